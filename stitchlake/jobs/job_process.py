"""A running `spark-submit` job as processes: its progress lines relayed, stopped gracefully or at once, and
nothing of it left running when it is over (PySpark's workers leave the job's process group, so every process of
the job carries a mark in its environment)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from stitchlake.concurrency.processes import running_in_group, still_running, with_environment

#: What a job's driver prints before a progress line on stderr; the launcher relays those lines.
PROGRESS_PREFIX = "STITCH-PROGRESS: "
#: Environment variable naming the job in every process it starts (PySpark's workers leave its process group).
JOB_MARK = "STITCHLAKE_SPARK_JOB"
#: Seconds an interrupted job gets to end after SIGTERM before its process group is SIGKILLed.
STOP_GRACE_S = 20
#: Seconds what a finished job left in its process group (Python workers) gets after SIGTERM, before SIGKILL.
LEFTOVER_GRACE_S = 5


def follow(
    process: subprocess.Popen[bytes],
    log: Path,
    progress: Callable[[str], None] | None,
    stop_file: Path | None = None,
    graceful_s: float = 0,
) -> None:
    """Wait for the job, passing its progress lines on; stop the whole job if we are interrupted."""
    position = 0
    try:
        while process.poll() is None:
            time.sleep(0.3)
            position = _relay(log, position, progress)
        _relay(log, position, progress)
    except BaseException:
        if stop_file is not None and _stopped_gracefully(process, log, position, progress, stop_file, graceful_s):
            return  # its result says how it ended
        stop(process)
        raise


def _stopped_gracefully(
    process: subprocess.Popen[bytes],
    log: Path,
    position: int,
    progress: Callable[[str], None] | None,
    stop_file: Path,
    graceful_s: float,
) -> bool:
    """Ask the job to stop after its running batch and wait up to `graceful_s`; a second interrupt stops waiting."""
    stop_file.touch()
    if progress:
        progress(f"stopping after the running batch (up to {graceful_s:.0f}s; interrupt again to stop at once)")
    deadline = time.monotonic() + graceful_s
    try:
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
            position = _relay(log, position, progress)
    except BaseException:
        return False
    _relay(log, position, progress)
    return process.poll() is not None


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the job's process group (the JVM, its Python driver and workers), SIGKILL after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def end_leftovers(group: int, mark: str | None = None) -> None:
    """Once the JVM has exited the job is over, but Python workers it started may still be on their way out: end
    them, so that nothing of the job runs when we return (a scheduler counts the task's processes as its own).

    PySpark's worker daemon puts itself and its workers in a process group of their own, so besides the job's
    group every process carrying the job's `mark` in its environment is ended, and waited for. Those are
    followed by pid once found: a killed process loses its environment before it has finished exiting."""
    marked = set(_marked(mark))
    if not running_in_group(group) and not marked:
        return
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)
        for pid in still_running(marked):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while time.monotonic() < deadline:
            marked |= set(_marked(mark))  # the daemon may have forked one more meanwhile
            if not running_in_group(group) and not still_running(marked):
                return
            time.sleep(0.05)


def _marked(mark: str | None) -> list[int]:
    """The running processes carrying the job's mark in their environment (none without a mark)."""
    return with_environment(f"{JOB_MARK}={mark}") if mark is not None else []


def _relay(log: Path, position: int, progress: Callable[[str], None] | None) -> int:
    if progress is None:
        return position
    try:
        with open(log, "rb") as handle:
            handle.seek(position)
            chunk = handle.read()
    except OSError:
        return position
    complete = chunk.rfind(b"\n") + 1
    for line in chunk[:complete].decode("utf-8", errors="replace").splitlines():
        if line.startswith(PROGRESS_PREFIX):
            progress(line[len(PROGRESS_PREFIX) :])
    return position + complete
