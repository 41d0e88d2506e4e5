"""Restore (design.md §4): bring the table back to a savepoint's state.

Every data-changing instant completed after the savepoint (and every pending one) is undone, newest first, under
one `restore` instant whose plan is recorded first, so a crashed restore is finished, never left half-way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.services.offsets import rewound
from stitchlake.services.publish import Published, publish_after
from stitchlake.services.rewrites.purge import finish_purges
from stitchlake.services.rewrites.rescale import buckets_reminder
from stitchlake.services.undo.rollback import expired, finish_rollback, target_of, undo
from stitchlake.services.upkeep.clean import finish_clean
from stitchlake.table.guards import undone_by
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import UNDONE_BY_RESTORE, kind_of
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import EraseCommit, RestoreCommit, RestorePlan, SavepointCommit
from stitchlake.timeline.savepoints import find, unfinished_purges
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


@dataclass
class RemovedSavepoint:
    """A savepoint a restore removed: it was taken after the state restored to, and a restore undoes every instant
    completed after that state, savepoints included (one that pinned a later state pins nothing any more)."""

    instant: str
    name: str | None
    #: The state it pinned; None when a crashed restore is finished and its record is already gone.
    savepoint_of: str | None
    reason: str


@dataclass
class RestoreResult:
    instant: str
    savepoint_of: str
    undone: list[str] = field(default_factory=list)
    deleted_files: int = 0
    message: str = ""
    #: The published tables brought back too.
    published: list[Published] = field(default_factory=list)
    #: The savepoints it removed (among `undone`), and why: said, never silently.
    removed_savepoints: list[RemovedSavepoint] = field(default_factory=list)
    #: The table's bucket count when the restore changed it (it undid a whole-table rescale), else None: the
    #: config must say it from now on.
    buckets: int | None = None
    #: The erases it undid (`<instant>: <n> key(s)`): their keys read again, which an operator must hear of.
    undone_erases: list[str] = field(default_factory=list)
    #: Crashed cleans and rollbacks it finished first (`"<action> <instant>"`).
    finished: list[str] = field(default_factory=list)


def restore(table: TableHandle, which: str, force: bool = False) -> RestoreResult:
    """Bring the table back to a savepoint's state."""
    table.require()
    finished = finish_unfinished(table) + finish_purges(table)  # a savepoint an unfinished purge left holds its keys
    result = _execute(table, begin_restore(table, which, force))
    if finished:
        result.finished = finished
        result.message = f"finished crashed {', '.join(finished)} from the recorded plan first\n{result.message}"
    return result


def _unfinished(timeline: Timeline) -> list[Instant]:
    """Pending cleans and rollbacks: a restore cannot undo them (the files a crashed clean deleted are named in
    its plan only; undoing it would leave reads of older states failing on missing files), only finish them."""
    return [i for i in timeline.pending() if i.action != Action.RESTORE and kind_of(i.action).finished_not_undone]


def finish_unfinished(table: TableHandle) -> list[str]:
    """Finish the crashed cleans and rollbacks before a restore plans (`"<action> <instant>"`); live ones are left
    for the plan to refuse."""
    finished = []
    timeline = table.timeline()
    for instant in _unfinished(timeline):
        if not expired(table, instant) or undone_by(timeline, instant.requested) is not None:
            continue  # live, or a pending restore's older plan takes it back: left to those
        (finish_clean if instant.action == Action.CLEAN else finish_rollback)(table, instant)
        finished.append(f"{instant.action} {instant.requested}")
    return finished


def begin_restore(table: TableHandle, which: str, force: bool = False) -> Transaction:
    """Check, plan and request the restore (its whole plan is recorded before anything is undone)."""
    table.require()
    timeline = table.timeline()
    savepoint, commit = find(timeline, which)
    at = commit.savepoint_of
    view = table.view(timeline)
    if view.horizon is not None and at < view.horizon:
        raise UsageError(f"savepoint {which} is older than the archived timeline ({view.horizon}); cannot restore")

    def refuse_live(pending: list[Instant], own: str | None = None) -> None:
        live = [i for i in pending if i.requested != own and not expired(table, i)]
        if live and not force:
            shown = ", ".join(f"{i.action} {i.requested}" for i in live)
            raise BusyError(
                f"live writers are running ({shown}); stop them or wait, or pass --force to roll them back too"
            )

    refuse_live(timeline.pending())  # at once, before the lock

    def plan(fresh: Timeline, requested: str) -> RestorePlan:
        refuse_live(fresh.pending(), requested)  # again under the lock: one that began since is not undone unasked
        if fresh.get(savepoint.requested) is None:  # e.g. an erase's purge deleted it: it pinned erased keys
            raise NotFoundError(f"savepoint {which!r} was deleted meanwhile; nothing was restored")
        purging = unfinished_purges(fresh, at)
        if purging:  # its savepoints still hold the keys, and this restore would take the erase back too
            raise BusyError(
                f"erase {purging[0].requested} (--purge) is still purging older copies of its keys; a restore to a "
                "state before it would bring them back. Wait for it (if its process is gone, `stitch rollback "
                "--failed` finishes it); nothing was restored"
            )
        unfinished = _unfinished(fresh)
        if unfinished:
            shown = ", ".join(f"{i.action} {i.requested}" for i in unfinished)
            raise BusyError(
                f"{shown} is running; a restore cannot undo it, only wait for it to complete (if its process is "
                "gone, `stitch rollback --failed` finishes it once its heartbeat expires); nothing was restored"
            )
        undone = [i for i in fresh.completed(UNDONE_BY_RESTORE, since=at) if i.requested != savepoint.requested] + [
            i for i in fresh.pending() if i.action != Action.RESTORE
        ]
        undone.sort(key=lambda i: i.completed or i.requested, reverse=True)
        targets = tuple(target_of(table, fresh, i) for i in undone)
        positions = rewound(table, fresh, undone)
        return RestorePlan(savepoint=which, savepoint_of=at, targets=targets, positions=positions)

    txn = Transaction.begin_planned(table, Action.RESTORE, plan=plan)
    assert txn is not None
    return txn


