"""JSON lines judged record by record: each value checked against the JSON type its column takes, so one bad value
makes one bad row (with its reason) instead of refusing the whole file. The JSON landing reader's `judge`."""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stitchlake.errors import InputRejected
from stitchlake.io.casting import Inconvertible, cast_values


@dataclass(frozen=True)
class Judged:
    """A file's records as rows, judged one by one: a value of the wrong JSON type is null in `table`, with the
    row's reason in `reasons` (None where the row is fine) and the value as JSON text in `shown`, so the bad row
    quarantined shows what was written. `lines` gives each row's line in the file (computed when asked: only a
    file with bad rows needs it)."""

    table: pa.Table
    reasons: np.ndarray | None = None
    shown: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)
    lines: Callable[[], np.ndarray] | None = None


JSON_SPACE = re.compile(r"\s*")


def skip_space(text: str, at: int) -> int:
    match = JSON_SPACE.match(text, at)
    return match.end() if match else at


#: Why a JSON value is a bad row: its JSON type is not one its column takes (a prefix, then the column's name;
#: `writing.batch` counts it among its reasons).
WRONG_JSON_TYPE = "wrong JSON type in "
#: A value of the right JSON type that cannot be the column's value (a whole number past 64 bits).
UNFIT_JSON_VALUE = "unparsable value in "
#: The strings a double column takes for the values JSON has no number for (what `--json` writes).
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_INT64 = (-(2**63), 2**63 - 1)


def _json_kind(kind: pa.DataType | None) -> str:
    """What JSON a column takes, by its table type: the JSON type stitch's own `--json` writes for it (a decimal
    also as a number)."""
    if kind is None:
        return "scalar"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "number"
    if pa.types.is_decimal(kind):
        return "decimal"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return "array"
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return "object"
    return "string"  # text, binary, date, timestamp


#: The type pyarrow's reader reads each kind as (None: kept as the table type itself).
_READ_AS: dict[str, pa.DataType | None] = {
    "scalar": pa.string(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
    "array": None,
    "object": None,
}


def _fast_type(kind: pa.DataType | None) -> pa.DataType | None:
    """The type pyarrow's JSON reader is told to read a column as: it refuses the file at a value of any other
    JSON type, so a file it reads has no wrong value (None: it cannot read the kind; judge every record)."""
    json_kind = _json_kind(kind)
    if json_kind == "decimal":
        assert isinstance(kind, pa.Decimal128Type | pa.Decimal256Type)
        return pa.decimal128(38, kind.scale)  # exact, as text; `prepare` checks the precision
    if json_kind in ("array", "object"):
        assert kind is not None
        return None if _has_map(kind) else _wide_floats(kind)
    return _READ_AS[json_kind]


def _wide_floats(kind: pa.DataType) -> pa.DataType:
    """`kind` with its float leaves read as doubles: pyarrow's reader would take 1e300 into a float leaf as
    infinity, where the cast to the table type (`conform`) finds it out of range."""
    if pa.types.is_floating(kind):
        return pa.float64()
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_wide_floats(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_wide_floats(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_wide_floats(f.type)) for f in kind])
    return kind


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


def judge_json(data: bytes, types: Mapping[str, pa.DataType | None], where: str) -> Judged:
    """JSON lines judged record by record: each column takes the JSON type its table type has (a string column
    a JSON string, a boolean column true or false, a number column a number, a double also "NaN", "Infinity" and
    "-Infinity", a decimal a number or a string, read exactly), and a value of another JSON type makes its row a
    bad row (WRONG_JSON_TYPE), the file's other rows good.

    The common case costs one pyarrow read: told each column's type, pyarrow refuses a file holding any other
    JSON type, and a file it reads has no wrong value. Only a refused file is parsed record by record."""
    import pyarrow.json as pajson

    read_as = {name: _fast_type(kind) for name, kind in types.items()}
    if all(kind is not None for kind in read_as.values()):
        schema = pa.schema([(name, kind) for name, kind in read_as.items()])
        options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        try:
            table = pajson.read_json(pa.BufferReader(data), parse_options=options)
            for name, kind in types.items():  # nested columns read with wider leaves, cast to their own
                if kind is not None and read_as[name] != kind and pa.types.is_nested(kind):
                    column = conform(table.column(name).combine_chunks(), kind)
                    table = table.set_column(table.schema.get_field_index(name), name, column)
        except _UNFIT:
            pass  # a value pyarrow refused, or one its type cannot hold: judged record by record
        else:
            return Judged(table)  # `read_landing_rows` tells lines when asked, without holding the bytes
    return _judge_records(data, types, where)


