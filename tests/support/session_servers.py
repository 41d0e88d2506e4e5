"""What the session-wide test servers (the S3 gateway, the Spark cluster) share: one server for the whole run,
also when pytest-xdist runs several workers, started by whichever worker comes first."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
