"""The write client: one batch of one stream becomes one `deltacommit` (design.md §2, §3, §6).

`write_file_groups` is the per-file-group core: it routes events by bucket, precombines each group's events
into summaries and writes one log file per touched file group. The in-process engine calls it with the whole
batch; each Spark task calls it with its share. Nothing here takes the table lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from stitchlake.concurrency import conflicts
from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.config import ConcurrencyMode, StreamSpec, TableConfig
from stitchlake.io.datafiles import write_table_file
from stitchlake.layout.bucket import stable_hash
from stitchlake.layout.names import LOG, file_group_id, join, log_name
from stitchlake.layout.partition import partition_path
from stitchlake.layout.rescales import BucketLayout
from stitchlake.merge.keys import key_index
from stitchlake.merge.rules import events, merge
from stitchlake.merge.stitch import to_log
from stitchlake.merge.version import constant, encode_ordering, encode_rank, rank_dictionary
from stitchlake.paths import quarantine_folder
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import DataFile, DeltaCommit, DeltaCommitPlan
from stitchlake.types import orders_by_rank
from stitchlake.writing.badrows import Rejected
from stitchlake.writing.batch import Batch, prepare

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: Writing a file group is mostly Parquet encoding, which releases the GIL: a few threads help.
WRITE_THREADS = 4


@dataclass
class WriteResult:
    """What one commit did, for summaries and `--json`."""

    instant: str
    completed: str | None
    stream: str
    rows: int
    files: list[DataFile] = field(default_factory=list)
    bad_rows: int = 0
    quarantine: str | None = None

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def route(config: TableConfig, rows: pa.Table, layout: BucketLayout | None = None) -> list[tuple[str, str, np.ndarray]]:
    """Group row indices by (partition path, file group id), in a deterministic order.

    Each partition's keys go to `stable_hash(key) mod` its bucket count in `layout` (the table's `buckets` when
    none is given: a table never rescaled).
    """
    if rows.num_rows == 0:
        return []
    hashes = stable_hash([rows.column(n) for n in config.table.key_names])
    names = config.table.partition_names
    layout = layout or BucketLayout(config.table.buckets)
    if names:
        parts = key_index([rows.column(n) for n in names])
        paths = [partition_path(names, tuple(rows.column(n)[int(i)].as_py() for n in names)) for i in parts.first]
        counts = np.array([layout.buckets(path) for path in paths], dtype=np.uint64)
        buckets = (hashes % counts[parts.ids]).astype(np.int64)
        code = parts.ids * int(counts.max()) + buckets
    else:
        paths = [""]
        buckets = (hashes % np.uint64(layout.buckets(""))).astype(np.int64)
        code = buckets
    order = np.argsort(code, kind="stable")
    sorted_code = code[order]
    starts = np.flatnonzero(np.r_[True, sorted_code[1:] != sorted_code[:-1]])
    ends = np.r_[starts[1:], len(order)]
    out = []
    for start, end in zip(starts, ends, strict=True):
        members = order[start:end]
        first = int(members[0])
        part = int(parts.ids[first]) if names else 0
        out.append((paths[part], file_group_id(int(buckets[first])), members))
    return out


def precombine(
    config: TableConfig, stream: StreamSpec, rows: pa.Table, pos: np.ndarray, deleted: np.ndarray, sparse: bool
) -> pa.Table:
    """A batch's events for one file group reduced to one summary per key (the log file's rows; `sparse`: the
    table's format, `stitch.to_log`)."""
    index = key_index([rows.column(c.name) for c in config.common_columns])
    ranks = tuple(
        rank_dictionary([rows.column(name)]) if orders_by_rank(stream.column(name).type) else None
        for name in stream.ordering
    )
    version = (
        *(
            encode_rank(rows.column(name), dictionary) if dictionary is not None else encode_ordering(rows.column(name))
            for name, dictionary in zip(stream.ordering, ranks, strict=True)
        ),
        constant(0, rows.num_rows),
        pos,
    )
    values = rows.select(list(stream.column_names))
    summaries = events(values, version, deleted, stream.nulls, ranks)
    present, merged = merge(summaries, index.ids, index.count, stream.nulls)
    keys = rows.select([c.name for c in config.common_columns]).take(pa.array(index.first))
    return to_log(config, stream, keys, present, merged, sparse)


