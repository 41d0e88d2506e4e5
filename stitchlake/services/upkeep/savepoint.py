"""Savepoints (design.md §4): pin the files a read as of one completed instant needs.

Cleaning leaves pinned files alone and `as_of=<savepoint name>` keeps working; `services.restore` brings the
table back to a savepoint's state. Creating and deleting one is metadata only: it never needs Spark.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.layout.fsview import FileSystemView
from stitchlake.services.upkeep.clean import needed_as_of
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import REWRITES
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import SavepointCommit, SavepointPlan
from stitchlake.timeline.savepoints import Savepoint, find, savepoints, summary
from stitchlake.timeline.timeline import Timeline, delete_instant

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

__all__ = ["Savepoint", "create", "delete", "list_savepoints"]

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")


def list_savepoints(table: TableHandle, timeline: Timeline | None = None) -> list[Savepoint]:
    return [summary(instant, commit) for instant, commit in savepoints(timeline or table.timeline())]


def create(table: TableHandle, instant_time: str | None = None, name: str | None = None) -> Savepoint:
    """Pin the state as of a completed instant (default: the latest data-changing one)."""
    table.require()
    if name is not None and (not NAME.match(name) or is_time(name)):
        raise UsageError(f"savepoint name {name!r}: use letters, digits, _ . - (not a bare instant time)")

    def plan(timeline: Timeline, _requested: str) -> SavepointPlan:
        if name is not None and any(commit.name == name for _i, commit in savepoints(timeline)):
            raise UsageError(f"a savepoint named {name!r} already exists; delete it first or pick another name")
        if timeline.pending([Action.CLEAN]):
            raise BusyError("a clean is running; create the savepoint after it finishes")
        if instant_time is None:
            target = timeline.latest_completed([Action.DELTACOMMIT, *REWRITES])
            if target is None:
                raise UsageError("the table has no completed commit to savepoint yet")
        else:
            target = timeline.get(instant_time)
            if target is None or not target.is_completed:
                raise NotFoundError(f"{instant_time} is not a completed instant on the active timeline")
        view = FileSystemView.build(timeline, load_checkpoint(table.storage))
        at = target.completed or ""
        view.latest_slices(at)  # raises if files that state needs were already cleaned
        return SavepointPlan(
            savepoint_of=at, instant=target.requested, name=name, files=tuple(sorted(needed_as_of(view, at)))
        )

    txn = Transaction.begin_planned(table, Action.SAVEPOINT, plan=plan)
    assert txn is not None and isinstance(txn.plan, SavepointPlan)
    content = txn.plan
    done = txn.complete(
        SavepointCommit(savepoint_of=content.savepoint_of, instant=content.instant, name=name, files=content.files)
    )
    return Savepoint(done.requested, name, content.savepoint_of, content.instant, len(content.files))


def delete(table: TableHandle, which: str) -> Savepoint:
    """Unpin a savepoint (its files become cleanable)."""
    table.require()
    instant, commit = find(table.timeline(), which)
    with table.lock() as lock:
        if table.timeline().get(instant.requested) is None:
            raise NotFoundError(f"savepoint {which!r} was deleted meanwhile")
        lock.fence()
        delete_instant(table.storage, instant)
    return summary(instant, commit)
