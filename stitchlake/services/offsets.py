"""A Kafka-fed stream's offsets: what the table consumed, what is pending, and exactly once at publish (design.md §6).

Offsets are the landing-file checkpoint's analogue. Each deltacommit of the stream records the offset range it
consumed per topic partition; the stream's next offset in a partition is the `end` of the range that the latest
completed commit (by completion time) recorded for it, starting from the newest archive checkpoint. Nothing is
kept anywhere else (no consumer group offsets, no side file), so whatever changes the table's history changes the
offsets with it: a rollback or a restore that removes commits rewinds them, and their records are read again.

Pending work is, per partition, `[next offset, end offset now)`, or up to a bound (`until`: a `stitch stream`
micro-batch's planned end) and at most `max_records` in all. A partition the topic no longer holds from the next
offset on (retention deleted records never ingested) is refused (exit 5) until `--reset-offsets` moves it on, which
the commit records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.errors import ConflictError, HistoryMoved, InputRejected, UsageError
from stitchlake.io import kafka
from stitchlake.table.transaction import ConflictCheck
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import DeltaCommit, OffsetRange, OffsetReset
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.config import SourceSpec
    from stitchlake.table.handle import Table

#: `--reset-offsets` choices: where a partition whose recorded offset the topic no longer holds goes on from.
RESETS = ("earliest", "latest")
#: `--engine auto` sizes a Kafka ingest at this many bytes per pending record (the broker does not say).
RECORD_BYTES_ESTIMATE = 1024


@dataclass
class TopicPlan:
    """What one ingest of a Kafka-fed stream reads and records."""

    #: Ranges to record, empty ones included (a position set by `--reset-offsets` or `starting_offsets: latest`).
    ranges: list[OffsetRange] = field(default_factory=list)
    resets: list[OffsetReset] = field(default_factory=list)

    @property
    def reads(self) -> list[OffsetRange]:
        """The ranges that hold records to read."""
        return [r for r in self.ranges if r.size > 0]

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)


def latest_ranges(commits: list[DeltaCommit], base: tuple[OffsetRange, ...] = ()) -> dict[tuple[str, int], OffsetRange]:
    """Per topic partition, the range the last of `commits` (in completion order) recorded, over `base`."""
    found = {r.key: r for r in base}
    for commit in commits:
        for item in commit.offsets:
            found[item.key] = item
    return found


def consumed_ranges(table: Table, timeline: Timeline, stream: str) -> dict[tuple[str, int], OffsetRange]:
    """The latest range recorded per topic partition by completed commits of `stream` (archived ones included).

    Read without the lock: if an archive or restore moves the history meanwhile, read it again once.
    """
    try:
        return _consumed(table, timeline, stream, None)
    except HistoryMoved:
        return _consumed(table, table.timeline(), stream, None)


def offsets_until(table: Table, timeline: Timeline, stream: str, horizon: str) -> tuple[OffsetRange, ...]:
    """What an archive checkpoint at `horizon` keeps of `stream`'s offsets."""
    found = _consumed(table, timeline, stream, horizon)
    return tuple(found[key] for key in sorted(found))


def _consumed(table: Table, timeline: Timeline, stream: str, until: str | None) -> dict[tuple[str, int], OffsetRange]:
    checkpoint = load_checkpoint(table.storage)
    base = checkpoint.offsets.get(stream, ()) if checkpoint else ()
    commits = []
    for instant in timeline.completed([Action.DELTACOMMIT], until=until):
        if checkpoint and (instant.completed or "") <= checkpoint.horizon:
            continue
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream == stream and commit.offsets:
            commits.append(commit)
    return latest_ranges(commits, base)


def next_offsets(table: Table, stream: str, topic: str) -> dict[int, int]:
    """The stream's next offset per partition of `topic` (partitions it never read are absent)."""
    found = consumed_ranges(table, table.timeline(), stream)
    return {partition: r.end for (name, partition), r in found.items() if name == topic}


