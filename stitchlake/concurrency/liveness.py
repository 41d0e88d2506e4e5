"""Is the process that beats for an instant still there? Answered at once for processes on this host.

A heartbeat proves liveness only by staying fresh, so a writer killed by SIGTERM or SIGKILL looks alive until its
beat expires (a minute by default) and every run of its stream in between exits "busy". A beat written by a
long-lived process therefore also names the process: host, pid and the process's start time, and where its pids
count: the kernel's boot id and the pid namespace. Containers often share a host name (`--network host`, a
hostname set in a manifest) while each counts its own pids; only a beat from this boot and this pid namespace is
judged here. There, a pid that no longer exists, or that now belongs to a process started at another time (pids
are reused), is a dead writer. Anywhere else nothing can be known, and expiry decides as before.

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


def _read(path: str, link: bool = False) -> str | None:
    try:
        if link:
            return os.readlink(path)
        with open(path, encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


@cache
def pid_space() -> dict[str, str | None]:
    """Where this process's pid means something: the kernel's boot (random per boot, shared by its containers) and
    the pid namespace (distinct per container on one kernel); None where Linux's /proc does not say."""
    return {"boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": _read("/proc/self/ns/pid", link=True)}


def start_time(pid: int) -> str | None:
    """When `pid` started, as the kernel counts it (field 22); None where unknown."""
    fields = stat(pid)
    return fields[19] if len(fields) > 19 else None


def identity() -> dict[str, object]:
    """What a beat records about the process writing it."""
    pid = os.getpid()
    return {"host": this_host(), "pid": pid, "started": start_time(pid), **pid_space()}


def gone(record: dict[str, object]) -> bool:
    """Whether a beat's process is known to be dead: its pids count here (this host, boot and pid namespace), and
    its pid is gone or was reused."""
    space = pid_space()
    if record.get("host") != this_host() or None in space.values():
        return False
    if any(record.get(name) != value for name, value in space.items()):
        return False  # another container of this name, or another boot; an older version's beat does not say
    pid = record.get("pid")
    started = record.get("started")
    if not isinstance(pid, int) or started is None:
        return False  # a beat that names no process (a Spark task's, or an older version's)
    if not exists(pid) or exited(pid):  # gone, or a zombie; else (perhaps someone else's) compare start times
        return True
    now = start_time(pid)
    return now is not None and now != started
