"""Refusals a transaction asks for before it begins or publishes: nothing may write while a restore or rollback
undoes history, while a rescale lays partitions out anew, or while another live writer holds the stream; and
what the timeline says about undos and rescales in progress. Kept apart from the transaction: they read the
timeline, never take the lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.config import ConcurrencyMode
from stitchlake.errors import BusyError
from stitchlake.timeline.actions import UNDOES_HISTORY
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import (
    DataFile,
    DeltaCommitPlan,
    RescalePlan,
    UndoPlan,
)
from stitchlake.timeline.timeline import (
    Timeline,
)

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


def undoes_history(timeline: Timeline, instant: Instant) -> bool:
    """A restore, or a rollback that takes back a completed commit (not one that only clears failed writes)."""
    plan = timeline.plan(instant)
    return isinstance(plan, UndoPlan) and plan.undoes_commits


def refuse_while_undoing(timeline: Timeline, what: str) -> None:
    """Refuse (exit 4) to plan on a history that is being taken back.

    A restore, or a rollback of a completed commit, deletes its targets' files outside the lock and un-consumes
    their landing files. An ingest begun meanwhile would take later files first (a state that never existed);
    a compaction or erase would merge files about to vanish; a savepoint would pin a state that is going away.
    """
    for instant in timeline.pending(UNDOES_HISTORY):
        if undoes_history(timeline, instant):
            raise BusyError(
                f"{instant.action} {instant.requested} is undoing commits, so nothing can {what} right now; "
                "run again when it has finished (if its process died, `stitch rollback --failed` finishes it)"
            )


def undone_since(timeline: Timeline, requested: str) -> Instant | None:
    """A restore or a rollback of a commit requested after `requested`, pending or completed."""
    for instant in timeline.filter(UNDOES_HISTORY):
        if instant.requested > requested and undoes_history(timeline, instant):
            return instant
    return None


def undone_by(timeline: Timeline, requested: str) -> str | None:
    """The pending rollback or restore whose plan undoes or resets `requested`, if any."""
    for instant in timeline.pending(UNDOES_HISTORY):
        plan = timeline.plan(instant)
        if isinstance(plan, UndoPlan) and plan.covers(requested):
            return f"{instant.action} {instant.requested}"
    return None


def pending_rescales(timeline: Timeline) -> list[tuple[Instant, RescalePlan]]:
    """Rescales requested and not completed, with their plans."""
    out = []
    for instant in timeline.pending([Action.RESCALE]):
        plan = timeline.plan(instant)
        if isinstance(plan, RescalePlan):
            out.append((instant, plan))
    return out


def refuse_while_rescaling(timeline: Timeline) -> None:
    """A write begun while a whole-table rescale runs could only be refused at its publish: refuse it now (exit 4).

    (A rescale of named partitions refuses only the writes that touch them, at their publish.)
    """
    for instant, plan in pending_rescales(timeline):
        if plan.whole_table:
            raise BusyError(
                f"rescale {instant.requested} is rewriting every partition into {plan.buckets} buckets, so nothing "
                "can be written right now (writers are fenced until it completes); run again when it has finished "
                "(if its process died, `stitch rescale --resume` finishes it)"
            )


def refuse_if_rescaled(table: TableHandle, timeline: Timeline, requested: str, files: tuple[DataFile, ...]) -> None:
    """A deltacommit publishes only into partitions laid out as it routed them (design.md §6, rescale): refused (exit
    4, nothing published; the next run routes by the new count) while a rescale of one of its partitions is pending,
    or when one completed meanwhile, so the partition's count is no longer the one its files were written with.

    Its logs would otherwise complete after the rescale's cut under file group ids of the old count, where reads of
    the new layout would look for other keys. Each file records the count it was routed with (`DataFile.buckets`).
    """
    partitions = {f.partition for f in files}
    if not partitions:
        return
    for instant, plan in pending_rescales(timeline):
        touched = sorted(partitions if plan.whole_table else partitions & set(plan.partitions))
        if touched:
            raise BusyError(
                f"rescale {instant.requested} is rewriting partition {touched[0] or '(unpartitioned)'} into "
                f"{plan.buckets} buckets while instant {requested} wrote it; nothing was published — run again when "
                "the rescale has finished (writers of the old layout are fenced)"
            )
    if not any(f.buckets for f in files):
        return
    layout = table.layout(timeline)
    for item in files:
        if item.buckets and item.buckets != layout.buckets(item.partition):
            raise BusyError(
                f"partition {item.partition or '(unpartitioned)'} was rescaled to {layout.buckets(item.partition)} "
                f"buckets while instant {requested} wrote it with {item.buckets}; nothing was published — run again "
                "(the next run routes by the new count)"
            )


def live_writer(table: TableHandle, timeline: Timeline, instant: Instant) -> bool:
    """Whether a pending instant's heartbeat is still fresh."""
    expire = table.config.concurrency.heartbeat.expire_s
    return not heartbeats.is_expired(table.storage, instant.requested, expire)


def taken_over(table: TableHandle, timeline: Timeline, instant: Instant, stream: str) -> Instant | None:
    """The claim that took `stream` over from the pending claim `instant`, or None. Lock-free mode lets one live
    writer claim a stream; a later claim that began while this one looked dead (its heartbeat expired, or not
    yet written) and has completed, or still writes with a live heartbeat, owns the stream now, so this one may
    not publish, whatever records or files it took: two claims of one stream must never both commit. (A claim
    that completed after this one began was a writer presumed dead itself, and it published first.)"""
    if table.config.concurrency.mode == ConcurrencyMode.OPTIMISTIC:
        return None

    def claims(other: Instant) -> bool:
        plan = timeline.plan(other)
        return isinstance(plan, DeltaCommitPlan) and plan.claimed and plan.stream == stream

    for other in timeline.completed([Action.DELTACOMMIT], since=instant.requested):
        if other.requested != instant.requested and claims(other):
            return other
    for other in timeline.pending([Action.DELTACOMMIT]):
        if other.requested > instant.requested and claims(other) and live_writer(table, timeline, other):
            return other
    return None


def refuse_if_stream_busy(table: TableHandle, timeline: Timeline, stream: str) -> None:
    """lock_free mode: one live writer per stream (exit 4 for a second). Optimistic mode lets several write at
    once and finds their conflicts by file group instead (`concurrency.conflicts`)."""
    if table.config.concurrency.mode == ConcurrencyMode.OPTIMISTIC:
        return
    for instant in timeline.pending([Action.DELTACOMMIT]):
        plan = timeline.plan(instant)
        if timeline.stream_of(instant) != stream or not live_writer(table, timeline, instant):
            continue
        writer = plan.writer
        raise BusyError(
            f"stream {stream} is already being written by instant {instant.requested} "
            f"(host {writer.host}, pid {writer.pid if writer.pid is not None else '?'}); its heartbeat is alive, "
            "so this run stops here instead of ingesting twice — run again after it finishes"
        )