def _judge_records(data: bytes, types: Mapping[str, pa.DataType | None], where: str) -> Judged:
    """`judge_json` record by record, for a file pyarrow refused (or one with a map column)."""
    records = _records(data, where)
    lines = np.array(records.lines, dtype=np.int64)
    return dataclasses.replace(judge_records(records.values, types), lines=lambda: lines)


def judge_records(records: Sequence[Mapping[str, Any]], types: Mapping[str, pa.DataType | None]) -> Judged:
    """Decoded JSON objects judged one by one against the columns' table types (`judge_json` says how), for any
    input whose records are JSON objects (numbers with a point best decoded as Decimal, to be read exactly)."""
    kinds = {name: _json_kind(kind) for name, kind in types.items()}
    values: dict[str, list[Any]] = {name: [] for name in types}
    reasons: list[str | None] = []
    shown: dict[str, dict[int, str]] = {}
    for row, record in enumerate(records):
        reason = None
        for name, json_kind in kinds.items():
            given = record.get(name)
            value, problem = _json_value(given, json_kind)
            values[name].append(value)
            if problem is not None:
                shown.setdefault(name, {})[row] = _as_json(given)
                reason = reason or f"{problem}{name}"
        reasons.append(reason)
    columns = {}
    for name, kind in types.items():
        column, unfit = _json_array(values[name], kinds[name], kind)
        columns[name] = column
        for row in unfit:
            shown.setdefault(name, {})[row] = _as_json(records[row].get(name))
            reasons[row] = reasons[row] or f"{UNFIT_JSON_VALUE}{name}"
    flagged = np.array(reasons, dtype=object) if any(r is not None for r in reasons) else None
    return Judged(pa.table(columns) if columns else pa.table({}), flagged, shown)


@dataclass(frozen=True)
class _Records:
    values: list[dict[str, Any]]
    #: The line each record starts on (1 for the first line).
    lines: list[int]


def _records(data: bytes, where: str) -> _Records:
    """A JSON-lines file's objects and their line numbers, in the order pyarrow reads them (whitespace-separated
    values; a leading byte-order mark is not a record). Numbers with a point or an exponent are read exactly
    (Decimal) until a column says what it wants; a value that is not JSON, or not an object, refuses the file."""
    text = data.decode("utf-8-sig")
    decoder = json.JSONDecoder(parse_float=decimal.Decimal)
    values: list[dict[str, Any]] = []
    lines: list[int] = []
    line, seen = 1, 0
    at = skip_space(text, 0)
    while at < len(text):
        line += text.count("\n", seen, at)
        seen = at
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:  # named by the line the record starts on (a cut record ends later)
            raise InputRejected(f"{where}: line {line} is not valid JSON ({exc.msg})", file=where) from None
        if not isinstance(record, dict):
            raise InputRejected(f"{where}: line {line} is not a JSON object", file=where)
        values.append(record)
        lines.append(line)
        at = skip_space(text, at)
    return _Records(values, lines)


def record_lines(data: bytes, where: str, rows: int) -> np.ndarray:
    """The line each of a file's `rows` records starts on (a file pyarrow read: asked only when it has bad rows)."""
    lines = _records(data, where).lines
    if len(lines) != rows:  # never seen: the reader and this scan disagree on what a record is
        raise InputRejected(f"{where}: {len(lines)} JSON values, but the reader found {rows} records", file=where)
    return np.array(lines, dtype=np.int64)


