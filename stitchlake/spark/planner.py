"""The planner process the JVM reader asks (docs/spark-reader.md): JSON requests in, plans out, one per line.

The JVM reader merges file slices in its Spark tasks, but which slices a read merges is decided here, by the
planner `stitch read` uses (`reading.snapshot.plan_slices`): one planner, so a Spark read and a `stitch read` of the
same table at the same time always see the same files. The JVM driver starts `python -m stitchlake.spark.planner`
once and keeps it; each request re-reads the timeline, so a plan is never stale. Nothing here imports pyspark: the
process starts in about a second.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import importlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa

from stitchlake.errors import StitchError, UsageError
from stitchlake.paths import TIMELINE_DIR
from stitchlake.spark.packing import Packing
from stitchlake.spark.read_request import ReadRequest
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    from stitchlake.config import ColumnSpec, TableConfig
    from stitchlake.layout.fsview import DataFile, FileSlice
    from stitchlake.reading.changes import ChangeGroup
    from stitchlake.reading.filters import Pruning
    from stitchlake.table.handle import TableHandle as Table
    from stitchlake.timeline.timeline import Timeline

FORMAT = "stitchlake.plan/2"
#: A plan larger than this goes to a file whose path is answered instead (a pipe line of megabytes is slow to parse
#: on both sides; the JVM reads the file and deletes it).
INLINE_PLAN_BYTES = 1024 * 1024


# ------------------------------------------------------------------------------------------------ requests


def handle(request: Mapping[str, Any]) -> dict[str, Any]:
    """One request's response: `{"id", "ok": true, "result"}` or `{"id", "ok": false, "error"}`."""
    ident = request.get("id")
    try:
        op = request.get("op")
        options = {str(k).lower(): str(v) for k, v in dict(request.get("options") or {}).items() if v is not None}
        if op == "schema":
            result = schema(options)
        elif op == "plan":
            result = plan(options, request.get("columns"), request.get("filters") or [], request.get("conf") or {})
        else:
            raise UsageError(f"planner: unknown request {op!r} (schema, plan)")
        return {"id": ident, "ok": True, "result": result}
    except StitchError as exc:
        return {"id": ident, "ok": False, "error": _error(exc, exc.exit_code)}
    except Exception as exc:  # the JVM shows it; the planner itself keeps serving
        return {"id": ident, "ok": False, "error": _error(exc, 1)}


def _error(exc: BaseException, exit_code: int) -> dict[str, Any]:
    return {"type": type(exc).__name__, "exit_code": exit_code, "message": str(exc)}


def schema(options: Mapping[str, str]) -> dict[str, Any]:
    """The Spark schema a read with these options returns (as the Python data source's `schema()` says it)."""
    from stitchlake.io.schemas import table_schema
    from stitchlake.reading.changes import CHANGE_COLUMNS

    read = ReadRequest(options)
    fields = [spark_field(f) for f in table_schema(read.table.config)]
    if read.changes:
        fields += [{"name": c, "type": "string", "nullable": True, "metadata": {}} for c in CHANGE_COLUMNS]
    return {
        "schema": {"type": "struct", "fields": fields},
        "table": read.table.storage.describe(),
        "delegate": None,
    }