def _execute(table: TableHandle, txn: Transaction) -> RestoreResult:
    plan = txn.plan
    assert isinstance(plan, RestorePlan)
    said = table.config.table.buckets
    before = table.timeline()  # read before undoing: the savepoints' and erases' records go with them
    removed = _removed_savepoints(table, before, plan)
    erases = _undone_erases(before, plan)
    deleted = sum(undo(table, target) for target in plan.targets)
    undone = tuple(t.requested for t in plan.targets)
    done = txn.complete(
        RestoreCommit(savepoint=plan.savepoint, savepoint_of=plan.savepoint_of, undone=undone, positions=plan.positions)
    )
    table.follow_buckets()  # a rescale it undid gives the table its old bucket count back
    # What was published after the savepoint shows undone rows: every published format shows the restored state.
    published = publish_after(table, f"restore {done.requested}")
    message = f"restored to {plan.savepoint_of}: undid {len(undone)} instant(s)"
    if removed:
        listed = "; ".join(f"{item.name or item.instant} ({item.reason})" for item in removed)
        message += f"\nremoved {len(removed)} savepoint(s) taken after that state: {listed}"
    if erases:
        message += (
            f"\nthe restore undid erase {'; erase '.join(erases)}: the keys they erased read again; erase them "
            "again (`stitch delete --keys`, with --purge for a GDPR request) if they must stay gone"
        )
    alters = [t.requested for t in plan.targets if t.action == Action.ALTER and _was_completed(before, t.requested)]
    if alters:
        message += (
            f"\nthe restore undid alter {', '.join(alters)}: the table has its schema from before again, and a config "
            "with the alter is ahead of it (`stitch alter` applies it again)"
        )
    now = table.config.table.buckets
    reminder = buckets_reminder(table, said)
    if now != said:
        message += f"\nthe restore undid a rescale: the table has {now} buckets per partition again"
        message += f"; {reminder}" if reminder else ""
    return RestoreResult(
        done.requested,
        plan.savepoint_of,
        list(undone),
        deleted,
        message,
        published,
        removed,
        now if now != said else None,
        erases,
    )


def _was_completed(timeline: Timeline, requested: str) -> bool:
    """Whether an instant the restore undid had completed (a pending one it rolled back changed nothing yet)."""
    found = timeline.get(requested)
    return found is not None and found.is_completed


def _undone_erases(timeline: Timeline, plan: RestorePlan) -> list[str]:
    """The completed erases among the restore's targets, as `<instant>: <n> key(s)` (just `<instant>` for one a
    crashed restore had already undone: its record went with it, the plan still names it)."""
    found = []
    for target in plan.targets:
        if target.action != Action.ERASE or target.completed is None:
            continue
        instant = timeline.get(target.requested)
        commit = timeline.commit(instant) if instant is not None and instant.is_completed else None
        counted = f": {commit.erased_keys} key(s)" if isinstance(commit, EraseCommit) else ""
        found.append(f"{target.requested}{counted}")
    return found


def _removed_savepoints(table: TableHandle, timeline: Timeline, plan: RestorePlan) -> list[RemovedSavepoint]:
    """The savepoints among the instants the restore undoes, each with why it goes."""
    out = []
    for target in plan.targets:
        if target.action != Action.SAVEPOINT:
            continue
        instant = timeline.get(target.requested)
        commit = timeline.commit(instant) if instant is not None and instant.is_completed else None
        pinned = commit.savepoint_of if isinstance(commit, SavepointCommit) else None
        if pinned is not None and pinned > plan.savepoint_of:
            reason = f"it pinned {pinned}, a state this restore undid"
        elif pinned is not None:
            reason = f"it pinned {pinned} and was taken after {plan.savepoint_of}: a restore undoes every later instant"
        else:
            reason = f"taken after {plan.savepoint_of}: a restore undoes every later instant"
        name = commit.name if isinstance(commit, SavepointCommit) else None
        out.append(RemovedSavepoint(target.requested, name, pinned, reason))
    return out


def finish_restore(table: TableHandle, instant: Instant) -> RestoreResult:
    """Finish a crashed restore from its recorded plan."""
    return _execute(table, Transaction.resume(table, instant, "restore"))
