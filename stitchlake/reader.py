"""Readers (DESIGN §7): snapshot (merge-on-read), read-optimized, time travel and incremental.

Every mode plans file slices from the file-system view, reads each slice's files once, and merges them with
`merge.stitch`; a Spark task reading one slice calls the same `read_slice`. `scan` streams a read one file slice
(one file group, for changes) at a time, a few slices ahead, so its memory is bounded by the largest slices, not by
the table; `read` gathers a scan into one Arrow table, which is the caller's choice (DESIGN §7).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from math import gcd
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import TableConfig
from stitchlake.errors import DataFileMissing, HistoryMoved, StitchError, UsageError
from stitchlake.filters import Condition, Filter, Pruning, parse_conditions, prune
from stitchlake.io.datafiles import read_parquet, read_table_file
from stitchlake.io.schemas import base_schema, evolve, key_schema, log_schema, table_schema
from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.fsview import DataFile, FileSlice, FileSystemView
from stitchlake.layout.names import BASE, file_group_id
from stitchlake.merge import summary
from stitchlake.merge.stitch import LogInput, Merged, base_columns, base_rows, merge_files, to_rows
from stitchlake.timeline.clock import parse_user_time
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import IN_CHANGE_FEED, EraseCommit, UndoPlan
from stitchlake.timeline.savepoints import savepoint_time
from stitchlake.timeline.timeline import Timeline
from stitchlake.transaction import undoes_history

if TYPE_CHECKING:
    from stitchlake.table import Table

SNAPSHOT = "snapshot"
READ_OPTIMIZED = "read_optimized"
MODES = (SNAPSHOT, READ_OPTIMIZED)
OP = "_op"
#: Change-feed columns after `_op`: the completion time of the last commit in the range that carried the key, and
#: the streams whose commits carried it (comma-separated, sorted; "erase" for an erase).
COMMIT_TIME = "_commit_time"
STREAMS = "_streams"
CHANGE_COLUMNS = (OP, COMMIT_TIME, STREAMS)
ERASE_LABEL = "erase"
READ_THREADS = 4
#: A scan merges slices ahead of its consumer while their files add up to at most this many bytes (and always one
#: slice, however large), as a Spark read task packs slices up to `maxPartitionBytes`: a small table's slices are
#: all merged at once, as fast as before, while a large table holds about one slice being merged and one being
#: consumed. Merging a slice needs all its files at once, so the largest file group, not the table, sets a read's
#: peak memory (docs/operations.md, "Sizing file groups").
READ_AHEAD_BYTES = 128 * 1024 * 1024
#: Rows per record batch a scan hands on (a slice's rows are cut into batches of at most this many).
BATCH_ROWS = 128 * 1024
log = logging.getLogger(__name__)
U = TypeVar("U")
R = TypeVar("R")

# ------------------------------------------------------------------------------------------------ planning


def resolve_time(table: Table, timeline: Timeline, value: str | None) -> str | None:
    """An `as_of`/`since`/`until` given as an instant time, an ISO timestamp or a savepoint name."""
    if value is None:
        return None
    named = savepoint_time(timeline, value)
    if named is not None:
        return named
    try:
        return parse_user_time(str(value))
    except ValueError as exc:
        raise UsageError(f"{exc}, nor a savepoint name") from None


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


def _wanted_columns(config: TableConfig, columns: Sequence[str] | None) -> list[str]:
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


def _common(config: TableConfig) -> list[str]:
    return [c.name for c in config.common_columns]


def _base_columns(config: TableConfig, per_stream: dict[str, list[str]]) -> list[str]:
    names = _common(config)
    for stream in config.streams.values():
        names += per_stream[stream.name]
        names += [f.name for f in summary.meta_fields(stream, True, per_stream[stream.name])]
    return names


def _log_columns(config: TableConfig, stream_name: str, per_stream: dict[str, list[str]]) -> list[str]:
    stream = config.streams[stream_name]
    return (
        _common(config)
        + per_stream[stream_name]
        + [f.name for f in summary.meta_fields(stream, False, per_stream[stream_name])]
    )


def merge_slice(
    table: Table,
    fslice: FileSlice,
    wanted: Sequence[str] | None = None,
    mode: str = SNAPSHOT,
    versions: bool = True,
) -> Merged:
    """Read one file slice's files once each and merge them (read-optimized: the base file alone).

    `versions=False` when only `to_rows` follows (see `merge_files`).
    """
    config = table.config
    per_stream = _stream_columns(config, _wanted_columns(config, wanted))
    base = _read_base(table, fslice, _base_columns(config, per_stream)) if fslice.base is not None else None
    logs = []
    if mode == SNAPSHOT:
        for item in fslice.logs:
            stream = config.streams.get(item.stream or "")
            if stream is None:
                if item.stream in table.config_of_file(item.schema_version).streams:
                    continue  # a stream dropped by `stitch alter`: hidden from reads of later versions
                raise StitchError(f"{item.path}: written by unknown stream {item.stream!r}")
            wanted_columns = _log_columns(config, stream.name, per_stream)
            rows = _read_file(table, item, log_schema(config, stream), wanted_columns)
            logs.append(LogInput(stream.name, rows, int(item.completed)))
    return merge_files(config, base, logs, columns=per_stream, versions=versions)


def _read_base(table: Table, fslice: FileSlice, columns: list[str]) -> pa.Table:
    assert fslice.base is not None
    return _read_file(table, fslice.base, base_schema(table.config), columns)


def _read_file(table: Table, item: DataFile, schema: pa.Schema, columns: list[str]) -> pa.Table:
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
    table: Table,
    fslice: FileSlice,
    columns: Sequence[str] | None = None,
    mode: str = SNAPSHOT,
    rows_filter: pc.Expression | None = None,
) -> pa.Table:
    """The live wide rows of one file slice.

    A base file read alone needs no merge (it holds one merged row per key), so only its value columns and
    one flag per stream is read, not the versions: read-optimized reads cost about a plain Parquet scan.
    """
    config = table.config
    wanted = _wanted_columns(config, columns)
    # On an object store, fetch the slice's files together: one round trip, not one per log file.
    ahead = fslice.files if mode == SNAPSHOT else [fslice.base] if fslice.base else []
    table.storage.prefetch((f.path, f.bytes) for f in ahead)
    if fslice.base is not None and (mode == READ_OPTIMIZED or not fslice.logs):
        out = base_rows(config, _read_base(table, fslice, base_columns(config, wanted)), wanted)
    else:
        out = to_rows(config, merge_slice(table, fslice, wanted, mode, versions=False), wanted)
    if rows_filter is not None and out.num_rows:
        out = out.filter(rows_filter)
    return out


def _empty(config: TableConfig, columns: Sequence[str]) -> pa.Table:
    schema = table_schema(config)
    return pa.schema([schema.field(c) for c in columns]).empty_table()


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _slice_pool() -> ThreadPoolExecutor:
    """One pool for the process: starting threads for every read costs more than a small read itself.

    Its tasks (`read_slice`) never submit to it, so they cannot wait on each other.
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="stitch-read")
        return _POOL