def plan(
    options: Mapping[str, str],
    columns: Sequence[str] | None,
    filters: Sequence[Mapping[str, Any]],
    conf: Mapping[str, str],
) -> dict[str, Any]:
    """The plan document of one read (docs/spark-reader.md)."""
    from stitchlake.io.schemas import table_schema
    from stitchlake.reading.changes import CHANGE_COLUMNS
    from stitchlake.reading.filters import prune
    from stitchlake.reading.snapshot import plan_slices, wanted_columns

    read = ReadRequest(options)
    table = read.table
    config = table.config
    asked = None if columns is None else [c for c in columns if c not in CHANGE_COLUMNS or not read.changes]
    wanted = wanted_columns(config, asked)
    document: dict[str, Any] = {
        "format": FORMAT,
        "table": table.storage.describe(),
        "mode": read.mode,
        "as_of": read.as_of,
        "delegate": None,
        "schema": {"type": "struct", "fields": [spark_field(f) for f in table_schema(config)]},
        "columns": [name for name in (c.name for c in config.all_columns()) if name in wanted],
        "merge": merge_spec(config),
        "hadoop_conf": hadoop_conf(table),
        "slices": [],
        "partitions": [],
        "filters_used": [],
    }
    where, used = _pruning_filter(config, filters)
    timeline = table.read_timeline()
    packing = Packing.of(options, conf)
    document["filters_used"] = used
    # A task that finds a planned file gone tells a clean or restore since (run again) from damage by these.
    latest = timeline.latest_completed()
    document["timeline"] = location(table, TIMELINE_DIR)
    document["planned_at"] = latest.completed if latest is not None else None
    # `p IN ('a', 'c') AND p IN ('b', 'd')`: no value left, so no row holds (an empty condition would be none).
    nothing = any(not values for values in where.values())
    if read.changes:
        return _change_document(document, read, table, timeline, None if nothing else prune(config, where), packing)
    slices = [] if nothing else plan_slices(config, table.view(timeline), read.as_of, prune(config, where))
    if read.mode == ReadMode.READ_OPTIMIZED:
        slices = [s for s in slices if s.base is not None]
    weights = [sum(f.bytes + packing.open_cost for f in _files(s, read.mode)) for s in slices]
    document["slices"] = [slice_entry(table, s, read.mode) for s in slices]
    document["partitions"] = packing.pack(weights)
    return document


def _change_document(
    document: dict[str, Any],
    read: ReadRequest,
    table: Table,
    timeline: Timeline,
    pruning: Pruning | None,
    packing: Packing,
) -> dict[str, Any]:
    """An incremental read's plan: per file group the range touched, its slice as of `until`, the slices as of
    `since` its keys were in, the files whose keys are the candidates and the keys erased (docs/spark-reader.md,
    "Incremental reads"); no pruning: no row can hold, nothing planned."""
    from stitchlake.reading.changes import plan_changes

    config = table.config
    view = table.view(timeline)
    planned = [] if pruning is None else plan_changes(table, timeline, view, read.since, read.until, pruning)
    document["changes"] = {
        "since": read.since,
        "until": read.until,
        "before_images": read.before_images,
        "keys": list(config.table.key_names),
    }
    document["change_slices"] = [_change_entry(table, group) for group in planned]
    weights = [
        sum(f.bytes + packing.open_cost for f in g.after.files) if g.after is not None else packing.open_cost
        for g in planned
    ]
    document["partitions"] = packing.pack(weights)
    return document


def _change_entry(table: Table, group: ChangeGroup) -> dict[str, Any]:
    """One `change_slices` entry: erased keys as literals in the common columns' order, then time and label."""
    from stitchlake.reading.changes import COMMIT_TIME, STREAMS
    from stitchlake.reading.snapshot import common_names

    common = common_names(table.config)
    kinds = {c.name: c.type for c in table.config.common_columns}
    erased: list[list[Any]] = []
    if group.erased is not None:
        for row in group.erased.to_pylist():
            erased.append([*(literal(row[n], kinds.get(n)) for n in common), row[COMMIT_TIME], row[STREAMS]])
    return {
        "partition": group.partition,
        "file_group": group.file_group,
        "buckets": group.buckets,
        "after": slice_entry(table, group.after, ReadMode.SNAPSHOT) if group.after is not None else None,
        "before": [slice_entry(table, s, ReadMode.SNAPSHOT) for s in group.before],
        # Only its key columns are read, which no alter changes: no schema version to describe (its stream may even
        # be a dropped one).
        "carried": [
            {"file": _stored(table, c.file), "commit_time": c.completed, "stream": c.stream, "buckets": c.buckets}
            for c in group.carried
        ],
        "erased": erased,
    }


def _pruning_filter(
    config: TableConfig, filters: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, list[Any]], list[int]]:
    """Equalities and IN lists on key and partition columns, as the Python source's `pushFilters` takes them
    (they prune partitions and file groups); the indices of the filters used. Spark checks every row again."""
    usable = {c.name for c in config.common_columns}
    where: dict[str, list[Any]] = {}
    used = []
    for index, item in enumerate(filters):
        name = item.get("column")
        if name not in usable or item.get("op") not in ("eq", "in"):
            continue
        values = [item.get("value")] if item["op"] == "eq" else list(item.get("values") or [])
        if any(v is None for v in values):
            continue
        where[name] = [v for v in values if v in where[name]] if name in where else values
        used.append(index)
    return where, used


