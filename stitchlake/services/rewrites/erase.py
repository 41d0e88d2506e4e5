"""Key-level erase (design.md §2): remove every group of the given keys committed before the erase's commit.

An erase rewrites the file groups holding the keys — their current slices become new base files without the
keys — under optimistic concurrency (design.md §6): it conflicts (exit 3, nothing left behind) with another
rewrite of the same file groups, and with a commit that wrote one of the erased keys while the erase ran,
because that event was committed before the erase's commit too and would otherwise survive it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from stitchlake.engine import Engine, LocalEngine, marker_for
from stitchlake.errors import (
    COMPLETED_BEFORE_STOP,
    ConflictError,
    InputRejected,
    StitchError,
    Terminated,
    UsageError,
)
from stitchlake.io.datafiles import read_parquet, read_table_file, write_parquet, write_table_file
from stitchlake.io.landing import FORMATS as LANDING_FORMATS
from stitchlake.io.schemas import key_schema, log_schema
from stitchlake.layout.fsview import FileSystemView
from stitchlake.layout.names import BASE, base_name, join
from stitchlake.layout.placement import KeyPlacement
from stitchlake.merge.stitch import to_base
from stitchlake.paths import erase_folder
from stitchlake.reading.changes import ERASED_GROUP, ERASED_PARTITION
from stitchlake.reading.snapshot import common_names, merge_slice
from stitchlake.services.publish import Published, publish_after
from stitchlake.services.published_state import left_behind
from stitchlake.services.rewrites.purge import PurgeResult
from stitchlake.services.rewrites.purge import purge as purge_copies
from stitchlake.storage import storage_for
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import REWRITES
from stitchlake.timeline.archive import archived_instants, load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import (
    DataFile,
    EraseCommit,
    ErasePlan,
    FileGroupRef,
    FileSlice,
    RewriteCommit,
    RewritePlan,
)
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import SourceFormat
from stitchlake.writing.batch import cast_column

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

log = logging.getLogger(__name__)


@dataclass
class EraseResult:
    instant: str
    completed: str | None
    requested_keys: int
    erased_keys: int
    file_groups: int
    #: With `purge`: savepoints deleted, older file slices removed, quarantine files rewritten or removed and Spark
    #: job logs deleted, because they still held (or may have held) the keys.
    purged_savepoints: list[str] = field(default_factory=list)
    purged_files: int = 0
    purged_quarantine: list[str] = field(default_factory=list)
    purged_logs: list[str] = field(default_factory=list)
    #: The published tables brought up to date.
    published: list[Published] = field(default_factory=list)
    #: Published tables the config no longer points at (`publish.location` or the Iceberg namespace changed): no
    #: publish reaches them, so they may still hold the keys; the operator deletes them.
    left_behind: list[str] = field(default_factory=list)


#: Key files (Parquet, CSV or JSON lines) are read by the landing readers, under the names those readers take.
KEY_FILE_FORMATS = {
    extension: str(name)
    for name in (SourceFormat.PARQUET, SourceFormat.CSV, SourceFormat.JSON)
    for extension in LANDING_FORMATS[name].extensions
}


def load_keys(location: str, options: Mapping[str, str] | None = None) -> pa.Table:
    """The keys to erase from a Parquet, CSV or JSON-lines file (a local path or a URI)."""
    from stitchlake.config import SourceSpec
    from stitchlake.io.landing import LandingFile, read_landing, split_location

    folder, name = split_location(location)
    suffix = name[name.rfind(".") :].lower() if "." in name else ""
    file_format = KEY_FILE_FORMATS.get(suffix)
    if file_format is None:
        raise UsageError(f"--keys {location}: use a .parquet, .csv or .json(l) file")
    try:
        info = storage_for(folder, options).stat(name)
    except FileNotFoundError:
        raise UsageError(f"--keys {location}: no such file") from None
    file = LandingFile(folder, name, name, info.size, info.version)
    return read_landing(SourceSpec(format=file_format, path=folder), file, [], options)


def _keys_table(table: TableHandle, keys: pa.Table) -> pa.Table:
    """The keys to erase, cast to the key (and, if given, partition) types; nulls are refused."""
    config = table.config
    wanted = [c for c in config.common_columns if c.name in keys.column_names]
    missing = [c.name for c in config.table.key if c.name not in keys.column_names]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise InputRejected(f"keys to erase: missing key column{plural} {', '.join(missing)}", column=missing[0])
    columns = {}
    for spec in wanted:
        column, failed = cast_column(keys.column(spec.name).combine_chunks(), spec, "keys to erase")
        if failed.any() or column.null_count:
            raise InputRejected(f"keys to erase: column {spec.name} has null or unparsable values", column=spec.name)
        columns[spec.name] = column
    return pa.table(columns).group_by(list(columns)).aggregate([])


def _targets(table: TableHandle, view: FileSystemView, keys: pa.Table) -> set[tuple[str, str]]:
    """File groups that may hold the keys: their bucket, in their partition or in every partition (under each
    partition's bucket count now: a rescale changes it)."""
    layout = view.layout()
    placement = KeyPlacement(keys, table.config.table.key_names, table.config.table.partition_names)
    return {k for k in view.file_groups() if k[1] in placement.file_groups(k[0], layout.buckets(k[0]))}


def _match(candidates: pa.Table, keys: pa.Table) -> np.ndarray:
    """Mask over `candidates` rows whose key (on the columns `keys` has) is in `keys`."""
    on = keys.column_names
    indexed = candidates.select(on).append_column("_row", pa.array(np.arange(candidates.num_rows)))
    hits = indexed.join(keys, keys=on, join_type="left semi").column("_row").to_numpy()
    mask = np.zeros(candidates.num_rows, dtype=bool)
    mask[hits] = True
    return mask


def _rewrites_touching(timeline: Timeline, groups: set[tuple[str, str]], since: str, me: str) -> list[Instant]:
    """Compactions/erases other than `me` that completed after `since` or are pending, on the same groups."""
    out = []
    for instant in timeline.instants:
        if instant.action not in REWRITES or instant.requested == me:
            continue
        if instant.is_completed and (instant.completed or "") <= since:
            continue
        # The plan names the file groups of a pending or completed rewrite; a completed one also lists its files.
        plan = timeline.plan(instant)
        touched = plan.groups if isinstance(plan, RewritePlan) else set()
        if instant.is_completed:
            commit = timeline.commit(instant)
            touched |= commit.groups if isinstance(commit, RewriteCommit) else set()
        if touched & groups:
            out.append(instant)
    return out


def _late_writes(
    table: TableHandle, timeline: Timeline, keys: pa.Table, since: str, checked: Collection[str] = ()
) -> list[str]:
    """Deltacommits completed after `since` (but those in `checked`) that wrote one of the erased keys, in any file
    group that may hold one: the planned ones, and those the erase never saw (a partition or bucket the write
    created meanwhile), which its rewrite cannot cover either."""
    found = []
    common = [c.name for c in table.config.common_columns]
    placement = KeyPlacement(keys, table.config.table.key_names, table.config.table.partition_names)
    for instant in timeline.completed([Action.DELTACOMMIT], since=since):
        if instant.requested in checked:
            continue
        for entry in timeline.commit(instant).added_files:
            if entry.buckets and entry.file_group not in placement.file_groups(entry.partition, entry.buckets):
                continue  # its key routing says no erased key is in it (0: not recorded, read it)
            stream = table.config.streams.get(entry.stream or "")
            if stream is None:  # an alter dropped it meanwhile: its columns are not known here, so it may hold one
                found.append(instant.requested)
                break
            written = read_table_file(
                table.storage, entry.path, log_schema(table.config, stream), common, checksum=entry.checksum
            )
            if _match(written, keys).any():
                found.append(instant.requested)
                break
    return found


def erase(table: TableHandle, keys: pa.Table, purge: bool = False, engine: Engine | None = None) -> EraseResult:
    """Erase `keys` (a table with the key columns, optionally the partition columns too).

    The erase hides the keys from every read from its commit on; time travel to before it, savepoints and older
    file slices still hold them until cleaned. `purge` removes those copies at once (GDPR: the data is gone):
    it deletes the savepoints that pin an older slice of a rewritten file group, and cleans every slice older than
    the erase's in those groups, whatever the retention says.

    Every format the table publishes (or has published) is then published again without the keys; with `purge`
    that publish recreates each published table, since its older versions, log and manifests still hold them.
    """
    engine = engine or LocalEngine()
    table.require()  # a config that disagrees with the table is refused before any slice is read
    wanted = _keys_table(table, keys)
    _refuse_misplaced(table, wanted, engine)
    result = _erase(table, wanted, engine, purge)
    if purge:
        purged = _purged(table, result.instant, wanted)
        result.purged_savepoints, result.purged_files = purged.savepoints, purged.files
        result.purged_quarantine, result.purged_logs = purged.quarantine, purged.logs
    result.published = publish_after(table, f"erase {result.instant}", wait_busy=True)
    try:
        result.left_behind = left_behind(table)
    except (StitchError, OSError) as exc:  # the erase stands: say what could not be checked, fail nothing
        log.warning(
            "erase %s stands, but published tables of earlier locations were not looked for: %s", result.instant, exc
        )
    if result.left_behind:
        log.warning("published tables no publish reaches may still hold the erased keys: %s", result.left_behind)
    return result


def _purged(table: TableHandle, instant: str, wanted: pa.Table) -> PurgeResult:
    """The erase's purge; the erase stands whatever happens to it, and the operator is told how to finish it."""
    finish = "`stitch rollback --failed` finishes it, then publishes"
    try:
        return purge_copies(table, instant, wanted)
    except (StitchError, OSError) as exc:
        raise StitchError(
            f"erase {instant} completed, but its purge failed: {exc} — older copies of the keys are still there; "
            f"{finish}"
        ) from exc
    except (KeyboardInterrupt, Terminated) as exc:
        exc.add_note(f"{COMPLETED_BEFORE_STOP}: erase {instant} stands; its purge was stopped — {finish}")
        raise


def _refuse_misplaced(table: TableHandle, wanted: pa.Table, engine: Engine) -> None:
    """Refuse (exit 5, before anything changes) keys that the keys file places in a partition they are not in
    while the table holds them in another.

    A keys file with partition columns is searched in those partitions only, and a key is one record per
    partition: erasing its record in another partition could erase someone else's, and leaving it while saying
    `erased N of M` would be a GDPR request silently unmet. Not misplaced: a key that is nowhere (erase requests
    often name people with no rows), one the file also names where it is, and one an earlier erase was asked for
    or removed in the partition given (a re-run). Keys missed in their partition cost a read of the key columns
    of their buckets in every other partition.
    """
    named = [n for n in table.config.table.partition_names if n in wanted.column_names]
    if not named:
        return
    on = wanted.column_names
    key_names = list(table.config.table.key_names)
    loose = wanted.select(key_names).group_by(key_names).aggregate([])
    view = FileSystemView.build(table.timeline(), load_checkpoint(table.storage), table.base_buckets)
    searched = _targets(table, view, wanted)  # every partition when the file has some partition columns only
    held = _stored_keys(table, view, searched, loose, engine)
    missed = wanted.join(held.select(on), keys=on, join_type="left anti")
    if missed.num_rows:
        missed = missed.join(_asked_before(table, on), keys=on, join_type="left anti")
    if missed.num_rows == 0:
        return
    missed_keys = missed.select(key_names).group_by(key_names).aggregate([])
    rest = _targets(table, view, missed_keys) - searched
    held = pa.concat_tables([held, _stored_keys(table, view, rest, missed_keys, engine)])
    elsewhere = held.join(missed_keys, keys=key_names, join_type="left semi")
    elsewhere = elsewhere.join(wanted.select(on), keys=on, join_type="left anti")
    if elsewhere.num_rows == 0:
        return
    given = missed.join(elsewhere.select(key_names), keys=key_names, join_type="left semi")
    example = given.slice(0, 1).to_pylist()[0]
    found = elsewhere.join(given.slice(0, 1).select(key_names), keys=key_names, join_type="left semi")
    where = ", ".join(_place(row, named) for row in found.slice(0, 3).to_pylist())
    keys_text = ", ".join(f"{n}={example[n]}" for n in key_names)
    raise InputRejected(
        f"keys to erase: {given.num_rows} key(s) are not in the partition the keys file gives but are in another "
        f"(e.g. {keys_text}: given {_place(example, named)}, found in {where}); nothing was erased. Give those keys "
        "with the partition they are in, or give the key columns alone to erase a key in every partition"
    )


def _place(row: Mapping[str, object], names: list[str]) -> str:
    return "/".join(f"{n}={row[n]}" for n in names)


def _stored_keys(
    table: TableHandle, view: FileSystemView, groups: set[tuple[str, str]], keys: pa.Table, engine: Engine
) -> pa.Table:
    """The key and partition columns of the records of `keys` (matched on its columns) in `groups`' latest slices,
    tombstoned ones too: a deleted record is still the one the keys file named."""
    common = common_names(table.config)
    slices = [s for s in (view.latest_slice(k) for k in sorted(groups)) if s is not None]

    def held(fslice: FileSlice) -> pa.Table:
        merged = merge_slice(table, fslice, wanted=common)
        return merged.keys.select(common).filter(pa.array(_match(merged.keys, keys) & merged.stored()))

    found = engine.map(held, slices, weight=lambda s: s.bytes)
    return pa.concat_tables([key_schema(table.config).empty_table(), *found])


def _asked_before(table: TableHandle, on: list[str]) -> pa.Table:
    """The `on` columns of every key an earlier erase (archived ones too) removed, or was asked for by a keys file
    with those columns: a tombstoned record it took away is in its keys file only."""
    timeline = table.timeline()
    commits = [timeline.commit(i) for i in timeline.completed([Action.ERASE])]
    commits += [entry.commit for entry in archived_instants(table.storage)]
    found = [key_schema(table.config).empty_table().select(on)]
    for commit in commits:
        if not isinstance(commit, EraseCommit):
            continue
        if commit.erased_file:
            found.append(read_parquet(table.storage, commit.erased_file, on, commit.erased_checksum or None))
        if commit.keys_file:
            asked = read_parquet(table.storage, commit.keys_file)
            if all(name in asked.column_names for name in on):
                found.append(asked.select(on))
    return pa.concat_tables(found)


def _erase(table: TableHandle, wanted: pa.Table, engine: Engine, purge: bool = False) -> EraseResult:
    """One erase commit of `wanted`, the keys as `_keys_table` cast them."""
    groups: set[tuple[str, str]] = set()

    def plan(timeline: Timeline, requested: str) -> ErasePlan | None:
        view = FileSystemView.build(timeline, load_checkpoint(table.storage), table.base_buckets)
        groups.update(_targets(table, view, wanted))
        busy = _rewrites_touching(timeline, groups, requested, requested)
        if busy:
            raise ConflictError(
                f"erase conflicts with {busy[0].action} {busy[0].requested}, still pending on the same file groups; "
                "nothing was changed — retry after it completes"
            )
        slices = tuple(s for s in (view.latest_slice(k) for k in sorted(groups)) if s is not None)
        return ErasePlan(operations=slices, keys_file=f"{erase_folder(requested)}/keys.parquet")

    txn = Transaction.begin_planned(table, Action.ERASE, plan=plan)
    assert txn is not None
    try:
        return _execute(table, txn, wanted, groups, engine, purge)
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        txn.abort()
        if txn.sent is None:  # else left pending: a commit that may still land names its keys file
            table.storage.delete_tree(erase_folder(txn.time))  # its (now empty) folder would be a trace too
        if refused is not None:
            raise refused from exc
        raise


def erase_file_group(
    table: TableHandle, fslice: FileSlice, keys: pa.Table, instant: str, mark: Callable[[str], None]
) -> tuple[DataFile, pa.Table]:
    """Rewrite one file group's slice without the keys: its new base file, and the keys it really held."""
    merged = merge_slice(table, fslice)
    hit = _match(merged.keys, keys)
    rows = to_base(table.config, merged, table.sparse_column_versions, erase=hit)
    path = join(fslice.partition, base_name(fslice.file_group, instant))
    mark(path)
    written = write_table_file(table.storage, path, rows)
    gone = merged.keys.filter(pa.array(hit & merged.live()))
    gone = gone.append_column(ERASED_GROUP, pa.array([fslice.file_group] * gone.num_rows, pa.string()))
    gone = gone.append_column(ERASED_PARTITION, pa.array([fslice.partition] * gone.num_rows, pa.string()))
    added = DataFile(
        path, fslice.partition, fslice.file_group, BASE, None, rows.num_rows, written.size, written.checksum
    )
    return added, gone


def _execute(
    table: TableHandle, txn: Transaction, keys: pa.Table, groups: set[tuple[str, str]], engine: Engine, purge: bool
) -> EraseResult:
    storage = table.storage
    plan = txn.plan
    assert isinstance(plan, ErasePlan) and plan.keys_file is not None
    txn.mark(plan.keys_file)
    write_parquet(storage, plan.keys_file, keys)
    time, mark = txn.time, marker_for(table, txn.time)  # tasks get plain values, never the transaction
    done = engine.map(
        lambda fslice: erase_file_group(table, fslice, keys, time, mark),
        list(plan.operations),
        weight=lambda s: s.bytes,
    )
    files = [file for file, _gone in done]
    erased_path = f"{erase_folder(txn.time)}/erased.parquet"
    erased_rows = pa.concat_tables([gone for _file, gone in done]) if done else None
    erased_checksum = ""
    if erased_rows is not None:
        txn.mark(erased_path)
        erased_checksum = write_parquet(storage, erased_path, erased_rows).checksum

    # One snapshot for both: a commit completing between two separate loads would be checked by neither.
    snapshot = table.timeline()
    late = _late_writes(table, snapshot, keys, txn.time)
    # Under the lock, every other one: a listing is no atomic cut (a commit created while it ran may be missed
    # beside a later one that was seen), so what was seen says which were checked, not a time.
    checked = {i.requested for i in snapshot.completed([Action.DELTACOMMIT], since=txn.time)}

    def conflicts(timeline: Timeline, instant: Instant) -> None:
        rivals = _rewrites_touching(timeline, groups, instant.requested, instant.requested)
        if rivals:
            raise ConflictError(
                f"erase {instant.requested} conflicts with {rivals[0].action} {rivals[0].requested} on the same "
                "file groups; nothing was changed — retry"
            )
        more = late or _late_writes(table, timeline, keys, txn.time, checked)
        if more:
            raise ConflictError(
                f"erase {instant.requested}: deltacommit {more[0]} wrote an erased key while the erase ran; "
                "nothing was changed — retry the erase"
            )

    erased = 0 if erased_rows is None else erased_rows.num_rows
    instant = txn.complete(
        EraseCommit(
            schema_version=table.schema_version,
            operations=tuple(FileGroupRef(f.partition, f.file_group) for f in files),
            added=tuple(files),
            keys_file=plan.keys_file,
            erased_file=erased_path if erased_rows is not None else None,
            erased_checksum=erased_checksum,
            requested_keys=keys.num_rows,
            erased_keys=erased,
            purge=purge,
            purge_marked=purge,
        ),
        conflict_check=conflicts,
    )
    return EraseResult(instant.requested, instant.completed, keys.num_rows, erased, len(files))