def bounded(
    fn: Callable[[U], R],
    items: Sequence[U],
    weight: Callable[[U], int],
    max_bytes: int | None = None,
    max_count: int = READ_THREADS,
    pool: ThreadPoolExecutor | None = None,
) -> Iterator[tuple[U, R]]:
    """`fn` over `items` in `pool` (the shared read pool by default), results in item order, with at most
    `max_count` calls in flight whose `weight`s add up to at most `max_bytes` (one call always runs, whatever its
    weight).

    A result is handed on and dropped before the next call starts, so at most the calls in flight plus the one
    result the consumer holds are alive: an unbounded `pool.map` would buffer the whole table. A consumer that
    stops early (a closed generator) cancels the calls not started yet.
    """
    limit = READ_AHEAD_BYTES if max_bytes is None else max_bytes
    pending: deque[tuple[U, int, Future[R]]] = deque()
    in_flight = 0
    position = 0
    pool = pool or _slice_pool()
    try:
        while position < len(items) or pending:
            while position < len(items) and len(pending) < max_count:
                cost = weight(items[position])
                if pending and in_flight + cost > limit:
                    break
                pending.append((items[position], cost, pool.submit(fn, items[position])))
                in_flight += cost
                position += 1
            item, cost, future = pending.popleft()
            result = future.result()
            in_flight -= cost
            yield item, result
            del result  # the consumer had its turn: never keep a slice alive while the next one is merged
    finally:
        for _item, _cost, future in pending:
            future.cancel()