# ------------------------------------------------------------------------------------------------ documents


def merge_spec(config: TableConfig) -> dict[str, Any]:
    """What the JVM merge needs of the config: row identity, and per stream its ordering, nulls and defaults."""
    from stitchlake.types import orders_by_rank

    return {
        "common": [{"name": c.name, "type": c.type} for c in config.common_columns],
        "streams": [
            {
                "name": stream.name,
                "nulls": stream.nulls,
                "ordering": [
                    {"type": stream.column(name).type, "ranked": orders_by_rank(stream.column(name).type)}
                    for name in stream.ordering
                ],
                "columns": [_column(c) for c in stream.columns],
            }
            for stream in config.streams.values()
        ],
    }


def _column(spec: ColumnSpec) -> dict[str, Any]:
    return {"name": spec.name, "type": spec.type, "default": literal(spec.default, spec.type)}


def _files(fslice: FileSlice, mode: str) -> list[DataFile]:
    if mode == ReadMode.SNAPSHOT:
        return list(fslice.files)
    return [fslice.base] if fslice.base is not None else []


def slice_entry(table: Table, fslice: FileSlice, mode: str) -> dict[str, Any]:
    """One slice: its base file and (snapshot reads) its logs in commit order, dropped streams' logs left out."""
    config = table.config
    logs = []
    if mode == ReadMode.SNAPSHOT:
        for item in fslice.logs:
            if item.stream not in config.streams:
                if item.stream in table.config_of_file(item.schema_version).streams:
                    continue  # a stream dropped by `stitch alter`: hidden from reads of later versions
                raise StitchError(f"{item.path}: written by unknown stream {item.stream!r}")
            logs.append(file_entry(table, item))
    return {
        "partition": fslice.partition,
        "file_group": fslice.file_group,
        "base": file_entry(table, fslice.base) if fslice.base is not None else None,
        "logs": logs,
    }


def file_entry(table: Table, item: DataFile) -> dict[str, Any]:
    """A data file as the JVM reads it: where, what to verify, and what its schema version lacks or stores
    narrower than the table's schema (`io.schemas.evolve` in Python)."""
    from stitchlake.io.schemas import base_schema, log_schema
    from stitchlake.layout.names import BASE

    config = table.config
    base = item.kind == BASE
    current = base_schema(config) if base else log_schema(config, config.streams[item.stream or ""])
    absent: dict[str, Any] = {}
    types: dict[str, str] = {}
    if item.schema_version != table.schema_version:
        written = table.config_of_file(item.schema_version)
        own = base_schema(written) if base else log_schema(written, written.streams[item.stream or ""])
        defaults = table.initial_defaults()
        declared = {c.name: c.type for c in config.all_columns()}
        old_types = {c.name: c.type for c in written.all_columns()}
        for field in current:
            if field.name not in own.names:
                kind = declared.get(field.name)
                absent[field.name] = literal(defaults.get(field.name), kind) if kind else None
            elif field.name in declared and old_types.get(field.name) not in (None, declared[field.name]):
                types[field.name] = old_types[field.name]
    return {
        **_stored(table, item),
        "commit": int(item.completed) if item.completed else 0,
        "absent": absent,
        "types": types,
    }


def _stored(table: Table, item: DataFile) -> dict[str, Any]:
    """Where a data file is and what to verify it by."""
    return {
        "path": location(table, item.path),
        "kind": item.kind,
        "stream": item.stream,
        "checksum": item.checksum,
        "bytes": item.bytes,
        "rows": item.rows,
        "format": "avro" if item.path.endswith(".avro") else "parquet",
    }


def location(table: Table, path: str) -> str:
    """A file's full location as Hadoop's file systems name it: a local path, or `s3a://bucket/key`."""
    where = table.storage.describe(path)
    return "s3a://" + where[len("s3://") :] if where.startswith("s3://") else where


