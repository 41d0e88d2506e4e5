"""Turn incoming rows into a stream's events: select, cast, reject bad rows, mark deletes.

The same function runs in-process and inside Spark executors, so both engines accept and reject exactly the
same rows with the same reasons. Schema problems (a missing column, a type that cannot be cast at all)
reject the whole input; bad *rows* (null key, null ordering, a value that does not parse) are split off
with their reason, and `bad_rows: fail | quarantine` decides what happens to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import ColumnSpec, StreamSpec, TableConfig
from stitchlake.errors import InputRejected
from stitchlake.io.casting import Inconvertible, cast_values, is_text
from stitchlake.io.json_records import WRONG_JSON_TYPE
from stitchlake.layout.partition import escape
from stitchlake.types import arrow_type, contiguous

REASON = "_reason"
#: Columns of a batch moved between processes (`Batch.to_table`): position and delete flag.
POS = "_sl_pos"
DELETED = "_sl_del"
SOURCE = "_source"
ROW = "_row"
#: A bad row's line in its landing file, for formats whose records are lines (JSON lines).
LINE = "_line"
UNPARSABLE = "unparsable value in "
NULL_KEY = "null key "
NULL_PARTITION = "null partition value "
EMPTY_PARTITION = "empty partition value "
LONG_PARTITION = "partition value too long "
NULL_ORDERING = "null ordering value "
NAN_ORDERING = "NaN ordering value "
#: Why a row is bad: one of these, then the column's name.
REASONS = (
    UNPARSABLE,
    WRONG_JSON_TYPE,
    NULL_KEY,
    NULL_PARTITION,
    EMPTY_PARTITION,
    LONG_PARTITION,
    NULL_ORDERING,
    NAN_ORDERING,
)
#: The longest folder name most file systems (and so a partition folder) allow.
MAX_FOLDER_NAME_BYTES = 255


@dataclass
class Batch:
    """Valid events of one stream: `rows` holds key, partition and stream columns in table types."""

    rows: pa.Table
    pos: np.ndarray
    deleted: np.ndarray
    bad: pa.Table | None = None

    @property
    def bad_count(self) -> int:
        return 0 if self.bad is None else self.bad.num_rows

    def to_table(self) -> pa.Table:
        """Good rows with their positions and delete flags as columns (to move a batch between processes)."""
        return self.rows.append_column(POS, pa.array(self.pos, pa.int64())).append_column(
            DELETED, pa.array(self.deleted, pa.bool_())
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> Batch:
        rows = table.drop_columns([POS, DELETED])
        pos = table.column(POS).to_numpy()
        deleted = table.column(DELETED).to_numpy(zero_copy_only=False)
        return cls(rows, pos, deleted)

    @classmethod
    def concat(cls, batches: list[Batch]) -> Batch:
        """Several files' events as one batch (their positions already tell them apart)."""
        if len(batches) == 1:
            return batches[0]
        bads = [b.bad for b in batches if b.bad is not None and b.bad.num_rows]
        return cls(
            rows=pa.concat_tables([b.rows for b in batches]),
            pos=np.concatenate([b.pos for b in batches]),
            deleted=np.concatenate([b.deleted for b in batches]),
            bad=pa.concat_tables(bads, promote_options="permissive") if bads else None,
        )


def required_columns(config: TableConfig, stream: StreamSpec) -> list[ColumnSpec]:
    return [*config.common_columns, *stream.columns]


def cast_column(column: pa.Array, spec: ColumnSpec, where: str) -> tuple[pa.Array, np.ndarray]:
    """Cast one source column to its table type. Returns the cast values and a mask of unparsable rows."""
    try:
        return cast_values(column, arrow_type(spec.type))
    except Inconvertible as exc:
        raise _inconvertible(exc.type, spec, where) from None


