"""Pending rewrite plans (compaction, rescale): which a run may take over and how much it would read.

A plan is written before its run starts, so a plan whose run died stays pending; these answer the same two
questions for both rewrites, which `stitch compact` and `stitch rescale` ask before they run anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.errors import BusyError, NotFoundError, PlanGone, PlanUndone, UsageError
from stitchlake.timeline.metadata import RewritePlan, UndoPlan
from stitchlake.vocabulary import Action

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.instant import Instant
    from stitchlake.timeline.timeline import Timeline

__all__ = ["planned_bytes", "to_run", "unclaimed", "undone_meanwhile"]

#: How `to_run` refuses a plan that completed: `undone_meanwhile` tells it from other refusals by it.
ALREADY_COMPLETED = "already completed"
#: How `to_run` ends the refusal of a named plan that an undo removed (`undone_meanwhile` words it for a listed one).
SCHEDULE_AGAIN = ": schedule it again (running this again cannot help)"


def planned_bytes(timeline: Timeline, pending: Sequence[Instant], instant_time: str | None = None) -> int:
    """Bytes a run would read: of the plan `instant_time`, or of the oldest pending one (to pick an engine)."""
    chosen = [i for i in pending if i.requested == instant_time] if instant_time else list(pending[:1])
    total = 0
    for instant in chosen:
        plan = timeline.plan(instant)
        if isinstance(plan, RewritePlan):
            total += sum(f.bytes for op in plan.operations for f in op.files)
    return total


def unclaimed(table: TableHandle, pending: Sequence[Instant]) -> list[Instant]:
    """The pending plans no live process runs (never started, or their run's heartbeat expired), in order."""
    expire = table.config.concurrency.heartbeat.expire_s
    return [instant for instant in pending if heartbeats.is_expired(table.storage, instant.requested, expire)]


def to_run(
    timeline: Timeline,
    pending: Sequence[Instant],
    instant_time: str | None,
    action: Action,
    names: tuple[str, str],
    hints: tuple[str, str] = ("", ""),
) -> Instant:
    """The pending plan a run takes: `instant_time`, else the oldest. Refused: nothing pending, a time that is no
    plan of `action`, a plan already completed. `names`: what one pending plan and several are called in the
    messages; `hints` end the first two (how to make or pick one). A plan of `action` that a restore or rollback
    undid is PlanGone (exit 3, not retried: the same request cannot succeed, a new schedule can); a run of its own
    plan sees it as PlanUndone through `undone_meanwhile`."""
    one, plural = names
    if instant_time is None:
        if not pending:
            raise NotFoundError(f"no pending {one} to run{hints[0]}")
        return pending[0]
    found = timeline.get(instant_time)
    undo = _undone_by(timeline, instant_time, action) if found is None else None
    if undo is not None:
        raise PlanGone(
            f"{action} plan {instant_time} was undone by {undo.action} {undo.requested} (completed {undo.completed}) "
            f"before a run took it; nothing was written{SCHEDULE_AGAIN}"
        )
    if found is None or found.action != action:
        listed = ", ".join(i.requested for i in pending) or "none"
        raise NotFoundError(f"{instant_time} is not a {action} on the timeline (pending {plural}: {listed}){hints[1]}")
    if found.is_completed:
        raise UsageError(f"{action} {instant_time} {ALREADY_COMPLETED} at {found.completed}; nothing to run")
    return found


def _undone_by(timeline: Timeline, instant_time: str, action: Action) -> Instant | None:
    """The restore or rollback on the timeline that removed `instant_time`, a plan of `action`, if one did."""
    for instant in timeline.completed([Action.RESTORE, Action.ROLLBACK]):
        plan = timeline.plan(instant)
        if isinstance(plan, UndoPlan) and any(t.requested == instant_time and t.action == action for t in plan.targets):
            return instant
    return None


@contextmanager
def undone_meanwhile(table: TableHandle, instant_time: str) -> Iterator[None]:
    """Run a plan this process listed or wrote a moment ago. A restore or rollback removes pending plans, so one
    can vanish between the listing and the run: that is PlanUndone (exit 3, run again), never "not a compaction on
    the timeline", which tells an operator their command was wrong. One that another process ran meanwhile (a plan
    has no heartbeat until a run takes it) is busy (exit 4), never "already completed, nothing to run" (exit 2).
    Anything else stands."""
    try:
        yield
    except PlanGone as exc:  # gone for this run, but a new run plans anew: running again helps
        raise PlanUndone(str(exc).removesuffix(SCHEDULE_AGAIN) + ": run again") from exc
    except (NotFoundError, UsageError) as exc:
        now = table.timeline().get(instant_time)
        if now is None and isinstance(exc, NotFoundError):
            raise PlanUndone(
                f"plan {instant_time} was undone by a concurrent restore or rollback before its run took it; run again"
            ) from exc
        if now is not None and now.is_completed and ALREADY_COMPLETED in str(exc):
            raise BusyError(
                f"plan {instant_time} was run by another process meanwhile (completed {now.completed})"
            ) from exc
        raise
