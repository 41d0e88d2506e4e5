"""Recovery of failed work: instants whose process died (expired heartbeat) are rolled back or finished.

What to do with a dead instant depends on its action, in the action registry (`ActionKind.recovery`): crashed
compactions and rescales are reset to run again, crashed rollbacks, cleans and restores are finished from their
recorded plans (half a deletion cannot be taken back), every other failed write is rolled back. Never a live
writer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from stitchlake.services.rewrites.purge import finish_purges
from stitchlake.services.undo.restore import RestoreResult, finish_restore
from stitchlake.services.undo.rollback import RollbackResult, expired, finish_rollback, run_rollback
from stitchlake.services.upkeep.clean import finish_clean
from stitchlake.table.guards import undone_by
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.archive import horizon_of
from stitchlake.timeline.instant import Action, Instant, State
from stitchlake.timeline.timeline import Timeline, delete_instant
from stitchlake.vocabulary import Recovery

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: How a crashed instant is finished, for each action whose `ActionKind.recovery` is `Recovery.FINISH` (a test keeps
#: the keys equal to those actions).
FINISHERS: dict[Action, Callable[[TableHandle, Instant], object]] = {
    Action.ROLLBACK: finish_rollback,
    Action.CLEAN: finish_clean,
    Action.RESTORE: finish_restore,
}


def archive_leftovers(table: TableHandle, timeline: Timeline) -> list[Instant]:
    """Requested or inflight files an interrupted archive left of instants it archived.

    Archive never archives at or after the oldest pending instant, and every new instant is requested after every
    time on the timeline, the horizon included: so a pending instant at or before the horizon is such a leftover,
    never a writer. Rolling it back would delete the files of a commit the archive counts.
    """
    horizon = horizon_of(table.storage)
    return [i for i in timeline.pending() if horizon is not None and i.requested <= horizon]


def failed_instants(table: TableHandle, timeline: Timeline) -> tuple[list[Instant], list[Instant], list[Instant]]:
    """Pending instants whose writer is dead: (to roll back, crashed compactions and rescales to reset,
    ones to finish)."""
    targets, resets, unfinished = [], [], []
    leftovers = {i.requested for i in archive_leftovers(table, timeline)}
    for instant in timeline.pending():
        if instant.requested in leftovers or not expired(table, instant):
            continue
        recovery = kind_of(instant.action).recovery
        if recovery is Recovery.RERUN:
            if instant.state is State.INFLIGHT:
                resets.append(instant)
        elif recovery is Recovery.FINISH:
            unfinished.append(instant)
        else:
            targets.append(instant)
    return targets, resets, unfinished


def finish_crashed(table: TableHandle, instants: list[Instant], notes: list[str] | None = None) -> list[str]:
    """Complete crashed rollbacks, cleans and restores from their recorded plans; what was finished
    (`"<action> <instant>"`).

    Restores go first: a restore's plan takes back every instant that was pending when it began (crashed
    rollbacks and cleans too, in plans recorded before restores finished those first), and resuming one of those
    while the restore is pending is refused (it is being undone), so taking them in time order would wait on each
    other forever. Whatever a pending restore or rollback already covers is left to it.
    """
    finished = []
    for instant in sorted(instants, key=lambda i: (i.action != Action.RESTORE, i.requested)):
        if not to_finish(table.timeline(), [instant]):
            continue
        done = FINISHERS[instant.action](table, instant)
        finished.append(f"{instant.action} {instant.requested}")
        if notes is not None and isinstance(done, RestoreResult):  # what it undid that an operator must hear of
            notes.extend(done.message.splitlines()[1:])
    return finished


def to_finish(timeline: Timeline, instants: list[Instant]) -> list[Instant]:
    """Those of `instants` still pending that no pending restore or rollback covers: what a recovery finishes."""
    out = []
    for instant in instants:
        current = timeline.get(instant.requested)
        if current is not None and not current.is_completed and undone_by(timeline, instant.requested) is None:
            out.append(instant)
    return out


def rollback_failed(table: TableHandle) -> RollbackResult:
    """Finish crashed services, roll back every pending write whose heartbeat expired, then finish the purges
    of erases that committed but did not purge.

    What was finished is reported too: a crashed restore finished here changes what reads return, so "nothing
    to roll back" would hide that the table just moved.
    """
    table.require()
    timeline = table.timeline()
    for leftover in archive_leftovers(table, timeline):
        delete_instant(table.storage, leftover)
    targets, resets, unfinished = failed_instants(table, timeline)
    notes: list[str] = []
    finished = finish_crashed(table, unfinished, notes)
    if unfinished:
        timeline = table.timeline()
        targets, resets, _ = failed_instants(table, timeline)
    result = run_rollback(table, timeline, targets, resets, "failed writes (expired heartbeats)")
    finished += finish_purges(table)
    result.finished = finished
    if finished:
        done = f"finished crashed {', '.join(finished)} from the recorded plan"
        result.message = f"{done}; nothing else to roll back" if result.instant is None else f"{done}; {result.message}"
    if notes:
        result.message += "\n" + "\n".join(notes)
    return result