def _json_value(value: Any, json_kind: str) -> tuple[Any, str | None]:
    """A record's value for a column of `json_kind`, as the column reads it, or None and why it is a bad row."""
    if value is None:
        return None, None
    is_number = isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)
    if json_kind == "string":
        return (value, None) if isinstance(value, str) else (None, WRONG_JSON_TYPE)
    if json_kind == "boolean":
        return (value, None) if isinstance(value, bool) else (None, WRONG_JSON_TYPE)
    if json_kind == "integer":
        if not is_number:
            return None, WRONG_JSON_TYPE
        if isinstance(value, decimal.Decimal) and (not value.is_finite() or value.adjusted() > 18):
            return None, UNFIT_JSON_VALUE  # past any int64, told without building a million-digit int
        if isinstance(value, float) or (isinstance(value, decimal.Decimal) and value != value.to_integral_value()):
            return None, UNFIT_JSON_VALUE  # 5.5 (or a bare NaN) is a number, but no whole one
        whole = int(value)
        return (whole, None) if _INT64[0] <= whole <= _INT64[1] else (None, UNFIT_JSON_VALUE)
    if json_kind == "number":
        if is_number:
            try:
                number = float(value)
            except OverflowError:  # a whole number past any double
                return None, UNFIT_JSON_VALUE
            if math.isinf(number) and not isinstance(value, float):  # 1e400: past any double (a bare Infinity
                return None, UNFIT_JSON_VALUE  # token is read as one already, and stands)
            return number, None
        return (NON_FINITE[value], None) if isinstance(value, str) and value in NON_FINITE else (None, WRONG_JSON_TYPE)
    if json_kind == "decimal":
        if isinstance(value, str):
            return value, None
        if isinstance(value, decimal.Decimal):
            return format(value, "f"), None  # exact: the number as written
        if is_number and not isinstance(value, float):
            return str(value), None
        return None, UNFIT_JSON_VALUE if is_number else WRONG_JSON_TYPE  # a bare NaN, or not a number
    if json_kind == "array":  # leaves are judged as the column is built (`typed_column`)
        return (value, None) if isinstance(value, list) else (None, WRONG_JSON_TYPE)
    if json_kind == "object":
        return (value, None) if isinstance(value, dict) else (None, WRONG_JSON_TYPE)
    # a delete marker: any value, compared as text
    return (value if isinstance(value, str) else _as_json(value)), None


def _as_json(value: Any) -> str:
    """A value as the JSON text it was written as (numbers exactly), to show in a bad row."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


#: The column each kind is built as from judged values (None: the table type).
_BUILD_AS: dict[str, pa.DataType | None] = {
    "scalar": pa.string(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "decimal": pa.string(),  # exact text: `prepare` parses it, a digit past the scale is a bad row
    "string": pa.string(),
    "array": None,
    "object": None,
}


def _shaped(value: Any, kind: pa.DataType) -> bool:
    """Whether a nested value has the shape of `kind` at every level: a list where it says list, an object where
    it says struct or map (pyarrow takes any text for a list of characters)."""
    if value is None:
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return isinstance(value, list | tuple) and all(_shaped(v, kind.value_type) for v in value)
    if pa.types.is_map(kind):
        if isinstance(value, dict):
            return all(_shaped(v, kind.item_type) for v in value.values())
        pairs = value if isinstance(value, list) else None  # [(key, value), ...], as pyarrow takes a map too
        return pairs is not None and all(
            isinstance(p, list | tuple) and len(p) == 2 and _shaped(p[1], kind.item_type) for p in pairs
        )
    if pa.types.is_struct(kind):
        return isinstance(value, dict) and all(
            _shaped(value.get(kind.field(i).name), kind.field(i).type) for i in range(kind.num_fields)
        )
    return not isinstance(value, list | tuple | dict)


def _json_array(values: list[Any], json_kind: str, kind: pa.DataType | None) -> tuple[pa.Array, list[int]]:
    """A judged column, and the rows whose nested value does not fit the column's type (["a"] in array<int>)."""
    return typed_column(values, _BUILD_AS[json_kind] or kind)


#: What building or casting a value of the wrong kind raises.
_UNFIT = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError, ValueError)


def typed_column(values: list[Any], build: pa.DataType | None, judge: bool = True) -> tuple[pa.Array, list[int]]:
    """`values` as a column of type `build`, and the rows whose value does not fit it (null there): one bad value
    makes one bad row, not a column that cannot be built. `judge`: the values are decoded JSON, whose nested
    leaves are judged as top-level JSON values are (Avro's come typed by their schema)."""
    if build is not None and pa.types.is_nested(build):
        return _nested_column(values, build, judge)
    try:
        return pa.array(values, build), []
    except _UNFIT:
        pass
    kept: list[Any] = []
    unfit: list[int] = []
    for row, value in enumerate(values):
        try:
            pa.array([value], build)
        except _UNFIT:
            unfit.append(row)
            value = None
        kept.append(value)
    return pa.array(kept, build), unfit


def _nested_column(values: list[Any], kind: pa.DataType, judge: bool) -> tuple[pa.Array, list[int]]:
    """A nested column as pyarrow infers it from values whose leaves were judged as top-level JSON values are
    (`_entries`), then cast safely to `kind` level by level (`conform`): building straight as `kind` would take
    1.5 as 1 and no date from text. A value that does not fit is a bad row at any depth, its rows found by halves
    (a file with one bad value among a million is not built row by row)."""
    unfit = [row for row, value in enumerate(values) if not _shaped(value, kind)]
    dropped = set(unfit)
    column, misfits = _built([None if row in dropped else value for row, value in enumerate(values)], kind, 0, judge)
    return column, sorted([*unfit, *misfits])


