"""Arrow schemas of the table's files, derived from the table config in one place."""

from __future__ import annotations

import pyarrow as pa

from stitchlake.config import ColumnSpec, StreamSpec, TableConfig
from stitchlake.merge import summary
from stitchlake.types import arrow_type


def _fields(columns: tuple[ColumnSpec, ...] | list[ColumnSpec]) -> list[pa.Field]:
    return [pa.field(c.name, arrow_type(c.type)) for c in columns]


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
