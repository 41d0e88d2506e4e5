"""Rollback (design.md §6): undo failed writes through their markers, or on request the latest deltacommit of the
table, or of one stream.

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
from stitchlake.concurrency.markers import delete_marked, delete_markers, marked_files
from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.paths import erase_folder
from stitchlake.services.offsets import rewound
from stitchlake.table.guards import refuse_while_undoing
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import REWRITES, kind_of
from stitchlake.timeline.archive import horizon_of
from stitchlake.timeline.instant import Action, Instant, State, pending_file_name
from stitchlake.timeline.metadata import DeltaCommit, EraseCommit, RewritePlan, RollbackCommit, RollbackPlan, UndoTarget
from stitchlake.timeline.savepoints import savepoints
from stitchlake.timeline.timeline import Timeline, delete_instant, timeline_path

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


@dataclass
class RollbackResult:
    instant: str | None
    rolled_back: list[str] = field(default_factory=list)
    reset_compactions: list[str] = field(default_factory=list)
    deleted_files: int = 0
    message: str = ""
    #: Crashed restores, rollbacks and cleans finished from their recorded plans first ("restore <instant>").
    finished: list[str] = field(default_factory=list)


def expired(table: TableHandle, instant: Instant) -> bool:
    return heartbeats.is_expired(table.storage, instant.requested, table.config.concurrency.heartbeat.expire_s)


def files_of(table: TableHandle, timeline: Timeline, instant: Instant) -> list[str]:
    """Every file an instant wrote or started to write: its markers, plus what its commit says it owns."""
    paths = set(marked_files(table.storage, instant.requested))
    if instant.is_completed:
        paths |= timeline.commit(instant).owned_files()
    return sorted(paths)


def target_of(table: TableHandle, timeline: Timeline, instant: Instant) -> UndoTarget:
    """An instant to undo, with every file it wrote (recorded in the plan before anything is deleted)."""
    return UndoTarget(
        instant.requested,
        instant.action,
        instant.state,
        instant.completed,
        tuple(files_of(table, timeline, instant)),
    )


def undo(table: TableHandle, target: UndoTarget) -> int:
    """Remove one instant and its files (idempotent: a re-run after a crash finishes the job)."""
    storage = table.storage
    instant = Instant(target.requested, target.action, target.state, target.completed)
    if instant.completed:
        storage.delete(timeline_path(instant.file_name))
    deleted = sum(1 for path in target.files if storage.delete(path))
    delete_markers(storage, instant.requested)
    heartbeats.delete(storage, instant.requested)
    if instant.action == Action.ERASE:
        storage.delete_tree(erase_folder(instant.requested))
    delete_instant(storage, instant)
    return deleted


def reset_compaction(table: TableHandle, instant: Instant, files: list[str]) -> int:
    """A crashed compaction: drop its partial files and go back to `requested` so it can run again.

    `files`: its marked files as listed before the rollback was requested. Only those go, with their markers: a run
    that takes the compaction over once the rollback is done marks its own files beside them.
    """
    storage = table.storage
    deleted = delete_marked(storage, instant.requested, files)
    heartbeats.delete(storage, instant.requested)
    storage.delete(timeline_path(pending_file_name(instant.requested, instant.action, State.INFLIGHT)))
    return deleted


def run_rollback(
    table: TableHandle,
    timeline: Timeline,
    targets: list[Instant],
    resets: list[Instant],
    reason: str,
    per_stream: bool = False,
) -> RollbackResult:
    """One rollback instant undoing `targets` and resetting crashed compactions `resets`. A completed target must
    be the latest deltacommit of the table, or with `per_stream` of its stream (`_refuse_completed`)."""
    if not targets and not resets:
        return RollbackResult(None, message="nothing to roll back")
    plan = RollbackPlan(
        targets=tuple(target_of(table, timeline, t) for t in targets),
        positions=rewound(table, timeline, targets),
        reason=reason,
        reset_compactions=tuple(r.requested for r in resets),
    )
    # Listed before the rollback is requested: no run can take these compactions over until it is done.
    partial = {r.requested: marked_files(table.storage, r.requested) for r in resets}
    txn = Transaction.begin(table, Action.ROLLBACK, plan, busy_check=_unchanged(table, [*targets, *resets], per_stream))
    deleted = sum(undo(table, target) for target in plan.targets)
    if resets and (lost := txn.superseded()) is not None:
        # Frozen past its heartbeat, finished by another process meanwhile: a compaction reset now may be running
        # again, its inflight file and heartbeat another run's. Its own beat file may be the finisher's: it stays.
        if txn.heartbeat is not None:
            txn.heartbeat.stop(delete=False)
            txn.heartbeat = None
        raise txn.refusal(lost)
    deleted += sum(reset_compaction(table, r, partial[r.requested]) for r in resets)
    done = txn.complete(
        RollbackCommit(
            rolled_back=tuple(t.requested for t in plan.targets),
            reset_compactions=plan.reset_compactions,
            deleted_files=tuple(p for t in plan.targets for p in t.files),
            reason=reason,
            positions=plan.positions,
        )
    )
    return RollbackResult(
        done.requested,
        [t.requested for t in targets],
        [r.requested for r in resets],
        deleted,
        f"rolled back {len(targets)} instant(s), reset {len(resets)} crashed compaction(s), deleted {deleted} file(s)",
    )


def finish_rollback(table: TableHandle, instant: Instant) -> None:
    """Complete a crashed rollback from its recorded plan."""
    txn = Transaction.resume(table, instant, "rollback")
    plan = txn.plan
    assert isinstance(plan, RollbackPlan)
    for target in plan.targets:
        undo(table, target)
    rolled_back = tuple(t.requested for t in plan.targets)
    txn.complete(RollbackCommit(rolled_back=rolled_back, resumed=True, positions=plan.positions))


def _unchanged(table: TableHandle, chosen: list[Instant], per_stream: bool = False) -> Callable[[Timeline], None]:
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
                    _refuse_completed(table, fresh, instant, per_stream)
            else:  # gone already is fine (undoing it again is a no-op); completed or alive again is not
                changed = now is not None and (now.is_completed or not expired(table, instant))
            if changed:
                raise BusyError(
                    f"{instant.action} {instant.requested} changed since it was chosen for rollback (it completed, "
                    "vanished or its writer is alive again); nothing was rolled back — run again"
                )

    return check


def _refuse_completed(table: TableHandle, timeline: Timeline, target: Instant, per_stream: bool = False) -> None:
    """Refuse (exit 2) to undo a completed instant unless that is safe: a deltacommit that is the table's latest
    (`per_stream`: its stream's latest), absorbed by no compaction or erase and pinned by no savepoint.

    Per stream is sound because each log file holds one stream's rows of one commit: removing a commit's logs
    changes only that stream's groups, whatever other streams committed after it (design.md §2). What could have
    taken those logs in, a rewrite or a savepoint, is checked below either way; incremental reads over the range
    are refused once a commit is undone, and writers that began before refuse to publish (design.md §6).
    """
    horizon = horizon_of(table.storage)
    if horizon is not None and (target.completed or "") <= horizon:
        raise UsageError(
            f"{target.action} {target.requested} is archived (an archive that stopped part-way left its file on the "
            "active timeline: `stitch archive` removes it); an archived commit can only be taken back by restoring "
            "a savepoint"
        )
    if target.action != Action.DELTACOMMIT:
        raise UsageError(
            f"{target.action} {target.requested} is completed; only pending instants and the latest deltacommit can "
            "be rolled back. To undo it, restore a savepoint taken before it (`stitch savepoint restore`)"
        )
    stream = _stream(timeline, target)
    if per_stream:
        latest = latest_of_stream(timeline, stream or "")
        if latest is None or latest.requested != target.requested:
            raise UsageError(
                f"deltacommit {target.requested} is not the latest one of stream {stream} "
                f"({latest.requested if latest else '-'}); rolling back an older commit would silently drop newer "
                "data. Roll back the newer ones first, or restore a savepoint"
            )
    else:
        latest = timeline.latest_completed([Action.DELTACOMMIT])
        if latest is None or latest.requested != target.requested:
            own = latest_of_stream(timeline, stream or "") if stream else None
            hint = (
                f"; it is the latest of stream {stream}: `stitch rollback --stream {stream}` undoes it and keeps "
                "the other streams' newer commits"
                if own is not None and own.requested == target.requested
                else ""
            )
            raise UsageError(
                f"deltacommit {target.requested} is not the latest one ({latest.requested if latest else '-'}); "
                "rolling back an older commit would silently drop newer data. Roll back the newer ones first, "
                f"or restore a savepoint{hint}"
            )
    files = set(files_of(table, timeline, target))
    for other in timeline.instants:
        if other.action not in REWRITES:
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


def rollback(table: TableHandle, instant_time: str) -> RollbackResult:
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


def latest_of_stream(timeline: Timeline, stream: str) -> Instant | None:
    """The latest completed deltacommit of `stream` on the active timeline."""
    for instant in reversed(timeline.completed([Action.DELTACOMMIT])):
        if _stream(timeline, instant) == stream:
            return instant
    return None


def _stream(timeline: Timeline, instant: Instant) -> str | None:
    """The stream a completed deltacommit wrote (its commit says; API writes without a stream have none)."""
    commit = timeline.commit(instant)
    return commit.stream if isinstance(commit, DeltaCommit) else None


def rollback_stream(table: TableHandle, stream: str) -> RollbackResult:
    """Roll back the latest completed deltacommit of one stream, even when other streams committed after it.

    Refused (exit 2) when a compaction or erase absorbed it or a savepoint pins it: then only a restore can take
    it back. Its landing files become pending again, as for any rolled-back commit.
    """
    table.require()
    table.config.stream(stream)  # an unknown stream is a usage error that lists the streams
    timeline = table.timeline()
    target = latest_of_stream(timeline, stream)
    if target is None:
        raise NotFoundError(
            f"stream {stream} has no completed deltacommit on the active timeline, so there is nothing to roll back "
            "(an archived one can only be taken back by restoring a savepoint)"
        )
    _refuse_completed(table, timeline, target, per_stream=True)
    reason = f"requested rollback of stream {stream}'s latest deltacommit {target.requested}"
    return run_rollback(table, timeline, [target], [], reason, per_stream=True)
