"""Compaction (design.md §5): merge each chosen file slice into a new base file.

Scheduling writes an immutable plan, `<T>.compaction.requested`, listing per file group the base file and
exactly the logs whose commits completed before T (it is computed under the table lock, with T).
Running it is idempotent and resumable: a crashed attempt's files are found through its markers and
removed before the plan runs again. Writers never wait: logs completing after T belong to the new slices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.engine import Engine, LocalEngine, marker_for
from stitchlake.errors import BusyError, PlanUndone, one_of
from stitchlake.io.datafiles import write_table_file
from stitchlake.layout.fsview import FileSystemView
from stitchlake.layout.names import BASE, base_name, join
from stitchlake.merge.stitch import to_base
from stitchlake.reading.snapshot import merge_slice
from stitchlake.services.publish import Published, publish_after
from stitchlake.services.rewrites.pending import planned_bytes, to_run, unclaimed, undone_meanwhile
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import CompactionCommit, CompactionPlan, DataFile, FileGroupRef, FileSlice
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import CompactionStrategy

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: Whether a strategy takes a file slice with logs, given the table's thresholds (min log files, min log bytes).
TAKES: dict[CompactionStrategy, Callable[[FileSlice, int, int], bool]] = {
    CompactionStrategy.ALL: lambda _fslice, _files, _bytes: True,
    CompactionStrategy.LOG_FILES: lambda fslice, files, _bytes: len(fslice.logs) >= files,
    CompactionStrategy.LOG_BYTES: lambda fslice, _files, bytes_: fslice.log_bytes >= bytes_,
}


@dataclass
class CompactionResult:
    """What a compaction did, for summaries and `--json` (counts, never a list per file)."""

    instant: str
    completed: str | None
    file_groups: int
    rows: int
    bytes: int
    merged_files: int = 0
    #: What `publish.formats` published after the compaction.
    published: list[Published] = field(default_factory=list)
    #: Plans left pending (interrupted, crashed or only scheduled) that the same call ran first, oldest first.
    resumed: list[CompactionResult] = field(default_factory=list)


def check_strategy(strategy: CompactionStrategy | str) -> CompactionStrategy:
    """Refuse an unknown strategy before any work (a plain compact runs pending plans before it plans)."""
    return one_of(CompactionStrategy, strategy, "compaction strategy")


def choose(
    view: FileSystemView, strategy: CompactionStrategy | str, min_log_files: int, min_log_bytes: int
) -> list[FileSlice]:
    """The latest slices worth compacting; file groups with a pending rewrite are left alone."""
    takes = TAKES[check_strategy(strategy)]
    chosen = []
    for key in view.file_groups():
        if key in view.pending_rewrites:
            continue
        fslice = view.latest_slice(key)
        if fslice is None or not fslice.logs:
            continue
        if takes(fslice, min_log_files, min_log_bytes):
            chosen.append(fslice)
    return chosen


def schedule(table: TableHandle, strategy: CompactionStrategy | str | None = None) -> str | None:
    """Write a compaction plan; returns its instant time, or None when no file group qualifies."""
    table.require()
    spec = table.config.compaction
    chosen_strategy = check_strategy(strategy or spec.strategy)

    def plan(timeline: Timeline, _requested: str) -> CompactionPlan | None:
        view = FileSystemView.build(timeline, load_checkpoint(table.storage))
        slices = choose(view, chosen_strategy, spec.min_log_files, spec.min_log_bytes)
        if not slices:
            return None
        return CompactionPlan(strategy=chosen_strategy, operations=tuple(slices))

    txn = Transaction.begin_planned(table, Action.COMPACTION, plan=plan, heartbeat=False, inflight=False)
    return txn.time if txn is not None else None


def plan_bytes(table: TableHandle, instant_time: str | None = None) -> int:
    """Bytes a compaction run would read: of one plan, or of the oldest pending one (to pick an engine)."""
    timeline = table.timeline()
    return planned_bytes(timeline, pending_plans(table, timeline), instant_time)


def pending_plans(table: TableHandle, timeline: Timeline | None = None) -> list[Instant]:
    timeline = timeline or table.timeline()
    return timeline.pending([Action.COMPACTION])


def runnable_plans(table: TableHandle, timeline: Timeline | None = None) -> list[Instant]:
    """Pending plans that no live process is running, oldest first: scheduled and never run, or whose run was
    interrupted or crashed. Plain `stitch compact` runs these before it plans anything new (as Hudi's compaction
    runs pick up pending plans first): a plan nobody runs keeps its file groups out of every later plan."""
    return unclaimed(table, pending_plans(table, timeline))


def compact_file_group(table: TableHandle, fslice: FileSlice, instant: str, mark: Callable[[str], None]) -> DataFile:
    """Merge one planned slice into a new base file (one Spark task's work, or one thread's)."""
    merged = merge_slice(table, fslice)
    rows = to_base(table.config, merged, table.sparse_column_versions)
    path = join(fslice.partition, base_name(fslice.file_group, instant))
    mark(path)
    written = write_table_file(table.storage, path, rows)
    return DataFile(
        path, fslice.partition, fslice.file_group, BASE, None, rows.num_rows, written.size, written.checksum
    )


def start_run(table: TableHandle, instant_time: str | None) -> tuple[Transaction, list[FileSlice]]:
    """Take a pending plan (the oldest if none is named), clear a crashed attempt's files, and return its work."""
    timeline = table.timeline()
    hints = (
        " (schedule one with `stitch compact --schedule`)",
        "; `stitch compact --run` without an instant runs the oldest pending plan",
    )
    pending = pending_plans(table, timeline)
    instant = to_run(timeline, pending, instant_time, Action.COMPACTION, ("compaction plan", "plans"), hints)
    txn = Transaction.take_over(table, instant, "compaction")
    assert isinstance(txn.plan, CompactionPlan)
    return txn, list(txn.plan.operations)


