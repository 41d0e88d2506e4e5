"""Launching a job from Python: `launch` runs any job request (`jobs.specs` says how each is checked, sized,
claimed and run): the engine chosen (`auto` by the size of the work), the claim taken before a JVM starts,
spark-submit, the abort after an interrupted job; retries after conflicts. `compact` and `rescale` run the plans
they make (and those left pending) through it.

The CLI and the library (`Table.ingest(..., engine="auto")`) both call this, so a job behaves the same whoever
starts it; errors are raised as the `stitchlake.errors` classes whose exit codes the CLI prints.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from stitchlake.concurrency.heartbeat import sent_unanswered
from stitchlake.errors import (
    COMMIT_SENT_UNANSWERED,
    PUBLISHED_BEFORE_STOP,
    BusyError,
    ConflictError,
    PlanUndone,
    StitchError,
    UsageError,
    one_of,
)
from stitchlake.jobs.results import JobRun, PlannedRuns
from stitchlake.vocabulary import CompactionStrategy, EngineChoice

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from stitchlake.engine import Engine
    from stitchlake.jobs.requests import CompactRequest, JobRequest, RescaleRequest
    from stitchlake.services.rewrites.compaction import CompactionResult
    from stitchlake.services.rewrites.rescale import RescaleResult
    from stitchlake.table.handle import TableHandle
    from stitchlake.table.transaction import Transaction

#: Retries after a conflict: the first wait, and the longest.
RETRY_FIRST_WAIT_S = 1.0
RETRY_MAX_WAIT_S = 30.0
#: Where progress lines go (a terminal's status line, a log); None: nowhere.
Progress = Callable[[str], None] | None
T = TypeVar("T")


def _runner(engine: EngineChoice | str | Engine) -> EngineChoice | Engine:
    """Where a job runs: an engine object (it runs the job in this process: a `SparkEngine` on a session the
    caller made) as given; anything else as an engine choice (unknown names refused, exit 2)."""
    return engine if not isinstance(engine, str) else engine_choice(engine)


def engine_choice(name: EngineChoice | str) -> EngineChoice:
    """`name` as an engine choice; anything else is a usage error (exit 2)."""
    return one_of(EngineChoice, name, "engine")


def choose_engine(
    table: TableHandle, request: JobRequest[Any], choice: EngineChoice | str, work_bytes: int
) -> EngineChoice:
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
    if not request.reads_only and not spark_can_open(table):
        return EngineChoice.local  # its driver could not open the table with this config (`target_args`)
    return EngineChoice.local if work_bytes <= limit else EngineChoice.spark


def spark_can_open(table: TableHandle) -> bool:
    """Whether a spark-submit driver opens the table with this handle's config: its file is on disk."""
    return bool(table.config.source_file) and Path(str(table.config.source_file)).is_file()


def with_retries(retries: int, attempt: Callable[[], T], on_retry: Progress = None) -> tuple[T, int]:
    """`attempt()` and how many retries it took. After a write conflict (nothing was published) wait and run it
    again, up to `retries` times; the wait doubles from `RETRY_FIRST_WAIT_S` up to `RETRY_MAX_WAIT_S`, with
    jitter, so two writers that conflicted do not meet again at once."""
    if retries < 0:
        raise UsageError(f"retries must be 0 or more, got {retries}")
    for number in range(retries + 1):
        try:
            return attempt(), number
        except ConflictError as exc:
            if number == retries or not exc.retry_helps:
                raise
            wait = min(RETRY_MAX_WAIT_S, RETRY_FIRST_WAIT_S * 2**number) * random.uniform(0.5, 1.0)
            if on_retry is not None:
                on_retry(f"conflict (exit 3): {exc}; running again in {wait:.1f}s (retry {number + 1} of {retries})")
            time.sleep(wait)
    raise AssertionError("unreachable")


