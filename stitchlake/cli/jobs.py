"""Run a job for the CLI through `stitchlake.jobs.launch`, with progress on stderr.

`--engine auto` (the default) runs in-process when the work is small — at most `spark.auto_local_max_mb` of landing
files or file slices — and on Spark otherwise, and says which it chose. Metadata-only jobs always run here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.cli import output
from stitchlake.jobs import launch
from stitchlake.jobs.launch import EngineChoice, abort_unless_published, choose_engine

if TYPE_CHECKING:
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.jobs.results import JobRun
    from stitchlake.table.handle import Table

T = TypeVar("T")

__all__ = ["EngineChoice", "abort_unless_published", "choose_engine", "execute", "progress_display", "with_retries"]


def with_retries(retries: int, attempt: Callable[[], output.Report]) -> output.Report:
    """`launch.with_retries` with each wait said on stderr; the report says how many retries it took."""
    report, number = launch.with_retries(retries, attempt, output.hint)
    if retries:
        report.data["retries"] = number
    return report


@contextlib.contextmanager
def progress_display(job: str) -> Iterator[Callable[[str], None]]:
    """A progress callback for a job: on a terminal a status line, started by the first message (jobs on Spark
    send them; in-process jobs none), in a log hint lines."""
    json_mode = output.json_mode()
    console = output.stderr_console()
    started = time.time()
    with contextlib.ExitStack() as stack:
        status: list[Any] = []

        def progress(message: str) -> None:
            if not status:
                status.append(stack.enter_context(console.status(f"{job}: starting Spark", spinner="dots")))
            status[0].update(output.redact(f"{job}: {message} ({time.time() - started:.0f}s)"))
            if not console.is_terminal and not json_mode:
                output.hint(f"{job}: {message}")

        yield progress


def execute(
    table: Table,
    request: JobRequest[T],
    engine: EngineChoice,
    graceful_stop_s: float | None = None,
) -> JobRun[T]:
    """`launch.execute` with the CLI's progress display (claims are taken by `launch`'s own jobs)."""
    with progress_display(request.job) as progress:
        return launch.execute(table, request, engine, None, graceful_stop_s, progress)