def write_file_group(
    table: TableHandle,
    stream: StreamSpec,
    partition: str,
    file_group: str,
    batch: Batch,
    instant: str,
    mark: Callable[[str], None],
) -> DataFile:
    """Write the events of one file group (already routed there) as its log file of `instant`.

    The Spark engine's write tasks receive their rows routed by the read tasks and call this directly.
    """
    config = table.config
    rows = precombine(config, stream, batch.rows, batch.pos, batch.deleted, table.sparse_column_versions)
    path = join(partition, log_name(file_group, instant, config.table.log_format))
    mark(path)
    written = write_table_file(table.storage, path, rows, config.table.log_format)
    routed = table.routing.buckets(partition)  # what `route` used: the same layout, travelling with the table
    return DataFile(
        path, partition, file_group, LOG, stream.name, rows.num_rows, written.size, written.checksum, buckets=routed
    )


def before_writing(table: TableHandle, stream: StreamSpec, instant: str, groups: list[tuple[str, str]]) -> None:
    """Call before writing a batch of file groups (every engine does): in optimistic mode with early conflict
    detection, records them and stops a doomed write (exit 3) before it writes any data."""
    concurrency = table.config.concurrency
    if not groups or concurrency.mode != ConcurrencyMode.OPTIMISTIC or not concurrency.early_conflict_detection:
        return
    expire = concurrency.heartbeat.expire_s
    conflicts.check_early(
        table.storage,
        instant,
        stream.name,
        groups,
        alive=lambda other: not heartbeats.is_expired(table.storage, other, expire),
    )


def write_file_groups(
    table: TableHandle,
    stream: StreamSpec,
    batch: Batch,
    instant: str,
    mark: Callable[[str], None],
) -> list[DataFile]:
    """Write one log file per touched file group; `mark` records each file before it is created."""

    def write_one(group: tuple[str, str, np.ndarray]) -> DataFile:
        partition, file_group, members = group
        rows = Batch(batch.rows.take(pa.array(members)), batch.pos[members], batch.deleted[members])
        return write_file_group(table, stream, partition, file_group, rows, instant, mark)

    groups = route(table.config, batch.rows, table.routing)
    before_writing(table, stream, instant, [(partition, file_group) for partition, file_group, _ in groups])
    if len(groups) <= 1:
        return [write_one(g) for g in groups]
    with ThreadPoolExecutor(max_workers=min(WRITE_THREADS, len(groups))) as pool:
        return list(pool.map(write_one, groups))


def deltacommit(
    table: TableHandle,
    stream: str,
    instant: str,
    files: Sequence[DataFile],
    rows: int,
    bad: Rejected,
    engine: str | None,
    **fields: Any,
) -> DeltaCommit:
    """The commit of one write of `stream`: its files, rows and bad rows, and the quarantine folder when anything was
    set aside (bad rows, or whole landing files that could not be read). `engine` is the job engine whose tasks wrote
    the files (None for `write`, which is no job). `fields` are the source's own (landing files read, Kafka offsets,
    a micro-batch, `extra`, ...). Every writer builds its commit here, `write` included."""
    return DeltaCommit(
        schema_version=table.schema_version,
        stream=stream,
        added=tuple(files),
        rows=rows,
        bad_rows=bad.count,
        quarantine=quarantine_folder(instant) if (bad.files or bad.rejected) else None,
        quarantine_files=tuple(bad.files),
        quarantined_files=tuple(bad.rejected),
        engine=engine,
        **fields,
    )


def write(
    table: TableHandle,
    stream_name: str,
    data: pa.Table | Batch,
    *,
    source: str = "input",
    metadata: dict[str, Any] | None = None,
    exclusive: bool = False,
    txn: Transaction | None = None,
) -> WriteResult:
    """Write one batch of one stream as one deltacommit; on any failure nothing becomes visible."""
    stream = table.config.stream(stream_name)
    own = txn is None
    if txn is None:
        table.require()  # a caller's transaction was claimed under a checked schema (it records that version)
        txn = Transaction.begin(
            table,
            Action.DELTACOMMIT,
            DeltaCommitPlan(stream=stream_name),
            exclusive_stream=stream_name if exclusive else None,
        )
    try:
        batch = (
            data
            if isinstance(data, Batch)
            else prepare(table.config, stream, data, source=source, fill=table.late_columns(stream_name))
        )
        bad = Rejected()
        bad.apply_policy(table.config.bad_rows, [batch.bad], table.storage, txn.time, "api", txn.mark)
        files = write_file_groups(table, stream, batch, txn.time, txn.mark)
        commit = deltacommit(
            table, stream_name, txn.time, files, batch.rows.num_rows, bad, None, extra=dict(metadata or {})
        )
        instant: Instant = txn.complete(commit)
    except BaseException:
        if own:
            txn.abort()
        raise
    return WriteResult(
        instant=instant.requested,
        completed=instant.completed,
        stream=stream_name,
        rows=batch.rows.num_rows,
        files=files,
        bad_rows=batch.bad_count,
        quarantine=bad.files[0] if bad.files else None,
    )