def target_args(table: TableHandle, request: JobRequest[Any]) -> list[str]:
    """How the spark-submit job names the table: the same config file, or (a job that only reads) the table's
    location. A job that changes the table needs the file: its driver takes the lock, heartbeat and retention
    settings from it, and a config built in memory (secrets expanded) is not written out for it."""
    if spark_can_open(table):
        return ["--config", str(Path(str(table.config.source_file)).resolve())]
    if not request.reads_only:
        raise UsageError(
            f"a spark-submit {request.job} job of {table.path} opens the table from its config file, but this "
            "handle's config has none on disk (built in memory): open the table from its YAML, or run the job in "
            "this process (engine='local')"
        )
    return ["--table", table.path]


def execute(
    table: TableHandle,
    request: JobRequest[T],
    engine: EngineChoice | Engine,
    claim: Transaction | None = None,
    graceful_stop_s: float | None = None,
    progress: Progress = None,
) -> JobRun[T]:
    """Run `request`; its service's result, where it ran and the wall time waited (`seconds`).

    `claim` is an instant the caller took before the job (so an overlapping run is refused at once): whatever
    happens to the job, this process stops beating for it, and a job that died without a word has its leftovers
    removed here.
    """
    started = 0.0
    try:  # from the first statement: a signal landing anywhere below must reach the abort
        from stitchlake.jobs.run import run

        started = time.time()
        if not isinstance(engine, str):  # an engine object: its session is this process's
            ran = JobRun(request.job, run(table, request, engine), engine.name)
        elif engine is EngineChoice.spark:
            from stitchlake.jobs.spark_submit import run_job

            submitted = run_job(table, request, target_args(table, request), progress, graceful_stop_s)
            ran = JobRun(request.job, submitted.result, "spark", job_seconds=submitted.job_seconds)
            ran.log = str(submitted.log)
        else:
            from stitchlake.engine import LocalEngine

            ran = JobRun(request.job, run(table, request, LocalEngine()), "local")
    except BaseException as exc:
        if claim is not None:
            abort_unless_published(table, claim, exc)
        raise
    finally:
        if claim is not None:
            claim.finish_here()
    ran.seconds = round(time.time() - started, 2)
    return ran


def abort_unless_published(table: TableHandle, claim: Transaction, failure: BaseException | None = None) -> bool:
    """Undo a claim whose job failed or was interrupted, unless the job's driver published it meanwhile (this
    process's handle does not know: the timeline does). Undoing twice is harmless (`Transaction.abort`).

    True when it undid the claim. A published instant stands, and `failure` says so in a note, so an operator is
    never told "aborted" about a commit that a re-run will then find done."""
    if claim.aborted:  # decided already (`execute`, then `launch` around it): no second wait for the lock
        return False
    if failure is not None and any(
        str(n).startswith(COMMIT_SENT_UNANSWERED) for n in getattr(failure, "__notes__", ())
    ):
        claim.leave_pending()  # the job's commit may still land: deleting its files could destroy it
        return False
    try:
        # Under the lock: a job that died without a word (its JVM killed) may have died inside its publish, its
        # create sent; the lease it held lasts until that create has landed or never will.
        with table.lock():
            current = table.timeline().get(claim.time)
            if current is not None and not current.is_completed and sent_unanswered(table.storage, claim.time):
                # The job's driver said so in its last beat, where the note did not reach this process (it was
                # stopped before it read the result file).
                claim.leave_pending()
                return False
            if current is None or not current.is_completed:
                claim.abort()
                return True
    except StitchError as busy:
        if claim.aborted:  # undone, and then the lock's release failed
            return True
        log.warning("instant %s is left to `stitch clean`: the lock to undo it was not free (%s)", claim.time, busy)
        claim.leave_pending()
        return False
    if failure is not None:
        failure.add_note(f"{PUBLISHED_BEFORE_STOP}: instant {claim.time} stands")
    return False


# ------------------------------------------------------------------------------------------------ launch


