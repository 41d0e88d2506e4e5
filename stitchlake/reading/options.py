"""What a read returns, written once: the seven choices `read`, `scan`, `stitch read`, `stitch sql` and
`Table.to_duckdb` all take (a snapshot or read-optimized state, now or as of a time, or the changes between two
times; which columns; which rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from stitchlake.vocabulary import ReadMode


@dataclass(frozen=True)
class ReadOptions:
    """One read's choices; the defaults read the whole table as of now, logs merged."""

    mode: ReadMode | str = ReadMode.SNAPSHOT
    #: Time travel: an instant id, a time or a savepoint name.
    as_of: str | None = None
    #: The changes after `since` up to `until` (an incremental read, with `_op`).
    since: str | None = None
    until: str | None = None
    #: The columns to return (None: all).
    columns: Sequence[str] | None = None
    #: A filter (`reading.filters`: text, a list of texts, or a pyarrow expression).
    filter: Any = None
    #: With `since`/`until`: an update is a -U row then a +U row, a delete keeps its values.
    before_images: bool = False

    def with_columns(self, columns: Sequence[str] | None) -> ReadOptions:
        return replace(self, columns=columns)


class ReadKeywords(TypedDict, total=False):
    """`ReadOptions` as keyword arguments (`Table.read(mode, as_of=...)`), typed once for every caller."""

    as_of: str | None
    since: str | None
    until: str | None
    columns: Sequence[str] | None
    filter: Any
    before_images: bool
