"""Errors that carry their design.md §8 exit code, so the CLI never guesses how to exit."""

from __future__ import annotations

import errno
import json
import os
from enum import StrEnum
from typing import TypeVar

#: Environment variable that asks for tracebacks and every log line (secrets may show): any value but "" or "0".
DEBUG_ENV = "STITCH_DEBUG"
#: How a StitchError's locations are noted in its traceback (parsed back by `spark.errors`).
DETAILS_NOTE = "stitchlake-details: "
#: Starts the note an interrupt carries when the job had published its instant before the stop reached it.
PUBLISHED_BEFORE_STOP = "published before the stop reached the job"
#: Starts the note an interrupt carries when it stopped the publish that follows a completed instant.
COMPLETED_BEFORE_STOP = "completed before the stop"
#: The notes that say the stopped command's instant stands (so it was not aborted).
STANDS_AFTER_STOP = (PUBLISHED_BEFORE_STOP, COMPLETED_BEFORE_STOP)
#: Starts the note a failure carries when its commit was sent and no answer came: it may still land, so whoever
#: holds the instant (a Spark job's launcher too) leaves it pending to the lazy rollback instead of aborting it.
COMMIT_SENT_UNANSWERED = "its commit was sent and no answer came"


def debugging() -> bool:
    """Whether `STITCH_DEBUG` asks for tracebacks and every log line (the CLI and Spark jobs read it alike)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


class StitchError(Exception):
    """Base of every error stitchlake raises on purpose; exit code 1 (failure).

    `file`, `column` and `yaml_path` say where the problem is when that is known, so `--json` failures carry them
    as fields a scheduler can read (the message names them too).
    """

    exit_code: int = 1

    def __init__(
        self, message: str = "", *, file: str | None = None, column: str | None = None, yaml_path: str | None = None
    ) -> None:
        super().__init__(message)
        self.file = file
        self.column = column
        self.yaml_path = yaml_path
        if self.details():
            # Printed with the traceback, which is all that crosses from a Spark task to the driver: the job
            # reads the locations back from it (`spark.errors.unwrap`).
            self.add_note(DETAILS_NOTE + json.dumps(self.details(), sort_keys=True))

    def details(self) -> dict[str, str]:
        """The known locations of the problem, for machine-readable output."""
        found = {"file": self.file, "column": self.column, "yaml_path": self.yaml_path}
        return {key: value for key, value in found.items() if value is not None}


class ConfigError(StitchError):
    """Bad usage or configuration (exit 2). The message names the YAML path of the problem."""

    exit_code = 2


class UsageError(StitchError):
    """Bad command-line usage or a refused operation that only a different request can fix (exit 2)."""

    exit_code = 2


Choice = TypeVar("Choice", bound=StrEnum)


def one_of(kind: type[Choice], value: str, what: str) -> Choice:
    """`value` as a member of `kind` (a read mode, a clean policy, ...); anything else is refused (exit 2) with the
    words that would do, before any work."""
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{what} {value!r} is not one of: {', '.join(kind)}") from None


class ConflictError(StitchError):
    """A write conflicted with a concurrent one (exit 3): retrying is safe."""

    exit_code = 3
    #: Whether running the same request again can succeed (`--retries` waits and runs it again only then).
    retry_helps: bool = True


class PlanUndone(ConflictError):
    """A pending plan this process listed or wrote a moment ago is gone: a concurrent restore or rollback undid it
    before its run took it (exit 3). Running again is safe; nothing was written."""


class PlanGone(PlanUndone):
    """The plan a run was asked for by name (`--run --instant T`) was undone by a restore or rollback (exit 3, as a
    plan undone under a run): running the same request again cannot help, so `--retries` does not; schedule again.
    A class of its own, so a Spark job's error keeps saying so when the launcher rebuilds it by name."""

    retry_helps = False


class BusyError(StitchError):
    """Another live writer or service holds what we need (exit 4): run again later."""

    exit_code = 4


class LockTimeout(BusyError):
    """The table lock could not be taken within `concurrency.lock.wait_s` (exit 4)."""


class LockLost(BusyError):
    """Our lease on the table lock expired and someone else took it over; nothing was published (exit 4: a
    retry is safe)."""


