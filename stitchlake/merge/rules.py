"""The merge rules of design.md §2, per stream, as vectorised kernels. The only place they live.

Every file holds *summaries*: for each key, the winning version of the stream's group, whether that
winner is a delete, and in `nulls: ignore` mode also the latest tombstone and the version each column's
value came from. A raw event is simply a summary of one event. Merging summaries is a max over a total
order per (key, group) — commutative, associative and idempotent — so the result depends only on the set of
committed events: never on file order, on where compaction cut, or on when it ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.merge.version import (
    INT64_MIN,
    Ranks,
    Version,
    group_argmax,
    is_valid,
    lex_greater,
    take,
)
from stitchlake.types import contiguous

OVERWRITE = "overwrite"
IGNORE = "ignore"


@dataclass
class StreamRows:
    """Summaries of one stream's group, one per row (rows may repeat a key until merged)."""

    #: Version of the group's winning event.
    version: Version
    #: The winning event is a delete (the group is a tombstone).
    deleted: np.ndarray
    #: The stream's own columns; null for tombstoned groups.
    values: pa.Table
    #: `nulls: ignore` only: version of the latest delete (meaningful where `has_tomb`).
    tomb: Version | None = None
    has_tomb: np.ndarray | None = None
    #: `nulls: ignore` only: version each column's value came from (meaningful where the value is not null).
    col_versions: dict[str, Version] | None = None
    #: What ranked ordering components index, shared by every version of this merge (see `merge.version`).
    ranks: Ranks = ()
    #: Readers' merges only (`merge(..., versions=False)`): `values` are still the unmerged rows, and summary i's
    #: value of column c is `values[c][picks[c][i]]` (-1: null). The values are gathered once, for the rows a
    #: reader shows (`column`), instead of once by the merge and again by the reader.
    picks: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.deleted)

    def column(self, name: str, rows: np.ndarray) -> pa.Array:
        """Column `name` of the summaries `rows` (-1: null)."""
        source = self.values.column(name)
        if self.picks is not None and len(self.picks[name]):
            shown = rows >= 0
            rows = np.where(shown, self.picks[name][np.where(shown, rows, 0)], -1)
        absent = rows < 0
        return contiguous(pc.take(source, pa.array(rows, mask=absent) if absent.any() else pa.array(rows)))

    def take(self, rows: np.ndarray) -> StreamRows:
        return StreamRows(
            version=take(self.version, rows),
            deleted=self.deleted[rows],
            values=self.values.take(pa.array(rows)),
            tomb=take(self.tomb, rows) if self.tomb is not None else None,
            has_tomb=self.has_tomb[rows] if self.has_tomb is not None else None,
            col_versions=(
                {name: take(v, rows) for name, v in self.col_versions.items()}
                if self.col_versions is not None
                else None
            ),
            ranks=self.ranks,
        )


def events(values: pa.Table, version: Version, deleted: np.ndarray, nulls: str, ranks: Ranks = ()) -> StreamRows:
    """Raw events as summaries: a delete event's own column values never count."""
    if deleted.any():
        keep = pa.array(~deleted)
        values = pa.table(
            {
                name: pc.if_else(keep, column, pa.nulls(len(column), column.type))
                for name, column in zip(values.column_names, values.columns, strict=True)
            }
        )
    rows = StreamRows(version=version, deleted=deleted, values=values, ranks=ranks)
    if nulls == OVERWRITE:
        return rows
    rows.tomb, rows.has_tomb = version, deleted
    rows.col_versions = dict.fromkeys(values.column_names, version)
    return rows


