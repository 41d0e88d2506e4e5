"""A Kafka-fed stream's offsets: what the table consumed, what is pending, and exactly once at publish (design.md §6).

Offsets are the landing-file checkpoint's analogue. Each deltacommit of the stream records the offset range it
consumed per topic partition; the stream's next offset in a partition is the `end` of the range that the latest
completed commit (by completion time) recorded for it, starting from the newest archive checkpoint. Nothing is
kept anywhere else (no consumer group offsets, no side file), so whatever changes the table's history changes the
offsets with it: a rollback or a restore that removes commits rewinds them, and their records are read again.

Pending work is, per partition, `[next offset, end offset now)`, or up to a bound (`until`: a `stitch stream`
micro-batch's planned end) and at most `max_records` in all. A partition the topic no longer holds from the next
offset on (retention deleted records never ingested) is refused (exit 5) until `--reset-offsets` moves it on, which
the commit records. Ranges carry the topic's id, so offsets of a topic since deleted and created again (and
partitions it no longer has) are refused the same way. Every ingest records each partition the topic has that no
commit recorded yet (an empty range where it read nothing) and how many partitions there are, so a partition
added since the last ingest is known to start at offset 0: if retention took its first records before they were
read, that is refused too. An undo whose commits were a partition's first reads records where they began
(`rewound`), so the stream goes on from there and not from `starting_offsets` again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from stitchlake.errors import ConflictError, HistoryMoved, InputRejected, UsageError
from stitchlake.io import kafka
from stitchlake.table.transaction import ConflictCheck
from stitchlake.timeline.archive import Checkpoint, load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import (
    Commit,
    DeltaCommit,
    OffsetRange,
    OffsetReset,
    RestoreCommit,
    RollbackCommit,
)
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.config import SourceSpec
    from stitchlake.table.handle import TableHandle

#: `--reset-offsets` choices: where a partition whose recorded offset the topic no longer holds goes on from.
RESETS = ("earliest", "latest")
#: Why a recorded partition the topic lacks is refused.
_GONE = "the topic no longer has this partition (a topic never loses partitions: was it created again with fewer?)"
#: The actions whose commits say where a stream's offsets are: ingests, and undos that rewind them.
OFFSET_ACTIONS = (Action.DELTACOMMIT, Action.ROLLBACK, Action.RESTORE)
#: `--engine auto` sizes a Kafka ingest at this many bytes per pending record (the broker does not say).
RECORD_BYTES_ESTIMATE = 1024


@dataclass
class TopicPlan:
    """What one ingest of a Kafka-fed stream reads and records."""

    #: Ranges to read and record, empty ones included (a position set by `--reset-offsets` or `starting_offsets:
    #: latest`): what makes the ingest worth a commit.
    ranges: list[OffsetRange] = field(default_factory=list)
    resets: list[OffsetReset] = field(default_factory=list)
    #: Where the topic's partitions never recorded stand (empty ranges): recorded beside `ranges`, so the table
    #: knows every partition the topic had; never a reason to commit.
    positions: list[OffsetRange] = field(default_factory=list)

    @property
    def recorded(self) -> list[OffsetRange]:
        """What the commit records: the ranges read or moved, and where the partitions never recorded stand."""
        return sorted([*self.ranges, *self.positions], key=lambda r: r.key)

    @property
    def reads(self) -> list[OffsetRange]:
        """The ranges that hold records to read."""
        return [r for r in self.ranges if r.size > 0]

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges or self.resets)


def latest_ranges(
    commits: list[Commit], base: tuple[OffsetRange, ...] = (), stream: str | None = None
) -> dict[tuple[str, int], OffsetRange]:
    """Per topic partition, the range the last of `commits` (in completion order) recorded, over `base`.

    A deltacommit records the ranges it read; a reset of a partition the topic no longer has (its `offset_resets`
    name it, its ranges do not) drops the partition. An undo (rollback, restore) of `stream`'s commits records
    where they began reading the partitions no remaining commit records (`rewound`).
    """
    found = {r.key: r for r in base}
    for commit in commits:
        if isinstance(commit, DeltaCommit):
            ranges = {item.key: item for item in commit.offsets}
            found.update(ranges)
            for reset in commit.offset_resets:
                if (reset.topic, reset.partition) not in ranges:
                    found.pop((reset.topic, reset.partition), None)
        elif isinstance(commit, RollbackCommit | RestoreCommit) and stream is not None:
            found.update({item.key: item for item in commit.positions.get(stream, ())})
    return found


def consumed_ranges(table: TableHandle, timeline: Timeline, stream: str) -> dict[tuple[str, int], OffsetRange]:
    """The latest range recorded per topic partition by completed commits of `stream` (archived ones included).

    Read without the lock: if an archive or restore moves the history meanwhile, read it again once.
    """
    try:
        return _consumed(table, timeline, stream, None)
    except HistoryMoved:
        return _consumed(table, table.timeline(), stream, None)


def offsets_until(
    previous: Checkpoint | None, timeline: Timeline, stream: str, horizon: str
) -> tuple[OffsetRange, ...]:
    """What an archive checkpoint at `horizon` keeps of `stream`'s offsets (`previous`: the newest checkpoint, read
    once by the archive for all its streams)."""
    found = _consumed_since(previous, timeline, stream, horizon)
    return tuple(found[key] for key in sorted(found))


def rewound(table: TableHandle, timeline: Timeline, undone: list[Instant]) -> dict[str, tuple[OffsetRange, ...]]:
    """What an undo of `undone` records so that it rewinds every Kafka-fed stream exactly (design.md §6): per
    stream, where the undone commits began reading each partition that no remaining commit records.

    Without it, a partition that only undone commits recorded would start over as if never read: a
    `starting_offsets: latest` stream at the topic's end (the records the undone commits read, and those after
    them, never read again), an `earliest` one wherever the topic starts now (records retention took meanwhile
    skipped without a word).
    """
    gone = {i.requested for i in undone if i.is_completed}
    undone_commits = []
    for instant in sorted((i for i in undone if i.is_completed), key=lambda i: i.completed or ""):
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream is not None and commit.offsets:
            undone_commits.append(commit)
    out: dict[str, tuple[OffsetRange, ...]] = {}
    for stream in dict.fromkeys(c.stream for c in undone_commits if c.stream is not None):
        kept = _consumed(table, timeline, stream, None, skip=gone)
        first: dict[tuple[str, int], OffsetRange] = {}
        for commit in (c for c in undone_commits if c.stream == stream):
            for item in commit.offsets:
                if item.key not in kept:
                    first.setdefault(item.key, replace(item, end=item.start))
        if first:
            out[stream] = tuple(first[key] for key in sorted(first))
    return out


def _consumed(
    table: TableHandle, timeline: Timeline, stream: str, until: str | None, skip: Collection[str] = ()
) -> dict[tuple[str, int], OffsetRange]:
    return _consumed_since(load_checkpoint(table.storage), timeline, stream, until, skip)


def _consumed_since(
    checkpoint: Checkpoint | None, timeline: Timeline, stream: str, until: str | None, skip: Collection[str] = ()
) -> dict[tuple[str, int], OffsetRange]:
    base = checkpoint.offsets.get(stream, ()) if checkpoint else ()
    commits: list[Commit] = []
    for instant in timeline.completed(OFFSET_ACTIONS, until=until):
        if (checkpoint and (instant.completed or "") <= checkpoint.horizon) or instant.requested in skip:
            continue
        commit = timeline.commit(instant)
        recorded = isinstance(commit, DeltaCommit) and bool(commit.offsets or commit.offset_resets)
        if isinstance(commit, DeltaCommit) and (commit.stream != stream or not recorded):
            continue
        commits.append(commit)
    return latest_ranges(commits, base, stream)


def next_offsets(table: TableHandle, stream: str, topic: str) -> dict[int, OffsetRange]:
    """The range the stream last recorded per partition of `topic` (partitions it never read are absent): each
    partition goes on from its `end`."""
    found = consumed_ranges(table, table.timeline(), stream)
    return {partition: r for (name, partition), r in found.items() if name == topic}


def plan(
    table: TableHandle,
    stream: str,
    max_records: int | None = None,
    reset: str | None = None,
    until: Mapping[int, int] | None = None,
) -> TopicPlan:
    """What an ingest of `stream` reads now: asks the broker for the topic's offsets (no lock held).

    The recorded offsets must still be the topic's: a partition recorded under another topic id (the topic was
    deleted and created again), a recorded partition the topic no longer has, and a next offset outside what the
    topic holds (retention, or a topic created again on a broker without ids) are refused (exit 5) until
    `--reset-offsets` moves them on. A topic created again starts over as a whole: every partition of the new
    topic from its first offset (`earliest`) or its end (`latest`).
    """
    spec = table.config.stream(stream)
    source = spec.source
    if source is None or not source.is_kafka:
        raise UsageError(f"stream {stream} does not read a Kafka topic (source.format: kafka)")
    if reset is not None and reset not in RESETS:
        raise UsageError(f"--reset-offsets takes {' or '.join(RESETS)}, not {reset!r}")
    topic = str(source.topic)
    recorded = next_offsets(table, stream, topic)
    state = kafka.topic_state(source)
    held, topic_id = state.offsets, state.topic_id
    # Recorded under another id: the topic was deleted and created again, and every recorded offset (those recorded
    # before ids were, too) belongs to the old topic.
    recreated = topic_id is not None and any(r.topic_id not in (None, topic_id) for r in recorded.values())
    count = len(held)
    out = TopicPlan()
    lost: list[str] = []
    refused_earliest: list[str] = []
    only_truncated = not (recreated and reset is None)  # every partition refused had its log truncated
    if recreated and reset is None:
        was = sorted({r.topic_id for r in recorded.values() if r.topic_id})
        nexts = ", ".join(f"{p} (next offset {r.end})" for p, r in sorted(recorded.items()))
        lost.append(
            f"it was deleted and created again (the table's offsets were recorded under topic id {', '.join(was)}; "
            f"its id is now {topic_id}): the offsets of partition(s) {nexts} mean nothing in the new topic"
        )
    for partition, item in sorted(recorded.items()):
        if partition in held:
            continue
        why = _recreated(item.topic_id, topic_id) if recreated else _GONE
        if reset is None:
            if not recreated:
                lost.append(f"partition {partition}: next offset {item.end}, but {why}")
                only_truncated = False
        else:  # dropped from the recorded offsets (`latest_ranges`); if it comes back, it is read from its start
            out.resets.append(OffsetReset(topic, partition, item.end, 0, f"reset {reset}: {why}; not read any more"))
    for partition, (low, high) in sorted(held.items()):
        last = recorded.get(partition)
        if recreated:
            start = low if reset == "earliest" else high
            moved = True
            if last is not None:
                why = _recreated(last.topic_id, topic_id)
                out.resets.append(OffsetReset(topic, partition, last.end, start, f"reset {reset}: {why}"))
        elif last is not None:
            start, moved = last.end, False
        else:
            # The topic's first read, or a partition added since (a first `latest` read: recorded as a position).
            moved = not recorded and source.starting_offsets == "latest"
            start = unrecorded_start(recorded, partition, low, high, source.starting_offsets)
        if not recreated and (start < low or start > high):
            truncated = start > high and last is not None and topic_id is not None and last.topic_id == topic_id
            if reset is None:
                added = " (a partition added since the last ingest)" if last is None else ""
                lost.append(_lost(partition, start, low, high, truncated) + added)
                only_truncated = only_truncated and truncated
                continue
            if truncated and reset == "earliest":
                refused_earliest.append(f"{partition} (next offset {start}, the topic ends at {high})")
                continue
            to = low if reset == "earliest" else high
            why = "retention deleted them" if start < low else "the topic holds fewer offsets than were ingested"
            why = "its log was truncated" if truncated else why
            skipped = f"offsets {start} to {low - 1} ({why})" if start < low else f"offset {start} ({why})"
            out.resets.append(OffsetReset(topic, partition, start, to, f"reset {reset}: {skipped}"))
            start, moved = to, True
        end = high if until is None else min(high, max(start, until.get(partition, start)))
        if end > start or moved:
            out.ranges.append(OffsetRange(topic, partition, start, end, topic_id, count))
        elif last is None:  # never recorded: where it stands (a recorded one's position is known already)
            out.positions.append(OffsetRange(topic, partition, start, start, topic_id, count))
    if lost and only_truncated:
        raise InputRejected(
            f"stream {stream}: {kafka.where(source)} ends before the table's next offset: {'; '.join(lost)}. Nothing "
            f"was ingested. Run `stitch ingest --stream {stream} --reset-offsets latest` to go on from its end",
            file=f"kafka:{source.topic}",
        )
    if lost:
        raise InputRejected(
            f"stream {stream}: {kafka.where(source)} no longer holds records the table has not ingested: "
            f"{'; '.join(lost)}. Nothing was ingested. Those records are gone from the topic (its retention passed "
            f"before they were ingested, or it was deleted and created again). To go on without them, run "
            f"`stitch ingest --stream {stream} --reset-offsets earliest` (carry on from the earliest offset the "
            "topic holds; a topic created again is read from its start) or `--reset-offsets latest` (skip to its "
            "end); the skip is recorded in that commit. To keep this from happening, ingest more often than the "
            "topic's retention.ms",
            file=f"kafka:{source.topic}",
        )
    if refused_earliest:
        raise UsageError(
            f"stream {stream}: --reset-offsets earliest would ingest again records the table already has: the log "
            f"of partition(s) {', '.join(refused_earliest)} of {kafka.where(source)} was truncated (same topic id; "
            "an unclean leader election drops records the old leader had), so the offsets before its end hold "
            "records already ingested. Read again, they would be new events: an older value would win over a newer "
            "one (by commit time, and on a tie of the stream's ordering), and a key erased since would come back "
            "(even after --purge). Nothing was ingested. Run `--reset-offsets latest` to go on from the topic's end "
            "(records written since the truncation, if any, are skipped)"
        )
    if max_records is not None:
        out.ranges, unread = _capped(out.ranges, max_records)
        # A position moved (a reset, a recreated topic) or never recorded must be recorded, read or not.
        out.positions.extend(u for u in unread if _moves(recorded.get(u.partition), u))
    return out


def _moves(last: OffsetRange | None, position: OffsetRange) -> bool:
    return last is None or last.end != position.start or last.topic_id != position.topic_id


def unrecorded_start(
    recorded: Mapping[int, OffsetRange], partition: int, low: int, high: int, starting_offsets: str
) -> int:
    """Where a partition no commit recorded is read from (the planner's rule, and the lag `t$streams` shows): the
    topic's first read from `starting_offsets` (its start, or with `latest` its end); later, offset 0 when it is
    numbered past the partitions the table last saw the topic with (added since: every record it had is owed,
    whatever retention took), else where the topic starts now (commits from before the count was recorded)."""
    if not recorded:
        return high if starting_offsets == "latest" else low
    seen = max((r.topic_partitions or 0 for r in recorded.values()), default=0)
    return 0 if seen and partition >= seen else low


def _recreated(recorded: str | None, now: str | None) -> str:
    was = f"id {recorded}" if recorded else "an id not recorded"
    return f"the topic was deleted and created again (its offsets were recorded under {was}; its id is now {now})"


def _lost(partition: int, start: int, low: int, high: int, truncated: bool = False) -> str:
    if start < low:
        gone = low - start
        return f"partition {partition}: next offset {start}, but the topic starts at {low} ({gone} record(s) gone)"
    if truncated:  # same topic id: not created again
        return (
            f"partition {partition}: next offset {start}, but the topic ends at {high}: its log was truncated (an "
            "unclean leader election); `--reset-offsets latest` goes on from its end without reading again what "
            "the table has (`earliest` is refused: it would read again records the table already has)"
        )
    return f"partition {partition}: next offset {start}, but the topic ends at {high} (was it created again?)"


def _capped(ranges: list[OffsetRange], budget: int) -> tuple[list[OffsetRange], list[OffsetRange]]:
    """At most `budget` records in all, shared evenly over the partitions (empty ranges kept: they set positions);
    and where the partitions left without a share stand. When the budget is smaller than the partitions with
    records, who goes first turns with the offsets already read, so no partition waits for ever."""
    give = {r.key: 0 for r in ranges}
    left = budget
    open_ = [r for r in ranges if r.size > 0]
    if open_:
        turn = sum(r.start for r in open_) % len(open_)
        open_ = open_[turn:] + open_[:turn]
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
    out, unread = [], []
    for item in ranges:
        if item.size == 0 or give[item.key] > 0:
            out.append(replace(item, end=item.start + give[item.key]))
        else:
            unread.append(replace(item, end=item.start))
    return out, unread


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
                    what = f"offsets {own.start} to {own.end - 1}" if own.size else f"offsets from {own.start}"
                    raise ConflictError(
                        f"{what} of {item.topic} partition {item.partition} (stream "
                        f"{stream}) were ingested by instant {other.requested} of another process while it ran; "
                        "nothing was published — run again"
                    )

    return check


def estimate_bytes(ranges: list[OffsetRange]) -> int:
    """What `--engine auto` weighs a Kafka ingest as."""
    return sum(r.size for r in ranges) * RECORD_BYTES_ESTIMATE


def source_of(table: TableHandle, stream: str) -> SourceSpec | None:
    """The stream's Kafka source, or None for a stream fed otherwise."""
    source = table.config.stream(stream).source
    return source if source is not None and source.is_kafka else None
