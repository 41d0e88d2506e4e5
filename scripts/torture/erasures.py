"""Erases in the oracle: which events of the consumed landing files an erase took away.

An erase removes every event of its keys committed before its own commit, and events committed after it create
the key again (design.md §9). So the reference merge of a state drops, from each landing file its deltacommit
consumed, the keys of every erase of that state that completed after that deltacommit did. A deltacommit that
completed while the erase ran and wrote one of its keys must have made the erase refuse to publish; had one
slipped through, its events would be dropped here and kept in the table, and the read would be a violation.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from scripts.torture.common import STREAMS, open_torture_table, read_lines
from scripts.torture.tablefiles import Seen, sources_of

if TYPE_CHECKING:
    from scripts.torture.oracle import History

#: stream -> landing file -> the keys whose events in that file an erase took away.
Drops = dict[str, dict[str, frozenset[int]]]


@dataclass(frozen=True)
class Erase:
    requested: str
    completed: str
    keys: frozenset[int]


def erase_keys(work: Path, history: History) -> dict[str, frozenset[int]]:
    """The keys of every erase the run made, by instant: from the eraser's log, else (killed before it logged)
    from the keys file the erase keeps in the table. An erase undone since may have neither."""
    found: dict[str, frozenset[int]] = {}
    for path in sorted((work / "logs").glob("eraser*.jsonl")):
        for record in read_lines(path):
            if record.get("event") == "erase" and record.get("instant"):
                found[str(record["instant"])] = frozenset(int(k) for k in record.get("keys") or [])
    storage = open_torture_table(work).storage
    instants = [*history.active.values(), *(seen for seen, _meta, _batch in history.archived.values())]
    for requested in {s.requested for s in instants if s.action == "erase"} - set(found):
        keys_file = history.meta(requested).get("keys_file")
        if not keys_file:
            continue
        try:
            keys = pq.read_table(io.BytesIO(storage.read_bytes(str(keys_file))), columns=["order_id"])
        except (FileNotFoundError, OSError):
            continue
        found[requested] = frozenset(int(k) for k in keys.column("order_id").to_pylist())
    return found


def erases_of(instants: Iterable[Seen], keys: Mapping[str, frozenset[int]]) -> tuple[list[Erase], list[str]]:
    """The erases among `instants` with their keys, and the erases whose keys are not known."""
    chosen: dict[str, Seen] = {s.requested: s for s in instants if s.action == "erase"}
    known = [Erase(s.requested, s.completed, keys[r]) for r, s in sorted(chosen.items()) if r in keys]
    return known, sorted(r for r in chosen if r not in keys)


def archived_times(history: History) -> dict[tuple[str, str], str]:
    """(stream, landing file) -> when the archived deltacommit that consumed it completed."""
    found: dict[tuple[str, str], str] = {}
    for seen, meta, _batch in history.archived.values():
        if seen.action == "deltacommit":
            for name in sources_of(meta):
                found[(str(meta.get("stream")), name)] = seen.completed
    return found


def dropped(files: Iterable[tuple[str, str, str]], erases: list[Erase]) -> Drops:
    """Per (stream, landing file, its deltacommit's completion): the keys of the erases that completed after it."""
    out: Drops = {stream: {} for stream in STREAMS}
    for stream, name, completed in files:
        gone = frozenset().union(*(e.keys for e in erases if completed < e.completed))
        if gone:
            out.setdefault(stream, {})[name] = gone
    return out


def drop_key(drops: Drops) -> Any:
    """A hashable form of `drops` for the reference's cache."""
    return tuple(sorted((s, n, tuple(sorted(k))) for s, files in drops.items() for n, k in files.items()))
