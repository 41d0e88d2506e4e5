"""Structured Streaming micro-batches as deltacommits, exactly once across restarts.

A streaming query names each micro-batch by (query id, batch id); both survive a restart from the query's
checkpoint, and a batch that did not finish is run again with the same ids. So the deltacommit of a micro-batch
records them (`stream_batch`), and:

- the first task of a batch begins its instant under the lock, and every other task of that batch (or of its
  re-run after a crash) finds it by the batch's ids and writes into it, so a batch is one instant;
- a task of a batch that already committed writes nothing, and the commit of a batch someone already committed
  publishes nothing: the re-run of a batch whose commit landed just before a crash adds no second copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.errors import ConflictError, UsageError
from stitchlake.table.guards import refuse_if_stream_busy
from stitchlake.table.transaction import ConflictCheck, Transaction
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan, StreamBatch
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


def refuse_unfit_request(
    table: TableHandle, stream: str, files_per_trigger: int | None, records_per_trigger: int | None
) -> None:
    """A `stitch stream` request its stream cannot follow (exit 2), checked before any JVM starts: no `source:`, or
    the other kind of source's per-trigger option."""
    source = table.config.stream(stream).source
    if source is None:
        raise UsageError(
            f"stream {stream} has no `source:` in the config; `stitch stream` follows it (a landing folder or a "
            "Kafka topic)"
        )
    if source.is_kafka and files_per_trigger is not None:
        raise UsageError(f"stream {stream} reads a Kafka topic: use --records-per-trigger, not --files-per-trigger")
    if not source.is_kafka and records_per_trigger is not None:
        raise UsageError(f"stream {stream} reads landing files: use --files-per-trigger, not --records-per-trigger")


@dataclass
class StreamCommit:
    """One micro-batch that committed: its instant and rows, so an operator can roll back or audit that batch."""

    batch_id: int
    instant: str
    rows: int


@dataclass
class StreamResult:
    """What a `stitch stream` query did until it stopped, for summaries and `--json`."""

    stream: str
    query_id: str
    checkpoint: str
    #: Why it stopped (asked to, or nothing left with `--available-now`).
    stopped: str
    batches: int = 0
    source_files: int = 0
    records: int = 0
    rows: int = 0
    bad_rows: int = 0
    message: str = ""
    #: The micro-batches that committed an instant, oldest first (a batch whose files another writer took first
    #: commits nothing and is not listed).
    commits: list[StreamCommit] = field(default_factory=list)


class BatchAlreadyCommitted(ConflictError):
    """This micro-batch was committed by an earlier run of it: what this run wrote is not wanted."""


def committed(timeline: Timeline, stream: str, batch: StreamBatch) -> Instant | None:
    """The completed deltacommit that holds `batch`, if any (the newest first: a re-run is recent)."""
    for instant in reversed(timeline.completed([Action.DELTACOMMIT])):
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream == stream and commit.stream_batch == batch:
            return instant
    return None


def archived(timeline: Timeline, stream: str, batch: StreamBatch) -> bool:
    """Whether `batch` (or a later batch of its query) committed in an instant archived since: Spark replays a
    batch whose commit it did not record, however long the query was down."""
    checkpoint = load_checkpoint(timeline.storage)
    known = checkpoint.stream_batches.get(stream, ()) if checkpoint is not None else ()
    return any(b.query_id == batch.query_id and b.batch_id >= batch.batch_id for b in known)


def _pending(timeline: Timeline, stream: str, batch: StreamBatch) -> Instant | None:
    for instant in timeline.pending([Action.DELTACOMMIT]):
        plan = timeline.plan(instant)
        if isinstance(plan, DeltaCommitPlan) and plan.stream == stream and plan.stream_batch == batch:
            return instant
    return None


def batch_instant(table: TableHandle, stream: str, batch: StreamBatch) -> str | None:
    """The instant the tasks of `batch` write into (begun by the first of them); None if it already committed.

    Another live writer of the stream (a `stitch ingest` of it) makes this exit 4, as for any second writer.
    """
    timeline = table.timeline()
    if committed(timeline, stream, batch) is not None or archived(timeline, stream, batch):
        return None
    found: list[str | None] = []

    def plan(timeline: Timeline, _requested: str) -> DeltaCommitPlan | None:
        if committed(timeline, stream, batch) is not None:
            found.append(None)
            return None
        pending = _pending(timeline, stream, batch)
        if pending is not None:  # a sibling task began it, or a crashed run of this batch did
            found.append(pending.requested)
            return None
        refuse_if_stream_busy(table, timeline, stream)
        return DeltaCommitPlan(stream=stream, stream_batch=batch, claimed=True)

    txn = Transaction.begin_planned(table, Action.DELTACOMMIT, plan=plan, heartbeat=False)
    if txn is None:
        return found[0] if found else None
    return txn.time


def exactly_once(stream: str, batch: StreamBatch) -> ConflictCheck:
    """At publish, under the lock: no other instant may hold this batch already."""

    def check(timeline: Timeline, instant: Instant) -> None:
        done = committed(timeline, stream, batch)
        if done is None and archived(timeline, stream, batch):
            raise BatchAlreadyCommitted(
                f"micro-batch {batch.batch_id} of query {batch.query_id} was already committed in an instant archived "
                "since; this run of it publishes nothing"
            )
        if done is not None and done.requested != instant.requested:
            raise BatchAlreadyCommitted(
                f"micro-batch {batch.batch_id} of query {batch.query_id} was already committed as instant "
                f"{done.requested}; this run of it publishes nothing"
            )

    return check
