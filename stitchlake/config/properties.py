"""The stored table properties (`.stitch/table.json`): what decides how stored data is read.

Written once when a table is created; every later config must agree with them (`diff_properties`), and a
table folder opened without its YAML gets a config from them (`config_from_properties`). Columns are stored as
lists of `{name, type, default}` in the table's wide-schema order, defaults in their JSON form — the model
validates that stored form directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stitchlake.errors import ConfigError

from .model import ColumnSpec, TableConfig
from .values import default_to_json

FORMAT_VERSION = 1
TABLE_JSON = ".stitch/table.json"
#: The table section's fields a config may never change once the table exists.
FIXED_TABLE_FIELDS = ("name", "key", "partition_by", "buckets", "log_format")
#: Each stream's fields a config may never change once the table exists.
FIXED_STREAM_FIELDS = ("columns", "ordering", "nulls", "deletes")


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


def diff_properties(existing: Mapping[str, Any], proposed: Mapping[str, Any]) -> list[str]:
    """Human lines for every way a config contradicts an existing table (empty when compatible)."""
    lines: list[str] = []
    for name in FIXED_TABLE_FIELDS:
        if existing.get(name) != proposed.get(name):
            lines.append(
                f"table.{name}: table has {_show(existing.get(name))}, config says {_show(proposed.get(name))}"
            )
    old_streams, new_streams = existing.get("streams", {}), proposed.get("streams", {})
    for name in sorted(set(old_streams) | set(new_streams)):
        if name not in new_streams:
            lines.append(f"streams.{name}: exists in the table but not in the config")
        elif name not in old_streams:
            lines.append(f"streams.{name}: is in the config but not in the table")
        else:
            for key in FIXED_STREAM_FIELDS:
                old, new = old_streams[name].get(key), new_streams[name].get(key)
                if not _same(key, old, new):
                    lines.append(f"streams.{name}.{key}: table has {_show(old)}, config says {_show(new)}")
    return lines


def _same(key: str, old: Any, new: Any) -> bool:
    """Equal as a table property: the order of columns (a mapping in the YAML) does not matter."""
    if key == "columns" and isinstance(old, list) and isinstance(new, list):
        return sorted(old, key=lambda c: c["name"]) == sorted(new, key=lambda c: c["name"])
    return bool(old == new)


def _show(value: Any) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict) and "name" in value[0]:
        return "{" + ", ".join(f"{c['name']}: {c['type']}" for c in value) + "}"
    return json.dumps(value)


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