def hadoop_conf(table: Table) -> dict[str, str]:
    """Hadoop settings that reach the table's object store with the settings stitchlake uses (`fs.s3a.*`)."""
    settings = getattr(table.storage, "client_settings", None)
    if settings is None:
        return {}
    found = settings()
    names = {
        "endpoint": "fs.s3a.endpoint",
        "region": "fs.s3a.endpoint.region",
        "access_key_id": "fs.s3a.access.key",
        "secret_access_key": "fs.s3a.secret.key",
        "session_token": "fs.s3a.session.token",
    }
    out = {names[k]: v for k, v in found.items() if k in names}
    out["fs.s3a.path.style.access"] = "true"
    out["fs.s3a.connection.ssl.enabled"] = "false" if found.get("allow_http") == "true" else "true"
    return out


# ------------------------------------------------------------------------------------------------ values


def literal(value: Any, type_name: str | None) -> Any:
    """A config value (a default) in Spark's internal form as JSON: dates as days, timestamps as microseconds,
    decimals as text, binary as base64, nested values as JSON arrays and objects."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Mapping):
        return {str(k): literal(v, None) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [literal(v, None) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # JSON has none: the JVM reads these texts back
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def spark_type(kind: pa.DataType) -> Any:
    """An Arrow type as Spark's schema JSON names it (what `pyspark.sql.pandas.types.from_arrow_type` makes)."""
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = kind.value_field
        return {"type": "array", "elementType": spark_type(element.type), "containsNull": element.nullable}
    if pa.types.is_map(kind):
        return {
            "type": "map",
            "keyType": spark_type(kind.key_type),
            "valueType": spark_type(kind.item_type),
            "valueContainsNull": kind.item_field.nullable,
        }
    if pa.types.is_struct(kind):
        return {"type": "struct", "fields": [spark_field(kind.field(i)) for i in range(kind.num_fields)]}
    simple = {
        pa.int8(): "byte",
        pa.int16(): "short",
        pa.int32(): "integer",
        pa.int64(): "long",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
    }
    if kind in simple:
        return simple[kind]
    raise UsageError(f"the JVM reader has no Spark type for {kind}")


def spark_field(field: pa.Field) -> dict[str, Any]:
    return {"name": field.name, "type": spark_type(field.type), "nullable": field.nullable, "metadata": {}}


# ------------------------------------------------------------------------------------------------ the process


def write_response(response: dict[str, Any], out: IO[str]) -> None:
    """One line of JSON; a plan too large for a line goes to a private file named instead."""
    text = json.dumps(response, separators=(",", ":"), allow_nan=False)
    if len(text) > INLINE_PLAN_BYTES and response.get("ok"):
        handle_fd, path = tempfile.mkstemp(prefix="stitchlake-plan-", suffix=".json")  # 0600: it may hold secrets
        with os.fdopen(handle_fd, "w", encoding="utf-8") as file:
            json.dump(response["result"], file, separators=(",", ":"), allow_nan=False)
        text = json.dumps({"id": response.get("id"), "ok": True, "result": {"plan_file": path}})
    out.write(text + "\n")
    out.flush()


def serve(source: IO[str], out: IO[str]) -> None:
    """Answer requests until the input closes (the JVM that started us exited)."""
    for line in source:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            write_response({"id": None, "ok": False, "error": _error(exc, 2)}, out)
            continue
        response = handle(request if isinstance(request, dict) else {})
        try:
            write_response(response, out)
        except (TypeError, ValueError) as exc:  # an answer JSON cannot carry: say so, and keep serving
            write_response({"id": response.get("id"), "ok": False, "error": _error(exc, 1)}, out)


#: What answering imports (lazily, in `schema` and `plan`), imported by `preload` before the first request.
PRELOADED = (
    "stitchlake.config.evolution",
    "stitchlake.io.schemas",
    "stitchlake.layout.names",
    "stitchlake.reading.changes",
    "stitchlake.reading.filters",
    "stitchlake.reading.options",
    "stitchlake.reading.snapshot",
    "stitchlake.spark.tables",
    "stitchlake.table.handle",
    "stitchlake.timeline.schemas",
    "stitchlake.types",
)


def preload() -> None:
    """Import what answering needs before the first request comes: the JVM starts this process with the session
    (`PlannerClient.prestart`), so these imports (about 0.3 s) happen while the session does other work instead
    of inside its first read's `load()`."""
    for module in PRELOADED:
        importlib.import_module(module)


def main() -> None:
    preload()
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