def launch(
    table: TableHandle,
    request: JobRequest[T],
    engine: EngineChoice | str | Engine = EngineChoice.auto,
    *,
    graceful_stop_s: float | None = None,
    progress: Progress = None,
) -> JobRun[T]:
    """Run any job request on the engine chosen for it, as its `jobs.specs.JobSpec` says: the preflight's
    refusals and work estimate first (nothing to do: its result at once, engine `none`), `auto` by that estimate,
    a Spark-only job on Spark. A job with a claim (ingest) takes its instant before the JVM starts, so an
    overlapping run is refused in well under a second, and it is undone if the job fails or is interrupted. An
    engine object runs the job in this process, on it."""
    from stitchlake.jobs.specs import spec_of

    runner = _runner(engine)
    spec = spec_of(request)
    if not request.reads_only:
        table.require_config()
    if spec.handler is None and not isinstance(runner, str):
        raise UsageError(f"the {request.job} job runs only as a spark-submit job: give engine='spark'")
    found = spec.preflight(table, request)
    if found.idle:
        return JobRun(request.job, found.result, "none")
    if not isinstance(runner, str):
        return execute(table, request, runner, progress=progress)
    chosen = EngineChoice.spark if spec.handler is None else choose_engine(table, request, runner, found.work)
    if chosen is EngineChoice.spark:
        target_args(table, request)  # a job its driver could not open is refused before any claim
    taken = spec.claim(table, request) if spec.claim is not None and chosen is EngineChoice.spark else None
    try:
        if taken is not None:
            request = replace(request, instant=taken.time)  # type: ignore[call-arg]  # a claiming job's request has one
        return execute(table, request, chosen, claim=taken, graceful_stop_s=graceful_stop_s, progress=progress)
    except BaseException as exc:
        # A signal can land between the claim and the job (`execute` undoes it from there on): undo it here.
        if taken is not None:
            abort_unless_published(table, taken, exc)
        raise


# ----------------------------------------------------------------------------------------------- compact


def compact(
    table: TableHandle,
    *,
    schedule_only: bool = False,
    run_only: bool = False,
    instant: str | None = None,
    strategy: CompactionStrategy | str | None = None,
    engine: EngineChoice | str | Engine = EngineChoice.auto,
    progress: Progress = None,
) -> PlannedRuns[CompactionResult]:
    """Run pending compaction plans nobody runs (oldest first), then schedule and run a new one.

    `run_only` runs a pending plan (`instant`, default the oldest); `schedule_only` only writes a plan. When
    nothing was compacted, a configured format that a failed publish left behind catches up (`published`).
    """
    from stitchlake.jobs.requests import CompactRequest
    from stitchlake.services.rewrites import compaction

    runner = _runner(engine)
    if runner is EngineChoice.spark and not schedule_only:
        target_args(table, CompactRequest())  # a job its driver could not open: refused before a plan is written
    if schedule_only and run_only:
        raise UsageError("--schedule and --run together is plain `stitch compact`; give one or neither")
    if instant and not run_only:
        raise UsageError("--instant only goes with --run")
    if strategy and run_only:
        raise UsageError("--strategy chooses what a new plan compacts; --run runs plans already scheduled, as planned")
    if strategy is not None:
        compaction.check_strategy(strategy)
    planned = instant
    resumed: list[JobRun[CompactionResult | None]] = []
    if not run_only and not schedule_only:
        # Plans left pending (an interrupted or crashed run, or `--schedule`) run first, oldest first: a plan
        # nobody runs would keep its file groups out of every new plan, and cron would compact nothing for good.
        resumed = _resume_pending(table, runner, progress)
    if not run_only:
        planned = compaction.schedule(table, strategy)  # metadata only: never needs Spark
        if planned is None and not schedule_only:
            if resumed:  # nothing new qualified: the summary is the last resumed plan's
                return PlannedRuns.of_resumed(resumed)
            # Nothing new to compact; a configured format a failed publish left behind catches up now.
            return PlannedRuns(published=compaction.publish_caught_up(table))
        if schedule_only:
            return PlannedRuns(planned)
    elif instant is None and not compaction.pending_plans(table):
        return PlannedRuns()
    if run_only:
        last = launch(table, CompactRequest(instant=planned), runner, progress=progress)
    else:
        last = _launch_listed(table, CompactRequest(instant=planned), runner, progress)
    return PlannedRuns(None if run_only else planned, last, resumed)


@overload
def _launch_listed(
    table: TableHandle, request: CompactRequest, engine: EngineChoice | Engine, progress: Progress
) -> JobRun[CompactionResult | None]: ...


