"""Arrow schemas of the table's files, derived from the table config in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from stitchlake.config import ColumnSpec, StreamSpec, TableConfig
from stitchlake.merge import summary
from stitchlake.types import arrow_type


def _fields(columns: tuple[ColumnSpec, ...] | list[ColumnSpec]) -> list[pa.Field]:
    return [pa.field(c.name, arrow_type(c.type)) for c in columns]


def key_schema(config: TableConfig) -> pa.Schema:
    """Key and partition columns: what every data file holds, in every schema version."""
    return pa.schema(_fields(config.common_columns))


def log_schema(config: TableConfig, stream: StreamSpec) -> pa.Schema:
    """Key and partition columns, the stream's columns, its meta columns (commit time implicit)."""
    return pa.schema(
        _fields(config.common_columns) + _fields(stream.columns) + summary.meta_fields(stream, with_commit=False)
    )


def base_schema(config: TableConfig) -> pa.Schema:
    """Key and partition columns, then per stream its columns and meta columns (commit time explicit)."""
    fields = _fields(config.common_columns)
    for stream in config.streams.values():
        fields += _fields(stream.columns) + summary.meta_fields(stream, with_commit=True)
    return pa.schema(fields)


def table_schema(config: TableConfig) -> pa.Schema:
    """The user-visible wide schema."""
    return pa.schema(_fields(config.all_columns()))


def evolve(table: pa.Table, target: pa.Schema, defaults: Mapping[str, Any] | None = None) -> pa.Table:
    """Rows of a file written under an older schema, as `target` (a subset of the current schema) wants them.

    A column added since reads the default it was added with (`defaults`: Iceberg's initial-default; else null):
    the events in the file never set it. A widened type is cast (every old value fits); a dropped column is left
    out. Column names never change owner (`stitch alter`
    refuses it), so a name present in the file is the same column.
    """
    columns = []
    for field in target:
        if field.name in table.column_names:
            column = table.column(field.name)
            columns.append(column if column.type == field.type else column.cast(field.type))
        elif defaults and defaults.get(field.name) is not None:
            columns.append(pa.array([defaults[field.name]] * table.num_rows, field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)
