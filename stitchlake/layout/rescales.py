"""Bucket counts over time (design.md §3): the `table.json` count, changed by completed rescales.

A rescale (`services/rewrites/rescale.py`) rewrites every file group of some partitions, or of every partition, into N
buckets as one instant. From its completion on, a rewritten partition's keys live in `stable_hash(key) mod N` and
its files older than the rescale's request belong to no current slice (the rescale's base files hold their merged
state); a whole-table rescale also makes N the count of partitions created later. Time travel before it still
sees the old files under the old count. The history is the table's count plus each completed rescale, from the
archive checkpoint (rescales archived) and the active timeline, so it survives archiving.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stitchlake.timeline.archive import Checkpoint, RescaleRecord
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import RescaleCommit
from stitchlake.timeline.timeline import Timeline

__all__ = ["BucketLayout", "RescaleRecord", "layout_at", "records", "resets"]


@dataclass(frozen=True)
class BucketLayout:
    """The bucket count of each partition at one time: `default`, unless a partition was rescaled on its own."""

    default: int
    partitions: Mapping[str, int] = field(default_factory=dict)

    def buckets(self, partition: str) -> int:
        return self.partitions.get(partition, self.default)


def record_of(requested: str, completed: str, commit: RescaleCommit) -> RescaleRecord:
    return RescaleRecord(requested, completed, commit.buckets, dict(commit.partitions), commit.whole_table)


def records(timeline: Timeline, checkpoint: Checkpoint | None = None) -> list[RescaleRecord]:
    """Every completed rescale, oldest completion first: archived ones from the checkpoint, then active ones."""
    found = {r.requested: r for r in checkpoint.rescales} if checkpoint is not None else {}
    for instant in timeline.completed([Action.RESCALE]):
        commit = timeline.commit(instant)
        if isinstance(commit, RescaleCommit) and instant.requested not in found:
            found[instant.requested] = record_of(instant.requested, instant.completed or "", commit)
    return sorted(found.values(), key=lambda r: r.completed)


def layout_at(default: int, history: Iterable[RescaleRecord], time: str | None = None) -> BucketLayout:
    """The layout in force at a completion time (None: now), from the table's own count and the rescales."""
    partitions: dict[str, int] = {}
    for record in history:
        if time is not None and record.completed > time:
            break
        if record.whole_table:
            # Every partition not already at the new count was rewritten to it: one count for all again.
            default, partitions = record.buckets, {}
        else:
            partitions.update(dict.fromkeys(record.partitions, record.buckets))
    return BucketLayout(default, partitions)


def resets(history: Iterable[RescaleRecord]) -> dict[str, list[tuple[str, str]]]:
    """Per partition, the (requested, completed) times of the rescales that rewrote it, oldest first."""
    out: dict[str, list[tuple[str, str]]] = {}
    for record in history:
        for partition in record.partitions:
            out.setdefault(partition, []).append((record.requested, record.completed))
    return out