@dataclass
class Scan:
    """A planned read as a stream of Arrow record batches, one part at a time (a file slice, or for changes a file
    group), merged a few parts ahead (`bounded`): memory is bounded by the largest parts, never by the table.

    Each pass (`batches`, `reader`, iterating, or a consumer of the Arrow C stream interface such as DuckDB, which
    asks once per scan of the view) reads what was planned when the scan was made, so two passes see the same
    state. A slice cleaned under a pass (a compaction replaced it) makes the pass plan the file groups it has not
    read yet once more, from the new timeline, as `read` plans again.
    """

    schema: pa.Schema
    #: One pass over the planned parts, in order; its argument is `resume` (see `batches`).
    parts: Callable[[bool], Iterator[pa.Table]]
    #: The error that ended the last pass: DuckDB passes on only its text, `stitchlake.sql` re-raises this instead.
    error: BaseException | None = None

    def batches(self, resume: bool = True) -> Iterator[pa.RecordBatch]:
        """One pass. `resume=False`: a slice cleaned under the pass is an error (`read` then plans the whole read
        again, so its rows are one state of the table)."""
        self.error = None
        try:
            for rows in self.parts(resume):
                yield from self._conform(rows).to_batches(max_chunksize=BATCH_ROWS)
                del rows  # never hold a part while the next one is merged
        except BaseException as exc:
            self.error = exc
            raise

    def _conform(self, rows: pa.Table) -> pa.Table:
        rows = rows.select(self.schema.names)
        return rows if rows.schema.equals(self.schema) else rows.cast(self.schema)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches()

    def reader(self) -> pa.RecordBatchReader:
        """One pass as a RecordBatchReader (Parquet writers, DuckDB, Polars, `pa.dataset` take one)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def read_all(self, resume: bool = True) -> pa.Table:
        """The whole result as one Arrow table: memory proportional to the result, the caller's choice."""
        return pa.Table.from_batches(list(self.batches(resume)), self.schema)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.reader().__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()


def _slice_weight(mode: str) -> Callable[[FileSlice], int]:
    def weight(fslice: FileSlice) -> int:
        return fslice.bytes if mode == SNAPSHOT else fslice.base.bytes if fslice.base else 0

    return weight


def _snapshot_scan(
    table: Table, view: FileSystemView, at: str | None, columns: list[str], mode: str, filter: Filter
) -> Scan:
    """A snapshot, time-travel or read-optimized read, planned: its latest slices as of `at`."""
    pruning = prune(table.config, filter)
    needed = _wanted_columns(table.config, None) if pruning.row_columns is None else pruning.row_columns
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
        fresh = table.view(table.timeline())
        left = fresh.latest_slices(at, file_groups=[s.group for s in slices[done:]])
        for _slice, rows in bounded(read_unit, left, weight):
            yield rows
            del rows

    return Scan(_empty(table.config, columns).schema, parts)


def _change_scan(
    table: Table,
    timeline: Timeline,
    view: FileSystemView,
    since: str | None,
    until: str | None,
    wanted: list[str],
    pruning: Pruning,
    before_images: bool,
    on_changes: Sequence[Condition],
    asked: list[str] | None,
) -> Scan:
    """An incremental read, planned: `change_parts` of (since, until], one file group at a time."""
    schema = _no_changes(table.config, wanted).schema
    if asked is not None:
        schema = pa.schema([schema.field(name) for name in asked])

    def parts(_resume: bool) -> Iterator[pa.Table]:
        for out in change_parts(table, timeline, view, since, until, wanted, pruning, before_images):
            for condition in on_changes:
                out = out.filter(condition.expression(pa.string()))
            yield out if asked is None else out.select(asked)

    return Scan(schema, parts)


