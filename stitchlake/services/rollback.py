"""Rollback (DESIGN §6): undo failed writes through their markers, or the latest deltacommit on request.

Order matters for crash safety: a completed instant's timeline file goes first (its files become invisible
at once), then its data files, then the rest of the instant. The rollback instant is requested with its full
plan before anything is deleted, so a crashed rollback is finished by the next run instead of half-done.
A crashed compaction is not rolled back: its partial files are removed and its plan is kept to run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.markers import delete_markers, marked_files
from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.paths import erase_folder
from stitchlake.timeline.instant import Action, Instant, State, pending_file_name
from stitchlake.timeline.metadata import (
    EraseCommit,
    RewritePlan,
    RollbackCommit,
    RollbackPlan,
    UndoTarget,
    kind_of,
)
from stitchlake.timeline.savepoints import savepoints
from stitchlake.timeline.timeline import Timeline, delete_instant, timeline_path
from stitchlake.transaction import Transaction, refuse_while_undoing

if TYPE_CHECKING:
    from stitchlake.table import Table


@dataclass
class RollbackResult:
    instant: str | None
    rolled_back: list[str] = field(default_factory=list)
    reset_compactions: list[str] = field(default_factory=list)
    deleted_files: int = 0
    message: str = ""


def expired(table: Table, instant: Instant) -> bool:
    return heartbeats.is_expired(table.storage, instant.requested, table.config.concurrency.heartbeat.expire_s)


def files_of(table: Table, timeline: Timeline, instant: Instant) -> list[str]:
    """Every file an instant wrote or started to write: its markers, plus what its commit says it owns."""
    paths = set(marked_files(table.storage, instant.requested))
    if instant.is_completed:
        paths |= timeline.commit(instant).owned_files()
    return sorted(paths)


def target_of(table: Table, timeline: Timeline, instant: Instant) -> UndoTarget:
    """An instant to undo, with every file it wrote (recorded in the plan before anything is deleted)."""
    return UndoTarget(
        instant.requested,
        instant.action,
        instant.state.label,
        instant.completed,
        tuple(files_of(table, timeline, instant)),
    )


def undo(table: Table, target: UndoTarget) -> int:
    """Remove one instant and its files (idempotent: a re-run after a crash finishes the job)."""
    storage = table.storage
    instant = Instant(target.requested, target.action, State[target.state.upper()], target.completed)
    if instant.completed:
        storage.delete(timeline_path(instant.file_name))
    deleted = sum(1 for path in target.files if storage.delete(path))
    delete_markers(storage, instant.requested)
    heartbeats.delete(storage, instant.requested)
    if instant.action == Action.ERASE:
        storage.delete_tree(erase_folder(instant.requested))
    delete_instant(storage, instant)
    return deleted


def reset_compaction(table: Table, instant: Instant) -> int:
    """A crashed compaction: drop its partial files and go back to `requested` so it can run again."""
    storage = table.storage
    deleted = sum(1 for path in marked_files(storage, instant.requested) if storage.delete(path))
    delete_markers(storage, instant.requested)
    heartbeats.delete(storage, instant.requested)
    storage.delete(timeline_path(pending_file_name(instant.requested, instant.action, State.INFLIGHT)))
    return deleted


def run_rollback(
    table: Table, timeline: Timeline, targets: list[Instant], resets: list[Instant], reason: str
) -> RollbackResult:
    """One rollback instant undoing `targets` and resetting crashed compactions `resets`."""
    if not targets and not resets:
        return RollbackResult(None, message="nothing to roll back")
    plan = RollbackPlan(
        targets=tuple(target_of(table, timeline, t) for t in targets),
        reason=reason,
        reset_compactions=tuple(r.requested for r in resets),
    )
    txn = Transaction.begin(table, Action.ROLLBACK, plan, busy_check=_unchanged(table, [*targets, *resets]))
    deleted = sum(undo(table, target) for target in plan.targets)
    deleted += sum(reset_compaction(table, r) for r in resets)
    done = txn.complete(
        RollbackCommit(
            rolled_back=tuple(t.requested for t in plan.targets),
            reset_compactions=plan.reset_compactions,
            deleted_files=tuple(p for t in plan.targets for p in t.files),
            reason=reason,
        )
    )
    return RollbackResult(
        done.requested,
        [t.requested for t in targets],
        [r.requested for r in resets],
        deleted,
        f"rolled back {len(targets)} instant(s), reset {len(resets)} crashed compaction(s), deleted {deleted} file(s)",
    )


def finish_rollback(table: Table, instant: Instant) -> None:
    """Complete a crashed rollback from its recorded plan."""
    txn = Transaction.resume(table, instant, "rollback")
    plan = txn.plan
    assert isinstance(plan, RollbackPlan)
    for target in plan.targets:
        undo(table, target)
    txn.complete(RollbackCommit(rolled_back=tuple(t.requested for t in plan.targets), resumed=True))


def _unchanged(table: Table, chosen: list[Instant]) -> Callable[[Timeline], None]:
    """Under the lock, before the rollback is requested: every target is still as it was chosen.

    Targets are chosen from an earlier timeline; a presumed-dead writer may have published meanwhile, or a
    crashed compaction been taken over. Undoing those would delete committed or running work, so refuse.
    """

    def check(fresh: Timeline) -> None:
        if any(instant.is_completed for instant in chosen):  # undoing a commit: not while another undo runs
            refuse_while_undoing(fresh, "roll back a commit")
        for instant in chosen:
            now = fresh.get(instant.requested)
            if instant.is_completed:
                changed = now != instant
                if not changed:  # still safe? (not absorbed by a compaction planned meanwhile, still the latest)
                    _refuse_completed(table, fresh, instant)
            else:  # gone already is fine (undoing it again is a no-op); completed or alive again is not
                changed = now is not None and (now.is_completed or not expired(table, instant))
            if changed:
                raise BusyError(
                    f"{instant.action} {instant.requested} changed since it was chosen for rollback (it completed, "
                    "vanished or its writer is alive again); nothing was rolled back — run again"
                )

    return check


def _refuse_completed(table: Table, timeline: Timeline, target: Instant) -> None:
    if target.action != Action.DELTACOMMIT:
        raise UsageError(
            f"{target.action} {target.requested} is completed; only pending instants and the latest deltacommit can "
            "be rolled back. To undo it, restore a savepoint taken before it (`stitch savepoint restore`)"
        )
    latest = timeline.latest_completed([Action.DELTACOMMIT])
    if latest is None or latest.requested != target.requested:
        raise UsageError(
            f"deltacommit {target.requested} is not the latest one ({latest.requested if latest else '-'}); "
            "rolling back an older commit would silently drop newer data. Roll back the newer ones first, "
            "or restore a savepoint"
        )
    files = set(files_of(table, timeline, target))
    for other in timeline.instants:
        if other.action not in Action.REWRITES:
            continue
        # The plan lists the logs a rewrite merges, whether it is pending or completed.
        plan = timeline.plan(other)
        absorbed = plan.planned_files if isinstance(plan, RewritePlan) else set()
        completed_after = other.is_completed and (other.completed or "") > (target.completed or "")
        if completed_after and isinstance(timeline.commit(other), EraseCommit):
            absorbed |= files
        if absorbed & files:
            raise UsageError(
                f"deltacommit {target.requested} was absorbed by {other.action} {other.requested} "
                f"({other.state.label}); rolling it back would leave that rewrite inconsistent. "
                "Restore a savepoint taken before it instead"
            )
    for savepoint, commit in savepoints(timeline):
        if commit.savepoint_of >= (target.completed or ""):
            raise UsageError(
                f"deltacommit {target.requested} is pinned by savepoint {savepoint.requested}; "
                "delete the savepoint first (`stitch savepoint delete`)"
            )


def rollback(table: Table, instant_time: str) -> RollbackResult:
    """Roll back one instant: a pending one whose writer is dead, or the latest completed deltacommit."""
    table.require()
    timeline = table.timeline()
    target = timeline.get(instant_time)
    if target is None:
        raise NotFoundError(
            f"instant {instant_time} is not on the active timeline, so there is nothing to roll back; "
            "`stitch timeline show` lists the instants (a pending one of a dead writer, or the latest "
            "deltacommit, can be rolled back)"
        )
    if not target.is_completed:
        if not expired(table, target):
            raise BusyError(
                f"{target.action} {target.requested} is being run by a live process (its heartbeat is fresh); "
                "stop that process first, or wait for it — `stitch rollback --failed` only touches dead writers"
            )
        if kind_of(target.action).finished_not_undone:
            raise UsageError(
                f"{target.requested} is a crashed {target.action}; it cannot be undone, only finished: "
                "run `stitch rollback --failed`"
            )
        return run_rollback(table, timeline, [target], [], f"requested rollback of {target.action} {target.requested}")
    _refuse_completed(table, timeline, target)
    return run_rollback(table, timeline, [target], [], f"requested rollback of deltacommit {target.requested}")
