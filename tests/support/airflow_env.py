"""A real Apache Airflow for the example DAG's test, in a virtual environment of its own.

Airflow pins many libraries (SQLAlchemy, pydantic, fastapi ...) that must not meet the project's own, so it lives
in `.venv/airflow/`, created on first use with every package pinned (`airflow-constraints.txt`, made the way
Airflow's constraints files are: from a working install). `Airflow` runs its CLI there with an `AIRFLOW_HOME` of
the test's own (SQLite metadata database, DAG folder, logs), so tests never share state.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

AIRFLOW_VERSION = "3.3.2"
CONSTRAINTS = Path(__file__).resolve().parent / "airflow-constraints.txt"
INSTALL_TIMEOUT_S = 1800
#: Variables of this process that would point Airflow's Python at the project's packages or another Airflow.
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AIRFLOW_HOME", "AIRFLOW_CONFIG")


def airflow_environment() -> Path:
    """The virtual environment's folder, installed on first use (one installer at a time when several test
    workers ask at once). A failed install fails the test that needed it; it is never skipped."""
    folder = Path(sys.prefix) / "airflow"
    done = folder / ".installed"
    wanted = f"apache-airflow=={AIRFLOW_VERSION}\n{CONSTRAINTS.read_text(encoding='utf-8')}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done.read_text(encoding="utf-8") if done.exists() else "") == wanted:
            return folder
        done.unlink(missing_ok=True)
        _run([sys.executable, "-m", "venv", "--clear", str(folder)])
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, f"apache-airflow=={AIRFLOW_VERSION}", "--constraint", str(CONSTRAINTS)])
        done.write_text(wanted, encoding="utf-8")
    return folder


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


@dataclass(frozen=True)
class Airflow:
    """The `airflow` CLI of the installed environment, with its home (and DAG folder) under `home`."""

    folder: Path
    home: Path
    dags: Path

    @classmethod
    def create(cls, home: Path, dags: Path) -> Airflow:
        """Install (first use), then make the metadata database (`airflow db migrate`, SQLite under `home`)."""
        airflow = cls(airflow_environment(), home, dags)
        home.mkdir(parents=True, exist_ok=True)
        airflow.run("db", "migrate")
        return airflow

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("AIRFLOW__")}
        env["PATH"] = os.pathsep.join([str(self.folder / "bin"), env.get("PATH", "")])
        env["AIRFLOW_HOME"] = str(self.home)
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(self.dags)
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        return {**env, **(extra or {})}

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 900, check: bool = True
    ) -> CompletedProcess[str]:
        """Run `airflow ARGS`. With `check`, a failure (exit code not 0) raises with the end of both streams."""
        done = subprocess.run(
            [str(self.folder / "bin" / "airflow"), *args],
            env=self.environ(env),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"airflow {' '.join(args)} failed (exit {done.returncode}):\n"
                f"{done.stdout[-6000:]}\n--- stderr ---\n{done.stderr[-6000:]}"
            )
        return done

    def json(self, *args: str) -> Any:
        """A listing command's `-o json` output (the last line of stdout: Airflow may print warnings before)."""
        lines = [line for line in self.run(*args, "-o", "json").stdout.splitlines() if line.strip()]
        return json.loads(lines[-1])