def scan(
    table: Table,
    mode: str = SNAPSHOT,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    columns: Sequence[str] | None = None,
    filter: Filter = None,
    before_images: bool = False,
) -> Scan:
    """Plan a read (same arguments and rows as `read`) and return it as a stream of record batches, one file slice
    (one file group for changes) at a time: memory bounded by the largest slices, not the table (DESIGN §7).

    Planning happens now (a bad argument or time is refused here); rows are read when the scan is iterated, and
    every pass reads the same planned files."""
    if mode not in MODES:
        raise UsageError(f"mode {mode!r} is not one of: {', '.join(MODES)}")
    table.require()
    if as_of is not None and (since is not None or until is not None):
        raise UsageError("use either as_of (a snapshot) or since/until (changes), not both")
    if before_images and since is None and until is None:
        raise UsageError("before_images is for change reads: give since and/or until")
    try:
        return _plan(table, mode, as_of, since, until, columns, filter, before_images)
    except (DataFileMissing, HistoryMoved):
        # An archive or restore removed the instants we listed (or a clean a file planning reads): plan again.
        return _plan(table, mode, as_of, since, until, columns, filter, before_images)


def read(
    table: Table,
    mode: str = SNAPSHOT,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    columns: Sequence[str] | None = None,
    filter: Filter = None,
    before_images: bool = False,
) -> pa.Table:
    """Read the table into one Arrow table. See DESIGN §7 for the modes; `since`/`until` give the incremental view
    (with `before_images`, an update is a `-U` row, the key as of `since`, then a `+U` row, and a delete keeps the
    deleted values). The result is whole in memory: `scan` streams the same rows slice by slice."""
    try:
        return scan(table, mode, as_of, since, until, columns, filter, before_images).read_all(resume=False)
    except (DataFileMissing, HistoryMoved):
        # A clean may remove a slice between our planning and our reading (a compaction replaced it), an archive
        # or restore the instants we listed: plan the whole read again from the new timeline, so the rows are one
        # state of the table. A file still missing then is damage, and the second error says so.
        return scan(table, mode, as_of, since, until, columns, filter, before_images).read_all(resume=False)


def _plan(
    table: Table,
    mode: str,
    as_of: str | None,
    since: str | None,
    until: str | None,
    columns: Sequence[str] | None,
    filter: Filter,
    before_images: bool = False,
) -> Scan:
    timeline = table.timeline()
    view = table.view(timeline)
    _warn_if_undoing(timeline)
    if since is not None or until is not None:
        end = resolve_time(table, timeline, until)
        if end is None:
            latest = timeline.latest_completed()
            end = latest.completed if latest else None
        table = table.at_time(end)  # changes are shown with the columns of their end
        table_filter, on_changes = _split_change_filter(filter)
        asked = None if columns is None or not set(columns) & set(CHANGE_COLUMNS) else list(columns)
        return _change_scan(
            table,
            timeline,
            view,
            resolve_time(table, timeline, since),
            end,
            _wanted_columns(table.config, [c for c in columns if c not in CHANGE_COLUMNS] if columns else columns),
            prune(table.config, table_filter),
            before_images,
            on_changes,
            asked,
        )
    _refuse_change_columns(columns, filter, as_of)
    at = resolve_time(table, timeline, as_of)
    table = table.at_time(at)  # time travel shows the columns of its time
    return _snapshot_scan(table, view, at, _wanted_columns(table.config, columns), mode, filter)


def _warn_if_undoing(timeline: Timeline) -> None:
    """Say so when a restore (or a rollback of commits) is pending: the rows read are a state partway through it,
    and the next read after it finishes will differ. A read never finishes it; its own process, or `stitch
    rollback --failed` after a crash, does."""
    for instant in timeline.pending([Action.RESTORE, Action.ROLLBACK]):
        if undoes_history(timeline, instant):
            log.warning(
                "%s %s is undoing commits and has not finished: this read shows the table partway through it "
                "(if its process died, `stitch rollback --failed` finishes it)",
                instant.action,
                instant.requested,
            )


# -------------------------------------------------------------------------------------------- incremental


