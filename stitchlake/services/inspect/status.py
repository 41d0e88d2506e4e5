"""`stitch status`: what a tired operator needs to see about a table's health, from metadata only."""

from __future__ import annotations

import shlex
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.layout.names import BASE, LOG
from stitchlake.services.published_state import PublishedFormat, published_status
from stitchlake.timeline import clock
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.archive import Checkpoint, archived_batches_newest_first, load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import DeltaCommit
from stitchlake.vocabulary import Recovery, State

if TYPE_CHECKING:
    from stitchlake.layout.fsview import FileSystemView
    from stitchlake.layout.rescales import BucketLayout
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.timeline import Timeline

MIB = 1024 * 1024
#: Large file groups listed in `stitch status --json` (`large_file_groups`), largest first.
LARGE_SHOWN = 10
#: Partitions named in the warning's rescale commands; `stitch status --json` lists the large file groups.
SHOWN = 5
#: Memory a merge of a file slice takes, as a multiple of the slice's file bytes: about 7x for a read and 8x for
#: a compaction, measured on the benchmark workload (docs/operations.md, "Sizing file groups").
MEMORY_FACTOR = 8


@dataclass
class PartitionHealth:
    """One partition's latest file slices (`rows` counts base-file rows: log rows are not known per key unmerged)."""

    buckets: int
    file_groups: int = 0
    base_files: int = 0
    log_files: int = 0
    max_logs_per_slice: int = 0
    bytes: int = 0
    rows: int = 0


@dataclass(frozen=True)
class PendingInstant:
    """A pending instant and whether a live process still runs it (its heartbeat)."""

    instant: str
    action: Action
    state: State
    stream: str | None
    alive: bool
    #: What recovery does with it once its process is gone: roll it back (a write), rerun it (a compaction or
    #: rescale plan, which waits to be run), finish it (a clean, rollback or restore).
    recovery: Recovery
    heartbeat_age_s: float | None
    pending_s: float
    host: str | None
    pid: int | None


@dataclass(frozen=True)
class LargeFileGroup:
    """A file group whose latest slice is over `compaction.max_file_group_mb`."""

    partition: str
    file_group: str
    bytes: int
    base_bytes: int
    log_files: int


@dataclass(frozen=True)
class LastCommit:
    """A stream's latest deltacommit."""

    instant: str
    completed: str | None
    rows: int
    files: int


@dataclass(frozen=True)
class Totals:
    partitions: int
    file_groups: int
    live_files: int
    base_files: int
    log_files: int
    bytes: int
    latest_slice_bytes: int
    largest_file_group_bytes: int


@dataclass(frozen=True)
class TimelineHealth:
    active_instants: int
    archived_until: str | None
    buckets: int
    last_rescale: str | None
    last_compaction: str | None
    last_clean: str | None
    deltacommits_since_compaction: int