def _inconvertible(given: pa.DataType, spec: ColumnSpec, where: str) -> InputRejected:
    return InputRejected(
        f"{where}: column {spec.name} has type {given}, which cannot be converted to {spec.type}; the file "
        f"must hold {spec.type} values (or text that parses as {spec.type}) in {spec.name}",
        file=where,
        column=spec.name,
    )


def prepare(
    config: TableConfig,
    stream: StreamSpec,
    data: pa.Table,
    *,
    source: str = "input",
    pos: np.ndarray | None = None,
    fill: Mapping[str, Any] | None = None,
    judged: np.ndarray | None = None,
) -> Batch:
    """Validate and convert rows arriving for `stream`. `pos` orders rows within the batch (default: row order).

    `fill`: columns the input may lack, with the value its events then carry (None: null) — a JSON field missing
    from every line, or a column `stitch alter` added after the producer was written (its default).
    `judged`: reasons the reader already found rows bad for (None where a row is fine): a JSON value of the wrong
    type (`io.json_records.judge_json`); they come first, since the reader left such a value null.
    """
    specs = {c.name: c for c in required_columns(config, stream)}
    for name, value in (fill or {}).items():
        if name not in data.column_names and name in specs:  # a delete marker left out means no deletes
            kind = arrow_type(specs[name].type)
            data = data.append_column(name, pa.array([value] * data.num_rows, kind))
    missing = [c.name for c in required_columns(config, stream) if c.name not in data.column_names]
    if missing:
        raise InputRejected(
            f"{source}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"needed by stream {stream.name} (found: {', '.join(data.column_names) or 'none'}); every input of the "
            "stream must have its key, partition and stream columns (only columns `stitch alter` added may be absent)",
            file=source,
            column=missing[0],
        )
    read = [c.name for c in required_columns(config, stream)] + ([stream.deletes.column] if stream.deletes else [])
    repeated = [name for name in read if data.column_names.count(name) > 1]
    if repeated:
        raise InputRejected(
            f"{source}: column {repeated[0]} appears {data.column_names.count(repeated[0])} times, so which one "
            "holds the values is unclear; each column must be named once",
            file=source,
            column=repeated[0],
        )
    length = data.num_rows
    deleted = np.zeros(length, dtype=bool)
    if stream.deletes and stream.deletes.column in data.column_names:
        marker = contiguous(data.column(stream.deletes.column))
        as_text = marker if is_text(marker.type) else pc.cast(marker, pa.string())
        deleted = pc.fill_null(pc.is_in(as_text, pa.array(list(stream.deletes.values))), False).to_numpy(
            zero_copy_only=False
        )
    # A delete is its key, partition and version: the values it carries never count (design.md §2), so one that
    # cannot be read there is left null instead of rejecting the delete.
    ignored = set(stream.column_names) - set(stream.ordering)
    reasons = np.full(length, None, dtype=object) if judged is None else np.array(judged, dtype=object)
    if judged is not None and deleted.any():
        dropped = {f"{prefix}{name}" for prefix in (WRONG_JSON_TYPE, UNPARSABLE) for name in ignored}
        reasons[deleted & np.isin(reasons, list(dropped))] = None
    columns: dict[str, pa.Array] = {}
    for spec in required_columns(config, stream):
        _require_utf8(data.column(spec.name), spec.name, source)
        cast, failed = cast_column(contiguous(data.column(spec.name)), spec, source)
        columns[spec.name] = cast
        _flag(reasons, failed & ~deleted if spec.name in ignored else failed, f"{UNPARSABLE}{spec.name}")
    for spec in config.table.key:
        _flag(reasons, _nulls(columns[spec.name]), f"{NULL_KEY}{spec.name}")
    for spec in config.table.partition_by:
        _flag(reasons, _nulls(columns[spec.name]), f"{NULL_PARTITION}{spec.name}")
        if spec.type == "string":
            empty = pc.fill_null(pc.equal(columns[spec.name], ""), False).to_numpy(zero_copy_only=False)
            _flag(reasons, empty, f"{EMPTY_PARTITION}{spec.name}")
            _flag(reasons, _too_long(spec.name, columns[spec.name]), f"{LONG_PARTITION}{spec.name}")
    for name in stream.ordering:
        _flag(reasons, _nulls(columns[name]), f"{NULL_ORDERING}{name}")
        if pa.types.is_floating(columns[name].type):  # NaN is unordered: as a version it would win forever
            _flag(
                reasons,
                pc.fill_null(pc.is_nan(columns[name]), False).to_numpy(zero_copy_only=False),
                f"{NAN_ORDERING}{name}",
            )

    positions = np.arange(length, dtype=np.int64) if pos is None else np.asarray(pos, dtype=np.int64)
    rows = pa.table(columns)
    bad_mask = reasons != None  # noqa: E711 - element-wise comparison on an object array
    if not bad_mask.any():
        return Batch(rows=rows, pos=positions, deleted=deleted)
    good = pa.array(~bad_mask)
    bad = _bad_rows(data, bad_mask, reasons, source)
    return Batch(rows=rows.filter(good), pos=positions[~bad_mask], deleted=deleted[~bad_mask], bad=bad)


