"""The stored table properties (`.stitch/table.json`) and the model: a config's stored schema, and a config
from a stored schema.

Written when a table is created and by every `stitch alter` (`config/evolution.py` says how a config may differ
from them), and a table folder opened without its YAML gets a config from them (`config_from_schema`). The
records themselves are in `config.stored`; columns keep the table's wide-schema order, defaults their JSON form.
"""

from __future__ import annotations

from pathlib import Path

from stitchlake.paths import TABLE_JSON

from .model import ColumnSpec, TableConfig
from .stored import FORMAT_VERSION, StoredColumn, StoredDeletes, StoredSchema, StoredStream
from .values import default_to_json

__all__ = ["FORMAT_VERSION", "config_from_schema", "in_stored_order", "stored_schema"]


def stored_schema(config: TableConfig, format_version: int = FORMAT_VERSION) -> StoredSchema:
    """The schema `config` describes, as `.stitch/table.json` (and an alter to it, with the table's format) records
    it."""
    table = config.table
    return StoredSchema(
        format_version=format_version,
        name=table.name,
        key=tuple(_column(c) for c in table.key),
        partition_by=tuple(_column(c) for c in table.partition_by),
        buckets=table.buckets,
        log_format=str(table.log_format),
        streams={
            s.name: StoredStream(
                columns=tuple(_column(c) for c in s.columns),
                ordering=tuple(s.ordering),
                nulls=str(s.nulls),
                deletes=StoredDeletes(s.deletes.column, tuple(s.deletes.values)) if s.deletes else None,
            )
            for s in config.streams.values()
        },
    )


def _column(column: ColumnSpec) -> StoredColumn:
    default = default_to_json(column.default) if column.default is not None else None
    return StoredColumn(column.name, column.type, default)


def config_from_schema(schema: StoredSchema, table_path: str) -> TableConfig:
    """A config for an existing table from a stored schema, with default runtime settings."""
    from .parse import validate

    where = f"{table_path}/{TABLE_JSON}"
    document = {
        "table": {
            "name": schema.name,
            "path": table_path,
            "key": [c.to_json() for c in schema.key],
            "partition_by": [c.to_json() for c in schema.partition_by],
            "buckets": schema.buckets,
            "log_format": schema.log_format,
        },
        "streams": {name: stream.to_json() for name, stream in schema.streams.items()},
    }
    return validate(document, file=where, base=Path(table_path), yaml=False)


def in_stored_order(config: TableConfig, schema: StoredSchema) -> TableConfig:
    """`config` with streams and columns in the order the table was created with (its wide schema's order)."""
    stored = schema.streams
    if list(stored) == list(config.streams) and all(
        stored[name].column_names == list(config.streams[name].column_names) for name in stored
    ):
        return config
    streams = {}
    for name, entry in stored.items():
        spec = config.streams[name]
        order = entry.column_names
        columns = tuple(sorted(spec.columns, key=lambda c: order.index(c.name)))
        streams[name] = spec.model_copy(update={"columns": columns})
    return config.model_copy(update={"streams": streams})
