"""Rescale (design.md §5, §9): rewrite every file group of some partitions, or of the whole table, into N buckets.

A table that grows keeps its bucket count, and every compaction rewrites each file group whole in one task. A
rescale changes the count, as one instant on the timeline, like a compaction of a different shape (many old file
groups into many new ones):

- **Plan** (metadata only, under the lock, at time T): per rewritten partition, the latest slice of every file
  group (the base file and exactly the logs completed before T), the partition's old count B and the new N.
  Refused (exit 4) while another rescale, or a compaction or erase of those partitions, is pending.
- **Run** (resumable, like a compaction run): the merge is a CRDT (design.md §2), so a rescale only re-partitions the
  merged summaries by key: new file group j of a partition is every key of the old slices whose
  `stable_hash(key) mod N` is j, with its versions and tombstones. A key of old group i can land in new group j only
  when i = j modulo gcd(B, N), so the work splits into gcd(B, N) independent units per partition: each merges its
  old slices one at a time and writes its new groups' base files (`<j>_<T>_<token>.parquet`). With N a multiple
  of B (4 -> 32) a unit is one old file group; with N a divisor of B (4 -> 2) one new file group's inputs; with
  coprime counts (2 -> 5) the whole partition.
- **Publish** `<T>_<C>.rescale`: from then on the rewritten partitions have N buckets (a whole-table rescale also
  gives N to partitions created later), and their files older than T belong to no slice (`layout.fsview`).

Writers are fenced, not carried over (design.md §6): a deltacommit publishes only while no rescale of a partition it
wrote is pending and each of its files was routed with the partition's count in force (exit 4 otherwise, nothing
published; the next run routes by the new count), and while a whole-table rescale is pending no write begins.
So no log completes after T under an old file group id, and no log a writer finishes late is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stitchlake.checksums import digest
from stitchlake.engine import Engine, LocalEngine, marker_for
from stitchlake.errors import BusyError, PlanUndone, StitchError, UsageError
from stitchlake.io.datafiles import PARQUET_COMPRESSION, parquet_encodings, statistics_columns
from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.fsview import FileSystemView
from stitchlake.layout.names import BASE, base_name, file_group_id, join
from stitchlake.merge.stitch import to_base
from stitchlake.reading.snapshot import merge_slice
from stitchlake.services.publish import Published, publish_after
from stitchlake.services.rewrites.pending import planned_bytes, to_run, unclaimed, undone_meanwhile
from stitchlake.table.guards import pending_rescales
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import HOLDS_FILE_GROUPS
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import DataFile, FileGroupRef, FileSlice, RescaleCommit, RescalePlan, RewritePlan
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: The bucket counts a table may have (as `table.buckets` in the config).
MIN_BUCKETS, MAX_BUCKETS = 1, 65536


@dataclass
class RescaleResult:
    """What a rescale did, for summaries and `--json` (counts, never a list per file)."""

    instant: str
    completed: str | None
    buckets: int
    #: Partitions rewritten, and the bucket counts they had (count -> how many partitions had it).
    partitions: int
    previous: dict[str, int]
    whole_table: bool
    file_groups: int
    rows: int
    bytes: int
    merged_files: int = 0
    #: What `publish.formats` published after the rescale.
    published: list[Published] = field(default_factory=list)


@dataclass(frozen=True)
class Unit:
    """One task's share of a rescale: old slices of a partition, and the new file groups their keys go to."""

    partition: str
    buckets: int
    inputs: tuple[FileSlice, ...]
    targets: tuple[int, ...]


def check_buckets(buckets: int) -> int:
    if not MIN_BUCKETS <= buckets <= MAX_BUCKETS:
        raise UsageError(f"--buckets {buckets}: a table has {MIN_BUCKETS} to {MAX_BUCKETS} buckets per partition")
    return buckets


# ------------------------------------------------------------------------------------------------- plan


