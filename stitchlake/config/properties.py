"""The stored table properties (`.stitch/table.json`): what decides how stored data is read.

Written when a table is created and by every `stitch alter` (`config/evolution.py` says how a config may differ
from them), and a table folder opened without its YAML gets a config from them (`config_from_properties`).
Columns are stored as lists of `{name, type, default}` in the table's wide-schema order, defaults in their JSON
form — the model validates that stored form directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stitchlake.errors import ConfigError
from stitchlake.paths import TABLE_JSON

from .model import ColumnSpec, TableConfig
from .values import default_to_json

FORMAT_VERSION = 1


def table_properties(config: TableConfig) -> dict[str, Any]:
    """What `.stitch/table.json` records for `config`."""
    table = config.table
    return {
        "format_version": FORMAT_VERSION,
        "name": table.name,
        "key": [_column(c) for c in table.key],
        "partition_by": [_column(c) for c in table.partition_by],
        "buckets": table.buckets,
        "log_format": str(table.log_format),
        "streams": {
            s.name: {
                "columns": [_column(c) for c in s.columns],
                "ordering": list(s.ordering),
                "nulls": str(s.nulls),
                "deletes": {"column": s.deletes.column, "values": list(s.deletes.values)} if s.deletes else None,
            }
            for s in config.streams.values()
        },
    }


def _column(column: ColumnSpec) -> dict[str, Any]:
    data: dict[str, Any] = {"name": column.name, "type": column.type}
    if column.default is not None:
        data["default"] = default_to_json(column.default)
    return data


def config_from_properties(properties: Mapping[str, Any], table_path: str) -> TableConfig:
    """A config for an existing table from its `.stitch/table.json`, with default runtime settings."""
    from .parse import validate

    where = f"{table_path}/{TABLE_JSON}"
    version = properties.get("format_version")
    if version != FORMAT_VERSION:
        raise ConfigError(
            f"{where}: table format version {version} is not supported by this stitchlake (supports {FORMAT_VERSION})"
        )
    try:
        document = {
            "table": {
                "name": properties["name"],
                "path": table_path,
                "key": properties["key"],
                "partition_by": properties["partition_by"],
                "buckets": properties["buckets"],
                "log_format": properties["log_format"],
            },
            "streams": {
                name: {
                    "columns": stream["columns"],
                    "ordering": stream["ordering"],
                    "nulls": stream["nulls"],
                    "deletes": stream.get("deletes"),
                }
                for name, stream in properties["streams"].items()
            },
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: damaged table properties (missing or malformed {exc})") from None
    return validate(document, file=where, base=Path(table_path), yaml=False)


def in_stored_order(config: TableConfig, properties: Mapping[str, Any]) -> TableConfig:
    """`config` with streams and columns in the order the table was created with (its wide schema's order)."""
    stored = properties.get("streams", {})
    if list(stored) == list(config.streams) and all(
        [c["name"] for c in stored[name]["columns"]] == list(config.streams[name].column_names) for name in stored
    ):
        return config
    streams = {}
    for name, entry in stored.items():
        spec = config.streams[name]
        order = [c["name"] for c in entry["columns"]]
        columns = tuple(sorted(spec.columns, key=lambda c: order.index(c.name)))
        streams[name] = spec.model_copy(update={"columns": columns})
    return config.model_copy(update={"streams": streams})
