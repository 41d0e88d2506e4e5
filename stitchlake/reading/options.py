"""What a read returns, written once: the seven choices `read`, `scan`, `stitch read`, `stitch sql` and
`Table.to_duckdb` all take (a snapshot or read-optimized state, now or as of a time, or the changes between two
times; which columns; which rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from stitchlake.errors import UsageError
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


def refuse_mixed_choices(
    mode: ReadMode, as_of: str | None, since: str | None, until: str | None, before_images: bool
) -> None:
    """Choices that do not go together (exit 2), one set of rules for every reader (`stitch read`, the API, Spark):
    read as one of them, any would be ignored without a word."""
    changes = since is not None or until is not None
    if as_of is not None and changes:
        raise UsageError("use either as_of (a snapshot) or since/until (changes), not both")
    if before_images and not changes:
        raise UsageError("before_images is for change reads: give since and/or until")
    if changes and mode is ReadMode.READ_OPTIMIZED:
        raise UsageError(
            "mode read_optimized reads base files as of now or as_of; a change read (since/until) merges the logs "
            "that hold the changes: drop the mode"
        )


class ReadKeywords(TypedDict, total=False):
    """`ReadOptions` as keyword arguments (`Table.read(mode, as_of=...)`), typed once for every caller."""

    as_of: str | None
    since: str | None
    until: str | None
    columns: Sequence[str] | None
    filter: Any
    before_images: bool
