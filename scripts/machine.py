"""The machine and revision a benchmark ran on, for the reports of bench.py, bench_scale.py and bench_peers.py."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from scripts import ROOT


def _first(path: str, prefix: str) -> str:
    """The value of the first `prefix: value` line of a /proc file, or 'unknown'."""
    try:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> dict[str, Any]:
    """Date, commit (and whether the tree had uncommitted changes), CPU, cores, memory, OS, Python and Java."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT
    )
    return {
        "date": f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "commit": (commit.stdout.strip() or "?") + (" with uncommitted changes" if dirty.stdout.strip() else ""),
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory": _first("/proc/meminfo", "MemTotal"),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": java[0] if java else "unknown",
    }
