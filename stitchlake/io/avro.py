"""Arrow <-> Avro (fastavro) for log blocks written with `log_format: avro` and for Avro landing files.

Avro is row oriented, so conversion goes through Python values. Dates and timestamps are written as their raw
integers (fastavro passes ints through its logical-type writers) to keep the row loop cheap; reading gets
Python objects back, which Arrow's date/timestamp builders take as they are. Nested types map to Avro arrays and
records; a map is an array of `{key, value}` records (Avro's own maps only have text keys).
"""

from __future__ import annotations

from typing import IO, Any

import pyarrow as pa

_PRIMITIVE = {
    pa.int32(): "int",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "bytes",
    pa.large_binary(): "bytes",
}


def avro_type(kind: pa.DataType, names: list[str] | None = None) -> Any:
    """The Avro type of an Arrow type (always nullable: every stitchlake column is).

    `names` collects the record names used so far: Avro wants each record type named once per schema.
    """
    names = [] if names is None else names
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return ["null", {"type": "array", "items": avro_type(kind.value_type, names)}]
    if pa.types.is_map(kind):
        names.append(f"entry_{len(names)}")
        fields = [
            {"name": "key", "type": avro_type(kind.key_type, names)[1]},
            {"name": "value", "type": avro_type(kind.item_type, names), "default": None},
        ]
        return ["null", {"type": "array", "items": {"type": "record", "name": names[-1], "fields": fields}}]
    if pa.types.is_struct(kind):
        names.append(f"struct_{len(names)}")
        own = names[-1]
        fields = [{"name": f.name, "type": avro_type(f.type, names), "default": None} for f in kind]
        return ["null", {"type": "record", "name": own, "fields": fields}]
    if kind in _PRIMITIVE:
        base: Any = _PRIMITIVE[kind]
    elif pa.types.is_date32(kind):
        base = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(kind):
        base = {"type": "long", "logicalType": "timestamp-micros"}
    elif pa.types.is_decimal(kind):
        base = {"type": "bytes", "logicalType": "decimal", "precision": kind.precision, "scale": kind.scale}
    else:
        raise TypeError(f"no Avro mapping for Arrow type {kind}")
    return ["null", base]


def avro_schema(schema: pa.Schema, name: str = "stitchlake_log") -> dict[str, Any]:
    names: list[str] = []
    return {
        "type": "record",
        "name": name,
        "fields": [{"name": f.name, "type": avro_type(f.type, names), "default": None} for f in schema],
    }


def _to_avro(value: Any, kind: pa.DataType) -> Any:
    """A nested Python value in Avro's shape (maps as lists of {key, value} records)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return [{"key": k, "value": _to_avro(v, kind.item_type)} for k, v in value]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_to_avro(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {f.name: _to_avro(value.get(f.name), f.type) for f in kind}
    return value


def _from_avro(value: Any, kind: pa.DataType) -> Any:
    """An Avro value in the shape Arrow's builders take (maps as lists of (key, value) pairs)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return [(entry["key"], _from_avro(entry["value"], kind.item_type)) for entry in value]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_from_avro(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {f.name: _from_avro(value.get(f.name), f.type) for f in kind}
    return value


def _nested(kind: pa.DataType) -> bool:
    return bool(pa.types.is_nested(kind))


def _python_column(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type
    if pa.types.is_timestamp(kind):
        return column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64()).to_pylist()
    if pa.types.is_date32(kind):
        return column.cast(pa.int32()).to_pylist()
    if _nested(kind):
        return [_to_avro(value, kind) for value in column.to_pylist()]
    return column.to_pylist()


def write_avro(table: pa.Table, handle: IO[bytes]) -> None:
    import fastavro

    names = table.column_names
    columns = [_python_column(table.column(n)) for n in names]
    records = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
    fastavro.writer(handle, fastavro.parse_schema(avro_schema(table.schema)), records, codec="deflate")


def read_avro(handle: IO[bytes], schema: pa.Schema | None = None, columns: list[str] | None = None) -> pa.Table:
    """Read a whole Avro container file into Arrow; `schema` gives the Arrow types to build."""
    import fastavro

    reader = fastavro.reader(handle)
    writer_schema: dict[str, Any] = reader.writer_schema  # type: ignore[assignment]  # a record schema
    records = list(reader)
    fields = [f["name"] for f in writer_schema["fields"]]
    # A requested column the file lacks is left out, so the caller's missing-column check names it.
    wanted = [c for c in columns if c in fields] if columns is not None else fields
    arrays = {}
    for name in wanted:
        values = [record.get(name) if isinstance(record, dict) else None for record in records]
        kind = schema.field(name).type if schema is not None and name in schema.names else None
        arrays[name] = _arrow_column(values, kind, _logical(writer_schema, name))
    return pa.table(arrays)


def _logical(writer_schema: dict[str, Any], name: str) -> str | None:
    for f in writer_schema["fields"]:
        if f["name"] == name:
            kinds = f["type"] if isinstance(f["type"], list) else [f["type"]]
            for kind in kinds:
                if isinstance(kind, dict) and "logicalType" in kind:
                    return str(kind["logicalType"])
    return None


def _arrow_column(values: list[Any], kind: pa.DataType | None, logical: str | None) -> pa.Array:
    """Build an Arrow column; the date/timestamp builders accept raw integers and Python objects alike."""
    if logical == "timestamp-micros":
        column = pa.array(values, pa.timestamp("us", tz="UTC"))
        return column if kind is None else column.cast(kind)
    if logical == "timestamp-millis":
        return pa.array(values, pa.timestamp("ms", tz="UTC")).cast(kind or pa.timestamp("us", tz="UTC"))
    if logical == "date":
        return pa.array(values, pa.date32())
    if kind is not None and _nested(kind):
        return pa.array([_from_avro(value, kind) for value in values], kind)
    return pa.array(values, kind) if kind is not None else pa.array(values)