@dataclass(frozen=True)
class StatusReport:
    """`stitch status`: typed for Python callers and the CLI's tables; `to_json` is `stitch status --json`."""

    table: str
    path: str
    #: The table format its files are written in (`table.json`; design.md §3): what a reader must support.
    format_version: int
    partitions: dict[str, PartitionHealth]
    totals: Totals
    #: File groups over `compaction.max_file_group_mb`, largest first (at most LARGE_SHOWN; `warnings` counts all).
    large_file_groups: list[LargeFileGroup]
    pending_compactions: list[PendingInstant]
    writers: list[PendingInstant]
    #: Each stream's latest deltacommit, None for a stream never written.
    streams: dict[str, LastCommit | None]
    #: Each format of `publish.formats`, and any other with a publish on the active timeline.
    published: list[PublishedFormat]
    warnings: list[str]
    timeline: TimelineHealth

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status(table: TableHandle, now: float | None = None) -> StatusReport:
    """Per partition: file groups, log files in latest slices, bytes; pending compactions; writers; streams.

    `now` (epoch seconds) is when ages are measured from: this moment unless given.
    """
    table.require()
    timeline = table.timeline()
    view = table.view(timeline)
    expire = table.config.concurrency.heartbeat.expire_s
    now = time.time() if now is None else now

    partitions: dict[str, PartitionHealth] = {}
    with_data: set[str] = set()
    layout = view.layout()
    for key in view.file_groups():
        fslice = view.latest_slice(key)
        if fslice is None:
            continue  # a file group of an older bucket count, kept only for time travel until cleaned
        with_data.add(key[0])
        entry = partitions.setdefault(key[0] or "(unpartitioned)", PartitionHealth(layout.buckets(key[0])))
        entry.file_groups += 1
        entry.base_files += 1 if fslice.base else 0
        entry.log_files += len(fslice.logs)
        entry.max_logs_per_slice = max(entry.max_logs_per_slice, len(fslice.logs))
        entry.bytes += sum(f.bytes for f in fslice.files)
        entry.rows += fslice.base.rows if fslice.base else 0

    writers: list[PendingInstant] = []
    warnings: list[str] = []
    stale_after_s = table.config.compaction.stale_plan_minutes * 60
    for instant in timeline.pending():
        record = heartbeats.read_beat(table.storage, instant.requested)
        beat = None if record is None else float(record["ts"])
        alive = not heartbeats.is_expired(table.storage, instant.requested, expire, now)
        writer = timeline.plan(instant).writer
        pending_s = round(now - clock.to_millis(instant.requested) / 1000, 1)
        writers.append(
            PendingInstant(
                instant=instant.requested,
                action=instant.action,
                state=instant.state,
                stream=timeline.stream_of(instant),
                alive=alive,
                recovery=kind_of(instant.action).recovery,
                heartbeat_age_s=None if beat is None else round(now - beat, 1),
                pending_s=pending_s,
                host=writer.host,
                pid=writer.pid,
            )
        )
        if instant.action == Action.COMPACTION and pending_s > stale_after_s:
            # Its file groups stay out of every new plan until it completes: logs pile up, reads slow down,
            # read-optimized reads and published tables go stale. Plain `stitch compact` runs one nobody runs; one
            # that a live process has been running this long may be hung, and only its operator can tell.
            took = f"{pending_s / 60:.0f} min" if pending_s < 100 * 60 else f"{pending_s / 3600:.1f} h"
            age = f"compaction plan {instant.requested} has been pending for {took}"
            if alive and record is not None:
                where = f"process {record.get('pid', '?')} on {record.get('host', '?')}"
                warnings.append(
                    f"{age} (over compaction.stale_plan_minutes) and {where} still beats for it: a long run, or "
                    "a hung one; if it is hung, stop it, and the next `stitch compact` runs the plan"
                )
            else:
                warnings.append(
                    f"{age} and nothing is running it (over compaction.stale_plan_minutes): run `stitch compact`"
                )

        if instant.action == Action.RESCALE and not alive:
            # Writers of its partitions are fenced (exit 4) until it completes.
            warnings.append(
                f"rescale {instant.requested} is pending and nothing is running it; writers of its partitions are "
                "refused until it completes: run `stitch rescale --resume`"
            )

    limit = table.config.compaction.max_file_group_mb * MIB
    large, largest = _slice_sizes(view, limit)
    if large:
        warnings.append(_large_file_groups(large, limit, layout, with_data))

    streams: dict[str, LastCommit | None] = {name: None for name in table.config.streams}
    for instant in reversed(timeline.completed([Action.DELTACOMMIT])):
        if all(streams.values()):
            break
        commit = timeline.commit(instant)
        if not isinstance(commit, DeltaCommit) or commit.stream is None:
            continue
        if commit.stream in streams and streams[commit.stream] is None:
            streams[commit.stream] = LastCommit(instant.requested, instant.completed, commit.rows, len(commit.added))

    published = published_status(table, timeline)
    for fmt in published:
        if fmt.stale and fmt.configured:
            # The compaction's (or erase's, restore's) own republish failed or was stopped: readers of the
            # published table see an older state, erased keys or undone commits included, until it is published.
            last = f"its last publish {fmt.last_publish}" if fmt.last_publish else "it was never published"
            warnings.append(
                f"published {fmt.format} is behind the table ({last}): run `stitch publish -f {fmt.format}`"
            )

    live = view.live_files()
    checkpoint = load_checkpoint(table.storage)
    last_compaction, last_clean, archived_deltas = _latest_services(table, timeline, checkpoint)
    # By instant: a crashed archive may leave instants on the active timeline that its batch holds too.
    deltas = {i.requested: i for i in [*archived_deltas, *timeline.completed([Action.DELTACOMMIT])]}
    since_compaction = [
        i for i in deltas.values() if last_compaction is None or (i.completed or "") > (last_compaction.requested or "")
    ]
    return StatusReport(
        table=table.config.table.name,
        path=table.path,
        format_version=table.properties.schema.format_version,
        partitions=partitions,
        totals=Totals(
            partitions=len(partitions),
            file_groups=sum(p.file_groups for p in partitions.values()),
            live_files=len(live),
            base_files=sum(1 for f in live if f.kind == BASE),
            log_files=sum(1 for f in live if f.kind == LOG),
            bytes=sum(f.bytes for f in live),
            latest_slice_bytes=sum(p.bytes for p in partitions.values()),
            largest_file_group_bytes=largest,
        ),
        large_file_groups=large[:LARGE_SHOWN],
        pending_compactions=[w for w in writers if w.action == Action.COMPACTION],
        writers=[w for w in writers if w.action != Action.COMPACTION],
        streams=streams,
        published=published,
        warnings=warnings,
        timeline=TimelineHealth(
            active_instants=len(timeline),
            archived_until=checkpoint.horizon if checkpoint else None,
            buckets=layout.default,
            last_rescale=view.rescales[-1].completed if view.rescales else None,
            last_compaction=last_compaction.completed if last_compaction else None,
            last_clean=last_clean.completed if last_clean else None,
            deltacommits_since_compaction=len(since_compaction),
        ),
    )


