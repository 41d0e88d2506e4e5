"""Savepoints: named, clean-proof snapshots of a completed instant (DESIGN §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Action
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table import Table


def savepoint_time(table: Table, timeline: Timeline, name: str) -> str | None:
    """The completion time a savepoint name pins, or None if `name` names no savepoint."""
    if is_time(str(name)):
        return None
    for instant in reversed(timeline.completed([Action.SAVEPOINT])):
        meta = timeline.metadata(instant)
        if meta.get("name") == name:
            return str(meta["savepoint_of"])
    return None
