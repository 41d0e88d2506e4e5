"""The real `stitch` console script run as cron, Airflow or an operator would run it, said once for every test that
runs it as a process (refusals, exit codes, JSON on stdout, signals); and this environment's Python, run the same
way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner, Result

from scripts import run_captured
from stitchlake.cli.app import app

#: The console script of this environment (what `pip install` put on PATH).
STITCH = Path(sys.executable).parent / "stitch"


def console(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: str | None = None,
    runner: tuple[str, ...] = (),
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """`stitch ARGS` as a process, its output captured as text, its stdin `stdin` (else /dev/null: a prompt fails
    at once). `env` adds to (or, with value None, removes from) the environment; output is 200 columns wide so a
    message is never wrapped; `runner` is a command that runs it (e.g. without root's capabilities)."""
    return _run([*runner, str(STITCH), *map(str, args)], cwd, env, stdin, timeout)


def python(
    *args: str | Path, cwd: Path | None = None, env: Mapping[str, str | None] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with this environment's interpreter (a `-c` program, `-m stitchlake`, a script), run as
    `console` runs `stitch`."""
    return _run([sys.executable, *map(str, args)], cwd, env, None, timeout)


def _run(
    command: list[str], cwd: Path | None, env: Mapping[str, str | None] | None, stdin: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "200"}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return run_captured(command, timeout, env=environment, cwd=cwd, stdin_text=stdin)


def stitch_json(*args: str | Path, cwd: Path | None = None) -> dict[str, Any]:
    """`stitch ARGS --json`, which must succeed: its JSON object."""
    done = console(*args, "--json", cwd=cwd)
    shown = " ".join(map(str, args))
    assert done.returncode == 0, f"stitch {shown}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return dict(json.loads(done.stdout))


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """`stitch ARGS` in this process, through typer's CliRunner: no process to start, so the unit tier may run it."""
    return CliRunner().invoke(app, list(args), env=env)


def leaf_commands() -> list[tuple[str, ...]]:
    group = typer.main.get_command(app)
    found: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):  # a group (typer ships its own click)
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            found.append(path)

    walk(group, ())
    return sorted(found)


COMMANDS = leaf_commands()
