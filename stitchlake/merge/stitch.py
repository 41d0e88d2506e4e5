"""Stitch streams into wide rows: merge every stream's summaries for a set of files, then lay them side by side.

This is the one function readers, compaction, erase and the incremental view all call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import ColumnSpec, StreamSpec, TableConfig
from stitchlake.merge import summary
from stitchlake.merge.keys import key_index
from stitchlake.merge.rules import StreamRows, concat, merge
from stitchlake.types import arrow_type, contiguous


@dataclass(frozen=True)
class LogInput:
    """One log file's rows and the completion time of the commit that wrote it."""

    stream: str
    table: pa.Table
    commit: int


@dataclass
class Merged:
    """Per-key merge result of a set of files: `keys` has one row per key id."""

    keys: pa.Table
    streams: dict[str, tuple[np.ndarray, StreamRows]]

    @property
    def count(self) -> int:
        return self.keys.num_rows

    def live(self) -> np.ndarray:
        """Key ids with at least one group that is not a tombstone: the keys in the table."""
        alive = np.zeros(self.count, dtype=bool)
        for present, rows in self.streams.values():
            alive[present[~rows.deleted]] = True
        return alive

    def stored(self) -> np.ndarray:
        """Key ids with any group, tombstones included: what compaction must keep."""
        seen = np.zeros(self.count, dtype=bool)
        for present, _rows in self.streams.values():
            seen[present] = True
        return seen


def merge_files(
    config: TableConfig,
    base: pa.Table | None,
    logs: Sequence[LogInput],
    streams: Sequence[str] | None = None,
    columns: dict[str, list[str]] | None = None,
    versions: bool = True,
) -> Merged:
    """Merge a base file (or none) and log files that belong to one set of keys.

    `streams` limits which streams are merged; `columns` limits, per stream, which value columns are carried
    (presence is always computed, so a key seen only by a pruned stream is still a row). `versions=False`
    (readers) leaves the merged versions out: enough for `to_rows`, not for `to_base` or `to_log`.
    """
    common = [c.name for c in config.common_columns]
    wanted = list(streams) if streams is not None else list(config.streams)
    sources = ([base] if base is not None else []) + [log.table for log in logs]
    if not sources:
        return Merged(keys=_empty_keys(config), streams={})
    key_table = pa.concat_tables([t.select(common) for t in sources])
    index = key_index(key_table.columns)
    offsets = np.cumsum([0, *[t.num_rows for t in sources]])

    merged: dict[str, tuple[np.ndarray, StreamRows]] = {}
    for name in wanted:
        stream = config.streams[name]
        keep = columns.get(name) if columns is not None else None
        parts: list[StreamRows] = []
        ids: list[np.ndarray] = []
        own_logs = [log.table for log in logs if log.stream == name and log.table.num_rows]
        with_base = base is not None and summary.presence_column(stream) in base.column_names
        ranks = summary.rank_dictionaries(stream, ([base] if with_base and base is not None else []) + own_logs)
        if base is not None and with_base:
            mask = summary_is_present(base, stream)
            if mask.any():
                parts.append(summary.from_table(stream, _filter(base, mask), None, keep, ranks))
                ids.append(index.ids[0 : base.num_rows][mask])
        for position, log in enumerate(logs, start=1 if base is not None else 0):
            if log.stream != name or log.table.num_rows == 0:
                continue
            parts.append(summary.from_table(stream, log.table, log.commit, keep, ranks))
            ids.append(index.ids[offsets[position] : offsets[position + 1]])
        if parts:
            merged[name] = merge(concat(parts), np.concatenate(ids), index.count, stream.nulls, versions)
    return Merged(keys=key_table.take(pa.array(index.first)), streams=merged)


def base_columns(config: TableConfig, columns: Sequence[str] | None = None) -> list[str]:
    """What `base_rows` reads of a base file: key, partition and wanted columns, and per stream the one meta
    column that says whether it holds a live group (no versions: nothing is merged)."""
    names = list(columns) if columns is not None else [c.name for c in config.all_columns()]
    out = [c.name for c in config.common_columns]
    for stream in config.streams.values():
        out += [c for c in stream.column_names if c in names]
        out.append(summary.meta_name(stream.name, "del"))
    return out