def concat(parts: list[StreamRows]) -> StreamRows:
    """Stack summaries of the same stream (from several files)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    rows = StreamRows(
        version=_stack([p.version for p in parts]),
        deleted=np.concatenate([p.deleted for p in parts]),
        values=pa.concat_tables([p.values for p in parts]),
        ranks=first.ranks,  # every part of one merge is ranked against the same dictionaries
    )
    if first.col_versions is None:  # nulls: overwrite
        return rows
    rows.tomb = _stack([p.tomb for p in parts if p.tomb is not None])
    rows.has_tomb = np.concatenate([p.has_tomb for p in parts if p.has_tomb is not None])
    rows.col_versions = {
        name: _stack([p.col_versions[name] for p in parts if p.col_versions is not None]) for name in first.col_versions
    }
    return rows


def _stack(versions: list[Version]) -> Version:
    return tuple(np.concatenate(components) for components in zip(*versions, strict=True))


def merge(
    rows: StreamRows, keys: np.ndarray, n_keys: int, nulls: str, versions: bool = True
) -> tuple[np.ndarray, StreamRows]:
    """Merge summaries by key id. Returns the key ids that have a group, and one summary per such key.

    `versions=False` is for readers, which only show values: the merged summaries then carry no versions
    (empty), which saves a gather per version component; they cannot be written as a base or log file.
    """
    winner = group_argmax(keys, rows.version, n_keys)
    present = np.flatnonzero(winner >= 0)
    chosen = winner[present]
    if nulls == OVERWRITE:
        if not versions:
            picks = dict.fromkeys(rows.values.column_names, chosen)
            return present, StreamRows(
                version=(), deleted=rows.deleted[chosen], values=rows.values, ranks=rows.ranks, picks=picks
            )
        return present, rows.take(chosen)
    return present, _merge_ignore(rows, keys, n_keys, present, chosen, versions)


def _merge_ignore(
    rows: StreamRows, keys: np.ndarray, n_keys: int, present: np.ndarray, chosen: np.ndarray, versions: bool = True
) -> StreamRows:
    """`nulls: ignore`: per column, the highest-version non-null value among events newer than the tombstone.

    Fast paths, same result: with no tombstone at all every event is "newer"; and a value's version never exceeds
    its row's (it came from one of the events the row summarises), so where a key's row winner holds an eligible
    value of the row's own version, nothing can beat it: only the other keys search their rows.
    """
    assert rows.tomb is not None and rows.has_tomb is not None and rows.col_versions is not None
    any_tomb = bool(rows.has_tomb.any())
    if any_tomb:
        tomb_winner = group_argmax(keys, rows.tomb, n_keys, rows=np.flatnonzero(rows.has_tomb))
        key_has_tomb = tomb_winner >= 0
        safe = np.where(key_has_tomb, tomb_winner, 0)
        key_tomb = tuple(np.where(key_has_tomb, c[safe], INT64_MIN) for c in rows.tomb)
        row_has_tomb = key_has_tomb[keys]
        row_tomb = tuple(c[keys] for c in key_tomb)
        tomb = tuple(c[present] for c in key_tomb)
        has_tomb = key_has_tomb[present]
    else:
        tomb = tuple(np.full(len(present), INT64_MIN, dtype=np.int64) for _ in rows.tomb)
        has_tomb = np.zeros(len(present), dtype=bool)

    columns: dict[str, pa.Array] = {}
    picks: dict[str, np.ndarray] = {}
    col_versions: dict[str, Version] = {}
    for name in rows.values.column_names:
        column = rows.values.column(name)
        version = rows.col_versions[name]
        eligible = is_valid(column)
        if any_tomb:
            eligible &= ~row_has_tomb | lex_greater(version, row_tomb)
        unbeatable = eligible
        if version is not rows.version:
            for component, own in zip(version, rows.version, strict=True):
                unbeatable = unbeatable & (component == own)
        settled = unbeatable[chosen]
        if settled.all():
            best = chosen
        else:
            open_keys = np.ones(n_keys, dtype=bool)
            open_keys[present[settled]] = False
            searched = group_argmax(keys, version, n_keys, rows=np.flatnonzero(eligible & open_keys[keys]))[present]
            best = np.where(settled, chosen, searched)
        if not versions:
            picks[name] = best
            continue
        found = best >= 0
        if found.all():
            columns[name] = pc.take(column, best)
            col_versions[name] = tuple(c[best] for c in version)
        else:
            columns[name] = pc.take(column, pa.array(best, mask=~found))
            col_versions[name] = tuple(np.where(found, c[np.where(found, best, 0)], 0) for c in version)
    if not versions:
        return StreamRows(version=(), deleted=rows.deleted[chosen], values=rows.values, ranks=rows.ranks, picks=picks)
    return StreamRows(
        ranks=rows.ranks,
        version=take(rows.version, chosen),
        deleted=rows.deleted[chosen],
        values=pa.table(columns, schema=rows.values.schema),
        tomb=tomb,
        has_tomb=has_tomb,
        col_versions=col_versions,
    )