def _split_change_filter(where: Filter) -> tuple[Filter, list[Condition]]:
    """An incremental read's filter: (the part on table columns, conditions on the change columns `_op`,
    `_commit_time`, `_streams`, which hold only in the change rows and are checked on them)."""
    if where is None or isinstance(where, pc.Expression):
        return where, []  # an expression is checked on the change rows as it is, `_op` included
    if isinstance(where, Mapping):
        changes = [
            Condition(name, "=", tuple(str(v) for v in (value if isinstance(value, list | tuple | set) else [value])))
            for name, value in where.items()
            if name in CHANGE_COLUMNS
        ]
        return {k: v for k, v in where.items() if k not in CHANGE_COLUMNS}, changes
    rest, changes = [], []
    for name, op, value in parse_conditions(where):
        if name in CHANGE_COLUMNS:
            changes.append(Condition(name, op, (value,)))
        else:
            rest.append(f"{name}{op}{value}")
    return rest, changes


def _refuse_change_columns(columns: Sequence[str] | None, where: Filter, as_of: str | None) -> None:
    """`_op` and the other change columns exist only in incremental reads: say so, instead of "unknown column"."""
    named = [c for c in columns or () if c in CHANGE_COLUMNS]
    if isinstance(where, Mapping):
        named += [c for c in where if c in CHANGE_COLUMNS]
    elif isinstance(where, str) or (isinstance(where, Sequence) and all(isinstance(w, str) for w in where)):
        named += [name for name, _op, _value in parse_conditions(where) if name in CHANGE_COLUMNS]
    if named:
        read = "a time-travel read (as of a time)" if as_of is not None else "a snapshot read"
        raise UsageError(
            f"{', '.join(dict.fromkeys(named))}: only incremental reads have the change columns "
            f"{', '.join(CHANGE_COLUMNS)} (give --since and/or --until); {read} returns rows, not changes"
        )


def changed_instants(timeline: Timeline, since: str | None, until: str | None) -> list[Any]:
    """The deltacommits and erases whose changes an incremental read of (since, until] reports.

    Refused when the range holds an undo of a completed commit (a restore, or a rollback of a commit that had
    completed): rows that were reported as changed would silently come back or vanish without a change row.
    """
    span = timeline.completed(since=since, until=until)
    for instant in span:
        if instant.action == Action.RESTORE:
            raise UsageError(
                f"the range contains restore {instant.requested}, which rewrote history; read changes from after "
                "it instead"
            )
        if instant.action == Action.ROLLBACK and _undoes_commits(timeline.plan(instant)):
            raise UsageError(
                f"the range contains rollback {instant.requested} of a completed commit, which rewrote history; "
                "read changes from after it instead"
            )
    return [i for i in span if i.action in IN_CHANGE_FEED]


def _undoes_commits(plan: object) -> bool:
    return isinstance(plan, UndoPlan) and plan.undoes_commits


def _touched_keys(
    table: Table, timeline: Timeline, view: FileSystemView, instants: list[Any], wanted: Callable[[str, str, int], bool]
) -> dict[str, list[pa.Table]]:
    """Key columns each partition received from the instants in the range, each with the commit's completion time
    and stream (`COMMIT_TIME`, `STREAMS`). A file group's keys are read only if `wanted(partition, file group, its
    bucket count then)` says they may be asked for."""
    config = table.config
    common = _common(config)
    out: dict[str, list[pa.Table]] = {}

    def add(partition: str, keys: pa.Table, instant: Any, stream: str) -> None:
        rows = keys.num_rows
        keys = keys.append_column(COMMIT_TIME, pa.array([instant.completed] * rows, pa.string()))
        out.setdefault(partition, []).append(keys.append_column(STREAMS, pa.array([stream] * rows, pa.string())))

    for instant in instants:
        commit = timeline.commit(instant)
        layout = view.layout(instant.completed)  # the count its files were routed with (writers are fenced)
        if isinstance(commit, EraseCommit):
            for (partition, group), keys in erased_keys(table, commit).items():
                if wanted(partition, group, layout.buckets(partition)):
                    add(partition, keys, instant, ERASE_LABEL)
            continue
        stream = getattr(commit, "stream", None) or ""
        for entry in commit.added_files:
            if not wanted(entry.partition, entry.file_group, entry.buckets or layout.buckets(entry.partition)):
                continue
            add(
                entry.partition,
                read_table_file(table.storage, entry.path, key_schema(config), common, entry.rows, entry.checksum),
                instant,
                stream,
            )
    return out