def base_rows(config: TableConfig, base: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """The wide rows of a base file read alone (read-optimized, or a slice with no logs yet).

    A base file already holds one merged row per key, so this is `to_rows(merge_files(base))` without the
    merge: keep keys with a live group; a stream's columns show its default (else null) where its group is
    absent or a tombstone. Same rows and types (in the file's order; the merge's order may differ).
    """
    names = list(columns) if columns is not None else [c.name for c in config.all_columns()]
    alive = np.zeros(base.num_rows, dtype=bool)
    shown: dict[str, np.ndarray] = {}
    for stream in config.streams.values():
        # In a base file `del` is null exactly where the stream has no group, so it alone says "live".
        deleted = base.column(summary.meta_name(stream.name, "del"))
        live = pc.fill_null(pc.invert(deleted), False).to_numpy(zero_copy_only=False)
        shown[stream.name] = live
        alive |= live
    if not alive.all():
        keep = pa.array(alive)
        base = base.filter(keep)
        shown = {name: live[alive] for name, live in shown.items()}
    out: dict[str, pa.Array | pa.ChunkedArray] = {}
    for spec in config.common_columns:
        if spec.name in names:
            out[spec.name] = base.column(spec.name)
    for stream in config.streams.values():
        hidden = ~shown[stream.name]
        for spec in stream.columns:
            if spec.name not in names:
                continue
            column = base.column(spec.name)
            if hidden.any():
                kind = arrow_type(spec.type)
                fill = pa.scalar(spec.default, kind) if spec.default is not None else pa.scalar(None, kind)
                column = pc.if_else(pa.array(hidden), fill, column)
            out[spec.name] = column
    return pa.table({name: out[name] for name in names if name in out})


def summary_is_present(table: pa.Table, stream: StreamSpec) -> np.ndarray:
    column = table.column(summary.presence_column(stream))
    return pc.is_valid(column).to_numpy(zero_copy_only=False)


def _filter(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table if mask.all() else table.filter(pa.array(mask))


def _empty_keys(config: TableConfig) -> pa.Table:
    return pa.table({c.name: pa.array([], arrow_type(c.type)) for c in config.common_columns})


def _positions(count: int, present: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """For each selected key id, its row in the stream's merged summaries, or -1."""
    where = np.full(count, -1, dtype=np.int64)
    where[present] = np.arange(len(present), dtype=np.int64)
    return where[selected]


def _value_column(spec: ColumnSpec, values: StreamRows | None, rows: np.ndarray) -> pa.Array:
    """A stream column for selected keys; groups never written (or tombstoned) read as the default."""
    kind = arrow_type(spec.type)
    absent = rows < 0
    if values is None or values.values.column(spec.name).num_chunks == 0:
        column = pa.nulls(len(rows), kind)
    else:
        column = values.column(spec.name, rows)
    if spec.default is not None and absent.any():
        column = pc.if_else(pa.array(absent), pa.scalar(spec.default, kind), column)
    return column


def to_rows(
    config: TableConfig,
    merged: Merged,
    columns: Sequence[str] | None = None,
    keys: np.ndarray | None = None,
) -> pa.Table:
    """User-visible wide rows for the live keys (or the given key ids), in key-id order."""
    selected = np.flatnonzero(merged.live()) if keys is None else keys
    names = list(columns) if columns is not None else [c.name for c in config.all_columns()]
    out: dict[str, pa.Array] = {}
    key_rows = merged.keys.take(pa.array(selected))
    for spec in config.common_columns:
        if spec.name in names:
            out[spec.name] = key_rows.column(spec.name).combine_chunks()
    for stream in config.streams.values():
        wanted = [c for c in stream.columns if c.name in names]
        if not wanted:
            continue
        rows = np.full(len(selected), -1, dtype=np.int64)
        values: StreamRows | None = None
        if stream.name in merged.streams:
            present, values = merged.streams[stream.name]
            rows = _positions(merged.count, present, selected)
            hit = rows >= 0
            rows[hit] = np.where(values.deleted[rows[hit]], -1, rows[hit])
        for spec in wanted:
            out[spec.name] = _value_column(spec, values, rows)
    return pa.table({name: out[name] for name in names if name in out})


def to_base(config: TableConfig, merged: Merged, sparse: bool, erase: np.ndarray | None = None) -> pa.Table:
    """A base file's rows: every key with any group (tombstones kept, so late events stay ignored).

    `sparse`: the table's format leaves a column's version null where it is the row's (`summary.to_columns`).
    `erase` marks key ids whose groups a key-level erase removes entirely.
    """
    keep = merged.stored()
    if erase is not None:
        keep &= ~erase
    selected = np.flatnonzero(keep)
    key_rows = merged.keys.take(pa.array(selected))
    order = key_order(config, key_rows)
    selected = selected[order.to_numpy()]
    key_rows = key_rows.take(order)
    out: dict[str, pa.Array] = {}
    for spec in config.common_columns:
        out[spec.name] = key_rows.column(spec.name).combine_chunks()
    for stream in config.streams.values():
        out |= _stream_block(stream, merged, selected, sparse)
    return marked_key_ordered(pa.table(out))


def _stream_block(stream: StreamSpec, merged: Merged, selected: np.ndarray, sparse: bool) -> dict[str, pa.Array]:
    """A stream's value and meta columns for the selected key ids (all null where it has no group)."""
    count = len(selected)
    fields = summary.meta_fields(stream, with_commit=True)
    if stream.name not in merged.streams:
        out = {c.name: pa.nulls(count, arrow_type(c.type)) for c in stream.columns}
        return out | {f.name: pa.nulls(count, f.type) for f in fields}
    present, rows = merged.streams[stream.name]
    where = _positions(merged.count, present, selected)
    absent = where < 0
    index = pa.array(where, mask=absent)
    out = {c.name: contiguous(pc.take(rows.values.column(c.name), index)) for c in stream.columns}
    meta = summary.to_columns(stream, rows, with_commit=True, sparse=sparse)
    return out | {name: contiguous(pc.take(column, index)) for name, column in meta.items()}


def to_log(
    config: TableConfig, stream: StreamSpec, keys: pa.Table, present: np.ndarray, rows: StreamRows, sparse: bool
) -> pa.Table:
    """A log file's rows: one stream's merged summaries, commit time left implicit (`sparse` as in `to_base`)."""
    out: dict[str, pa.Array] = {}
    key_rows = keys.take(pa.array(present))
    for spec in config.common_columns:
        out[spec.name] = key_rows.column(spec.name).combine_chunks()
    for spec in stream.columns:
        out[spec.name] = contiguous(rows.values.column(spec.name))
    out |= summary.to_columns(stream, rows, with_commit=False, sparse=sparse)
    log = pa.table(out)
    return marked_key_ordered(log.take(key_order(config, log)))


#: Footer metadata of a data file whose rows are in key order, one row per key (`to_base`, `to_log`): the JVM reader
#: merges a slice of such files window by window instead of holding it decoded whole (docs/spark-reader.md,
#: "Memory"). A file without it (written before, or a rescale's base of several sorted runs) is read whole.
KEY_ORDERED = {b"stitchlake.rows": b"key-ordered"}


def marked_key_ordered(rows: pa.Table) -> pa.Table:
    """`rows`, in key order with one row per key, marked so in the file's footer."""
    return rows.replace_schema_metadata(KEY_ORDERED)


def key_order(config: TableConfig, rows: pa.Table) -> pa.Array:
    """The order that puts a file's rows by key (key, then partition columns). Logs and bases are written so (a
    rescale's base file as one such run per old slice it takes rows from): a reader that meets the keys in rising
    runs can merge them as sorted runs (the JVM reader's key index does), and the key ranges in row-group
    statistics become narrow."""
    return pc.sort_indices(rows, sort_keys=[(spec.name, "ascending") for spec in config.common_columns])
