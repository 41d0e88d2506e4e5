"""How a table's schema may change (`stitch alter`): compatible changes, and why the others are refused.

Pure functions over stored schemas (`config.stored.StoredSchema`), so the rules live in one place: the alter service
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

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stitchlake.errors import ConfigError

from .model import TableConfig
from .properties import config_from_schema, stored_schema
from .stored import StoredColumn, StoredSchema, StoredStream

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


def with_schema(config: TableConfig, schema: StoredSchema) -> TableConfig:
    """`config`'s runtime settings (sources, locks, spark, ...) with the columns and streams of a stored schema."""
    stored = config_from_schema(schema, config.table.path)
    streams = {
        name: spec.model_copy(update={"source": config.streams[name].source if name in config.streams else None})
        for name, spec in stored.streams.items()
    }
    table = stored.table.model_copy(update={"path": config.table.path})
    return config.model_copy(update={"table": table, "streams": streams})


def same_schema(old: StoredSchema, new: StoredSchema) -> bool:
    return not changes(old, new, set())


def names_ever_used(schemas: Iterable[StoredSchema]) -> dict[str, str]:
    """Column name -> the stream it belonged to, in any schema version (a name must never change owner)."""
    out: dict[str, str] = {}
    for schema in schemas:
        for stream, spec in schema.streams.items():
            for column in spec.columns:
                out.setdefault(column.name, stream)
    return out


def changes(old: StoredSchema, new: StoredSchema, history: Mapping[str, str] | set[str]) -> list[Change]:
    """Every difference from schema `old` to `new`; `history` maps every column name ever used to its stream."""
    owners = history if isinstance(history, Mapping) else {}
    out: list[Change] = []
    for name in FIXED:
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            out.append(
                Change(
                    f"table.{name}",
                    f"table has {_show(before)}, config says {_show(after)}",
                    False,
                    "stored data is laid out by it (files, buckets, keys)"
                    + ("; `stitch rescale --buckets N` rewrites the table into N buckets" if name == "buckets" else ""),
                )
            )
    if old.log_format != new.log_format:
        out.append(Change("table.log_format", f"{old.log_format} -> {new.log_format}", True))
    old_streams, new_streams = old.streams, new.streams
    for stream in sorted(set(old_streams) | set(new_streams)):
        path = f"streams.{stream}"
        if stream not in new_streams:
            out.append(Change(path, "drop the stream (hidden from reads from then on)", True))
        elif stream not in old_streams:
            reused = [name for name in new_streams[stream].column_names if name in owners]
            if stream in set(owners.values()):
                why = (
                    f"stream {stream!r} was dropped in an earlier schema version: its old files still hold its rows, "
                    "which would come back into reads; pick a new name"
                )
                out.append(Change(path, "add the stream", False, why))
            elif reused:
                out.append(Change(path, "add the stream", False, _reuse(reused[0], owners[reused[0]])))
            else:
                out.append(Change(path, f"add the stream ({_columns(new_streams[stream].columns)})", True))
        else:
            out += _stream_changes(path, old_streams[stream], new_streams[stream], owners, stream)
    columns, streams = _names(old), set(old.streams)
    for path, name, other, why in name_clashes(new):
        before = streams if path.count(".") == 1 and path.startswith("streams.") else columns
        if name not in before or other not in before:  # a table made before this check keeps its names
            out.append(Change(path, f"add {name!r}", False, why))
    return out


def name_clashes(schema: StoredSchema) -> list[tuple[str, str, str, str]]:
    """Each name that clashes with one before it: its path, the name, the other and why.

    - Names that differ only in case (stream names among streams; column names among every column, key and
      partition columns included): Spark, Trino and the published tables match names without regard to case.
    - A stream whose name begins with another's and `__` (`pay` and `pay__eu`, `pay_`): a stream's meta columns
      are `_sl__<stream>__<what>`, so one's would be read as the other's.
    """
    out: list[tuple[str, str, str, str]] = []
    streams: dict[str, str] = {}
    columns: dict[str, str] = {}
    named = [(f"table.key.{c.name}", c.name) for c in schema.key]
    named += [(f"table.partition_by.{c.name}", c.name) for c in schema.partition_by]
    for stream, spec in schema.streams.items():
        other = streams.setdefault(stream.casefold(), stream)
        if other != stream:
            out.append((f"streams.{stream}", stream, other, _case_clash(stream, other)))
        for earlier in schema.streams:
            if earlier == stream:
                break
            inner, outer = sorted((stream, earlier), key=len)
            if inner != outer and f"{outer}__".startswith(f"{inner}__"):
                out.append((f"streams.{stream}", stream, earlier, _meta_clash(outer, inner)))
        named += [(f"streams.{stream}.columns.{c.name}", c.name) for c in spec.columns]
    for path, name in named:
        other = columns.setdefault(name.casefold(), name)
        if other != name:
            out.append((path, name, other, _case_clash(name, other)))
    return out