def run(table: TableHandle, instant_time: str | None = None, engine: Engine | None = None) -> CompactionResult:
    """Execute a compaction plan: one task per file group on the engine (in-process by default)."""
    table.require()
    txn, operations = start_run(table, instant_time)
    time, mark = txn.time, marker_for(table, txn.time)  # tasks get plain values, never the transaction
    try:
        files = (engine or LocalEngine()).map(
            lambda op: compact_file_group(table, op, time, mark), operations, weight=lambda op: op.bytes
        )
        return finish(txn, files, operations)
    except BaseException as exc:
        txn.run_failed(exc)
        raise


def finish(txn: Transaction, files: list[DataFile], operations: list[FileSlice]) -> CompactionResult:
    """Publish the compaction as a `commit`."""
    # Like an erase, name the file groups rewritten (a list, never a count): conflict checks read it.
    groups = tuple(FileGroupRef(f.partition, f.file_group) for f in files)
    version = txn.table.schema_version
    instant = txn.complete(CompactionCommit(added=tuple(files), operations=groups, schema_version=version))
    return CompactionResult(
        instant=instant.requested,
        completed=instant.completed,
        file_groups=len(files),
        rows=sum(f.rows for f in files),
        bytes=sum(f.bytes for f in files),
        merged_files=sum(len(op.files) for op in operations),
        published=publish_after(txn.table, f"compaction {instant.requested}", list(txn.table.config.publish.formats)),
    )


def publish_caught_up(table: TableHandle) -> list[Published]:
    """With nothing to compact: publish the configured formats still behind the newest compaction (a publish
    that failed after it)."""
    return publish_after(table, "the last compaction", list(table.config.publish.formats))


def inline_due(table: TableHandle) -> bool:
    """Whether `compaction.inline` asks for a compaction now: a pending plan nobody runs, or enough deltacommits
    since the last compaction (while a live process runs a plan, none)."""
    if not table.config.compaction.inline:
        return False
    timeline = table.timeline()
    return bool(runnable_plans(table, timeline)) or _commits_due(table, timeline)


def _commits_due(table: TableHandle, timeline: Timeline) -> bool:
    """Enough deltacommits completed since the last compaction for an inline one, and none pending."""
    if timeline.pending([Action.COMPACTION]):
        return False
    last = timeline.latest_completed([Action.COMPACTION])
    since = [
        i for i in timeline.completed([Action.DELTACOMMIT]) if last is None or (i.completed or "") > last.requested
    ]
    return len(since) >= table.config.compaction.after_delta_commits


def resume_pending(table: TableHandle, engine: Engine | None = None) -> list[CompactionResult]:
    """Run every pending plan nobody is running, oldest first. A plan another process takes over meanwhile is
    left to it (its run refuses ours as busy); one a restore or rollback undid meanwhile is skipped."""
    done = []
    for instant in runnable_plans(table):
        try:
            with undone_meanwhile(table, instant.requested):
                done.append(run(table, instant.requested, engine))
        except (BusyError, PlanUndone):
            continue
    return done


def compact(
    table: TableHandle, strategy: CompactionStrategy | str | None = None, engine: Engine | None = None
) -> CompactionResult | None:
    """Run the pending plans nobody runs, then schedule and run a new plan. Returns the new plan's result (the
    resumed ones in its `resumed`), or the last resumed one when nothing new qualified; None when nothing ran."""
    if strategy is not None:
        check_strategy(strategy)
    return _after(resume_pending(table, engine), lambda: _schedule_and_run(table, strategy, engine))


def compact_inline(table: TableHandle, engine: Engine | None = None) -> CompactionResult | None:
    """What `compaction.inline` does after an ingest: the pending plans nobody runs, then a new plan only when
    enough deltacommits piled up since the last compaction."""
    resumed = resume_pending(table, engine)
    return _after(
        resumed, lambda: _schedule_and_run(table, None, engine) if _commits_due(table, table.timeline()) else None
    )


def _schedule_and_run(
    table: TableHandle, strategy: CompactionStrategy | str | None, engine: Engine | None
) -> CompactionResult | None:
    instant = schedule(table, strategy)
    if instant is None:
        return None
    with undone_meanwhile(table, instant):  # the plan has no heartbeat until its run takes it
        return run(table, instant, engine)


def _after(resumed: list[CompactionResult], then: Callable[[], CompactionResult | None]) -> CompactionResult | None:
    """The last compaction run, carrying the resumed plans that ran before it."""
    result = then()
    if result is None:
        if not resumed:
            return None
        result, resumed = resumed[-1], resumed[:-1]
    result.resumed = resumed
    return result
