"""How a table's schema may change (`stitch alter`): compatible changes, and why the others are refused.

Pure functions over stored schemas (the `table.json` shape), so the rules live in one place: the alter service
applies them, `Table.require` uses them to say whether a config is behind the table, ahead of it (run `stitch
alter`), or contradicts it.

Compatible: add a stream; add a column (with or without a default); widen a type (int -> long, float -> double,
decimal precision up at the same scale); change a default; change the delete marker (it applies to events ingested
from then on); change the log format (files say their format); drop a column or a stream (hidden from reads from
then on; time travel before the alter still shows it). Refused, because data already merged would change meaning:
the key, partitioning or buckets, the table's name, narrowing or other type changes, moving a column between
streams (or reusing a name the table used before: old files would give its old values), and a stream's ordering
or nulls mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .model import TableConfig
from .properties import FORMAT_VERSION, config_from_properties, table_properties

#: Keys of `table.json` that are not the schema (identity and bookkeeping).
NOT_SCHEMA = frozenset({"table_id", "created"})
#: Table fields no alter may change.
FIXED = ("name", "key", "partition_by", "buckets")
#: (from, to) simple type changes that read every old value exactly.
WIDENINGS = frozenset({("int", "long"), ("float", "double")})
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


@dataclass(frozen=True)
class Change:
    """One difference between two schemas, as a person reads it, and whether `stitch alter` may apply it."""

    path: str
    what: str
    allowed: bool
    why: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.what}" + ("" if self.allowed else f" — refused: {self.why}")


def schema_of(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The schema part of stored properties."""
    return {k: v for k, v in properties.items() if k not in NOT_SCHEMA}


def with_schema(config: TableConfig, properties: Mapping[str, Any]) -> TableConfig:
    """`config`'s runtime settings (sources, locks, spark, ...) with the columns and streams of a stored schema."""
    stored = config_from_properties({**schema_of(properties), "format_version": FORMAT_VERSION}, config.table.path)
    streams = {
        name: spec.model_copy(update={"source": config.streams[name].source if name in config.streams else None})
        for name, spec in stored.streams.items()
    }
    table = stored.table.model_copy(update={"path": config.table.path})
    return config.model_copy(update={"table": table, "streams": streams})


def same_schema(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return not changes(old, new, set())


def names_ever_used(schemas: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Column name -> the stream it belonged to, in any schema version (a name must never change owner)."""
    out: dict[str, str] = {}
    for schema in schemas:
        for stream, spec in schema.get("streams", {}).items():
            for column in spec.get("columns", []):
                out.setdefault(column["name"], stream)
    return out


def changes(old: Mapping[str, Any], new: Mapping[str, Any], history: Mapping[str, str] | set[str]) -> list[Change]:
    """Every difference from schema `old` to `new`; `history` maps every column name ever used to its stream."""
    owners = history if isinstance(history, Mapping) else {}
    out: list[Change] = []
    for name in FIXED:
        if old.get(name) != new.get(name):
            out.append(
                Change(
                    f"table.{name}",
                    f"table has {_show(old.get(name))}, config says {_show(new.get(name))}",
                    False,
                    "stored data is laid out by it (files, buckets, keys)"
                    + ("; `stitch rescale --buckets N` rewrites the table into N buckets" if name == "buckets" else ""),
                )
            )
    if old.get("log_format") != new.get("log_format"):
        out.append(Change("table.log_format", f"{old.get('log_format')} -> {new.get('log_format')}", True))
    old_streams, new_streams = old.get("streams", {}), new.get("streams", {})
    for stream in sorted(set(old_streams) | set(new_streams)):
        path = f"streams.{stream}"
        if stream not in new_streams:
            out.append(Change(path, "drop the stream (hidden from reads from then on)", True))
        elif stream not in old_streams:
            reused = [c["name"] for c in new_streams[stream]["columns"] if c["name"] in owners]
            if reused:
                out.append(Change(path, "add the stream", False, _reuse(reused[0], owners[reused[0]])))
            else:
                out.append(Change(path, f"add the stream ({_columns(new_streams[stream]['columns'])})", True))
        else:
            out += _stream_changes(path, old_streams[stream], new_streams[stream], owners, stream)
    return out


def _stream_changes(
    path: str, old: Mapping[str, Any], new: Mapping[str, Any], owners: Mapping[str, str], stream: str
) -> list[Change]:
    out: list[Change] = []
    if list(old.get("ordering") or []) != list(new.get("ordering") or []):
        out.append(
            Change(
                f"{path}.ordering",
                f"table has {_show(old.get('ordering'))}, config says {_show(new.get('ordering'))}",
                False,
                "versions already merged were compared by the old ordering",
            )
        )
    if old.get("nulls") != new.get("nulls"):
        out.append(
            Change(
                f"{path}.nulls",
                f"table has {old.get('nulls')}, config says {new.get('nulls')}",
                False,
                "merged groups depend on it",
            )
        )
    if old.get("deletes") != new.get("deletes"):
        out.append(Change(f"{path}.deletes", f"{_show(old.get('deletes'))} -> {_show(new.get('deletes'))}", True))
    before = {c["name"]: c for c in old.get("columns", [])}
    after = {c["name"]: c for c in new.get("columns", [])}
    for name in sorted(set(before) | set(after)):
        where = f"{path}.columns.{name}"
        if name not in after:
            out.append(Change(where, "drop the column (hidden from reads from then on)", True))
        elif name not in before:
            if name in owners:
                out.append(Change(where, "add the column", False, _reuse(name, owners[name], stream)))
            else:
                default = f", default {after[name]['default']!r}" if "default" in after[name] else ""
                out.append(Change(where, f"add the column ({after[name]['type']}{default})", True))
        else:
            out += _column_changes(where, before[name], after[name])
    return out


def _column_changes(where: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    out: list[Change] = []
    if old["type"] != new["type"]:
        allowed = widens(old["type"], new["type"])
        why = "" if allowed else "only widening is safe (int -> long, float -> double, decimal precision up)"
        what = f"{old['type']} -> {new['type']}" if allowed else f"table has {old['type']}, config says {new['type']}"
        out.append(Change(f"{where}.type", what, allowed, why))
    if old.get("default") != new.get("default"):
        out.append(Change(f"{where}.default", f"{_show(old.get('default'))} -> {_show(new.get('default'))}", True))
    return out


def widens(old: str, new: str) -> bool:
    """Whether every value of type `old` reads exactly as type `new`."""
    if (old, new) in WIDENINGS:
        return True
    before, after = _DECIMAL.match(old), _DECIMAL.match(new)
    if before and after:
        return after.group(2) == before.group(2) and int(after.group(1)) > int(before.group(1))
    return False


def _reuse(name: str, owner: str, stream: str | None = None) -> str:
    moved = owner != stream if stream is not None else True
    if moved:
        return (
            f"column {name!r} belonged to stream {owner} in an earlier schema version: moving a column between "
            "streams (or reusing its name) would make old files give its old values; pick a new name"
        )
    return (
        f"column {name!r} was dropped from this stream in an earlier schema version: its old files still hold it, "
        "and they would give its old values; pick a new name"
    )


def _columns(columns: list[Mapping[str, Any]]) -> str:
    return ", ".join(f"{c['name']}: {c['type']}" for c in columns)


def _show(value: Any) -> str:
    import json

    if isinstance(value, list) and value and isinstance(value[0], dict) and "name" in value[0]:
        return "{" + _columns(value) + "}"
    return json.dumps(value)


def schema_properties(config: TableConfig) -> dict[str, Any]:
    """The stored schema a config describes (what an alter to it records)."""
    return schema_of(table_properties(config))
