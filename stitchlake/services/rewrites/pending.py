"""Pending rewrite plans (compaction, rescale): which a run may take over and how much it would read.

A plan is written before its run starts, so a plan whose run died stays pending; these answer the same two
questions for both rewrites, which `stitch compact` and `stitch rescale` ask before they run anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.timeline.metadata import RewritePlan

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.instant import Instant
    from stitchlake.timeline.timeline import Timeline

__all__ = ["planned_bytes", "unclaimed"]


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
