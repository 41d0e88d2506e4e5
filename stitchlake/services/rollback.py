"""Rollback (DESIGN §6): undo failed writes through their markers, or the latest deltacommit on request.

Order matters for crash safety: a completed instant's timeline file goes first (its files become invisible
at once), then its data files, then the rest of the instant. The rollback instant is requested with its full
plan before anything is deleted, so a crashed rollback is finished by the next run instead of half-done.
A crashed compaction is not rolled back: its partial files are removed and its plan is kept to run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.markers import delete_markers, marked_files
from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.timeline.instant import Action, Instant, State, pending_file_name
from stitchlake.timeline.timeline import Timeline, delete_instant, timeline_path
from stitchlake.transaction import Transaction, refuse_while_undoing, undone_by

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
    """Every file an instant wrote or started to write: its markers, plus what its metadata lists."""
    paths = set(marked_files(table.storage, instant.requested))
    if instant.is_completed:
        meta = timeline.metadata(instant)
        paths |= {entry["path"] for entry in meta.get("added", [])}
        for key in ("quarantine", "keys_file", "erased_file"):
            if meta.get(key):
                paths.add(meta[key])
    return sorted(paths)


def _target_json(table: Table, timeline: Timeline, instant: Instant) -> dict[str, Any]:
    return {
        "requested": instant.requested,
        "action": instant.action,
        "state": instant.state.label,
        "completed": instant.completed,
        "files": files_of(table, timeline, instant),
    }


def undo(table: Table, target: dict[str, Any]) -> int:
    """Remove one instant and its files (idempotent: a re-run after a crash finishes the job)."""
    storage = table.storage
    instant = Instant(target["requested"], target["action"], State[target["state"].upper()], target["completed"])
    if instant.completed:
        storage.delete(timeline_path(instant.file_name))
    deleted = sum(1 for path in target["files"] if storage.delete(path))
    delete_markers(storage, instant.requested)
    heartbeats.delete(storage, instant.requested)
    if instant.action == Action.ERASE:
        from stitchlake.services.erase import ERASE_DIR

        storage.delete_tree(f"{ERASE_DIR}/{instant.requested}")
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


def _run(
    table: Table, timeline: Timeline, targets: list[Instant], resets: list[Instant], reason: str
) -> RollbackResult:
    if not targets and not resets:
        return RollbackResult(None, message="nothing to roll back")
    plan = [_target_json(table, timeline, t) for t in targets]
    txn = Transaction.begin(
        table,
        Action.ROLLBACK,
        {"targets": plan, "reason": reason, "reset_compactions": [r.requested for r in resets]},
        busy_check=_unchanged(table, [*targets, *resets]),
    )
    deleted = sum(undo(table, target) for target in plan)
    deleted += sum(reset_compaction(table, r) for r in resets)
    done = txn.complete(
        {
            "rolled_back": [t["requested"] for t in plan],
            "reset_compactions": [r.requested for r in resets],
            "deleted_files": [p for t in plan for p in t["files"]],
            "reason": reason,
        }
    )
    return RollbackResult(
        done.requested,
        [t.requested for t in targets],
        [r.requested for r in resets],
        deleted,
        f"rolled back {len(targets)} instant(s), reset {len(resets)} crashed compaction(s), deleted {deleted} file(s)",
    )


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


#: Crashed instants of these actions are finished, not undone: half a deletion cannot be taken back.
FINISHED_NOT_UNDONE = (Action.ROLLBACK, Action.CLEAN, Action.RESTORE)


def failed_instants(table: Table, timeline: Timeline) -> tuple[list[Instant], list[Instant], list[Instant]]:
    """Pending instants whose writer is dead: (to roll back, crashed compactions to reset, ones to finish)."""
    targets, resets, unfinished = [], [], []
    for instant in timeline.pending():
        if not expired(table, instant):
            continue
        if instant.action == Action.COMPACTION:
            if instant.state is State.INFLIGHT:
                resets.append(instant)
        elif instant.action in FINISHED_NOT_UNDONE:
            unfinished.append(instant)
        else:
            targets.append(instant)
    return targets, resets, unfinished


def finish_crashed(table: Table, instants: list[Instant]) -> None:
    """Complete crashed rollbacks, cleans and restores from their recorded plans.

    Restores go first: a restore's plan takes back every instant that was pending when it began, crashed
    rollbacks and cleans included, and resuming one of those while the restore is pending is refused (it is
    being undone), so taking them in time order would wait on each other forever. Whatever a pending restore
    or rollback already covers is left to it.
    """
    from stitchlake.services.clean import finish_clean
    from stitchlake.services.savepoint import finish_restore

    for instant in sorted(instants, key=lambda i: (i.action != Action.RESTORE, i.requested)):
        timeline = table.timeline()
        current = timeline.get(instant.requested)
        if current is None or current.is_completed or undone_by(timeline, instant.requested) is not None:
            continue
        if instant.action == Action.ROLLBACK:
            for target in timeline.requested_content(instant).get("targets", []):
                undo(table, target)
            txn = Transaction.resume(table, instant, "rollback")
            txn.complete(
                {
                    "rolled_back": [t["requested"] for t in timeline.requested_content(instant)["targets"]],
                    "resumed": True,
                }
            )
        elif instant.action == Action.CLEAN:
            finish_clean(table, timeline, instant)
        else:
            finish_restore(table, timeline, instant)


def rollback_failed(table: Table) -> RollbackResult:
    """Roll back every pending instant whose heartbeat expired (never a live writer's)."""
    table.require()
    timeline = table.timeline()
    targets, resets, unfinished = failed_instants(table, timeline)
    finish_crashed(table, unfinished)
    return _run(table, timeline, targets, resets, "failed writes (expired heartbeats)")


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
        # The plan (requested content) lists the logs a rewrite merges, whether it is pending or completed.
        plan = timeline.requested_content(other)
        absorbed = {log["path"] for op in plan.get("operations", []) for log in op.get("logs", [])}
        if other.action == Action.ERASE and other.is_completed and (other.completed or "") > (target.completed or ""):
            absorbed |= files
        if absorbed & files:
            raise UsageError(
                f"deltacommit {target.requested} was absorbed by {other.action} {other.requested} "
                f"({other.state.label}); rolling it back would leave that rewrite inconsistent. "
                "Restore a savepoint taken before it instead"
            )
    for savepoint in timeline.completed([Action.SAVEPOINT]):
        pinned = str(timeline.metadata(savepoint).get("savepoint_of", ""))
        if pinned >= (target.completed or ""):
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
        if target.action in FINISHED_NOT_UNDONE:
            raise UsageError(
                f"{target.requested} is a crashed {target.action}; it cannot be undone, only finished: "
                "run `stitch rollback --failed`"
            )
        return _run(table, timeline, [target], [], f"requested rollback of {target.action} {target.requested}")
    _refuse_completed(table, timeline, target)
    return _run(table, timeline, [target], [], f"requested rollback of deltacommit {target.requested}")
