"""The change feed (design.md §7): which keys' merged rows changed in (since, until], and how (`_op` I/U/D).

`plan_changes` plans the read per file group (the JVM reader takes the same plan): the files whose keys the range's
commits carried, the keys its erases removed, and the group's slices as of `since` and as of `until`. `change_parts`
reads each group's carried keys (keys only), merges its two states with the snapshot reader's `merge_slice`, diffs
them and hands them on, one group at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from math import gcd
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import TableConfig
from stitchlake.config.evolution import changes as schema_changes
from stitchlake.errors import UsageError
from stitchlake.io.datafiles import read_parquet, read_table_file
from stitchlake.io.schemas import key_schema
from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.fsview import FileSystemView
from stitchlake.layout.names import file_group_id
from stitchlake.layout.rescales import BucketLayout
from stitchlake.merge.stitch import to_rows
from stitchlake.reading.filters import Condition, Filter, Pruning, parse_conditions, refuse_empty_values
from stitchlake.reading.scan import Scan
from stitchlake.reading.snapshot import common_names, empty_rows, merge_slice
from stitchlake.timeline.actions import IN_CHANGE_FEED, UNDOES_HISTORY, WRITES_DATA
from stitchlake.timeline.clock import parse_user_time
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DataFile, EraseCommit, FileSlice, UndoPlan
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

OP = "_op"
#: Change-feed columns after `_op`: the completion time of the last commit in the range that carried the key, and
#: the streams whose commits carried it (comma-separated, sorted; "erase" for an erase).
COMMIT_TIME = "_commit_time"
STREAMS = "_streams"
CHANGE_COLUMNS = (OP, COMMIT_TIME, STREAMS)
ERASE_LABEL = "erase"


def change_scan(
    config: TableConfig,
    wanted: list[str],
    changes: Callable[[], Iterator[pa.Table]],
    on_changes: Sequence[Condition],
    asked: list[str] | None,
) -> Scan:
    """An incremental read, planned: `changes()` (`change_parts` of (since, until], one file group at a time), the
    conditions on the change columns checked on its rows, the `asked` columns kept."""
    schema = _no_changes(config, wanted).schema
    if asked is not None:
        schema = pa.schema([schema.field(name) for name in asked])

    def parts(_resume: bool) -> Iterator[pa.Table]:
        for out in changes():
            for condition in on_changes:
                out = out.filter(condition.expression(pa.string()))
            yield out if asked is None else out.select(asked)

    return Scan(schema, parts)


def split_change_filter(where: Filter) -> tuple[Filter, list[Condition]]:
    """An incremental read's filter: (the part on table columns, conditions on the change columns `_op`,
    `_commit_time`, `_streams`, which hold only in the change rows and are checked on them)."""
    if where is None or isinstance(where, pc.Expression):
        return where, []  # an expression is checked on the change rows as it is, `_op` included
    if isinstance(where, Mapping):
        many = (list, tuple, set, frozenset)
        refuse_empty_values({k: v for k, v in where.items() if k in CHANGE_COLUMNS})
        changes = [
            _change_condition(name, "=", [str(v) for v in (value if isinstance(value, many) else [value])])
            for name, value in where.items()
            if name in CHANGE_COLUMNS
        ]
        return {k: v for k, v in where.items() if k not in CHANGE_COLUMNS}, changes
    rest, changes = [], []
    equal: dict[str, list[str]] = {}
    for name, op, value in parse_conditions(where):
        if name in CHANGE_COLUMNS and op == "=":  # equalities on one column combine as IN, as on table columns
            equal.setdefault(name, []).append(value)
        elif name in CHANGE_COLUMNS:
            changes.append(_change_condition(name, op, [value]))
        else:
            rest.append(f"{name}{op}{value}")
    return rest, [_change_condition(name, "=", values) for name, values in equal.items()] + changes


def _change_condition(name: str, op: str, values: list[str]) -> Condition:
    """A condition on a change column. `_commit_time` holds instant times (`yyyyMMddHHmmssSSS`) and compares as
    text: a value given as an ISO timestamp, as `since`/`until` take it, becomes that instant time first (compared
    as written, `2026-12-03T07:00` would sort before every instant time and keep or drop every row)."""
    if name == COMMIT_TIME:
        try:
            values = [parse_user_time(value) for value in values]
        except ValueError as exc:
            raise UsageError(f"filter: {COMMIT_TIME}: {exc}") from None
    return Condition(name, op, tuple(values))


def refuse_change_columns(columns: Sequence[str] | None, where: Filter, as_of: str | None) -> None:
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
        if instant.action in UNDOES_HISTORY and _undoes_commits(timeline.plan(instant)):
            # A restore always takes commits back; a rollback only when it undid a completed one.
            what = "" if instant.action == Action.RESTORE else " of a completed commit"
            raise UsageError(
                f"the range contains {instant.action} {instant.requested}{what}, which rewrote history; read changes "
                "from after it instead"
            )
    return [i for i in span if i.action in IN_CHANGE_FEED]


def _refuse_reshaping_alters(
    table: TableHandle, timeline: Timeline, view: FileSystemView, since: str | None, until: str
) -> None:
    """Refused (exit 2), as an undo in the range is: an alter in (since, until] that dropped a stream or changed a
    default. Both ends are merged with the streams and defaults of `until`, and an alter is no change of any key: the
    keys only a dropped stream wrote would vanish from reads, and those a stream never wrote change value, with no
    change row (and a before-image would show the new default). From the empty table (no `since`, or one before
    any data) nothing vanishes or changes: every key is new. The latest such alter is named: read after it."""
    if since is None or (view.horizon is None and not timeline.completed(WRITES_DATA, until=since)):
        return
    for before, after in reversed(list(pairwise(table.schema_history(timeline)))):
        if not since < after.since <= until:
            continue
        dropped = sorted(set(before.properties.streams) - set(after.properties.streams))
        what = [f"drops stream {name!r}: the keys only it wrote would vanish" for name in dropped]
        found = schema_changes(before.properties, after.properties, set())
        what += [
            f"changes {c.path}: keys that stream never wrote would change" for c in found if c.path.endswith(".default")
        ]
        if what:
            raise UsageError(
                f"the range contains the alter completed at {after.since} (schema version {after.version}), which "
                f"{what[0]} with no change row; read changes from after it instead, or read the table itself"
            )


def _refuse_cleaned(timeline: Timeline, view: FileSystemView, instants: list[Any], since: str | None) -> None:
    """Refused (exit 2), as time travel is: a range holding deltacommits whose files clean (or an erase's purge)
    has removed, or starting at a state whose files are gone. `_touched_keys` reads their keys from those files (an
    erase's keys come from its own record) and the diff compares with the state as of `since`, so the feed would be
    silently incomplete or fail as time travel; the message names the first `since` that can be read."""

    def removed(instant: Any) -> bool:
        commit = timeline.commit(instant)
        return not isinstance(commit, EraseCommit) and any(f.path in view.deleted for f in commit.added_files)

    gone = [i for i in instants if removed(i)]
    lost = _lost_files(view, since) if since is not None else []
    if not gone and not lost:
        return
    # A `since` must also have its own state kept: the first completion after the gone commits whose slices exist.
    after = gone[-1].completed if gone else since
    readable = next((i.completed for i in timeline.completed(since=after) if _kept(view, i.completed)), None)
    instead = f"Read changes since {readable} or later" if readable else "Read the table itself"
    paths = [f.path for i in gone for f in timeline.commit(i).added_files] + lost
    purges = sorted({view.purged[path] for path in paths if path in view.purged})
    what = (
        f"the files of {len(gone)} commit(s) in that range"
        if gone
        else f"the files of the state as of {since} (the feed compares its changes with it)"
    )
    if purges:
        erase, completed = purges[-1]
        raise UsageError(
            f"changes since {since or 'the first commit'} can no longer be read: erase {erase} with --purge "
            f"(completed {completed}) removed {what}, as a purge must; "
            "a change feed cannot run across it. Bring the copy you feed up to date from a snapshot read (the "
            "purged keys are gone from it)" + (f", then read changes since {readable} or later" if readable else "")
        )
    by = (
        f", the last {gone[-1].action} {gone[-1].requested} (completed {gone[-1].completed})"
        if gone
        else f" at {view.deleted[lost[0]]}"
    )
    raise UsageError(
        f"changes since {since or 'the first commit'} can no longer be read: {what} were removed by clean{by}; "
        f"that part of the history is outside the retention. {instead} (keep more with clean.retain, or pin a "
        "savepoint)"
    )


def _lost_files(view: FileSystemView, as_of: str) -> list[str]:
    """The files the state as of `as_of` was read from that clean or a purge removed (none: it can be read)."""
    slices = (view.latest_slice(key, as_of) for key in view.file_groups())
    return [f.path for s in slices if s is not None for f in s.files if f.path in view.deleted]


def _kept(view: FileSystemView, as_of: str | None) -> bool:
    """Whether the table's state as of `as_of` can still be read (no file of it cleaned or purged)."""
    try:
        view.latest_slices(as_of)
    except UsageError:
        return False
    return True


def _undoes_commits(plan: object) -> bool:
    return isinstance(plan, UndoPlan) and plan.undoes_commits


#: Columns of an erase's `erased_file` besides the key and partition columns: where each erased key lived.
ERASED_GROUP = "_file_group"
ERASED_PARTITION = "_partition"


def erased_keys(table: TableHandle, commit: EraseCommit) -> dict[tuple[str, str], pa.Table]:
    """The keys a completed erase removed, by file group (the incremental view reports them deleted)."""
    if not commit.erased_file:
        return {}
    rows = read_parquet(table.storage, commit.erased_file, checksum=commit.erased_checksum or None)
    common = common_names(table.config)
    out: dict[tuple[str, str], pa.Table] = {}
    places = [ERASED_PARTITION, ERASED_GROUP]
    for place in rows.select(places).group_by(places).aggregate([]).to_pylist():  # a few file groups
        partition, group = place[ERASED_PARTITION], place[ERASED_GROUP]
        mask = pc.and_(pc.equal(rows.column(ERASED_PARTITION), partition), pc.equal(rows.column(ERASED_GROUP), group))
        out[(partition, group)] = rows.filter(mask).select(common)
    return out


class ChangeScope:
    """The file groups (numbered under the bucket counts as of `until`) an incremental read may return keys of: its
    filters' and, in a Spark task, its own share. A rescale in the range moved keys: a key in group i of b buckets
    is in group j of n only if i = j modulo gcd(b, n)."""

    def __init__(self, pruning: Pruning, after: BucketLayout) -> None:
        self.pruning = pruning
        self.after = after

    def allowed(self, partition: str) -> set[int] | None:
        """The groups of `partition` the read may return keys of (None: every one)."""
        ids = self.pruning.file_groups(self.after.buckets(partition))
        found = None if ids is None else {int(i) for i in ids}
        if self.pruning.only is not None:
            handed = {int(group) for place, group in self.pruning.only if place == partition}
            found = handed if found is None else found & handed
        return found

    def holding(self, partition: str, group: str, buckets: int) -> list[int]:
        """The allowed groups as of `until` that keys of file group `group`, laid out by `buckets`, may be in."""
        if not self.pruning.matches_partition(partition):
            return []
        count = self.after.buckets(partition)
        step = gcd(buckets, count)
        ids = self.allowed(partition)
        return [j for j in range(int(group) % step, count, step) if ids is None or j in ids]

    def may_hold(self, partition: str, group: str, buckets: int) -> bool:
        return bool(self.holding(partition, group, buckets))


@dataclass(frozen=True)
class CarriedFile:
    """A data file a deltacommit of the range added: its keys in the group (by the hash under the count as of
    `until`, when `buckets` differs from it) are candidates, carried at `completed` by `stream`."""

    file: DataFile
    completed: str
    stream: str
    buckets: int


@dataclass(frozen=True)
class ChangeGroup:
    """One file group's share of an incremental read, planned for a reader that merges and diffs it itself (the
    JVM reader): its slice as of `until`, the slices as of `since` its keys were in, the files whose keys are the
    candidates and the erased keys (common columns, `COMMIT_TIME`, `STREAMS`)."""

    partition: str
    file_group: str
    buckets: int
    after: FileSlice | None
    before: list[FileSlice]
    carried: list[CarriedFile]
    erased: pa.Table | None


def plan_changes(
    table: TableHandle,
    timeline: Timeline,
    view: FileSystemView,
    since: str | None,
    until: str | None,
    pruning: Pruning,
) -> list[ChangeGroup]:
    """The file groups whose changes in (since, until] `change_parts` would report, each as a `ChangeGroup`: the
    same instants, refusals, slices and candidate keys, with no data file read here (only an erase's key list)."""
    config = table.config
    if until is None:
        latest = timeline.latest_completed()
        until = latest.completed if latest else None
    if until is None:
        return []
    if view.horizon is not None and (since is None or since < view.horizon):
        # Instants up to the horizon are archived: the feed would leave their changes out without a word.
        raise UsageError(
            f"changes since {since or 'the first commit'} can no longer be read: the timeline up to "
            f"{view.horizon} is archived (`stitch archive`), and the changes of its commits with it. Read changes "
            f"since {view.horizon} or later, or read the table itself"
        )
    after_layout = view.layout(until)
    before_layout = view.layout(since) if since else None
    scope = ChangeScope(pruning, after_layout)
    instants = changed_instants(timeline, since, until)
    _refuse_reshaping_alters(table, timeline, view, since, until)
    _refuse_cleaned(timeline, view, instants, since)
    carried: dict[tuple[str, str], list[CarriedFile]] = {}
    erased: dict[tuple[str, str], list[pa.Table]] = {}
    for instant in instants:
        commit = timeline.commit(instant)
        layout = view.layout(instant.completed)
        if isinstance(commit, EraseCommit):
            for (partition, group), keys in erased_keys(table, commit).items():
                if not scope.may_hold(partition, group, layout.buckets(partition)):
                    continue
                groups = _groups_of(config, keys, after_layout.buckets(partition))
                ids = scope.allowed(partition)
                for number in np.unique(groups):
                    if ids is not None and int(number) not in ids:
                        continue
                    rows = keys.filter(pa.array(groups == number))
                    rows = rows.append_column(COMMIT_TIME, pa.array([instant.completed] * rows.num_rows, pa.string()))
                    rows = rows.append_column(STREAMS, pa.array([ERASE_LABEL] * rows.num_rows, pa.string()))
                    erased.setdefault((partition, file_group_id(int(number))), []).append(rows)
            continue
        stream = getattr(commit, "stream", None) or ""
        for entry in commit.added_files:
            buckets = entry.buckets or layout.buckets(entry.partition)
            for number in scope.holding(entry.partition, entry.file_group, buckets):
                place = (entry.partition, file_group_id(number))
                carried.setdefault(place, []).append(CarriedFile(entry, instant.completed, stream, buckets))
    out = []
    for partition, group in sorted(set(carried) | set(erased)):
        count = after_layout.buckets(partition)
        after = view.latest_slices(until, file_groups=[(partition, group)])
        before: list[FileSlice] = []
        if since and before_layout is not None:
            then = before_layout.buckets(partition)
            step = gcd(then, count)
            places = [(partition, file_group_id(j)) for j in range(int(group) % step, then, step)]
            before = view.latest_slices(since, file_groups=places)
        gone = erased.get((partition, group))
        out.append(
            ChangeGroup(
                partition,
                group,
                count,
                after[0] if after else None,
                before,
                carried.get((partition, group), []),
                pa.concat_tables(gone) if gone else None,
            )
        )
    return out


def change_parts(
    table: TableHandle,
    timeline: Timeline,
    view: FileSystemView,
    since: str | None,
    until: str | None,
    wanted: list[str],
    pruning: Pruning,
    before_images: bool = False,
) -> Iterator[pa.Table]:
    """Keys whose merged row changed in (since, until], with their row as of `until`, `_op` I/U/D and the
    change-feed columns (`CHANGE_COLUMNS`), one file group at a time, as `plan_changes` plans them (the JVM reader
    reads the same plan): the group's carried keys are read (keys only), then its two states are merged, diffed
    and handed on before the next group's."""
    config = table.config
    common = common_names(config)
    every = list(dict.fromkeys(common + [c.name for c in config.all_columns()]))
    for group in plan_changes(table, timeline, view, since, until, pruning):
        carried = _carried_keys(table, group)
        if not carried.num_rows:
            continue
        candidates = carried.select(common).group_by(common).aggregate([])
        after = _state(table, group.after, every, candidates)
        found = [_state(table, s, every, candidates) for s in group.before]
        found = [f for f in found if f.num_rows]
        before = pa.concat_tables(found) if found else empty_rows(config, every)
        changed = _diff(config, before, after, common, every, before_images)
        changes = _filter_changes(_with_commits(changed, carried, common), pruning, before_images, common)
        yield changes.select([*wanted, *CHANGE_COLUMNS])


def _carried_keys(table: TableHandle, group: ChangeGroup) -> pa.Table:
    """The keys the range's commits carried into `group` (common columns, `COMMIT_TIME`, `STREAMS`): each carried
    file's keys in the group (hashed again when a rescale changed the count since), then the erased ones."""
    config = table.config
    common = common_names(config)
    parts = []
    for item in group.carried:
        entry = item.file
        keys = read_table_file(table.storage, entry.path, key_schema(config), common, entry.rows, entry.checksum)
        if item.buckets != group.buckets:
            keys = keys.filter(pa.array(_groups_of(config, keys, group.buckets) == int(group.file_group)))
        keys = keys.append_column(COMMIT_TIME, pa.array([item.completed] * keys.num_rows, pa.string()))
        parts.append(keys.append_column(STREAMS, pa.array([item.stream] * keys.num_rows, pa.string())))
    if group.erased is not None:
        parts.append(group.erased)
    return pa.concat_tables(parts) if parts else pa.table({})


def _filter_changes(out: pa.Table, pruning: Pruning, before_images: bool, common: list[str]) -> pa.Table:
    """The read's filter on change rows: `D` rows stay whatever the value conditions say; with `before_images` an
    update's two rows are kept or dropped together, by its new values."""
    if not out.num_rows:
        return out
    if pruning.row_columns is None and pruning.rows is not None:
        return out.filter(_expression_kept(out, pruning.rows, common))
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
        empty_rows(config, wanted)
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


def _expression_kept(rows: pa.Table, expression: pc.Expression, common: list[str]) -> pa.Array:
    """Which change rows an opaque filter expression keeps. A deleted row has no new values: it is judged with its
    value columns null, and kept unless the expression is then false (`amount > 5` keeps every delete, `k == 2`
    or `_op != "D"` drops them; a function that answers for a null, such as `is_in` or `is_valid`, decides). A
    `-U` row is judged by its `+U` row's values (the pair goes together) with its own change columns."""
    keep = _evaluate(rows, expression)
    deleted = _rows_of(rows, "D")
    if deleted.size:
        known = {*common, *CHANGE_COLUMNS}
        unknown = rows.take(pa.array(deleted))
        for at, name in enumerate(unknown.column_names):
            if name not in known:
                unknown = unknown.set_column(at, name, pa.nulls(unknown.num_rows, unknown.schema.field(name).type))
        keep[deleted] = ~_evaluate(unknown, ~expression)  # null counts as false in `_evaluate`: kept
    minus = _rows_of(rows, "-U")
    if minus.size:
        pairs = rows.take(pa.array(minus + 1))  # a -U row is always right before its +U row
        for name in CHANGE_COLUMNS:
            at = pairs.schema.get_field_index(name)
            pairs = pairs.set_column(at, name, rows.column(name).take(pa.array(minus)))
        keep[minus] = _evaluate(pairs, expression)
    return pa.array(keep)


def _rows_of(rows: pa.Table, op: str) -> np.ndarray:
    """The positions of the change rows of one `_op`, by an Arrow kernel."""
    return np.flatnonzero(pc.equal(rows.column(OP), op).to_numpy(zero_copy_only=False))


def _pairs_kept(rows: pa.Table, values: Any) -> pa.Array:
    """Which rows a value filter keeps when updates come as `-U`/`+U` pairs: a `-U` row goes with its `+U`."""
    matches = _evaluate(rows, values)
    keep = matches.copy()
    keep[_rows_of(rows, "D")] = True
    minus = _rows_of(rows, "-U")
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


def _state(table: TableHandle, fslice: FileSlice | None, columns: list[str], candidates: pa.Table) -> pa.Table:
    """The candidates' merged rows in `fslice` (none: no rows)."""
    if fslice is None:
        return empty_rows(table.config, columns)
    rows = to_rows(table.config, merge_slice(table, fslice, columns, versions=False), columns)
    found, _ = _match_keys(rows, candidates, common_names(table.config), "left semi")
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
    """Per row: both null, or equal values (nested values compared whole). NaN equals NaN (Spark's equality, and
    the JVM reader's): a key a commit carried with NaN again is unchanged."""
    if pa.types.is_nested(now.type):
        return np.array([_equal(a, b) for a, b in zip(now.to_pylist(), then.to_pylist(), strict=True)], dtype=bool)
    same = pc.fill_null(pc.equal(now, then), False)
    if pa.types.is_floating(now.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(now), pc.is_nan(then)), False))
    return pc.or_(same, pc.and_(pc.is_null(now), pc.is_null(then))).to_numpy(zero_copy_only=False)


def _equal(a: Any, b: Any) -> bool:
    """Two nested values (as `to_pylist` gives them) equal, NaN equal to NaN at any depth."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


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
