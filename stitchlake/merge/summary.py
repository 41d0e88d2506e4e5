"""How stream summaries are stored as columns (design.md §3: base files carry the winning versions).

Meta columns are named `_sl__<stream>__<field>` — plain identifiers, so Parquet, Avro and Spark all accept
them. Log files hold one commit of one stream, so their commit time is implicit (the instant's completion
time, filled in on read); base files carry it explicitly because they mix many commits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import StreamSpec
from stitchlake.merge.rules import IGNORE, StreamRows
from stitchlake.merge.version import Ranks, Version, constant, encode_rank, is_valid, rank_dictionary
from stitchlake.types import arrow_type, orders_by_rank

PREFIX = "_sl__"


def meta_name(stream: str, field: str) -> str:
    return f"{PREFIX}{stream}__{field}"


def is_meta(name: str) -> bool:
    return name.startswith(PREFIX)


def is_delete_flag(name: str) -> bool:
    """A stream's delete flag (`meta_name(stream, "del")`): whether the row's key is deleted in that stream."""
    return is_meta(name) and name.endswith("__del")


def is_position(name: str) -> bool:
    """A meta column of in-batch positions (the row's, the tombstone's or a column's version)."""
    return is_meta(name) and name.endswith("__pos")


def _version_fields(prefix: str, ordering: int, with_commit: bool) -> list[str]:
    fields = [f"{prefix}o{i}" for i in range(ordering)]
    if with_commit:
        fields.append(f"{prefix}commit")
    fields.append(f"{prefix}pos")
    return fields


def ordering_type(stream: StreamSpec, index: int) -> pa.DataType:
    """What a file stores for ordering component `index`: an int64 image, or the value itself (ranked types)."""
    kind = stream.column(stream.ordering[index]).type
    return arrow_type(kind) if orders_by_rank(kind) else pa.int64()


def _field_type(stream: StreamSpec, name: str) -> pa.DataType:
    if name == "del":
        return pa.bool_()
    last = name.rsplit("__", 1)[-1]
    if last.startswith("o") and last[1:].isdigit():
        return ordering_type(stream, int(last[1:]))
    return pa.int64()


def meta_fields(stream: StreamSpec, with_commit: bool, columns: list[str] | None = None) -> list[pa.Field]:
    """The meta columns a file holds for a stream, in order (`columns` limits the per-column versions)."""
    k = len(stream.ordering)
    names = [*_version_fields("", k, with_commit), "del"]
    if stream.nulls == IGNORE:
        names += _version_fields("t__", k, with_commit)
        for column in stream.column_names:
            if columns is None or column in columns:
                names += _version_fields(f"c__{column}__", k, with_commit)
    return [pa.field(meta_name(stream.name, n), _field_type(stream, n)) for n in names]


def version_added_columns(stream: StreamSpec, table: pa.Table, added: list[str], with_commit: bool) -> pa.Table:
    """`nulls: ignore` only: columns a file predates carry, as their version, the version of the row's group.

    Every event the file summarises held the column's default (or null), so the row's own version is the version
    its value came from — exactly what the column would carry had it existed when the file was written.
    """
    if stream.nulls != IGNORE:
        return table
    k = len(stream.ordering)
    own = _version_fields("", k, with_commit)
    for column in added:
        for source, target in zip(own, _version_fields(f"c__{column}__", k, with_commit), strict=True):
            name = meta_name(stream.name, target)
            if name in table.column_names:
                values = table.column(meta_name(stream.name, source))
                valid = is_valid(table.column(column))  # null values carry no version
                masked = pc.if_else(pa.array(valid), values, pa.nulls(len(values), values.type))
                table = table.set_column(table.column_names.index(name), name, masked)
    return table


def rank_dictionaries(stream: StreamSpec, tables: Sequence[pa.Table]) -> Ranks:
    """Per ordering component, the sorted distinct values every version column of `tables` holds for it (None
    for an int64 image): what one merge ranks them against, so all its parts compare alike."""
    out: list[pa.Array | None] = []
    prefix = meta_name(stream.name, "")
    for index in range(len(stream.ordering)):
        kind = ordering_type(stream, index)
        if pa.types.is_int64(kind):
            out.append(None)
            continue
        suffix = f"o{index}"
        arrays = [
            table.column(name)
            for table in tables
            for name in table.column_names
            if name.startswith(prefix)
            and (name[len(prefix) :] in (suffix, f"t__{suffix}") or _is_column_version(name[len(prefix) :], suffix))
        ]
        out.append(rank_dictionary(arrays) if arrays else pa.array([], kind))
    return tuple(out)


def _is_column_version(rest: str, suffix: str) -> bool:
    return rest.startswith("c__") and rest.endswith(f"__{suffix}")


def presence_column(stream: StreamSpec) -> str:
    """A column that is non-null exactly on rows where the stream has a group."""
    return meta_name(stream.name, "pos")


def _arrow_version(
    stream: StreamSpec, prefix: str, version: Version, with_commit: bool, mask: np.ndarray | None, ranks: Ranks
) -> dict[str, pa.Array]:
    k = len(stream.ordering)
    names = _version_fields(prefix, k, True)
    out: dict[str, pa.Array] = {}
    for index, (name, component) in enumerate(zip(names, version, strict=True)):
        if name.endswith("commit") and not with_commit:
            continue
        dictionary = ranks[index] if index < k and index < len(ranks) else None
        if dictionary is not None:  # a ranked component: store the value itself, never its merge-local rank
            out[meta_name(stream.name, name)] = dictionary.take(pa.array(component, type=pa.int64(), mask=mask))
        else:
            out[meta_name(stream.name, name)] = pa.array(component, type=pa.int64(), mask=mask)
    return out


def to_columns(stream: StreamSpec, rows: StreamRows, with_commit: bool, sparse: bool) -> dict[str, pa.Array]:
    """Meta columns for summaries (values are handled by the caller).

    `sparse` (tables of format version 2): a column's version is written only where it is not the row's own, which
    it nearly always is; readers take the row's version where it is null (`column_version`). Format 1 writes it
    wherever the value is not null.
    """
    out = _arrow_version(stream, "", rows.version, with_commit, None, rows.ranks)
    out[meta_name(stream.name, "del")] = pa.array(rows.deleted, type=pa.bool_())
    if stream.nulls == IGNORE:
        assert rows.tomb is not None and rows.has_tomb is not None and rows.col_versions is not None
        out |= _arrow_version(stream, "t__", rows.tomb, with_commit, ~rows.has_tomb, rows.ranks)
        for name in stream.column_names:
            version = rows.col_versions[name]
            hidden = ~is_valid(rows.values.column(name))
            if sparse:
                hidden |= _same(version, rows.version)
            out |= _arrow_version(stream, f"c__{name}__", version, with_commit, hidden, rows.ranks)
    return _ordered(stream, out, with_commit)


def _same(a: Version, b: Version) -> np.ndarray:
    """Per row, whether two versions are equal in every component (a version has at least commit and pos)."""
    same = np.ones(len(a[0]), dtype=bool)
    if a is not b:
        for x, y in zip(a, b, strict=True):
            same &= x == y
    return same


def _ordered(stream: StreamSpec, columns: dict[str, pa.Array], with_commit: bool) -> dict[str, pa.Array]:
    return {f.name: columns[f.name] for f in meta_fields(stream, with_commit)}


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if column.null_count:
        column = pc.fill_null(column, 0)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _read_version(stream: StreamSpec, table: pa.Table, prefix: str, commit: int | None, ranks: Ranks) -> Version:
    k = len(stream.ordering)
    parts: list[np.ndarray] = []
    for index, name in enumerate(_version_fields(prefix, k, True)):
        if name.endswith("commit") and commit is not None:
            parts.append(constant(commit, table.num_rows))
            continue
        column = table.column(meta_name(stream.name, name))
        dictionary = ranks[index] if index < k and index < len(ranks) else None
        parts.append(encode_rank(column, dictionary) if dictionary is not None else _numpy(column))
    return tuple(parts)


def from_table(
    stream: StreamSpec, table: pa.Table, commit: int | None, columns: list[str] | None = None, ranks: Ranks = ()
) -> StreamRows:
    """Summaries of `stream` held in `table` (only rows where the stream has a group).

    `commit` is the completion time for a log file; None means the table is a base file carrying its own.
    `columns` limits the value columns carried (presence and versions are always read). `ranks` are the merge's
    dictionaries for ranked ordering columns (`rank_dictionaries` over every file of the merge).
    """
    names = list(stream.column_names) if columns is None else [c for c in stream.column_names if c in columns]
    values = table.select(names)
    deleted = table.column(meta_name(stream.name, "del"))
    rows = StreamRows(
        version=_read_version(stream, table, "", commit, ranks),
        deleted=pc.fill_null(deleted, False).to_numpy(zero_copy_only=False),
        values=values,
        ranks=ranks,
    )
    if stream.nulls == IGNORE:
        rows.tomb = _read_version(stream, table, "t__", commit, ranks)
        rows.has_tomb = is_valid(table.column(meta_name(stream.name, "t__pos")))
        rows.col_versions = {name: column_version(stream, table, name, commit, ranks, rows.version) for name in names}
    return rows


def column_version(
    stream: StreamSpec, table: pa.Table, name: str, commit: int | None, ranks: Ranks, own: Version
) -> Version:
    """The version a column's value came from: its own columns where they hold one, else the row's version `own`
    (a sparse file leaves it null there; where the value itself is null, the version is never used). A file whose
    column versions are all null returns `own` itself, which the merge's fast path recognises."""
    positions = table.column(meta_name(stream.name, f"c__{name}__pos"))
    if positions.null_count == len(positions):
        return own
    version = _read_version(stream, table, f"c__{name}__", commit, ranks)
    if not positions.null_count:
        return version
    missing = ~is_valid(positions) & is_valid(table.column(name))  # format 1 has none: its nulls are the values'
    if not missing.any():
        return version
    return tuple(np.where(missing, mine, theirs) for mine, theirs in zip(own, version, strict=True))
