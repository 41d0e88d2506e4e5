"""Is the process that beats for an instant still there? Answered at once for processes on this host.

A heartbeat proves liveness only by staying fresh, so a writer killed by SIGTERM or SIGKILL looks alive until its
beat expires (a minute by default) and every run of its stream in between exits "busy". A beat written by a
long-lived process therefore also names the process: host, pid and the process's start time. On the same host,
a pid that no longer exists, or that now belongs to a process started at another time (pids are reused), is a
dead writer. On another host nothing can be known, and expiry decides as before.

Beats written once from short-lived Spark tasks name no process (a Python worker may exit while the job lives).
"""

from __future__ import annotations

import os
import socket
from functools import cache

from stitchlake.concurrency.processes import exists, exited, stat


@cache
def this_host() -> str:
    return socket.gethostname()


def start_time(pid: int) -> str | None:
    """When `pid` started, as the kernel counts it (field 22); None where unknown."""
    fields = stat(pid)
    return fields[19] if len(fields) > 19 else None


def identity() -> dict[str, object]:
    """What a beat records about the process writing it."""
    pid = os.getpid()
    return {"host": this_host(), "pid": pid, "started": start_time(pid)}


def gone(record: dict[str, object]) -> bool:
    """Whether a beat's process is known to be dead: on this host, and its pid is gone or was reused."""
    if record.get("host") != this_host():
        return False
    pid = record.get("pid")
    started = record.get("started")
    if not isinstance(pid, int) or started is None:
        return False  # a beat that names no process (a Spark task's, or an older version's)
    if not exists(pid) or exited(pid):  # gone, or a zombie; else (perhaps someone else's) compare start times
        return True
    now = start_time(pid)
    return now is not None and now != started
