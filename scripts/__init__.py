"""The project's own tools: benchmarks, the torture test, the local servers the tests start.

A package so that its modules import each other by name (`from scripts import rgw`) without editing `sys.path`;
run one as `python -m scripts.bench` from the repository root. It is not shipped: the wheel holds only `stitchlake`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_argv(module: str, *args: str) -> list[str]:
    """argv that runs `scripts.<module>` in this Python; start it with `child_env()` so any folder will do."""
    return [sys.executable, "-m", f"scripts.{module}", *args]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the repository root first on PYTHONPATH: a child finds
    `scripts` and the stitchlake next to it (not another installed copy) from whatever folder it runs in."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_captured(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a one-off command (an install, an unpack, a format, a `stitch` a test runs) to its end and return what it
    printed: stdin is `stdin_text`, or else /dev/null, so a command that would prompt fails instead of hanging a test
    run, and its output is kept as text for the error that reports a failure (each caller words its own)."""
    stdin = subprocess.DEVNULL if stdin_text is None else None
    return subprocess.run(
        list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, stdin=stdin, input=stdin_text
    )