#: Columns of an erase's `erased_file` besides the key and partition columns: where each erased key lived.
ERASED_GROUP = "_file_group"
ERASED_PARTITION = "_partition"


def erased_keys(table: Table, commit: EraseCommit) -> dict[tuple[str, str], pa.Table]:
    """The keys a completed erase removed, by file group (the incremental view reports them deleted)."""
    if not commit.erased_file:
        return {}
    rows = read_parquet(table.storage, commit.erased_file, checksum=commit.erased_checksum or None)
    common = _common(table.config)
    out: dict[tuple[str, str], pa.Table] = {}
    places = [ERASED_PARTITION, ERASED_GROUP]
    for place in rows.select(places).group_by(places).aggregate([]).to_pylist():  # a few file groups
        partition, group = place[ERASED_PARTITION], place[ERASED_GROUP]
        mask = pc.and_(pc.equal(rows.column(ERASED_PARTITION), partition), pc.equal(rows.column(ERASED_GROUP), group))
        out[(partition, group)] = rows.filter(mask).select(common)
    return out


def read_changes(
    table: Table,
    timeline: Timeline,
    view: FileSystemView,
    since: str | None,
    until: str | None,
    wanted: list[str],
    pruning: Pruning,
    before_images: bool = False,
) -> pa.Table:
    """Keys whose merged row changed in (since, until], with their row as of `until`, `_op` I/U/D and the
    change-feed columns (`CHANGE_COLUMNS`); with `before_images`, see `read`."""
    parts = [p for p in change_parts(table, timeline, view, since, until, wanted, pruning, before_images) if p.num_rows]
    return pa.concat_tables(parts) if parts else _no_changes(table.config, wanted)


def change_parts(
    table: Table,
    timeline: Timeline,
    view: FileSystemView,
    since: str | None,
    until: str | None,
    wanted: list[str],
    pruning: Pruning,
    before_images: bool = False,
) -> Iterator[pa.Table]:
    """`read_changes` one file group at a time: the keys the range touched are read first (keys only), then each
    file group's two states are merged, diffed and handed on before the next one's."""
    config = table.config
    common = _common(config)
    if until is None:
        latest = timeline.latest_completed()
        until = latest.completed if latest else None
    if until is None:
        return
    after_layout = view.layout(until)
    before_layout = view.layout(since) if since else None

    def allowed(partition: str) -> set[int] | None:
        """The file groups (ids under the count as of `until`) of a partition the read may return keys of."""
        ids = pruning.file_groups(after_layout.buckets(partition))
        found = None if ids is None else {int(i) for i in ids}
        if pruning.only is not None:
            handed = {int(group) for place, group in pruning.only if place == partition}
            found = handed if found is None else found & handed
        return found

    def may_hold(partition: str, group: str, buckets: int) -> bool:
        """Whether a file group laid out by `buckets` may hold keys of an allowed group as of `until`: a key in
        group i of b buckets is in group j of n only if i = j modulo gcd(b, n)."""
        if not pruning.matches_partition(partition):
            return False
        ids = allowed(partition)
        if ids is None:
            return True
        step = gcd(buckets, after_layout.buckets(partition))
        return any(int(group) % step == j % step for j in ids)

    touched = _touched_keys(table, timeline, view, changed_instants(timeline, since, until), may_hold)
    every = list(dict.fromkeys(common + [c.name for c in config.all_columns()]))
    for partition, keys in sorted(touched.items()):
        carried_all = pa.concat_tables(keys)
        groups = _groups_of(config, carried_all, after_layout.buckets(partition))
        ids = allowed(partition)
        for group in np.unique(groups):
            if ids is not None and int(group) not in ids:
                continue
            carried = carried_all.filter(pa.array(groups == group))
            candidates = carried.select(common).group_by(common).aggregate([])
            after = _state(table, view, (partition, file_group_id(int(group))), until, every, candidates)
            before = (
                _before(table, view, partition, since, every, candidates, before_layout.buckets(partition))
                if since and before_layout is not None
                else _empty(config, every)
            )
            changed = _diff(config, before, after, common, every, before_images)
            changes = _filter_changes(_with_commits(changed, carried, common), pruning, before_images)
            yield changes.select([*wanted, *CHANGE_COLUMNS])