def plan(
    table: Table,
    stream: str,
    max_records: int | None = None,
    reset: str | None = None,
    until: Mapping[int, int] | None = None,
) -> TopicPlan:
    """What an ingest of `stream` reads now: asks the broker for the topic's offsets (no lock held)."""
    spec = table.config.stream(stream)
    source = spec.source
    if source is None or not source.is_kafka:
        raise UsageError(f"stream {stream} does not read a Kafka topic (source.format: kafka)")
    if reset is not None and reset not in RESETS:
        raise UsageError(f"--reset-offsets takes {' or '.join(RESETS)}, not {reset!r}")
    recorded = next_offsets(table, stream, str(source.topic))
    held = kafka.topic_offsets(source)
    out = TopicPlan()
    lost: list[str] = []
    for partition, (low, high) in sorted(held.items()):
        if partition in recorded:
            start = recorded[partition]
        elif recorded or source.starting_offsets == "earliest":
            start = low  # the topic's first read, or a partition added since: from its beginning
        else:
            start = high  # starting_offsets: latest, the first time: from now on (recorded as a position)
        moved = not recorded and source.starting_offsets == "latest"
        if start < low or start > high:
            if reset is None:
                lost.append(_lost(partition, start, low, high))
                continue
            to = low if reset == "earliest" else high
            why = "retention deleted them" if start < low else "the topic holds fewer offsets than were ingested"
            skipped = f"offsets {start} to {low - 1} ({why})" if start < low else f"offset {start} ({why})"
            out.resets.append(OffsetReset(str(source.topic), partition, start, to, f"reset {reset}: {skipped}"))
            start, moved = to, True
        end = high if until is None else min(high, max(start, until.get(partition, start)))
        if end > start or moved:
            out.ranges.append(OffsetRange(str(source.topic), partition, start, end))
    if lost:
        raise InputRejected(
            f"stream {stream}: {kafka.where(source)} no longer holds records the table has not ingested: "
            f"{'; '.join(lost)}. Nothing was ingested. Those records are gone from the topic (its retention passed "
            f"before they were ingested, or it was deleted and created again). To go on without them, run "
            f"`stitch ingest --stream {stream} --reset-offsets earliest` (carry on from the earliest offset the "
            "topic holds) or `--reset-offsets latest` (skip to its end); the skip is recorded in that commit. To "
            "keep this from happening, ingest more often than the topic's retention.ms",
            file=f"kafka:{source.topic}",
        )
    if max_records is not None:
        out.ranges = _capped(out.ranges, max_records)
    return out


def _lost(partition: int, start: int, low: int, high: int) -> str:
    if start < low:
        gone = low - start
        return f"partition {partition}: next offset {start}, but the topic starts at {low} ({gone} record(s) gone)"
    return f"partition {partition}: next offset {start}, but the topic ends at {high} (was it created again?)"


def _capped(ranges: list[OffsetRange], budget: int) -> list[OffsetRange]:
    """At most `budget` records in all, shared evenly over the partitions (empty ranges kept: they set positions)."""
    give = {r.key: 0 for r in ranges}
    left = budget
    open_ = [r for r in ranges if r.size > 0]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for item in list(open_):
            take = min(share, item.size - give[item.key], left)
            give[item.key] += take
            left -= take
            if give[item.key] == item.size:
                open_.remove(item)
            if left == 0:
                break
    out = []
    for item in ranges:
        if item.size == 0 or give[item.key] > 0:
            out.append(OffsetRange(item.topic, item.partition, item.start, item.start + give[item.key]))
    return out


def still_unconsumed(stream: str, ranges: list[OffsetRange]) -> ConflictCheck:
    """Exactly once at publish, under the lock: no commit of `stream` that completed since this one began may have
    recorded offsets past where this one starts in any of its partitions (a writer presumed dead that wakes up
    after another one read the same records must not publish them again)."""
    mine = {r.key: r for r in ranges}

    def check(timeline: Timeline, instant: Instant) -> None:
        for other in timeline.completed([Action.DELTACOMMIT], since=instant.requested):
            commit = timeline.commit(other)
            if not isinstance(commit, DeltaCommit) or commit.stream != stream:
                continue
            for item in commit.offsets:
                own = mine.get(item.key)
                if own is not None and item.end > own.start:
                    raise ConflictError(
                        f"offsets {own.start} to {own.end - 1} of {item.topic} partition {item.partition} (stream "
                        f"{stream}) were ingested by instant {other.requested} of another process while it ran; "
                        "nothing was published — run again"
                    )

    return check


def estimate_bytes(ranges: list[OffsetRange]) -> int:
    """What `--engine auto` weighs a Kafka ingest as."""
    return sum(r.size for r in ranges) * RECORD_BYTES_ESTIMATE


def source_of(table: Table, stream: str) -> SourceSpec | None:
    """The stream's Kafka source, or None for a stream fed otherwise."""
    source = table.config.stream(stream).source
    return source if source is not None and source.is_kafka else None
