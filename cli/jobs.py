"""Run a job request for the CLI: in this process or as a spark-submit job, with progress on stderr.

`--engine auto` (the default) runs in-process when the work is small — at most `spark.auto_local_max_mb` of landing
files or file slices — and on Spark otherwise, and says which it chose. Metadata-only jobs always run here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli import output
from cli.options import EngineChoice
from stitchlake.errors import ConflictError, UsageError

if TYPE_CHECKING:
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.table import Table
    from stitchlake.transaction import Transaction

#: `--retries`: the first wait after a conflict, and the longest.
RETRY_FIRST_WAIT_S = 1.0
RETRY_MAX_WAIT_S = 30.0


def choose_engine(table: Table, request: JobRequest, choice: EngineChoice, work_bytes: int) -> EngineChoice:
    """The engine a request runs on (`auto`: by the size of the work)."""
    if request.metadata_only:
        if choice is EngineChoice.spark:
            raise UsageError(
                f"{request.job} is metadata only (a few small files): it runs in this process, never on Spark"
            )
        return EngineChoice.local
    if choice is not EngineChoice.auto:
        return choice
    # The choice is reported in the result (`engine`), which the summary and `--json` show.
    limit = table.config.spark.auto_local_max_mb * 1024 * 1024
    return EngineChoice.local if work_bytes <= limit else EngineChoice.spark


def with_retries(retries: int, attempt: Callable[[], output.Report]) -> output.Report:
    """Run `attempt`; after a write conflict (exit 3, nothing was published) wait and run it again, up to `retries`
    times. The wait doubles from `RETRY_FIRST_WAIT_S` up to `RETRY_MAX_WAIT_S`, with jitter, so two writers that
    conflicted do not meet again at once."""
    for number in range(retries + 1):
        try:
            report = attempt()
        except ConflictError as exc:
            if number == retries:
                raise
            wait = min(RETRY_MAX_WAIT_S, RETRY_FIRST_WAIT_S * 2**number) * random.uniform(0.5, 1.0)
            output.hint(f"conflict (exit 3): {exc}; running again in {wait:.1f}s (retry {number + 1} of {retries})")
            time.sleep(wait)
            continue
        if retries:
            report.data["retries"] = number
        return report
    raise AssertionError("unreachable")


def target_args(table: Table) -> list[str]:
    """How the spark-submit job names the table: the same config file, or the table's location."""
    if table.config.source_file and Path(table.config.source_file).is_file():
        return ["--config", str(Path(table.config.source_file).resolve())]
    return ["--table", table.path]


def execute(
    table: Table,
    request: JobRequest,
    engine: EngineChoice,
    claim: Transaction | None = None,
    graceful_stop_s: float | None = None,
) -> dict[str, Any]:
    """Run `request`; return its result as plain data with `engine` and `seconds` (the wall time waited).

    `claim` is an instant the caller took before the job (so an overlapping run is refused at once): whatever
    happens to the job, this process stops beating for it, and a job that died without a word has its leftovers
    removed here.
    """
    started = 0.0
    try:  # from the first statement: a signal landing anywhere below must reach the abort
        from stitchlake.jobs.run import run

        started = time.time()
        if engine is EngineChoice.spark:
            result = _on_spark(table, request, started, graceful_stop_s)
        else:
            from stitchlake.engine import LocalEngine

            result = {**run(table, request, LocalEngine()), "engine": "local"}
    except BaseException:
        if claim is not None:
            abort_unless_published(table, claim)
        raise
    finally:
        if claim is not None:
            claim.finish_here()
    return {**result, "seconds": round(time.time() - started, 2)}


def abort_unless_published(table: Table, claim: Transaction) -> None:
    """Undo a claim whose job failed or was interrupted, unless the job's driver published it meanwhile (this
    process's handle does not know: the timeline does). Undoing twice is harmless (`Transaction.abort`)."""
    current = table.timeline().get(claim.time)
    if current is None or not current.is_completed:
        claim.abort()


def _on_spark(
    table: Table, request: JobRequest, started: float, graceful_stop_s: float | None = None
) -> dict[str, Any]:
    from stitchlake.spark.launcher import run_job

    json_mode = output.json_mode()
    console = output.stderr_console()
    with console.status(f"{request.job}: starting Spark", spinner="dots") as status:

        def progress(message: str) -> None:
            status.update(output.redact(f"{request.job}: {message} ({time.time() - started:.0f}s)"))
            if not console.is_terminal and not json_mode:
                output.hint(f"{request.job}: {message}")

        result = run_job(table, request, target_args(table), progress, graceful_stop_s)
    result.pop("ok", None)
    # `seconds` will be the wall time the user waited; `job_seconds` the job's own part, after JVM start-up.
    inside = {"job_seconds": round(float(result["seconds"]), 2)} if "seconds" in result else {}
    return {**result, **inside, "engine": "spark"}