def _filter_changes(out: pa.Table, pruning: Pruning, before_images: bool) -> pa.Table:
    """The read's filter on change rows: `D` rows stay whatever the value conditions say; with `before_images` an
    update's two rows are kept or dropped together, by its new values."""
    if not out.num_rows:
        return out
    if pruning.row_columns is None and pruning.rows is not None:
        # An opaque expression may name value columns, which a deleted row no longer has.
        return out.filter(pruning.rows | (pc.field(OP) == "D"))
    if pruning.keys is not None:
        out = out.filter(pruning.keys)
    if pruning.values is not None:
        kept = pruning.values | (pc.field(OP) == "D")
        if before_images:  # an update is kept or dropped as a pair, by its new values
            kept = _pairs_kept(out, pruning.values)
        out = out.filter(kept)
    return out


def _no_changes(config: TableConfig, wanted: list[str]) -> pa.Table:
    return (
        _empty(config, wanted)
        .append_column(OP, pa.array([], pa.string()))
        .append_column(COMMIT_TIME, pa.array([], pa.string()))
        .append_column(STREAMS, pa.array([], pa.string()))
    )


def _with_commits(changed: pa.Table, carried: pa.Table, common: list[str]) -> pa.Table:
    """`changed` with, per key, the last commit time and the streams of the commits that carried it."""
    # Each key's distinct streams, in name order (sorted first, then listed by a single-threaded group-by, which
    # keeps input order) and joined in Arrow: no string built per row in Python.
    pairs = carried.select([*common, STREAMS]).group_by([*common, STREAMS]).aggregate([])
    listed = pairs.sort_by([(STREAMS, "ascending")]).group_by(common, use_threads=False).aggregate([(STREAMS, "list")])
    named = listed.select(common).append_column(STREAMS, pc.binary_join(listed.column(f"{STREAMS}_list"), ","))
    summary = carried.group_by(common).aggregate([(COMMIT_TIME, "max")]).join(named, common)
    found, at = _match_keys(changed, summary, common, "left outer")
    order = np.argsort(found, kind="stable")  # the join may reorder rows: back to `changed`'s order
    at = pa.array(at[order])
    times = summary.column(f"{COMMIT_TIME}_max").take(at)
    streams = summary.column(STREAMS).take(at)
    return changed.append_column(COMMIT_TIME, times).append_column(STREAMS, streams)


def _pairs_kept(rows: pa.Table, values: Any) -> pa.Array:
    """Which rows a value filter keeps when updates come as `-U`/`+U` pairs: a `-U` row goes with its `+U`."""
    matches = _evaluate(rows, values)
    ops = np.asarray(rows.column(OP).to_pylist())
    keep = matches | (ops == "D")
    minus = np.flatnonzero(ops == "-U")
    keep[minus] = matches[minus + 1]  # a -U row is always right before its +U row
    return pa.array(keep)


def _evaluate(rows: pa.Table, expression: Any) -> np.ndarray:
    """A filter expression evaluated to one boolean per row (null counts as false)."""
    import pyarrow.dataset as ds

    marked = rows.append_column("_row", pa.array(np.arange(rows.num_rows), pa.int64()))
    matched = ds.dataset(marked).to_table(filter=expression, columns=["_row"]).column("_row").to_numpy()
    out = np.zeros(rows.num_rows, dtype=bool)
    out[matched] = True
    return out


def _groups_of(config: TableConfig, keys: pa.Table, buckets: int) -> np.ndarray:
    """Each row's file group number with `buckets` buckets."""
    return bucket_of([keys.column(n) for n in config.table.key_names], buckets)


def _before(
    table: Table,
    view: FileSystemView,
    partition: str,
    since: str,
    columns: list[str],
    candidates: pa.Table,
    buckets: int,
) -> pa.Table:
    """The candidates' rows as of `since`, from the file groups they had then (a rescale in the range moved them)."""
    groups = _groups_of(table.config, candidates, buckets)
    found = [
        _state(
            table, view, (partition, file_group_id(int(g))), since, columns, candidates.filter(pa.array(groups == g))
        )
        for g in np.unique(groups)
    ]
    found = [f for f in found if f.num_rows]
    return pa.concat_tables(found) if found else _empty(table.config, columns)