@overload
def _launch_listed(
    table: TableHandle, request: RescaleRequest, engine: EngineChoice | Engine, progress: Progress
) -> JobRun[RescaleResult | None]: ...


def _launch_listed(
    table: TableHandle, request: CompactRequest | RescaleRequest, engine: EngineChoice | Engine, progress: Progress
) -> JobRun[Any]:
    """Launch the run of a plan this process just listed or wrote: a plan a restore or rollback undid meanwhile is
    PlanUndone (exit 3), never "no such plan"."""
    from stitchlake.services.rewrites.pending import undone_meanwhile

    assert request.instant is not None
    with undone_meanwhile(table, request.instant):
        return launch(table, request, engine, progress=progress)


def _resume_pending(
    table: TableHandle, engine: EngineChoice | Engine, progress: Progress
) -> list[JobRun[CompactionResult | None]]:
    """Run each pending plan that no live process runs, each on the engine its size picks; a plan another
    process takes over meanwhile is left to it."""
    from stitchlake.jobs.requests import CompactRequest
    from stitchlake.services.rewrites import compaction

    done = []
    for plan in compaction.runnable_plans(table):
        try:
            ran = _launch_listed(table, CompactRequest(instant=plan.requested), engine, progress)
        except (BusyError, PlanUndone):
            continue
        if ran.result is not None:
            done.append(ran)
    return done


# ----------------------------------------------------------------------------------------------- rescale


def rescale(
    table: TableHandle,
    buckets: int | None,
    *,
    partitions: tuple[str, ...] = (),
    resume: bool = False,
    engine: EngineChoice | str | Engine = EngineChoice.auto,
    progress: Progress = None,
) -> PlannedRuns[RescaleResult]:
    """Run pending rescales nobody runs (oldest first), then plan and run one to `buckets` (of `partitions`, by
    path; none: the whole table). `resume` only runs the pending ones. A whole-table rescale makes the handle
    route by the new count at once."""
    from stitchlake.jobs.requests import RescaleRequest
    from stitchlake.services.rewrites import rescale as rescales

    runner = _runner(engine)
    if runner is EngineChoice.spark:
        target_args(table, RescaleRequest())  # refused before a plan is written, as a compaction is
    if resume and (buckets is not None or partitions):
        raise UsageError("--resume runs a pending rescale as planned; it takes no --buckets or --partition")
    if not resume and buckets is None:
        raise UsageError("give --buckets N (the new bucket count), or --resume to finish a pending rescale")
    if buckets is not None and not partitions and table.config.table.buckets == buckets:
        # The config says the new count already (edited first, as for `stitch alter`): rescale the table to it.
        table.follow_buckets()
    elif resume:
        # Edited first for the pending rescale `--resume` finishes: take it as `--buckets N` would.
        rescales.follow_a_config_edited_first(table, None)
    table.require()
    resumed = _resume_rescales(table, runner, progress)
    planned = None if buckets is None else rescales.schedule(table, buckets, list(partitions) or None)
    if planned is None:  # `resume`, nothing to do, or the rescale a crash left behind was this one
        return PlannedRuns.of_resumed(resumed)
    last = _launch_listed(table, RescaleRequest(instant=planned), runner, progress)
    _follow(table, last.result)
    return PlannedRuns(planned, last, resumed)


def _resume_rescales(
    table: TableHandle, engine: EngineChoice | Engine, progress: Progress
) -> list[JobRun[RescaleResult | None]]:
    """Run each pending rescale nobody runs (its process died, or it was only planned), oldest first."""
    from stitchlake.jobs.requests import RescaleRequest
    from stitchlake.services.rewrites import rescale as rescales

    done = []
    for plan in rescales.runnable_plans(table):
        try:
            ran = _launch_listed(table, RescaleRequest(instant=plan.requested), engine, progress)
        except PlanUndone:
            continue
        if ran.result is not None:
            done.append(ran)
            _follow(table, ran.result)
    return done


def _follow(table: TableHandle, done: RescaleResult | None) -> None:
    """A whole-table rescale run elsewhere (a spark-submit job) changed the count: route by it here too."""
    if done is not None and done.whole_table:
        table.follow_buckets(done.buckets)
