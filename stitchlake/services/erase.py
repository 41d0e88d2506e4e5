"""Key-level erase (DESIGN §2): remove every group of the given keys committed before the erase's commit.

An erase rewrites the file groups holding the keys — their current slices become new base files without the
keys — under optimistic concurrency (DESIGN §6): it conflicts (exit 3, nothing left behind) with another
rewrite of the same file groups, and with a commit that wrote one of the erased keys while the erase ran,
because that event was committed before the erase's commit too and would otherwise survive it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stitchlake.batch import cast_column
from stitchlake.errors import ConflictError, InputRejected, NotFoundError
from stitchlake.io.datafiles import read_table_file, write_table_file
from stitchlake.io.schemas import log_schema
from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.fsview import FileSystemView
from stitchlake.layout.names import BASE, base_name, file_group_id, join
from stitchlake.layout.partition import partition_path
from stitchlake.merge.stitch import to_base
from stitchlake.reader import merge_slice
from stitchlake.services.archive import load_checkpoint
from stitchlake.services.compaction import slice_from_json, slice_to_json
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import Timeline
from stitchlake.transaction import Transaction

if TYPE_CHECKING:
    from stitchlake.table import Table

ERASE_DIR = ".stitch/erase"
GROUP = "_file_group"
PARTITION = "_partition"


@dataclass
class EraseResult:
    instant: str
    completed: str | None
    requested_keys: int
    erased_keys: int
    file_groups: int
    #: With `purge`: savepoints deleted and older file slices removed, because they still held the keys.
    purged_savepoints: list[str] = field(default_factory=list)
    purged_files: int = 0


def _keys_table(table: Table, keys: pa.Table) -> pa.Table:
    """The keys to erase, cast to the key (and, if given, partition) types; nulls are refused."""
    config = table.config
    wanted = [c for c in config.common_columns if c.name in keys.column_names]
    missing = [c.name for c in config.table.key if c.name not in keys.column_names]
    if missing:
        raise InputRejected(f"keys to erase: missing key column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    columns = {}
    for spec in wanted:
        column, failed = cast_column(keys.column(spec.name).combine_chunks(), spec, "keys to erase")
        if failed.any() or column.null_count:
            raise InputRejected(f"keys to erase: column {spec.name} has null or unparsable values")
        columns[spec.name] = column
    return pa.table(columns).group_by(list(columns)).aggregate([])


def _targets(table: Table, view: FileSystemView, keys: pa.Table) -> set[tuple[str, str]]:
    """File groups that may hold the keys: their bucket, in their partition or in every partition."""
    config = table.config
    buckets = bucket_of([keys.column(n) for n in config.table.key_names], config.table.buckets)
    groups = {file_group_id(int(b)) for b in np.unique(buckets)}
    names = config.table.partition_names
    if names and all(n in keys.column_names for n in names):
        rows = keys.select(list(names)).to_pylist()
        wanted = {
            (partition_path(names, tuple(r[n] for n in names)), file_group_id(int(b)))
            for r, b in zip(rows, buckets, strict=True)
        }
        return {k for k in view.file_groups() if k in wanted}
    return {k for k in view.file_groups() if k[1] in groups}


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
        if instant.action not in Action.REWRITES or instant.requested == me:
            continue
        if instant.is_completed and (instant.completed or "") <= since:
            continue
        # The plan names the file groups of a pending or completed rewrite; a completed one also lists its files.
        touched = {(e["partition"], e["file_group"]) for e in timeline.requested_content(instant).get("operations", [])}
        if instant.is_completed:
            touched |= {(e["partition"], e["file_group"]) for e in timeline.metadata(instant).get("added", [])}
        if touched & groups:
            out.append(instant)
    return out


def _late_writes(
    table: Table, timeline: Timeline, groups: set[tuple[str, str]], keys: pa.Table, since: str
) -> list[str]:
    """Deltacommits completed after `since` that wrote one of the erased keys in the erased file groups."""
    found = []
    common = [c.name for c in table.config.common_columns]
    for instant in timeline.completed([Action.DELTACOMMIT], since=since):
        for entry in timeline.metadata(instant).get("added", []):
            if (entry["partition"], entry["file_group"]) not in groups:
                continue
            stream = table.config.streams[entry["stream"]]
            written = read_table_file(table.storage, entry["path"], log_schema(table.config, stream), common)
            if _match(written, keys).any():
                found.append(instant.requested)
                break
    return found


def erase(table: Table, keys: pa.Table, purge: bool = False) -> EraseResult:
    """Erase `keys` (a table with the key columns, optionally the partition columns too).

    The erase hides the keys from every read from its commit on; time travel to before it, savepoints and older
    file slices still hold them until cleaned. `purge` removes those copies at once (GDPR: the data is gone):
    it deletes the savepoints that pin an older slice of a rewritten file group, and cleans every slice older than
    the erase's in those groups, whatever the retention says.
    """
    result = _erase(table, keys)
    if purge:
        result.purged_savepoints, result.purged_files = purge_older_copies(table, result.instant)
    return result


def purge_older_copies(table: Table, erase_instant: str) -> tuple[list[str], int]:
    """Delete savepoints and file slices older than an erase in the file groups it rewrote."""
    from stitchlake.services.clean import purge_file_groups, superseded_in
    from stitchlake.services.savepoint import delete as delete_savepoint

    timeline = table.timeline()
    done = timeline.get(erase_instant)
    if done is None or not done.is_completed:
        raise NotFoundError(f"erase {erase_instant} is not a completed erase on the timeline")
    groups = {(e["partition"], e["file_group"]) for e in timeline.metadata(done).get("operations", [])}
    older = superseded_in(table.view(timeline), groups)
    removed = []
    for savepoint in timeline.completed([Action.SAVEPOINT]):
        if set(timeline.metadata(savepoint).get("files", [])) & older:
            delete_savepoint(table, savepoint.requested)
            removed.append(savepoint.requested)
    return removed, len(purge_file_groups(table, groups).deleted)


def _erase(table: Table, keys: pa.Table) -> EraseResult:
    table.require()
    wanted = _keys_table(table, keys)
    groups: set[tuple[str, str]] = set()

    def plan(timeline: Timeline, requested: str) -> dict[str, Any] | None:
        view = FileSystemView.build(timeline, load_checkpoint(table.storage))
        groups.update(_targets(table, view, wanted))
        busy = _rewrites_touching(timeline, groups, requested, requested)
        if busy:
            raise ConflictError(
                f"erase conflicts with {busy[0].action} {busy[0].requested}, still pending on the same file groups; "
                "nothing was changed — retry after it completes"
            )
        slices = [s for s in (view.latest_slice(k) for k in sorted(groups)) if s is not None]
        return {
            "operations": [slice_to_json(s) for s in slices],
            "keys_file": f"{ERASE_DIR}/{requested}/keys.parquet",
        }

    txn = Transaction.begin_planned(table, Action.ERASE, plan=plan)
    assert txn is not None
    try:
        return _execute(table, txn, wanted, groups)
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        txn.abort()
        table.storage.delete_tree(f"{ERASE_DIR}/{txn.time}")  # its (now empty) folder would be a trace too
        if refused is not None:
            raise refused from exc
        raise


def _execute(table: Table, txn: Transaction, keys: pa.Table, groups: set[tuple[str, str]]) -> EraseResult:
    storage = table.storage
    plan = txn.plan
    keys_path = plan["keys_file"]
    txn.mark(keys_path)
    storage.makedirs(keys_path.rsplit("/", 1)[0])
    pq.write_table(keys, storage.abspath(keys_path), filesystem=storage.filesystem)
    files, erased = [], []
    for operation in plan["operations"]:
        fslice = slice_from_json(operation)
        merged = merge_slice(table, fslice)
        hit = _match(merged.keys, keys)
        rows = to_base(table.config, merged, erase=hit)
        path = join(fslice.partition, base_name(fslice.file_group, txn.time))
        txn.mark(path)
        size = write_table_file(storage, path, rows)
        files.append(
            {
                "path": path,
                "partition": fslice.partition,
                "file_group": fslice.file_group,
                "kind": BASE,
                "stream": None,
                "rows": rows.num_rows,
                "bytes": size,
            }
        )
        gone = merged.keys.filter(pa.array(hit & merged.live()))
        erased.append(
            gone.append_column(GROUP, pa.array([fslice.file_group] * gone.num_rows, pa.string())).append_column(
                PARTITION, pa.array([fslice.partition] * gone.num_rows, pa.string())
            )
        )
    erased_path = f"{ERASE_DIR}/{txn.time}/erased.parquet"
    erased_rows = pa.concat_tables(erased) if erased else None
    if erased_rows is not None:
        txn.mark(erased_path)
        pq.write_table(erased_rows, storage.abspath(erased_path), filesystem=storage.filesystem)

    # One snapshot for both: a commit completing between two separate loads would be checked by neither.
    snapshot = table.timeline()
    late = _late_writes(table, snapshot, groups, keys, txn.time)
    checked_at = snapshot.latest_time() or txn.time

    def conflicts(timeline: Timeline, instant: Instant) -> None:
        rivals = _rewrites_touching(timeline, groups, instant.requested, instant.requested)
        if rivals:
            raise ConflictError(
                f"erase {instant.requested} conflicts with {rivals[0].action} {rivals[0].requested} on the same "
                "file groups; nothing was changed — retry"
            )
        more = late or _late_writes(table, timeline, groups, keys, checked_at)
        if more:
            raise ConflictError(
                f"erase {instant.requested}: deltacommit {more[0]} wrote an erased key while the erase ran; "
                "nothing was changed — retry the erase"
            )

    instant = txn.complete(
        {
            "operations": [{"partition": f["partition"], "file_group": f["file_group"]} for f in files],
            "added": files,
            "keys_file": keys_path,
            "erased_file": erased_path if erased_rows is not None else None,
            "requested_keys": keys.num_rows,
            "erased_keys": 0 if erased_rows is None else erased_rows.num_rows,
        },
        conflict_check=conflicts,
    )
    return EraseResult(
        instant.requested,
        instant.completed,
        keys.num_rows,
        0 if erased_rows is None else erased_rows.num_rows,
        len(files),
    )


def erased_keys(table: Table, metadata: dict[str, Any]) -> dict[tuple[str, str], pa.Table]:
    """The keys a completed erase removed, by file group (for the incremental view)."""
    path = metadata.get("erased_file")
    if not path:
        return {}
    rows = pq.read_table(table.storage.abspath(path), filesystem=table.storage.filesystem)
    common = [c.name for c in table.config.common_columns]
    out: dict[tuple[str, str], pa.Table] = {}
    groups = rows.select([PARTITION, GROUP]).to_pylist()
    for key in {(g[PARTITION], g[GROUP]) for g in groups}:
        mask = np.array([(g[PARTITION], g[GROUP]) == key for g in groups])
        out[key] = rows.filter(pa.array(mask)).select(common)
    return out