def refuse_name_clashes(config: TableConfig) -> None:
    """A config whose names clash (`name_clashes`) is refused naming the first: by `stitch validate` as by the
    table's creation, so that a check in CI passes no config `stitch init` then refuses."""
    clashes = name_clashes(stored_schema(config))
    if clashes:
        path, _name, _other, why = clashes[0]
        where = config.source_file
        raise ConfigError(f"{where or 'config'}: {path}: {why}", file=where, yaml_path=path)


def _case_clash(name: str, other: str) -> str:
    return (
        f"{name!r} and {other!r} differ only in case: Spark, Trino and the published tables match names without "
        "regard to case, so they could not tell them apart; pick another name"
    )


def _meta_clash(outer: str, inner: str) -> str:
    return (
        f"stream {outer!r} begins with stream {inner!r} and `_`: a stream's meta columns are named "
        f"`_sl__<stream>__...`, so those of {outer!r} would be read as {inner!r}'s; pick another name"
    )


def _names(schema: StoredSchema) -> set[str]:
    """Every column name, key and partition columns included."""
    found = {c.name for c in (*schema.key, *schema.partition_by)}
    return found | {c.name for spec in schema.streams.values() for c in spec.columns}


def _stream_changes(
    path: str, old: StoredStream, new: StoredStream, owners: Mapping[str, str], stream: str
) -> list[Change]:
    out: list[Change] = []
    if old.ordering != new.ordering:
        out.append(
            Change(
                f"{path}.ordering",
                f"table has {_show(old.ordering)}, config says {_show(new.ordering)}",
                False,
                "versions already merged were compared by the old ordering",
            )
        )
    if old.nulls != new.nulls:
        what = f"table has {old.nulls}, config says {new.nulls}"
        out.append(Change(f"{path}.nulls", what, False, "merged groups depend on it"))
    if old.deletes != new.deletes:
        out.append(Change(f"{path}.deletes", f"{_show(old.deletes)} -> {_show(new.deletes)}", True))
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    for name in sorted(set(before) | set(after)):
        where = f"{path}.columns.{name}"
        if name not in after:
            out.append(Change(where, "drop the column (hidden from reads from then on)", True))
        elif name not in before:
            if name in owners:
                out.append(Change(where, "add the column", False, _reuse(name, owners[name], stream)))
            else:
                added = after[name]
                default = f", default {added.default!r}" if added.default is not None else ""
                out.append(Change(where, f"add the column ({added.type}{default})", True))
        else:
            out += _column_changes(where, before[name], after[name])
    return out


def _column_changes(where: str, old: StoredColumn, new: StoredColumn) -> list[Change]:
    out: list[Change] = []
    if old.type != new.type:
        allowed = widens(old.type, new.type)
        why = "" if allowed else "only widening is safe (int -> long, float -> double, decimal precision up)"
        what = f"{old.type} -> {new.type}" if allowed else f"table has {old.type}, config says {new.type}"
        out.append(Change(f"{where}.type", what, allowed, why))
    if not _same_value(old.default, new.default):
        out.append(Change(f"{where}.default", f"{_show(old.default)} -> {_show(new.default)}", True))
    return out


def _same_value(old: Any, new: Any) -> bool:
    """Equal defaults, NaN (which `==` finds unequal to itself, nested too) equal to NaN: a `default: nan` read
    from the config and the same one stored with the table are one default."""
    return bool(old == new) or _canonical(old) == _canonical(new)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)  # NaN -> NaN (a list or mapping holding one too)


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


def _columns(columns: Iterable[StoredColumn]) -> str:
    return ", ".join(f"{c.name}: {c.type}" for c in columns)


def _show(value: Any) -> str:
    """A stored value as the message shows it: columns as `{name: type}`, the rest as JSON."""
    import json

    if isinstance(value, tuple) and value and isinstance(value[0], StoredColumn):
        return "{" + _columns(value) + "}"
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value.to_json() if hasattr(value, "to_json") else value)
