"""Errors that carry their DESIGN §8 exit code, so the CLI never guesses how to exit."""

from __future__ import annotations


class StitchError(Exception):
    """Base of every error stitchlake raises on purpose; exit code 1 (failure)."""

    exit_code: int = 1


class ConfigError(StitchError):
    """Bad usage or configuration (exit 2). The message names the YAML path of the problem."""

    exit_code = 2


class UsageError(StitchError):
    """Bad command-line usage or a refused operation that only a different request can fix (exit 2)."""

    exit_code = 2


class ConflictError(StitchError):
    """A write conflicted with a concurrent one (exit 3): retrying is safe."""

    exit_code = 3


class BusyError(StitchError):
    """Another live writer or service holds what we need (exit 4): run again later."""

    exit_code = 4


class LockTimeout(BusyError):
    """The table lock could not be taken within `concurrency.lock.wait_s` (exit 4)."""


class LockLost(StitchError):
    """Our lease on the table lock expired and someone else took it over; nothing was published."""


class InputRejected(StitchError):
    """Input data was rejected (exit 5): the message names the file and column."""

    exit_code = 5


class CorruptFileError(StitchError):
    """A table file could not be read completely; the message names the file."""


class NotFoundError(StitchError):
    """A table, instant or file that was asked for does not exist."""

    exit_code = 2
