"""Savepoints (design.md §4): pin the files a read as of one completed instant needs.

Cleaning leaves pinned files alone and `as_of=<savepoint name>` keeps working; `services.restore` brings the
table back to a savepoint's state. Creating and deleting one is metadata only: it never needs Spark.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from stitchlake.concurrency.heartbeat import is_expired
from stitchlake.errors import BusyError, ConflictError, NotFoundError, StitchError, UsageError
from stitchlake.layout.fsview import FileSystemView
from stitchlake.services.upkeep.clean import needed_as_of
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import UNDONE_BY_RESTORE
from stitchlake.timeline.archive import horizon_of, load_checkpoint
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import CleanCommit, SavepointCommit, SavepointPlan
from stitchlake.timeline.savepoints import Savepoint, find, purge_after, savepoints, summary
from stitchlake.timeline.timeline import Timeline, delete_instant

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

__all__ = ["Savepoint", "create", "delete", "list_savepoints"]

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")


def list_savepoints(table: TableHandle, timeline: Timeline | None = None) -> list[Savepoint]:
    return [summary(instant, commit) for instant, commit in savepoints(timeline or table.timeline())]


def create(table: TableHandle, instant_time: str | None = None, name: str | None = None) -> Savepoint:
    """Pin the state as of a completed instant (default: the latest one a restore would undo, savepoints aside:
    a commit, rewrite or alter)."""
    table.require()
    if name is not None and (not NAME.match(name) or is_time(name)):
        raise UsageError(f"savepoint name {name!r}: use letters, digits, _ . - (not a bare instant time)")

    def plan(timeline: Timeline, requested: str) -> SavepointPlan:
        if name is not None and any(commit.name == name for _i, commit in savepoints(timeline)):
            raise UsageError(f"a savepoint named {name!r} already exists; delete it first or pick another name")
        if name is not None:
            _refuse_name_in_the_making(table, timeline, name, requested)
        if timeline.pending([Action.CLEAN]):
            raise BusyError("a clean is running; create the savepoint after it finishes")
        if instant_time is None:
            # Every action a restore to it would undo but savepoints: a savepoint made after an alter pins it too.
            target = timeline.latest_completed([a for a in UNDONE_BY_RESTORE if a != Action.SAVEPOINT])
            if target is None:
                raise UsageError("the table has no completed commit to savepoint yet")
        else:
            target = timeline.get(instant_time)
            if target is None or not target.is_completed:
                raise NotFoundError(f"{instant_time} is not a completed instant on the active timeline")
        view = FileSystemView.build(timeline, load_checkpoint(table.storage))
        at = target.completed or ""
        _refuse_purged(timeline, at, UsageError)
        view.latest_slices(at)  # raises if files that state needs were already cleaned
        return SavepointPlan(
            savepoint_of=at, instant=target.requested, name=name, files=tuple(sorted(needed_as_of(view, at)))
        )

    txn = Transaction.begin_planned(table, Action.SAVEPOINT, plan=plan)
    assert txn is not None and isinstance(txn.plan, SavepointPlan)
    content = txn.plan
    try:
        done = txn.complete(
            SavepointCommit(savepoint_of=content.savepoint_of, instant=content.instant, name=name, files=content.files),
            functools.partial(_still_pinnable, content),
        )
    except BaseException:
        txn.abort()  # metadata only: nothing to undo but the instant
        raise
    return Savepoint(done.requested, name, content.savepoint_of, content.instant, len(content.files))


def _refuse_purged(timeline: Timeline, at: str, error: type[StitchError]) -> None:
    purge = purge_after(timeline, at)
    if purge is not None:
        raise error(
            f"erase {purge.requested} (--purge) completed after the state of {at}: the keys it erased are gone from "
            "every older state, so no savepoint can pin one; nothing was saved. Savepoint a state from after it"
        )


def _refuse_name_in_the_making(table: TableHandle, timeline: Timeline, name: str, own: str) -> None:
    """Two savepoints of one name would pin two states, and `--as-of NAME` and `restore --name NAME` could each take
    another: a savepoint of the name being made by a live process refuses this one (exit 4). One whose process died
    does not (it would refuse every retry until a recovery): both cannot complete, since completion checks the name
    again under the lock."""
    expire_s = table.config.concurrency.heartbeat.expire_s
    for other in timeline.pending([Action.SAVEPOINT]):
        planned = timeline.plan(other) if other.requested != own else None
        if isinstance(planned, SavepointPlan) and planned.name == name:
            if is_expired(table.storage, other.requested, expire_s):
                continue
            raise BusyError(
                f"savepoint {other.requested} named {name!r} is being made; wait for it, or pick another name"
            )


def _still_pinnable(plan: SavepointPlan, timeline: Timeline, own: Instant) -> None:
    """Under the lock at completion: what the plan pins is still there and may still be kept, and its name is still
    its own. A purge that completed meanwhile deletes the savepoints it finds first, but not one completing after it
    looked; a clean (or a purge's) that completed since this savepoint was planned may have deleted files it pins."""
    taken = [i.requested for i, c in savepoints(timeline) if plan.name is not None and c.name == plan.name]
    if taken:
        raise ConflictError(f"savepoint {taken[0]} named {plan.name!r} was made meanwhile; nothing was saved")
    _refuse_purged(timeline, plan.savepoint_of, ConflictError)
    horizon = horizon_of(timeline.storage)
    if horizon is not None and plan.savepoint_of < horizon:
        raise ConflictError(
            f"an archive moved the timeline past {plan.savepoint_of} while the savepoint was made; nothing was saved"
        )
    pinned = set(plan.files)
    for instant in timeline.completed([Action.CLEAN], since=own.requested):
        commit = timeline.commit(instant)
        gone = pinned & set(commit.deleted) if isinstance(commit, CleanCommit) else set()
        if gone:
            raise ConflictError(
                f"clean {instant.requested} deleted {len(gone)} file(s) the state of {plan.savepoint_of} needs while "
                f"the savepoint was made (e.g. {sorted(gone)[0]}); nothing was saved"
            )


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
