"""Snapshot reads (design.md §7): merge-on-read, read-optimized and time travel, one file slice at a time.

Every mode plans file slices from the file-system view, reads each slice's files once, and merges them with
`merge.stitch`; a Spark task reading one slice calls the same `read_slice`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import TableConfig
from stitchlake.errors import BusyError, ConflictError, DataFileMissing, HistoryMoved, StitchError, UsageError, one_of
from stitchlake.io.datafiles import read_table_file
from stitchlake.io.schemas import base_schema, evolve, log_schema, table_schema
from stitchlake.layout.fsview import DataFile, FileSlice, FileSystemView
from stitchlake.layout.names import BASE
from stitchlake.merge import summary
from stitchlake.merge.stitch import LogInput, Merged, base_columns, base_rows, merge_files, to_rows
from stitchlake.reading.filters import Filter, Pruning, prune
from stitchlake.reading.scan import Scan, bounded
from stitchlake.timeline.actions import IN_CHANGE_FEED, UNDOES_HISTORY
from stitchlake.timeline.archive import archived_batches_newest_first
from stitchlake.timeline.clock import from_millis, is_time, now_millis, parse_user_time
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import UndoPlan
from stitchlake.timeline.savepoints import refuse_unfinished_purge, savepoint_time
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


def read_mode(mode: str) -> ReadMode:
    """A read mode named by a caller (the API, Spark's options), or UsageError naming the modes."""
    return one_of(ReadMode, mode, "mode")


# ------------------------------------------------------------------------------------------------ planning


def refuse_reversed_range(start: str | None, end: str | None) -> None:
    """A change read whose resolved `since` is after the `until` it was given (exit 2), rather than no rows."""
    if start is not None and end is not None and start > end:
        raise UsageError(f"since ({start}) is after until ({end}): a change read runs from since to until")


def resolve_time(table: TableHandle, timeline: Timeline, value: str | None, *, since: bool = False) -> str | None:
    """An `as_of`/`since`/`until` (an instant id, an instant time, an ISO timestamp or a savepoint name) as the
    completion time it stands for (design.md §7).

    An instant id is the instant's *requested* time (what `timeline show` lists first), and a read as of t sees the
    commits *completed* by t: taken as a plain time, the id of a commit would leave that very commit out (it
    completes after it is requested, and instants complete out of requested order). So the id of a completed
    instant means the moment it completed: its changes are in. A publish changes no rows and publishes the state as
    of its own id, so its id keeps meaning that state. Any other 17-digit time, an ISO timestamp and the id of an
    instant not completed are the moment they say, and so is any id as a `since`: changes since an instant are
    those completed after it was requested, its own among them."""
    if value is None:
        return None
    at = _resolved_time(timeline, value, since)
    refuse_unfinished_purge(timeline, at)
    return at


#: How far another host's clock may lag ours: a commit it publishes from now on is dated no earlier than this ago.
SETTLE_S = 300


def resolve_until(table: TableHandle, timeline: Timeline, until: str | None) -> str | None:
    """A change read's end: `until` resolved, or the latest completion when it is not given.

    Readers take no lock, so a commit may be published while we list: its completion time was drawn under the lock,
    after every completion we see, but its file lands a moment later. A range ending at the latest completion we see
    misses no commit, if the listing is one cut of the timeline (`Timeline.load_cut`); an `until` after that
    could (and a reader taking it as its next `since` would skip that commit for good), so it is refused (exit 4,
    run again later) while a commit may still complete at or before it."""
    latest = timeline.latest_completed()
    settled = latest.completed if latest and latest.completed else ""
    end = (settled or None) if until is None else resolve_time(table, timeline, until)
    if end is None:
        return None
    if end <= settled:
        return end
    newest = max(timeline.all_times(), default="")
    if end > max(newest, from_millis(now_millis() + SETTLE_S * 1000)):
        raise UsageError(
            f"until {end} is in the future: the read would end at commits not made yet, and a next read from it "
            "would skip every commit made until then. Leave out until (the read ends at the latest completion)"
        )
    for pending in timeline.pending(IN_CHANGE_FEED):
        if pending.requested < end:  # it completes after every time it saw, its own request among them
            raise BusyError(
                f"until {end}: {pending.action} {pending.requested} is pending and may still complete at or before "
                f"it, so a range to it is not final yet. Read again once it completed (or `stitch rollback --failed` "
                "took it back, if its writer died), or leave out until: the read then ends at the latest completion"
            )
    if end > max(newest, from_millis(now_millis() - SETTLE_S * 1000)):
        raise BusyError(
            f"until {end} is after the latest completion ({settled or 'none yet'}) and not {SETTLE_S} s ago yet: a "
            "commit may still complete at or before it, and a next read from it would skip that commit. Leave out "
            "until (the read ends at the latest completion) and take the next since from the rows' largest "
            "_commit_time, or read again later"
        )
    return end


def _resolved_time(timeline: Timeline, value: str, since: bool) -> str:
    named = savepoint_time(timeline, value)
    if named is not None:
        return named
    try:
        at = parse_user_time(str(value))
    except ValueError as exc:
        raise UsageError(f"{exc}, nor a savepoint name") from None
    instant = timeline.get(at) if is_time(str(value).strip()) and not since else None
    if instant is None and is_time(str(value).strip()) and not since:
        instant = _archived(timeline, at)
    if instant is not None and instant.is_completed and instant.completed and instant.action != Action.PUBLISH:
        return instant.completed
    return at


def _archived(timeline: Timeline, requested: str) -> Instant | None:
    """The archived instant of this id: its id means its completion too. Only for an id older than the active
    timeline, and only the newest archive batch: an instant of an older one completed before the horizon, a time
    no read reaches."""
    oldest = timeline.instants[0].requested if timeline.instants else None
    if oldest is not None and requested >= oldest:
        return None
    for _horizon, entries in archived_batches_newest_first(timeline.storage):
        return next((e.instant for e in entries if e.instant.requested == requested), None)
    return None


def plan_slices(
    config: TableConfig,
    view: FileSystemView,
    as_of: str | None,
    pruning: Pruning,
) -> list[FileSlice]:
    """The slices a read as of `as_of` merges, of the partitions and file groups `pruning` allows (a key's file
    group under its partition's bucket count then: a rescale changes it)."""
    layout = view.layout(as_of) if pruning.bucket_keys is not None else None
    keys = [
        key
        for key in view.file_groups()
        if pruning.allows(key, layout.buckets(key[0]) if layout is not None else config.table.buckets)
    ]
    return view.latest_slices(as_of, file_groups=keys)


def wanted_columns(config: TableConfig, columns: Sequence[str] | None) -> list[str]:
    names = [c.name for c in config.all_columns()]
    if columns is None:
        return names
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise UsageError(
            f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (columns: {', '.join(names)})"
        )
    return list(columns)


def _stream_columns(config: TableConfig, wanted: Sequence[str]) -> dict[str, list[str]]:
    return {s.name: [c for c in s.column_names if c in wanted] for s in config.streams.values()}


# ------------------------------------------------------------------------------------------------ reading


def common_names(config: TableConfig) -> list[str]:
    return [c.name for c in config.common_columns]


def _base_columns(config: TableConfig, per_stream: dict[str, list[str]]) -> list[str]:
    names = common_names(config)
    for stream in config.streams.values():
        names += per_stream[stream.name]
        names += [f.name for f in summary.meta_fields(stream, True, per_stream[stream.name])]
    return names


def _log_columns(config: TableConfig, stream_name: str, per_stream: dict[str, list[str]]) -> list[str]:
    stream = config.streams[stream_name]
    return (
        common_names(config)
        + per_stream[stream_name]
        + [f.name for f in summary.meta_fields(stream, False, per_stream[stream_name])]
    )


def merge_slice(
    table: TableHandle,
    fslice: FileSlice,
    wanted: Sequence[str] | None = None,
    mode: ReadMode = ReadMode.SNAPSHOT,
    versions: bool = True,
) -> Merged:
    """Read one file slice's files once each and merge them (read-optimized: the base file alone).

    `versions=False` when only `to_rows` follows (see `merge_files`).
    """
    config = table.config
    per_stream = _stream_columns(config, wanted_columns(config, wanted))
    base = _read_base(table, fslice, _base_columns(config, per_stream)) if fslice.base is not None else None
    logs = []
    if mode == ReadMode.SNAPSHOT:
        for item in fslice.logs:
            stream = config.streams.get(item.stream or "")
            if stream is None:
                if item.stream in table.config_of_file(item.schema_version).streams:
                    continue  # a stream dropped by `stitch alter`: hidden from reads of later versions
                raise StitchError(f"{item.path}: written by unknown stream {item.stream!r}")
            log_columns = _log_columns(config, stream.name, per_stream)
            rows = _read_file(table, item, log_schema(config, stream), log_columns)
            logs.append(LogInput(stream.name, rows, int(item.completed)))
    return merge_files(config, base, logs, columns=per_stream, versions=versions)


def _read_base(table: TableHandle, fslice: FileSlice, columns: list[str]) -> pa.Table:
    assert fslice.base is not None
    return _read_file(table, fslice.base, base_schema(table.config), columns)


def _read_file(table: TableHandle, item: DataFile, schema: pa.Schema, columns: list[str]) -> pa.Table:
    """A data file's `columns` under the table's schema, whichever schema version the file was written under."""
    if item.schema_version == table.schema_version:
        return read_table_file(table.storage, item.path, schema, columns, item.rows, item.checksum)
    written = table.config_of_file(item.schema_version)
    own = base_schema(written) if item.kind == BASE else log_schema(written, written.streams[item.stream or ""])
    present = [name for name in columns if name in own.names]
    rows = read_table_file(table.storage, item.path, own, present, item.rows, item.checksum)
    evolved = evolve(rows, pa.schema([schema.field(name) for name in columns]), table.initial_defaults())
    for stream in table.config.streams.values():
        added = [c for c in stream.column_names if c in columns and c not in own.names]
        if added:
            evolved = summary.version_added_columns(stream, evolved, added, with_commit=item.kind == BASE)
    return evolved


def read_slice(
    table: TableHandle,
    fslice: FileSlice,
    columns: Sequence[str] | None = None,
    mode: ReadMode = ReadMode.SNAPSHOT,
    rows_filter: pc.Expression | None = None,
) -> pa.Table:
    """The live wide rows of one file slice.

    A base file read alone needs no merge (it holds one merged row per key), so only its value columns and
    one flag per stream is read, not the versions: read-optimized reads cost about a plain Parquet scan.
    """
    config = table.config
    wanted = wanted_columns(config, columns)
    # On an object store, fetch the slice's files together: one round trip, not one per log file.
    ahead = fslice.files if mode == ReadMode.SNAPSHOT else [fslice.base] if fslice.base else []
    table.storage.prefetch((f.path, f.bytes) for f in ahead)
    if fslice.base is not None and (mode == ReadMode.READ_OPTIMIZED or not fslice.logs):
        out = base_rows(config, _read_base(table, fslice, base_columns(config, wanted)), wanted)
    else:
        out = to_rows(config, merge_slice(table, fslice, wanted, mode, versions=False), wanted)
    if rows_filter is not None and out.num_rows:
        out = out.filter(rows_filter)
    return out


def empty_rows(config: TableConfig, columns: Sequence[str]) -> pa.Table:
    schema = table_schema(config)
    return pa.schema([schema.field(c) for c in columns]).empty_table()


def _slice_weight(mode: ReadMode) -> Callable[[FileSlice], int]:
    def weight(fslice: FileSlice) -> int:
        return fslice.bytes if mode == ReadMode.SNAPSHOT else fslice.base.bytes if fslice.base else 0

    return weight


def snapshot_scan(
    table: TableHandle,
    view: FileSystemView,
    at: str | None,
    columns: list[str],
    mode: ReadMode,
    filter: Filter,
    planned: str,
) -> Scan:
    """A snapshot, time-travel or read-optimized read, planned: its latest slices as of `at` (None: now, the
    latest completion `planned`)."""
    pruning = prune(table.config, filter)
    needed = wanted_columns(table.config, None) if pruning.row_columns is None else pruning.row_columns
    read_columns = columns + [n for n in needed if n not in columns]
    weight = _slice_weight(mode)
    slices = plan_slices(table.config, view, at, pruning)

    def read_unit(fslice: FileSlice) -> pa.Table:
        return read_slice(table, fslice, read_columns, mode, pruning.rows)

    def parts(resume: bool) -> Iterator[pa.Table]:
        done = 0
        try:
            for _slice, rows in bounded(read_unit, slices, weight):
                done += 1
                yield rows
                del rows
            return
        except (DataFileMissing, HistoryMoved):
            if not resume:
                raise
        # A clean removed a slice between planning and reading (or an archive or restore moved the instants): plan
        # the file groups not read yet again; a file still missing then is damage, and that error says so.
        timeline = table.read_timeline()
        fresh = table.view(timeline)
        left = replanned(table.config, view, fresh, at, pruning, slices[:done], slices[done:])
        if at is None or at > planned:  # "now" (or a time past it) moved on: the rest must still be the pass's state
            refuse_changed_since(timeline, fresh, left, planned, mode)
        for _slice, rows in bounded(read_unit, left, weight):
            yield rows
            del rows

    return Scan(empty_rows(table.config, columns).schema, parts)


#: Rewrites that leave every key's merged row as it was: a snapshot pass may read their files in place of those of
#: its state (not a read-optimized one: a compaction's base holds logs the state's base did not).
ROWS_KEPT_BY = frozenset({Action.COMPACTION, Action.RESCALE})
#: What else may complete while the rows stay: none of these changes a row.
ROWS_UNTOUCHED_BY = frozenset({Action.CLEAN, Action.SAVEPOINT, Action.PUBLISH})


def refuse_changed_since(
    timeline: Timeline, fresh: FileSystemView, slices: Sequence[FileSlice], state: str, mode: ReadMode
) -> None:
    """Refuse (exit 3, read again) slices planned anew for a pass of `state` (the latest completion when it was
    planned) that hold rows of a later state. A compaction keeps a file group's rows as they were when it was
    requested, a rescale a partition's: their files stand for `state` if no write of that group (partition)
    completed after `state` and before the rewrite was requested. Any other file completed after `state`, an undo of
    a commit or an alter since, is another state. Without this a pass mixed two: the groups it read before a clean,
    and the rest as they were later."""
    for undoing in timeline.pending(UNDOES_HISTORY):  # deletes commits' files before it completes, or if it died
        undo = timeline.plan(undoing)
        if not isinstance(undo, UndoPlan) or undo.undoes_commits:
            _moved_on(f"{undoing.action} {undoing.requested} is undoing commits", state)
    for instant in timeline.completed():
        if (instant.completed or "") <= state or instant.action in ROWS_KEPT_BY | ROWS_UNTOUCHED_BY:
            continue
        if instant.action in IN_CHANGE_FEED:
            continue  # its files are judged below, by the groups they are in
        plan = timeline.plan(instant) if instant.action == Action.ROLLBACK else None
        if isinstance(plan, UndoPlan) and not plan.undoes_commits:
            continue  # failed writes and crashed compactions only: no row of `state` was theirs
        _moved_on(f"{instant.action} {instant.requested} completed at {instant.completed}", state)
    actions = {i.requested: i.action for i in timeline.instants}
    by_group: dict[tuple[str, str], str] = {}  # the first file of a later write in each group, and partition
    by_partition: dict[str, str] = {}
    for key, written in fresh.groups.items():
        for f in written:
            if f.completed > state and actions.get(f.instant) not in ROWS_KEPT_BY:
                by_group[key] = min(by_group.get(key, f.completed), f.completed)
                by_partition[key[0]] = min(by_partition.get(key[0], f.completed), f.completed)
    for fslice in slices:
        read = ([fslice.base] if fslice.base else []) if mode == ReadMode.READ_OPTIMIZED else list(fslice.files)
        for f in read:
            if f.completed <= state:
                continue
            action = actions.get(f.instant)
            kept_by = action in ROWS_KEPT_BY and mode != ReadMode.READ_OPTIMIZED
            first = by_group.get(fslice.group) if action == Action.COMPACTION else by_partition.get(fslice.group[0])
            if not kept_by or (first is not None and f.instant >= first):
                _moved_on(f"{f.path} completed at {f.completed}", state)


def _moved_on(what: str, state: str) -> None:
    raise ConflictError(
        f"the table changed while this read ran ({what}, after the state the read began with, {state}), and "
        "files of that state the read had not reached are gone; nothing more is returned — read again"
    )


def replanned(
    config: TableConfig,
    before: FileSystemView,
    fresh: FileSystemView,
    at: str | None,
    pruning: Pruning,
    read: Sequence[FileSlice],
    rest: Sequence[FileSlice],
) -> list[FileSlice]:
    """The slices of a pass's unread file groups (`rest`), planned again from a newer view. A partition rescaled
    meanwhile has its keys in other file groups: planned again whole if the pass has read none of it, and refused
    (exit 3) if it has, since the keys it read and those left are no longer told apart by file group (the old
    groups alone lost the moved keys without a word)."""
    old, new = before.layout(at), fresh.layout(at)
    moved = sorted({s.group[0] for s in rest if old.buckets(s.group[0]) != new.buckets(s.group[0])})
    begun = sorted({s.group[0] for s in read} & set(moved))
    if begun or (moved and pruning.only is not None):
        raise ConflictError(
            f"partition(s) {', '.join(begun or moved)} were rescaled while this read ran, after part of the read: "
            "the keys left to read moved to other file groups; nothing more is returned — read again"
        )
    kept = fresh.latest_slices(at, file_groups=[s.group for s in rest if s.group[0] not in moved])
    if not moved:
        return kept
    return kept + [s for s in plan_slices(config, fresh, at, pruning) if s.group[0] in set(moved)]
