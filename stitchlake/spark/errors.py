"""Errors raised inside Spark tasks, recovered: a bad row on an executor is still an InputRejected (exit 5).

Spark wraps a task's exception in Java and Python exceptions whose text holds the original one; the class name and
message are dug out of it, so every engine raises the same stitchlake errors with the same exit codes.
"""

from __future__ import annotations

import json
import re

from stitchlake import errors
from stitchlake.timeline import clock, timeline

#: Modules whose own stitchlake errors a task may raise: imported, so that `error_class` finds them by name.
_RAISERS = (clock, timeline)

#: A stitchlake error in a task's traceback: most live in stitchlake.errors, a few beside the code raising them
#: (a timeline file gone, a clock skew), named by their module.
_WRAPPED = re.compile(
    r"(?<![\w/.-])stitchlake\.(?:[a-z_]+\.)*([A-Z]\w*): (.+?)(?:\n\s*(?:at |\tat |JVM stacktrace|\n)|$)", re.S
)


_DETAILS = re.compile(re.escape(errors.DETAILS_NOTE) + r"(\{[^\n]*\})")


def unwrap(error: BaseException) -> tuple[str, int, str]:
    """(error class name, exit code, message) for any exception, recovering stitchlake errors from executors."""
    if isinstance(error, errors.StitchError):
        return type(error).__name__, error.exit_code, str(error)
    if isinstance(error, errors.Terminated | KeyboardInterrupt):  # the job itself was stopped: 143 and 130
        return type(error).__name__, 143 if isinstance(error, errors.Terminated) else 130, str(error) or "interrupted"
    if isinstance(error, OSError) and error.errno:
        return "StitchError", 1, errors.describe_os_error(error)
    text = str(error)
    match = _last(_WRAPPED, text)
    if match:
        kind = errors.error_class(match.group(1))
        message = _DETAILS.sub("", match.group(2)).strip()
        return kind.__name__, kind.exit_code, message
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return "StitchError", 1, f"{type(error).__name__}: {first}"


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last match: a chained traceback prints the error it was handling first, the one raised last."""
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one is kept
        pass
    return found


def details(error: BaseException) -> dict[str, str]:
    """Where the problem is (file, column, YAML path), also for an error recovered from an executor's traceback."""
    if isinstance(error, errors.StitchError):
        return error.details()
    match = _DETAILS.search(str(error))
    if not match:
        return {}
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return {}
    return {k: str(v) for k, v in found.items() if k in ("file", "column", "yaml_path")}


def recovered(error: BaseException) -> errors.StitchError | None:
    """The stitchlake error a Spark failure wraps, as its own class again; None if it wraps none."""
    if isinstance(error, errors.StitchError):
        return error
    match = _last(_WRAPPED, str(error))
    if not match:
        return None
    name, _code, message = unwrap(error)
    return errors.error_class(name)(message, **details(error))
