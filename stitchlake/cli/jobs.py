"""Run a job for the CLI through `stitchlake.jobs.launch`, with progress on stderr.

`--engine auto` (the default) runs in-process when the work is small — at most `spark.auto_local_max_mb` of landing
files or file slices — and on Spark otherwise, and says which it chose. Metadata-only jobs always run here.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.cli import output, printing
from stitchlake.jobs import launch
from stitchlake.jobs.launch import abort_unless_published
from stitchlake.vocabulary import EngineChoice

if TYPE_CHECKING:
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.jobs.results import JobRun
    from stitchlake.table.handle import TableHandle

T = TypeVar("T")

__all__ = ["EngineChoice", "abort_unless_published", "launch_job", "progress_display", "with_retries"]


def with_retries(retries: int, attempt: Callable[[], output.Report]) -> output.Report:
    """`launch.with_retries` with each wait said on stderr; the report says how many retries it took."""
    report, number = launch.with_retries(retries, attempt, printing.hint)
    if retries:
        report.data["retries"] = number
    return report


#: Seconds between the plain progress lines of a job when stderr is not a terminal (a log file, a pipe).
PROGRESS_EVERY_S = 10.0


@contextlib.contextmanager
def progress_display(job: str, every_message: bool = False) -> Iterator[Callable[[str], None]]:
    """A progress callback for a job, started by its first message (jobs on Spark send them; in-process jobs none).

    On a terminal a status line that updates in place. Anywhere else (a log, a pipe, a scheduler) a spinner
    is a line of `\r` updates that never ends, so there it is a plain line now, then one every `PROGRESS_EVERY_S`
    with the latest message (none with `--json`). Whether stderr is a terminal is asked of the stream itself: rich
    takes FORCE_COLOR or TTY_COMPATIBLE (set by CI runners and schedulers for colours) for a terminal.

    `every_message`: a long-running job whose messages are events (a stream's committed micro-batches, which an
    operator audits or rolls back by instant): each is a line of its own on stderr, on a terminal, in a log and
    with `--json` alike (stdout keeps only the answer).
    """
    console = printing.stderr_console()
    if every_message:
        started = time.monotonic()
        yield lambda message: printing.hint(printing.redact(f"{job}: {message} ({time.monotonic() - started:.0f}s)"))
    elif _on_terminal(console):
        with _status_line(job, console) as progress:
            yield progress
    elif printing.json_mode():
        yield lambda _message: None
    else:
        with _progress_lines(job) as progress:
            yield progress


def _on_terminal(console: Any) -> bool:
    try:
        interactive = sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        interactive = False
    return bool(interactive and console.is_terminal and not console.is_dumb_terminal)


@contextlib.contextmanager
def _status_line(job: str, console: Any) -> Iterator[Callable[[str], None]]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        status: list[Any] = []

        def progress(message: str) -> None:
            if not status:
                status.append(stack.enter_context(console.status(f"{job}: starting Spark", spinner="dots")))
            status[0].update(printing.redact(f"{job}: {message} ({time.monotonic() - started:.0f}s)"))

        yield progress


@contextlib.contextmanager
def _progress_lines(job: str) -> Iterator[Callable[[str], None]]:
    """The first message at once, then the latest one every PROGRESS_EVERY_S (from a thread: a job may go quiet
    for minutes, and the log should still show it is running) until the job ends."""
    started = time.monotonic()
    latest: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def say() -> None:
        printing.hint(printing.redact(f"{job}: {latest[0]} ({time.monotonic() - started:.0f}s)"))

    def every() -> None:
        while not done.wait(PROGRESS_EVERY_S):
            with lock:
                say()

    ticker = threading.Thread(target=every, name="stitch-progress", daemon=True)

    def progress(message: str) -> None:
        with lock:
            first = not latest
            latest[:] = [message]
            if first:
                say()
                ticker.start()

    try:
        yield progress
    finally:
        done.set()
        if ticker.is_alive():
            ticker.join()


def launch_job(table: TableHandle, request: JobRequest[T], engine: EngineChoice | str) -> JobRun[T]:
    """`launch.launch` with the CLI's progress display."""
    with progress_display(request.job) as progress:
        return launch.launch(table, request, engine, progress=progress)