def _require_utf8(column: pa.ChunkedArray | pa.Array, name: str, source: str) -> None:
    """Refuse text that is not UTF-8 (Arrow builds such strings without checking): stored, it would make every
    later read of the table fail."""
    if pa.types.is_dictionary(column.type):  # categorical text: its entries are the text
        column = column.dictionary if isinstance(column, pa.DictionaryArray) else column.combine_chunks().dictionary
    if not is_text(column.type):
        return
    try:
        column.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise InputRejected(
            f"{source}: column {name} holds text that is not UTF-8 ({exc}); write the input as UTF-8",
            file=source,
            column=name,
        ) from None


def column_of(reason: str) -> str | None:
    """The column a bad row's reason names (None for a reason of another kind)."""
    for prefix in REASONS:
        if reason.startswith(prefix):
            return reason[len(prefix) :]
    return None


def _too_long(name: str, column: pa.Array) -> np.ndarray:
    """Values whose partition folder name (`name=<escaped value>`) is longer than file systems allow."""
    unique = pc.unique(column).drop_null()
    longest = MAX_FOLDER_NAME_BYTES - len(name.encode()) - 1
    if not len(unique) or pc.max(pc.binary_length(unique)).as_py() * 3 <= longest:  # escaping at most triples
        return np.zeros(len(column), dtype=bool)
    too_long = [v for v in unique.to_pylist() if len(escape(v).encode()) > longest]
    if not too_long:
        return np.zeros(len(column), dtype=bool)
    return pc.fill_null(pc.is_in(column, pa.array(too_long, column.type)), False).to_numpy(zero_copy_only=False)


def _nulls(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.zeros(len(column), dtype=bool)
    return pc.is_null(column).to_numpy(zero_copy_only=False)


def _flag(reasons: np.ndarray, mask: np.ndarray, reason: str) -> None:
    """Record the first reason a row is bad."""
    if mask.any():
        fresh = mask & (reasons == None)  # noqa: E711
        reasons[fresh] = reason


def _bad_rows(data: pa.Table, mask: np.ndarray, reasons: np.ndarray, source: str) -> pa.Table:
    """The rejected rows as text, with why and where they came from (for quarantine and error messages)."""
    rows = np.flatnonzero(mask)
    picked = data.take(pa.array(rows))
    columns = {}
    for index, name in enumerate(picked.column_names):  # by position: other columns may repeat a name
        column = contiguous(picked.column(index))
        try:
            columns[name] = pc.cast(column, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            columns[name] = pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())
    columns[REASON] = pa.array(list(reasons[rows]), pa.string())
    columns[SOURCE] = pa.array([source] * len(rows), pa.string())
    columns[ROW] = pa.array(rows, pa.int64())
    return pa.table(columns)
