"""Processes on this host, as Linux's /proc shows them: the one place that parses it.

Liveness asks whether a writer's pid still runs (and is the same process); the Spark launcher asks which
processes of a finished job are still on their way out. An exited process nobody reaped yet (a zombie: an init
that does not reap orphans keeps them for good) has ended for both.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

#: prctl(2) option: the signal sent to this process when its parent thread dies.
PR_SET_PDEATHSIG = 1
_ENDED = ("Z", "X")


def stat(pid: int) -> list[str]:
    """Linux `/proc/<pid>/stat` from field 3 (the state) on; empty where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    # The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    return text[text.rfind(")") + 2 :].split()


def parent(pid: int) -> int | None:
    """The parent of `pid`; None when it is gone."""
    fields = stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def exists(pid: int) -> bool:
    """Whether a process `pid` exists (running, a zombie, or another user's): the portable test, without /proc."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    return True


def exited(pid: int) -> bool:
    """Whether `pid` has exited but was not reaped yet (a zombie)."""
    fields = stat(pid)
    return bool(fields) and fields[0] in _ENDED


def still_running(pids: Iterable[int]) -> list[int]:
    """The processes of `pids` still running (neither gone nor a zombie)."""
    return [pid for pid in pids if (fields := stat(pid)) and fields[0] not in _ENDED]


def running_in_group(group: int) -> bool:
    """Whether a process of `group` still runs; without /proc, whether any member (even a zombie) is left."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        fields = stat(int(entry.name)) if entry.name.isdigit() else []
        if len(fields) > 2 and int(fields[2]) == group and fields[0] not in _ENDED:
            return True
    return False


def with_environment(entry: str) -> list[int]:
    """The running processes (other than this one) whose environment holds `entry` (`NAME=value`); none without
    /proc. A process marked this way is found whatever process group or session it moved to."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    wanted = entry.encode()
    found = []
    for child in proc.iterdir():
        if not child.name.isdigit() or int(child.name) == os.getpid():
            continue
        try:
            if wanted in (child / "environ").read_bytes().split(b"\0"):
                found.append(int(child.name))
        except OSError:
            continue
    return still_running(found)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere a no-op).

    A `stitch` command that is itself killed cannot stop its spark-submit job any more: without this the JVM and
    the job's Python driver live on, and could publish after the command was reported dead. The launcher starts
    spark-submit with it, and the job's Python driver calls it for itself.
    """
    import ctypes

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