def schedule(table: TableHandle, buckets: int, partitions: list[str] | None = None) -> str | None:
    """Plan a rescale of `partitions` (None: the whole table) to `buckets`; its instant time, or None when every
    partition named already has that count (nothing to do)."""
    table.require()
    check_buckets(buckets)
    named = sorted(set(partitions or []))
    if named and not table.config.table.partition_names:
        raise UsageError("--partition: the table has no partition columns; rescale the whole table instead")

    def plan(timeline: Timeline, _requested: str) -> RescalePlan | None:
        for instant, other in pending_rescales(timeline):
            raise BusyError(
                f"rescale {instant.requested} (to {other.buckets} buckets) is pending; one rescale runs at a time. "
                "Run again when it has finished (if its process died, `stitch rescale --resume` finishes it)"
            )
        view = FileSystemView.build(timeline, load_checkpoint(table.storage), table.base_buckets)
        layout = view.layout()
        existing = view.partitions()
        unknown = [p for p in named if p not in existing]
        if unknown:
            shown = ", ".join(existing[:5]) + (", ..." if len(existing) > 5 else "")
            raise UsageError(
                f"--partition {unknown[0]}: the table holds no such partition (give its path as `stitch status` "
                f"shows it; partitions: {shown or 'none yet'})"
            )
        scope = named or existing
        rewritten = {p: layout.buckets(p) for p in scope if layout.buckets(p) != buckets}
        if not rewritten and (named or layout.default == buckets):
            return None
        _refuse_pending_rewrites(timeline, set(rewritten))
        slices = [s for s in (view.latest_slice(k) for k in view.file_groups(rewritten)) if s is not None]
        return RescalePlan(operations=tuple(slices), buckets=buckets, partitions=rewritten, whole_table=not named)

    txn = Transaction.begin_planned(table, Action.RESCALE, plan=plan, heartbeat=False, inflight=False)
    return txn.time if txn is not None else None


def _refuse_pending_rewrites(timeline: Timeline, partitions: set[str]) -> None:
    """A compaction or erase still pending on a partition to rescale would write old-layout files after it: refuse
    (exit 4) and say how to finish it."""
    for instant in timeline.pending(HOLDS_FILE_GROUPS):
        plan = timeline.plan(instant)
        touched = sorted({p for p, _ in plan.groups} & partitions) if isinstance(plan, RewritePlan) else []
        if touched:
            how = (
                f"run it first (`stitch compact --run --instant {instant.requested}`)"
                if instant.action == Action.COMPACTION
                else "wait for it"
            )
            raise BusyError(
                f"{instant.action} {instant.requested} is pending on partition {touched[0] or '(unpartitioned)'}, "
                f"which the rescale would rewrite; {how}, then rescale (nothing was changed)"
            )


def plan_bytes(table: TableHandle, instant_time: str | None = None) -> int:
    """Bytes a rescale run reads: of one pending plan, or of the oldest (to pick an engine)."""
    timeline = table.timeline()
    return planned_bytes(timeline, [i for i, _ in pending_rescales(timeline)], instant_time)


def runnable_plans(table: TableHandle, timeline: Timeline | None = None) -> list[Instant]:
    """Pending rescales nobody runs (never started, or whose process died), oldest first."""
    return unclaimed(table, [instant for instant, _ in pending_rescales(timeline or table.timeline())])


# -------------------------------------------------------------------------------------------------- run


def follow_a_config_edited_first(table: TableHandle, instant_time: str | None) -> None:
    """A config that already says the new count of the whole-table rescale about to run (edited first, as
    `stitch rescale` allows) opens the table at its count now: the job (a spark-submit driver opens the table from
    the same YAML) runs the rescale the command planned instead of refusing the config."""
    pending = pending_rescales(table.timeline())
    chosen = [plan for instant, plan in pending if instant_time in (None, instant.requested)][:1]
    if chosen and chosen[0].whole_table and chosen[0].buckets == table.config.table.buckets:
        table.follow_buckets()