def _built(values: list[Any], kind: pa.DataType, first: int, judge: bool) -> tuple[pa.Array, list[int]]:
    try:
        return conform(pa.array([_entries(value, kind, judge) for value in values]), kind), []
    except _UNFIT:
        if len(values) == 1:
            return pa.nulls(1, kind), [first]
    half = len(values) // 2
    head, head_unfit = _built(values[:half], kind, first, judge)
    tail, tail_unfit = _built(values[half:], kind, first + half, judge)
    return pa.concat_arrays([head, tail]), [*head_unfit, *tail_unfit]


def _entries(value: Any, kind: pa.DataType, judge: bool) -> Any:
    """A nested value ready for pyarrow's inference: maps (objects) as their entries (inference makes a struct of
    an object, and no cast turns a struct into a map), fields the struct does not declare left out, and with
    `judge` each leaf of the JSON type its column takes (as a top-level value: no 1 for true, no "1" for a
    number; numbers exact)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        pairs = value.items() if isinstance(value, dict) else value
        return [{"key": k, "value": _entries(v, kind.item_type, judge)} for k, v in pairs]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_entries(v, kind.value_type, judge) for v in value]
    if pa.types.is_struct(kind):
        fields = {kind.field(i).name: kind.field(i).type for i in range(kind.num_fields)}
        return {k: _entries(v, fields[k], judge) for k, v in value.items() if k in fields}
    if not judge:
        return value
    judged, problem = _json_value(value, _json_kind(kind))
    if problem is not None:
        raise ValueError(f"{problem}a nested {kind}")
    return judged


def conform(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """An inferred array cast safely to `kind`, level by level (maps arrive as lists of key/value structs)."""
    import pyarrow.compute as pc

    if array.type == kind:
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), kind)
    if array.offset:
        array = pa.concat_arrays([array])  # offsets and children from the start
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            raise pa.ArrowInvalid(f"{array.type} is no {kind}")
        offsets = _offsets_with_nulls(array)
        if pa.types.is_map(kind):
            entries = array.values
            if pa.types.is_null(entries.type):  # every map empty (or null): no entry to infer a type from
                entries = pa.StructArray.from_arrays(
                    [pa.nulls(len(entries), kind.key_type), pa.nulls(len(entries), kind.item_type)], ["key", "value"]
                )
            if not pa.types.is_struct(entries.type):
                raise pa.ArrowInvalid(f"{array.type} is no {kind}")
            keys = conform(entries.field("key"), kind.key_type)
            if keys.null_count:
                raise pa.ArrowInvalid("a map key is null")
            if not pa.types.is_string(kind.key_type) and _repeated_keys(array, keys):
                raise pa.ArrowInvalid("two keys of a map are one value of its key type")  # "yes" and "true"
            return pa.MapArray.from_arrays(offsets, keys, conform(entries.field("value"), kind.item_type), type=kind)
        items = conform(array.values, kind.value_type)
        if pa.types.is_large_list(kind):
            return pa.LargeListArray.from_arrays(pc.cast(offsets, pa.int64()), items, type=kind)
        return pa.ListArray.from_arrays(offsets, items, type=kind)
    if pa.types.is_struct(kind):
        if not pa.types.is_struct(array.type):
            raise pa.ArrowInvalid(f"{array.type} is no {kind}")
        have = {array.type.field(i).name for i in range(array.type.num_fields)}
        children = [
            conform(array.field(f.name), f.type) if f.name in have else pa.nulls(len(array), f.type) for f in kind
        ]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=array.is_null())
    if pa.types.is_nested(array.type):
        raise pa.ArrowInvalid(f"{array.type} is no {kind}")
    try:
        cast, failed = cast_values(array, kind)  # a leaf reads as a top-level value of its type does
    except Inconvertible as exc:
        raise pa.ArrowInvalid(str(exc)) from None
    if failed.any():
        raise pa.ArrowInvalid(f"a value that is no {kind}")
    return cast


def _repeated_keys(maps: pa.Array, keys: pa.Array) -> bool:
    """Whether some map holds one key twice once its keys are cast (distinct JSON texts of one value)."""
    import pyarrow.compute as pc

    entries = pa.table({"map": pc.list_parent_indices(maps), "key": keys})
    return entries.group_by(["map", "key"]).aggregate([]).num_rows < len(keys)


def _offsets_with_nulls(array: pa.Array) -> pa.Array:
    """A list array's offsets, null where the list is null (how `from_arrays` is told which lists are null)."""
    offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int32)
    nulls = np.append(array.is_null().to_numpy(zero_copy_only=False), False)
    return pa.array(offsets, pa.int32(), mask=nulls)
