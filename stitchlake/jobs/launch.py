"""Launching a job from Python: the engine chosen (`auto` by the size of the work), the claim taken before a JVM
starts, spark-submit, the abort after an interrupted job, and retries after conflicts.

The CLI and the library (`Table.ingest(..., engine="auto")`) both call this, so a job behaves the same whoever
starts it; errors are raised as the `stitchlake.errors` classes whose exit codes the CLI prints.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.errors import PUBLISHED_BEFORE_STOP, BusyError, ConflictError, UsageError

if TYPE_CHECKING:
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.table.handle import Table
    from stitchlake.table.transaction import Transaction

#: Retries after a conflict: the first wait, and the longest.
RETRY_FIRST_WAIT_S = 1.0
RETRY_MAX_WAIT_S = 30.0
#: Where progress lines go (a terminal's status line, a log); None: nowhere.
Progress = Callable[[str], None] | None
T = TypeVar("T")


class EngineChoice(StrEnum):
    """Where a job runs: `local` in this process, `spark` under spark-submit, `auto` by the size of the work
    (at most `spark.auto_local_max_mb` in this process)."""

    auto = "auto"
    local = "local"
    spark = "spark"


def engine_choice(name: EngineChoice | str) -> EngineChoice:
    """`name` as an engine choice; anything else is a usage error (exit 2)."""
    try:
        return EngineChoice(name)
    except ValueError:
        known = ", ".join(c.value for c in EngineChoice)
        raise UsageError(f"unknown engine {name!r}: use one of {known}") from None


def choose_engine(table: Table, request: JobRequest, choice: EngineChoice | str, work_bytes: int) -> EngineChoice:
    """The engine a request runs on (`auto`: by the size of the work). Metadata-only jobs always run here."""
    choice = engine_choice(choice)
    if request.metadata_only:
        if choice is EngineChoice.spark:
            raise UsageError(
                f"{request.job} is metadata only (a few small files): it runs in this process, never on Spark"
            )
        return EngineChoice.local
    if choice is not EngineChoice.auto:
        return choice
    limit = table.config.spark.auto_local_max_mb * 1024 * 1024
    return EngineChoice.local if work_bytes <= limit else EngineChoice.spark


def with_retries(retries: int, attempt: Callable[[], T], on_retry: Progress = None) -> tuple[T, int]:
    """`attempt()` and how many retries it took. After a write conflict (nothing was published) wait and run it
    again, up to `retries` times; the wait doubles from `RETRY_FIRST_WAIT_S` up to `RETRY_MAX_WAIT_S`, with
    jitter, so two writers that conflicted do not meet again at once."""
    for number in range(retries + 1):
        try:
            return attempt(), number
        except ConflictError as exc:
            if number == retries:
                raise
            wait = min(RETRY_MAX_WAIT_S, RETRY_FIRST_WAIT_S * 2**number) * random.uniform(0.5, 1.0)
            if on_retry is not None:
                on_retry(f"conflict (exit 3): {exc}; running again in {wait:.1f}s (retry {number + 1} of {retries})")
            time.sleep(wait)
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
    progress: Progress = None,
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
            from stitchlake.jobs.spark_submit import run_job

            result = run_job(table, request, target_args(table), progress, graceful_stop_s)
            result.pop("ok", None)
            # `seconds` will be the wall time waited; `job_seconds` the job's own part, after JVM start-up.
            if "seconds" in result:
                result["job_seconds"] = round(float(result["seconds"]), 2)
            result["engine"] = "spark"
        else:
            from stitchlake.engine import LocalEngine

            result = {**run(table, request, LocalEngine()), "engine": "local"}
    except BaseException as exc:
        if claim is not None:
            abort_unless_published(table, claim, exc)
        raise
    finally:
        if claim is not None:
            claim.finish_here()
    return {**result, "seconds": round(time.time() - started, 2)}


def abort_unless_published(table: Table, claim: Transaction, failure: BaseException | None = None) -> bool:
    """Undo a claim whose job failed or was interrupted, unless the job's driver published it meanwhile (this
    process's handle does not know: the timeline does). Undoing twice is harmless (`Transaction.abort`).

    True when it undid the claim. A published instant stands, and `failure` says so in a note, so an operator is
    never told "aborted" about a commit that a re-run will then find done."""
    current = table.timeline().get(claim.time)
    if current is None or not current.is_completed:
        claim.abort()
        return True
    if failure is not None:
        failure.add_note(f"{PUBLISHED_BEFORE_STOP}: instant {claim.time} stands")
    return False


# ------------------------------------------------------------------------------------------------ ingest


def ingest(
    table: Table,
    stream: str,
    *,
    sources: tuple[str, ...] = (),
    max_files: int | None = None,
    reingest_changed: bool = False,
    max_records: int | None = None,
    reset_offsets: str | None = None,
    engine: EngineChoice | str = EngineChoice.auto,
    progress: Progress = None,
) -> dict[str, Any]:
    """Ingest a stream's new landing files (or new Kafka records) exactly once, on the engine chosen.

    Checked before any JVM starts: busy (BusyError, exit 4), changed landing files (exit 5), nothing pending (a
    result whose `instant` is None). On Spark the instant is claimed first, so an overlapping run is refused in
    well under a second, and undone if the job fails or is interrupted.
    """
    from stitchlake.jobs.requests import IngestRequest
    from stitchlake.services.ingest import claim, nothing_to_do, preflight, preflight_topic
    from stitchlake.services.offsets import estimate_bytes

    engine = engine_choice(engine)
    spec = table.config.stream(stream)
    kafka = spec.source is not None and spec.source.is_kafka
    if kafka and (sources or max_files or reingest_changed):
        raise UsageError(
            f"stream {stream} reads Kafka topic {spec.source.topic if spec.source else ''}: sources, max_files "
            "and reingest_changed apply to landing files"
        )
    if not kafka and (max_records is not None or reset_offsets is not None):
        raise UsageError(f"max_records and reset_offsets apply to Kafka sources; stream {stream} reads files")
    request = IngestRequest(
        stream, sources, max_files, reingest_changed, max_records=max_records, reset_offsets=reset_offsets
    )
    pending: Any
    if kafka:
        pending = preflight_topic(table, stream, max_records, reset_offsets)
        work = estimate_bytes(pending.ranges) if pending else 0
    else:
        pending = preflight(table, stream, list(sources) or None, max_files, reingest_changed)
        work = sum(f.size for f in pending)
    if not pending:
        return nothing_to_do(stream, "none").to_json()
    chosen = choose_engine(table, request, engine, work)
    taken = None
    if chosen is EngineChoice.spark:
        taken = claim(table, stream)  # refuses an overlapping run in well under a second, before the JVM starts
    try:
        if taken is not None:
            request = replace(request, instant=taken.time)
        return execute(table, request, chosen, claim=taken, progress=progress)
    except BaseException as exc:
        # A signal can land between the claim and the job (`execute` undoes it from there on): undo it here.
        if taken is not None:
            abort_unless_published(table, taken, exc)
        raise


# ----------------------------------------------------------------------------------------------- compact


def compact(
    table: Table,
    *,
    schedule_only: bool = False,
    run_only: bool = False,
    instant: str | None = None,
    strategy: str | None = None,
    engine: EngineChoice | str = EngineChoice.auto,
    progress: Progress = None,
) -> dict[str, Any]:
    """Run pending compaction plans nobody runs (oldest first), then schedule and run a new one.

    The result: `scheduled` (the new plan), `result` (the last run's commit, or None), `resumed` (the pending
    plans run before it), `engine`/`seconds` of the last run, and `published` when nothing was compacted but a
    configured format caught up. `run_only` runs a pending plan (`instant`, default the oldest); `schedule_only`
    only writes a plan.
    """
    from stitchlake.jobs.requests import CompactRequest
    from stitchlake.services import compaction

    engine = engine_choice(engine)
    if schedule_only and run_only:
        raise UsageError("--schedule and --run together is plain `stitch compact`; give one or neither")
    if instant and not run_only:
        raise UsageError("--instant only goes with --run")
    if strategy and run_only:
        raise UsageError("--strategy chooses what a new plan compacts; --run runs plans already scheduled, as planned")
    if strategy is not None:
        compaction.check_strategy(strategy)
    planned = instant
    resumed: list[dict[str, Any]] = []
    if not run_only and not schedule_only:
        # Plans left pending (an interrupted or crashed run, or `--schedule`) run first, oldest first: a plan
        # nobody runs would keep its file groups out of every new plan, and cron would compact nothing for good.
        resumed = _resume_pending(table, engine, progress)
    if not run_only:
        planned = compaction.schedule(table, strategy)  # metadata only: never needs Spark
        if planned is None and not schedule_only:
            if resumed:  # nothing new qualified: the summary is the last resumed plan's
                return {**resumed[-1], "resumed": resumed[:-1], "last_resumed": True}
            # Nothing new to compact; a configured format a failed publish left behind catches up now.
            return {"scheduled": None, "result": None, "resumed": [], "published": compaction.publish_caught_up(table)}
        if schedule_only:
            return {"scheduled": planned, "result": None}
    elif instant is None and not compaction.pending_plans(table):
        return {"scheduled": None, "result": None}
    request = CompactRequest(instant=planned)
    chosen = choose_engine(table, request, engine, compaction.plan_bytes(table, planned))
    result = execute(table, request, chosen, progress=progress)
    result["scheduled"] = None if run_only else planned
    result["resumed"] = resumed
    return result


def _resume_pending(table: Table, engine: EngineChoice | str, progress: Progress) -> list[dict[str, Any]]:
    """Run each pending plan that no live process runs, each on the engine its size picks; a plan another
    process takes over meanwhile is left to it."""
    from stitchlake.jobs.requests import CompactRequest
    from stitchlake.services import compaction

    done = []
    for plan in compaction.runnable_plans(table):
        request = CompactRequest(instant=plan.requested)
        chosen = choose_engine(table, request, engine, compaction.plan_bytes(table, plan.requested))
        try:
            result = execute(table, request, chosen, progress=progress)
        except BusyError:
            continue
        if result.get("result"):
            done.append({**result, "scheduled": None})
    return done