def buckets_reminder(table: TableHandle, said: int) -> str:
    """What to edit once this process changed the table's bucket count (a whole-table rescale, a restore that undid
    one; the handle follows it) while the YAML it was opened from says `said`: other commands refuse that YAML
    until it says the count now. '' when it does already, or the table was opened without a YAML file."""
    now, source = table.config.table.buckets, table.config.source_file
    if now == said or not source or not Path(source).is_file():
        return ""
    return f"set `buckets: {now}` under `table:` in {source}: commands refuse the count it says now ({said})"


def units(plan: RescalePlan) -> list[Unit]:
    """The plan's work, split where keys cannot cross: per partition, per class of file groups modulo gcd(B, N)."""
    out = []
    for partition, old in sorted(plan.partitions.items()):
        step = gcd(old, plan.buckets)
        ops = [op for op in plan.operations if op.partition == partition]
        for rest in range(step):
            inputs = tuple(op for op in ops if int(op.file_group) % step == rest)
            if inputs:
                out.append(Unit(partition, plan.buckets, inputs, tuple(range(rest, plan.buckets, step))))
    return out


class _BaseFileBuffer:
    """One new file group's base file, encoded as its rows arrive (one old slice's share at a time): a unit holds
    its new files' compressed bytes, not their rows, until each is written in one put as `write_table_file` does."""

    def __init__(self, schema: pa.Schema) -> None:
        self.sink = pa.BufferOutputStream()
        self.writer = pq.ParquetWriter(
            self.sink,
            schema,
            compression=PARQUET_COMPRESSION,
            compression_level=1,
            write_statistics=statistics_columns(schema),
            write_page_checksum=True,
            **parquet_encodings(schema),
        )
        self.rows = 0

    def append(self, rows: pa.Table) -> None:
        self.writer.write_table(rows)
        self.rows += rows.num_rows

    def finish(self) -> pa.Buffer:
        self.writer.close()
        return self.sink.getvalue()


def unit_bytes(unit: Unit) -> int:
    """What a unit's task reads: the in-process engine runs units under its byte budget by it."""
    return sum(fslice.bytes for fslice in unit.inputs)


def rescale_unit(table: TableHandle, unit: Unit, instant: str, mark: Callable[[str], None]) -> list[DataFile]:
    """Merge a unit's old slices one at a time and write each new file group's base file (one task's work).

    Old file groups hold disjoint keys, so a new group's rows are the union of each old slice's merged rows that
    hash there: no merge across slices is needed, only a split by the new bucket. Each slice's share is encoded
    into its new file as soon as it is split, so the task holds one merged slice and the new files' compressed
    bytes (about the unit's input bytes once compacted), never the unit's rows.
    """
    config = table.config
    files: dict[int, _BaseFileBuffer] = {}
    for fslice in unit.inputs:
        rows = to_base(config, merge_slice(table, fslice), table.sparse_column_versions)
        if not rows.num_rows:
            continue
        groups = bucket_of([rows.column(n) for n in config.table.key_names], unit.buckets)
        for j in np.unique(groups):
            part = rows.filter(pa.array(groups == j))
            if int(j) not in files:
                # Several sorted runs, one per old slice: not in key order as a whole, so not marked so.
                files[int(j)] = _BaseFileBuffer(part.schema.remove_metadata())
            files[int(j)].append(part)
        del rows, groups
    out = []
    for j in unit.targets:
        if j not in files:
            continue
        buffer = files.pop(j)
        data = buffer.finish()
        group = file_group_id(j)
        path = join(unit.partition, base_name(group, instant))
        mark(path)
        table.storage.write_bytes(path, data.to_pybytes())
        out.append(
            DataFile(
                path,
                unit.partition,
                group,
                BASE,
                None,
                buffer.rows,
                data.size,
                digest(memoryview(data)),
                buckets=unit.buckets,
            )
        )
    return out


def start_run(table: TableHandle, instant_time: str | None) -> tuple[Transaction, RescalePlan]:
    """Take a pending rescale (the oldest if none is named), clear a crashed attempt's files, and return its plan."""
    timeline = table.timeline()
    pending = [i for i, _ in pending_rescales(timeline)]
    instant = to_run(timeline, pending, instant_time, Action.RESCALE, ("rescale", "rescales"))
    txn = Transaction.take_over(table, instant, "rescale")
    assert isinstance(txn.plan, RescalePlan)
    return txn, txn.plan