def _state(
    table: Table,
    view: FileSystemView,
    key: tuple[str, str],
    as_of: str | None,
    columns: list[str],
    candidates: pa.Table,
) -> pa.Table:
    fslice = view.latest_slices(as_of, file_groups=[key])
    if not fslice:
        return _empty(table.config, columns)
    rows = to_rows(table.config, merge_slice(table, fslice[0], columns, versions=False), columns)
    found, _ = _match_keys(rows, candidates, _common(table.config), "left semi")
    return rows.take(np.sort(found))


def _match_keys(left: pa.Table, right: pa.Table, keys: list[str], how: str) -> tuple[np.ndarray, np.ndarray]:
    """Row positions in `left` and `right` (-1: no match) of a join on `keys` alone.

    Arrow joins refuse nested non-key columns, so only the keys and positions go through the join.
    """
    positions = left.select(keys).append_column("_left", pa.array(np.arange(left.num_rows), pa.int64()))
    other = right.select(keys)
    if how != "left semi":
        other = other.append_column("_right", pa.array(np.arange(right.num_rows), pa.int64()))
    joined = positions.join(other, keys=keys, join_type=how)
    taken = pc.fill_null(joined.column("_left"), -1).to_numpy()
    if how == "left semi":
        return taken, np.full(len(taken), -1)
    return taken, pc.fill_null(joined.column("_right"), -1).to_numpy()


def _same(now: pa.ChunkedArray, then: pa.ChunkedArray) -> np.ndarray:
    """Per row: both null, or equal values (nested values compared whole)."""
    if pa.types.is_nested(now.type):
        return np.array([a == b for a, b in zip(now.to_pylist(), then.to_pylist(), strict=True)], dtype=bool)
    same = pc.fill_null(pc.equal(now, then), False)
    return pc.or_(same, pc.and_(pc.is_null(now), pc.is_null(then))).to_numpy(zero_copy_only=False)


def _diff(
    config: TableConfig,
    before: pa.Table,
    after: pa.Table,
    common: list[str],
    every: list[str],
    before_images: bool = False,
) -> pa.Table:
    """Compare two states of the same keys: inserted, updated (values differ) or deleted. With `before_images`
    an update is two rows, `-U` (before) then `+U` (after), and a delete keeps its values."""
    values = [c for c in every if c not in common]
    in_after, in_before = _match_keys(after, before, common, "full outer")
    both = np.flatnonzero((in_after >= 0) & (in_before >= 0))
    changed = np.zeros(len(in_after), dtype=bool)
    if len(both):
        now, then = after.take(in_after[both]), before.take(in_before[both])
        for name in values:
            changed[both] |= ~_same(now.column(name), then.column(name))
    inserted = (in_after >= 0) & (in_before < 0)
    kept = np.flatnonzero(inserted | changed)
    upserts = after.take(in_after[kept]).select(every)
    updated = "+U" if before_images else "U"
    upserts = upserts.append_column(OP, pa.array(np.where(inserted[kept], "I", updated), pa.string()))
    gone = in_before[(in_after < 0) & (in_before >= 0)]
    deletes = before.take(gone).select(every)
    if not before_images:
        deletes = pa.table(
            {
                n: (deletes.column(n) if n in common else pa.nulls(len(gone), deletes.schema.field(n).type))
                for n in every
            }
        )
    deletes = deletes.append_column(OP, pa.array(["D"] * len(gone), pa.string()))
    parts = [upserts, deletes.cast(upserts.schema)]
    if before_images:
        old = before.take(in_before[kept[~inserted[kept]]]).select(every)
        parts.append(old.append_column(OP, pa.array(["-U"] * old.num_rows, pa.string())).cast(upserts.schema))
    out = pa.concat_tables(parts)
    # By key; a key's -U row right before its +U row ("+U" sorts before "-U", so sort on the op descending).
    order = [(k, "ascending") for k in common] + ([(OP, "descending")] if before_images else [])
    return out.take(pc.sort_indices(out.select([*common, OP]) if before_images else out.select(common), order))