class HistoryMoved(BusyError):
    """A completed instant's file vanished while read without the lock: a restore or archive moved the history
    meanwhile (exit 4). Lock-free readers plan again once; if it keeps moving, run again later."""


class InputRejected(StitchError):
    """Input data was rejected (exit 5): the message names the file and column."""

    exit_code = 5


class LandingVanished(InputRejected):
    """A listed landing file gone before it was read: no bad data, so never set aside as such. Recorded as
    consumed, a file moved away and back (same size and time) would be skipped for ever; the ingest stops instead,
    and the next one lists again. Here, not beside the reader: a Spark task's error is recovered by its name in
    this module."""


class CorruptFileError(StitchError):
    """A table file could not be read completely; the message names the file, and says what to do."""

    #: What to do, added to every message (the places that find the damage only say what and where).
    what_to_do = "a damaged table file: put it back from a backup or a copy of the table, then run again"

    def __init__(
        self, message: str = "", *, file: str | None = None, column: str | None = None, yaml_path: str | None = None
    ) -> None:
        advised = message if self.what_to_do in message else f"{message} — {self.what_to_do}"  # once, if recovered
        super().__init__(advised, file=file, column=column, yaml_path=yaml_path)


class DataFileMissing(CorruptFileError):
    """A data file a completed instant names is gone: cleaned under a slow reader (retry), or damage."""

    what_to_do = (
        "if `stitch clean` or a restore ran meanwhile, run again; otherwise put the file back from a backup or a "
        "copy of the table"
    )


class NotFoundError(StitchError):
    """A table, instant or file that was asked for does not exist."""

    exit_code = 2


_OS_ADVICE = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "no such file or directory",
}
_OS_WHAT_TO_DO = {
    errno.ENOSPC: "free some space and run again",
    errno.EDQUOT: "free some space or raise the quota, and run again",
    errno.EACCES: "the user running stitch needs read and write access to the table and landing folders",
    errno.EPERM: "the user running stitch needs read and write access to the table and landing folders",
    errno.EROFS: "the table folder must be on a writable file system",
    errno.EEXIST: "a file is where stitch needs a folder: move it away and run again",
    errno.ENOTDIR: "a file is where stitch needs a folder: move it away and run again",
    errno.EISDIR: "a folder is where stitch needs a file: move it away and run again",
}


def error_class(name: str) -> type[StitchError]:
    """The stitchlake error class of that name, for an error that crossed a process (a Spark task's traceback, a
    job's result): most live here, a few beside the code raising them (a timeline file gone, a clock skew), found
    among the subclasses loaded. StitchError for any other name."""
    found = globals().get(name)
    if isinstance(found, type) and issubclass(found, StitchError):
        return found
    pending, seen = [StitchError], set()
    while pending:
        kind = pending.pop()
        if kind.__name__ == name:
            return kind
        seen.add(kind)
        pending.extend(k for k in kind.__subclasses__() if k not in seen)
    return StitchError


def describe_os_error(error: OSError) -> str:
    """A file-system failure as a person can act on it: what, which file, and what to do.

    Nothing half-written is ever visible (files only count once an instant names them), so the advice is always
    to fix the cause and run again; `stitch clean` tidies what the failed run left.
    """
    what = _OS_ADVICE.get(error.errno or -1, (error.strerror or type(error).__name__).lower())
    where = f": {error.filename}" if error.filename else ""
    advice = _OS_WHAT_TO_DO.get(error.errno or -1, "check the path and run again")
    return f"{what}{where} — {advice} (nothing was published; `stitch clean` tidies what a failed run left)"


class Terminated(BaseException):
    """SIGTERM arrived (a scheduler or systemd stopping us): unwind like Ctrl-C, so the running instant is aborted
    and rolled back on the way out (exit 143). A BaseException, so no `except Exception` swallows it."""

    exit_code = 143
    #: The latest raised in this process: a library that catches it (DuckDB stops its query and raises a
    #: RuntimeError of its own) must not turn a stop into a failure (exit 1).
    latest: Terminated | None = None

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        super().__init__(f"terminated by {signal_name}")
        Terminated.latest = self


def stopped_by_signal() -> BaseException:
    """The stop a library swallowed: SIGTERM's `Terminated` if one was raised, else Ctrl-C."""
    return Terminated.latest if Terminated.latest is not None else KeyboardInterrupt()