def _slice_sizes(view: FileSystemView, limit: int) -> tuple[list[LargeFileGroup], int]:
    """File groups whose latest slice is over `limit` bytes (largest first), and the largest slice's bytes."""
    large: list[LargeFileGroup] = []
    largest = 0
    for key in view.file_groups():
        fslice = view.latest_slice(key)
        if fslice is None:
            continue
        largest = max(largest, fslice.bytes)
        if fslice.bytes > limit:
            base = fslice.base.bytes if fslice.base else 0
            large.append(LargeFileGroup(key[0], key[1], fslice.bytes, base, len(fslice.logs)))
    large.sort(key=lambda group: (-group.bytes, group.partition, group.file_group))
    return large, largest


def _large_file_groups(large: list[LargeFileGroup], limit: int, layout: BucketLayout, partitions: set[str]) -> str:
    """The warning for file groups over `compaction.max_file_group_mb`: what it costs, and which remedy fits.

    A slice is over the limit because its logs piled up (compacting shrinks it back to its base file) or because
    its base file alone is (the file group holds too many keys: more buckets, `stitch rescale`). `partitions` are
    the table's partitions with data, to tell whether every one of them needs the rescale."""
    largest = large[0]
    where = f"{largest.partition}/{largest.file_group}" if largest.partition else largest.file_group
    too_big = [g for g in large if g.base_bytes > limit]
    message = (
        f"{len(large)} file group(s) hold more than compaction.max_file_group_mb ({limit // MIB} MiB) in their latest "
        f"slice, the largest {largest.bytes / MIB:,.0f} MiB ({where}): reading, compacting or erasing it merges "
        f"all of it at once, at about {MEMORY_FACTOR}x its bytes of memory in one process or Spark task"
    )
    if not too_big:
        return f"{message}; their logs piled up: run `stitch compact` (or compact more often)"
    named = sorted({g.partition for g in too_big})
    counts = ", ".join(f"{p or '(unpartitioned)'}: {layout.buckets(p)}" for p in named[:SHOWN])
    counts += ", ..." if len(named) > SHOWN else ""
    return (
        f"{message}; {len(too_big)} of them exceed it in their base file alone: the file groups hold too many keys "
        f"for the bucket count of their partition ({counts}), rescale "
        f"({'; '.join(rescale_commands(too_big, limit, layout, partitions))}; docs/operations.md, "
        '"Sizing file groups")'
    )


def rescale_commands(
    too_big: list[LargeFileGroup], limit: int, layout: BucketLayout, partitions: set[str]
) -> list[str]:
    """The `stitch rescale` commands that bring base files back under half of `limit` (room to grow before the next
    warning), each partition from the count it has now to a multiple of it (each old file group splits into whole
    new ones: one rescale task per old file group, docs/operations.md, "Rescaling a table's buckets").

    One whole-table command when every partition needs it and all have one count (the largest target, so the
    partitions created later get it too); otherwise one command per target count, naming its partitions."""
    wanted: dict[str, int] = {}
    for group in too_big:
        factor = -(-group.base_bytes * 2 // limit)
        wanted[group.partition] = max(wanted.get(group.partition, 0), layout.buckets(group.partition) * factor)
    if set(wanted) >= partitions and len({layout.buckets(p) for p in partitions}) == 1:
        return [f"`stitch rescale --buckets {max(wanted.values())}`"]
    commands = []
    for buckets in sorted(set(wanted.values())):
        named = sorted(p for p, n in wanted.items() if n == buckets)
        flags = " ".join(f"--partition {shlex.quote(p)}" for p in named[:SHOWN])
        more = f" (and {len(named) - SHOWN} more partitions)" if len(named) > SHOWN else ""
        commands.append(f"`stitch rescale --buckets {buckets} {flags}`{more}")
    return commands


def _latest_services(
    table: TableHandle, timeline: Timeline, checkpoint: Checkpoint | None
) -> tuple[Instant | None, Instant | None, list[Instant]]:
    """The latest completed compaction and clean, from the active timeline or else from the archive (an archived
    compaction is still the last one), and the archived deltacommits that may have completed after it.

    The archive is read newest batch first and only as far as needed: until both are found and the batches left
    completed before the compaction was requested.
    """
    compaction = timeline.latest_completed([Action.COMPACTION])
    clean = timeline.latest_completed([Action.CLEAN])
    deltas: list[Instant] = []
    if checkpoint is None:
        return compaction, clean, deltas
    for horizon, entries in archived_batches_newest_first(table.storage):
        if compaction is not None and clean is not None and horizon <= (compaction.requested or ""):
            break
        for entry in entries:
            instant = entry.instant
            if instant.action == Action.DELTACOMMIT:
                deltas.append(instant)
            elif instant.action == Action.COMPACTION and compaction is None:
                compaction = instant
            elif instant.action == Action.CLEAN and clean is None:
                clean = instant
    return compaction, clean, deltas
