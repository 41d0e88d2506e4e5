"""A brute-force reference model of design.md §2, written independently of stitchlake's merge code.

Plain Python, one event at a time: for every key and stream, take the maximum by version. Tests compare the
real table against this model; if the two ever disagree, one of them is wrong about the product's promise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamModel:
    name: str
    columns: tuple[str, ...]
    ordering: tuple[str, ...] = ()
    nulls: str = "overwrite"
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    stream: str
    key: tuple[Any, ...]
    values: dict[str, Any]
    deleted: bool
    commit: int  # completion order (any increasing number)
    pos: int  # position within its batch


@dataclass(frozen=True)
class Erase:
    keys: frozenset[tuple[Any, ...]]
    commit: int


def _version(stream: StreamModel, event: Event) -> tuple[Any, ...]:
    return (*(event.values[name] for name in stream.ordering), event.commit, event.pos)


def _group(stream: StreamModel, events: list[Event]) -> dict[str, Any] | None:
    """The group's values, or None if the stream never wrote the key or the group is a tombstone."""
    if not events:
        return None
    winner = max(events, key=lambda e: _version(stream, e))
    if winner.deleted:
        return None
    if stream.nulls == "overwrite":
        return {c: winner.values.get(c) for c in stream.columns}
    deletes = [e for e in events if e.deleted]
    tomb = max((_version(stream, e) for e in deletes), default=None)
    out: dict[str, Any] = {}
    for column in stream.columns:
        best = None
        for event in events:
            if event.deleted or event.values.get(column) is None:
                continue
            if tomb is not None and not _version(stream, event) > tomb:
                continue
            if best is None or _version(stream, event) > _version(stream, best):
                best = event
        out[column] = None if best is None else best.values[column]
    return out


def expected_rows(
    streams: list[StreamModel],
    events: list[Event],
    erases: list[Erase] = (),  # type: ignore[assignment]
    key_names: tuple[str, ...] = ("k",),
    upto: int | None = None,
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Key -> wide row, using only events (and erases) committed at or before `upto`."""
    visible = [e for e in events if upto is None or e.commit <= upto]
    cuts = [x for x in erases if upto is None or x.commit <= upto]
    keys = {e.key for e in visible}
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key in keys:
        cut = max((x.commit for x in cuts if key in x.keys), default=None)
        row: dict[str, Any] = dict(zip(key_names, key, strict=True))
        alive = False
        for stream in streams:
            mine = [e for e in visible if e.key == key and e.stream == stream.name and (cut is None or e.commit > cut)]
            group = _group(stream, mine)
            if group is None:
                row.update({c: stream.defaults.get(c) for c in stream.columns})
            else:
                alive = True
                row.update(group)
        if alive:
            table[key] = row
    return table
