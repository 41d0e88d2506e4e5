"""What the session-wide test servers (the S3 gateway, the Spark cluster, Kafka, Trino) share: one server for the
whole run, also when pytest-xdist runs several workers, started by whichever worker comes first."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

Started = TypeVar("Started")


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    """The folder for a session server, and whether several xdist workers share it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent, True  # each worker's basetemp is <root>/popen-gwN
    return tmp_path_factory.getbasetemp(), False


def session_owner(shared: bool) -> int:
    """The process whose end stops a server: the xdist controller when shared, else this process."""
    return os.getppid() if shared else os.getpid()


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """One worker at a time starts (or finds) the server."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def serve(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    what: str,
    start: Callable[[Path, int], Started],
    stop: Callable[[Path], object],
    errors: type[Exception],
) -> Iterator[Started]:
    """The one way a session server is started and stopped: in `<root>/<name>` under a file lock, so xdist workers
    share it, watched by the session's owner, stopped at the end only by a run that does not share it. A failed
    start fails the tests that need the server (never a skip)."""
    root, shared = shared_root(tmp_path_factory)
    workdir = root / name
    try:
        with file_lock(root / f"{name}.lock"):
            workdir.mkdir(exist_ok=True)
            started = start(workdir, session_owner(shared))
    except errors as exc:
        pytest.fail(f"could not start {what}:\n{exc}", pytrace=False)
    try:
        yield started
    finally:
        if not shared:
            stop(workdir)