def run(table: TableHandle, instant_time: str | None = None, engine: Engine | None = None) -> RescaleResult:
    """Execute a pending rescale: one task per unit on the engine (in-process by default)."""
    follow_a_config_edited_first(table, instant_time)
    table.require()
    txn, plan = start_run(table, instant_time)
    time, mark = txn.time, marker_for(table, txn.time)  # tasks get plain values, never the transaction
    try:
        done = (engine or LocalEngine()).map(
            lambda unit: rescale_unit(table, unit, time, mark), units(plan), weight=unit_bytes
        )
        return finish(txn, [f for files in done for f in files], plan)
    except BaseException as exc:
        txn.run_failed(exc)
        raise


def _no_late_writes(plan: RescalePlan) -> Callable[[Timeline, Instant], None]:
    """Under the lock at publish: no deltacommit wrote a rescaled partition after the plan's cut. Writers are fenced
    (`guards.refuse_if_rescaled`), so this holds unless a writer without the fence (an older stitchlake)
    wrote; its logs would be laid out by the old count, so the rescale must not publish over them."""

    def check(timeline: Timeline, instant: Instant) -> None:
        for other in timeline.completed([Action.DELTACOMMIT], since=instant.requested):
            for item in timeline.commit(other).added_files:
                if plan.whole_table or item.partition in plan.partitions:
                    raise StitchError(
                        f"deltacommit {other.requested} wrote partition {item.partition or '(unpartitioned)'} after "
                        f"rescale {instant.requested} was planned, so the rescale would hide it; nothing was "
                        f"published. Roll the rescale back (`stitch rollback --instant {instant.requested}`) and "
                        "rescale again"
                    )

    return check


def finish(txn: Transaction, files: list[DataFile], plan: RescalePlan) -> RescaleResult:
    """Publish the rescale, then the configured published formats (the base files now hold every log)."""
    groups = tuple(FileGroupRef(p, file_group_id(j)) for p in sorted(plan.partitions) for j in range(plan.buckets))
    commit = RescaleCommit(
        added=tuple(sorted(files, key=lambda f: f.path)),
        operations=groups,
        schema_version=txn.table.schema_version,
        buckets=plan.buckets,
        partitions=dict(plan.partitions),
        whole_table=plan.whole_table,
    )
    instant = txn.complete(commit, conflict_check=_no_late_writes(plan))
    if plan.whole_table:
        txn.table.follow_buckets(plan.buckets)
    previous: dict[str, int] = {}
    for old in plan.partitions.values():
        previous[str(old)] = previous.get(str(old), 0) + 1
    return RescaleResult(
        instant=instant.requested,
        completed=instant.completed,
        buckets=plan.buckets,
        partitions=len(plan.partitions),
        previous=previous,
        whole_table=plan.whole_table,
        file_groups=len(files),
        rows=sum(f.rows for f in files),
        bytes=sum(f.bytes for f in files),
        merged_files=sum(len(op.files) for op in plan.operations),
        published=publish_after(txn.table, f"rescale {instant.requested}", list(txn.table.config.publish.formats)),
    )


def rescale(
    table: TableHandle, buckets: int, partitions: list[str] | None = None, engine: Engine | None = None
) -> RescaleResult | None:
    """Run the pending rescales nobody runs, then plan and run one to `buckets`. Returns the last one run (the
    pending one a crash left, when that already made the count `buckets`); None when nothing needed it."""
    check_buckets(buckets)
    done = []
    for instant in runnable_plans(table):
        try:
            with undone_meanwhile(table, instant.requested):
                done.append(run(table, instant.requested, engine))
        except PlanUndone:
            continue
    planned = schedule(table, buckets, partitions)
    if planned is not None:
        with undone_meanwhile(table, planned):
            done.append(run(table, planned, engine))
    return done[-1] if done else None
