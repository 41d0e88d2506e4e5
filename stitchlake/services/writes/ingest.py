"""Ingest a stream's landing files exactly once (design.md §6): one job, written once, for every engine.

Each completed deltacommit records the landing files it consumed, with what they held (size, version); a run
ingests only files no completed instant of the stream has consumed. A re-run after success finds nothing and
exits 0; a re-run after a crash ingests exactly the files the crashed run did not commit. A file re-delivered
under a consumed name with new content is reported (exit 5), or ingested again when asked. Only one live writer
per stream runs at a time (`lock_free`): the claim is the stream's pending deltacommit.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.errors import ConflictError, HistoryMoved, InputRejected, PlanUndone, StitchError, UsageError
from stitchlake.io import kafka
from stitchlake.io.landing import LandingFile, describe, discover
from stitchlake.services import offsets
from stitchlake.services.rewrites import compaction
from stitchlake.services.rewrites.compaction import CompactionResult
from stitchlake.table.guards import refuse_if_stream_busy
from stitchlake.table.transaction import ConflictCheck, Transaction
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import Commit, DeltaCommit, DeltaCommitPlan, LandingRecord, StreamBatch
from stitchlake.timeline.timeline import Timeline
from stitchlake.writing.writer import deltacommit

if TYPE_CHECKING:
    from stitchlake.config import StreamSpec
    from stitchlake.engine import Engine, StreamWrite
    from stitchlake.table.handle import TableHandle

T = TypeVar("T")


@dataclass
class IngestResult:
    """What an ingest run did, for the terminal summary and `--json` (counts, never a list per file)."""

    stream: str
    engine: str
    instant: str | None = None
    completed: str | None = None
    source_files: int = 0
    rows: int = 0
    bad_rows: int = 0
    quarantine: str | None = None
    quarantined_files: int = 0
    reingested: int = 0
    #: Kafka: records read, and the offset ranges consumed ("topic/partition:start-end").
    records: int = 0
    offsets: list[str] = field(default_factory=list)
    offset_resets: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    message: str = ""
    #: The engine's profile (see `StreamWrite.timings`).
    timings: dict[str, float] = field(default_factory=dict)
    #: The inline compaction run after the ingest (`compaction.inline`), if one ran.
    compaction: CompactionResult | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def consumed(table: TableHandle, timeline: Timeline, stream: str) -> dict[str, LandingRecord]:
    """Landing files completed instants of `stream` consumed (archived ones included), by name, newest record.

    Read without the lock: if an archive or restore moves the history meanwhile, read it again once.
    """
    try:
        return _consumed(table, timeline, stream)
    except HistoryMoved:
        return _consumed(table, table.timeline(), stream)


def _consumed(table: TableHandle, timeline: Timeline, stream: str) -> dict[str, LandingRecord]:
    checkpoint = load_checkpoint(table.storage)
    found = checkpoint.landing(stream) if checkpoint else {}
    for instant in timeline.completed([Action.DELTACOMMIT]):
        if checkpoint and (instant.completed or "") <= checkpoint.horizon:
            continue
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream == stream:
            found.update(commit.consumed())
    return found


def sources_of(commit: Commit, stream: str) -> set[str]:
    """The landing files a deltacommit of `stream` consumed (none for another stream's)."""
    if not isinstance(commit, DeltaCommit) or commit.stream != stream:
        return set()
    return set(commit.consumed())


def changed_since(record: LandingRecord, file: LandingFile) -> bool:
    """Whether a landing file holds something else than when it was ingested (older records have no version)."""
    if record.version is not None:
        return record.version != file.version
    return record.size is not None and record.size != file.size


def pending_files(
    table: TableHandle,
    stream: str,
    paths: list[str] | None = None,
    max_files: int | None = None,
    reingest_changed: bool = False,
    names: Collection[str] | None = None,
) -> tuple[list[LandingFile], int]:
    """Landing files of `stream` to ingest, in arrival order, at most `max_files`; and how many are re-ingested.

    A consumed name whose file changed since (appended to, cut, replaced) is refused with exit 5 unless
    `reingest_changed`: silently ignoring it would lose data, silently ingesting it would double it. `names`: only
    those of the folder's files (a `stitch stream` micro-batch's, as listed: a name is not rebuilt into a URI,
    where `#`, `?` or `%20` would mean something else), each of which must still be there.
    """
    spec = table.config.stream(stream)
    if spec.source is None:
        given = (
            " (--source / paths replace the folder of a `source:`, whose format says how to read them)" if paths else ""
        )
        raise UsageError(f"stream {stream} has no `source:` in the config; add one (format and path){given}")
    done = consumed(table, table.timeline(), stream)
    found = discover(spec.source, paths, table.storage_options)
    if names is not None:
        wanted = set(names)
        found = [f for f in found if f.name in wanted]
        gone = sorted(wanted - {f.name for f in found} - set(done))
        if gone:
            raise UsageError(
                f"landing file {gone[0]} of stream {stream} does not exist (moved or deleted before its ingest)"
            )
    changed = [f for f in found if f.name in done and changed_since(done[f.name], f)]
    if changed and not reingest_changed:
        first = changed[0]
        before = done[first.name]
        where = describe(first, table.storage_options)
        raise InputRejected(
            f"landing file {where} of stream {stream} changed after it was ingested (then {before.size} bytes, "
            f"now {first.size}){f' and {len(changed) - 1} more' if len(changed) > 1 else ''}; nothing was "
            "ingested. A landing file must not change once written: if this is new data, deliver it under a new "
            "name. --reingest-changed ingests the whole file again as new events: its rows already ingested are "
            "read again too, and on a stream without `ordering` (or on a tie of it) they win over newer rows of "
            "later files, and a key erased since comes back",
            file=where,
        )
    todo = [f for f in found if f.name not in done or f in changed]
    if max_files:
        todo = todo[:max_files]
    return todo, sum(1 for f in todo if f in changed)


def still_pending(stream: str, sources: list[str]) -> ConflictCheck:
    """Exactly-once at publish time: none of the landing files named `sources` may have been ingested by a
    commit that completed meanwhile (every engine publishes through this check).

    The busy check at begin keeps live writers of a stream apart, but a writer frozen past its heartbeat's expiry
    is presumed dead, so a second one may ingest the same files; whichever publishes second must not.
    """
    names = set(sources)

    def check(timeline: Timeline, instant: Instant) -> None:
        for other in timeline.completed([Action.DELTACOMMIT], since=instant.requested):
            taken = names & sources_of(timeline.commit(other), stream)
            if taken:
                raise ConflictError(
                    f"landing file(s) {', '.join(sorted(taken)[:3])} of stream {stream} were ingested by instant "
                    f"{other.requested} of another process while it ran; nothing was published — run again"
                )

    return check


def claim(table: TableHandle, stream: str, heartbeat: bool = True) -> Transaction:
    """Start the stream's deltacommit, refusing (exit 4) while another live writer of the stream runs.

    `heartbeat=False` leaves beating to the caller (a Spark driver beats from its tasks and its commit).
    """
    plan = DeltaCommitPlan(stream=stream)
    return Transaction.begin(table, Action.DELTACOMMIT, plan, exclusive_stream=stream, heartbeat=heartbeat)


def preflight(table: TableHandle, stream: str, pending: Callable[[], T]) -> T:
    """Cheap checks before claiming (and before any JVM): busy stream (exit 4 at once), then what is pending,
    `pending()` (`pending_files` or `offsets.plan`, which refuse changed landing files and records the topic no
    longer holds, exit 5). Nothing pending: no claim, no JVM. The ingest asks `pending()` again under its claim."""
    table.require()
    refuse_if_stream_busy(table, table.timeline(), stream)
    return pending()


def nothing_to_do(stream: str, engine: str) -> IngestResult:
    return IngestResult(stream=stream, engine=engine, message=f"nothing to ingest for stream {stream}")


def refuse_other_source_options(
    table: TableHandle, stream: str, *, file_options: bool = False, kafka_options: bool = False
) -> bool:
    """Whether `stream` reads a Kafka topic; options of the other kind of source are a usage error (exit 2),
    named as the CLI spells them and as Python does."""
    spec = table.config.stream(stream)
    from_kafka = spec.source is not None and spec.source.is_kafka
    if from_kafka and file_options:
        raise UsageError(
            f"stream {stream} reads Kafka topic {spec.source.topic if spec.source else ''}: --source, --max-files "
            "and --reingest-changed (sources, max_files, reingest_changed) apply to landing files"
        )
    if not from_kafka and kafka_options:
        raise UsageError(
            "--max-records and --reset-offsets (max_records, reset_offsets) apply to Kafka sources; "
            f"stream {stream} reads files"
        )
    return from_kafka


def ingest(
    table: TableHandle,
    engine: Engine,
    stream: str,
    paths: list[str] | None = None,
    max_files: int | None = None,
    reingest_changed: bool = False,
    txn: Transaction | None = None,
    progress: Callable[[str], None] = lambda _message: None,
    stream_batch: StreamBatch | None = None,
    max_records: int | None = None,
    reset_offsets: str | None = None,
    until: Mapping[int, int] | None = None,
    names: Collection[str] | None = None,
) -> IngestResult:
    """Ingest the stream's pending landing files (or, for a Kafka source, the records from its recorded offsets
    to the topic's end now, or `until`, at most `max_records`) as one deltacommit. `txn` is a claim taken by the
    caller; `stream_batch` the `stitch stream` micro-batch this ingest is (recorded in the commit).

    A failed ingest is undone by whoever took the claim: here when we did, else by the caller. A Spark job's
    driver must not undo the claim of the `stitch` command that started it: interrupted, the driver would delete
    the markers while a task is still writing, and the file that task finishes would be left behind unnamed; the
    command undoes it once every process of the job has ended (`stitchlake.cli.jobs.execute`).
    """
    started = time.time()
    table.require()
    spec = table.config.stream(stream)
    if spec.source is not None and spec.source.is_kafka:
        return _ingest_topic(
            table, engine, stream, txn, progress, stream_batch, max_records, reset_offsets, until, started
        )
    refuse_other_source_options(table, stream, kafka_options=max_records is not None or reset_offsets is not None)
    own_claim = txn is None
    pending = functools.partial(pending_files, table, stream, paths, max_files, reingest_changed, names)
    if txn is None:
        if not preflight(table, stream, pending)[0]:
            return nothing_to_do(stream, engine.name)
        txn = claim(table, stream)
    with _undone_on_failure(txn, own_claim):
        todo, reingested = pending()
        if not todo:
            txn.abort()  # whoever's claim it is: nothing was written, so no task can still be writing
            return nothing_to_do(stream, engine.name)
        txn.conflict_check = still_pending(stream, [f.name for f in todo])
        progress(f"writing {len(todo)} landing file(s) of stream {stream} as instant {txn.time}")
        sources = tuple(f.record() for f in todo)
        written, instant, commit = _write_and_commit(table, engine, spec, txn, todo, stream_batch, sources=sources)
    rejected = len(written.bad.rejected)
    skipped = f", {rejected} unreadable file(s) quarantined" if rejected else ""
    message = f"ingested {len(todo)} file(s), {written.rows} rows into stream {stream}{skipped}"
    done = (written, instant, commit)
    counts = {"source_files": len(todo), "quarantined_files": rejected, "reingested": reingested}
    return _committed(table, engine, progress, started, stream, done, message, **counts)


def _ingest_topic(
    table: TableHandle,
    engine: Engine,
    stream: str,
    txn: Transaction | None,
    progress: Callable[[str], None],
    stream_batch: StreamBatch | None,
    max_records: int | None,
    reset_offsets: str | None,
    until: Mapping[int, int] | None,
    started: float,
) -> IngestResult:
    """`ingest` for a Kafka-fed stream: claim, plan the offset ranges from the table's recorded offsets, read and
    write them, and publish one deltacommit recording them, refused if another commit took them meanwhile."""
    spec = table.config.stream(stream)
    own_claim = txn is None
    planned = functools.partial(offsets.plan, table, stream, max_records, reset_offsets, until)
    if txn is None:
        if not preflight(table, stream, planned):
            return nothing_to_do(stream, engine.name)
        txn = claim(table, stream)
    with _undone_on_failure(txn, own_claim):
        todo = planned()  # again, under the claim
        if not todo:
            txn.abort()
            return nothing_to_do(stream, engine.name)
        txn.conflict_check = offsets.still_unconsumed(stream, todo.recorded)
        progress(f"reading {todo.records} record(s) of stream {stream} in {len(todo.reads)} range(s) as {txn.time}")
        ranges, resets_done = tuple(todo.recorded), tuple(todo.resets)
        assert spec.source is not None
        written, instant, commit = _write_and_commit(
            table,
            engine,
            spec,
            txn,
            todo.reads,
            stream_batch,
            before_commit=functools.partial(kafka.same_topic, spec.source, todo.reads),
            offsets=ranges,
            offset_resets=resets_done,
        )
    resets = [f"{r.topic}/{r.partition}: {r.recorded} -> {r.to} ({r.reason})" for r in todo.resets]
    message = (
        f"ingested {todo.records} record(s) of {spec.source.topic if spec.source else '?'}, {written.rows} "
        f"rows into stream {stream}" + (f"; reset {len(resets)} partition(s)" if resets else "")
    )
    return _committed(
        table,
        engine,
        progress,
        started,
        stream,
        (written, instant, commit),
        message,
        records=todo.records,
        offsets=[f"{r.topic}/{r.partition}:{r.start}-{r.end}" for r in todo.ranges],
        offset_resets=resets,
    )


def _committed(
    table: TableHandle,
    engine: Engine,
    progress: Callable[[str], None],
    started: float,
    stream: str,
    done: tuple[StreamWrite, Instant, DeltaCommit],
    message: str,
    **source: Any,
) -> IngestResult:
    """The result of an ingest whose deltacommit completed (`done`, from `_write_and_commit`), with the counts
    only its kind of source has (`source`: landing files or Kafka records); then the inline compaction, when
    `compaction.inline` says one is due (every ingest: `stitch ingest`, `Table.ingest`, a `stitch stream` batch)."""
    written, instant, commit = done
    result = IngestResult(
        stream=stream,
        engine=engine.name,
        instant=instant.requested,
        completed=instant.completed,
        rows=written.rows,
        bad_rows=written.bad.count,
        quarantine=commit.quarantine,
        files=len(written.files),
        bytes=sum(f.bytes for f in written.files),
        seconds=round(time.time() - started, 3),
        message=message,
        timings=written.timings,
        **source,
    )
    if compaction.inline_due(table):
        result.compaction = compact_inline(table, engine, result, progress)
    return result


@contextmanager
def _undone_on_failure(txn: Transaction, own_claim: bool) -> Iterator[None]:
    """A failure undoes our own claim (a caller's claim is the caller's to undo), and a refusal the failure came
    from (history moved, the input taken meanwhile) is raised in its place."""
    try:
        yield
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        if own_claim:
            txn.abort()
        if refused is not None:
            raise refused from exc
        raise


def _write_and_commit(
    table: TableHandle,
    engine: Engine,
    spec: StreamSpec,
    txn: Transaction,
    inputs: Sequence[Any],
    stream_batch: StreamBatch | None,
    before_commit: Callable[[], None] = lambda: None,
    **source: Any,
) -> tuple[StreamWrite, Instant, DeltaCommit]:
    """Write the stream's inputs (landing files or Kafka ranges) on the engine under the bad-row policy, and
    publish them as one deltacommit recording `source` (what was consumed); `before_commit` may still refuse
    once everything is written (outside the lock)."""
    written = engine.write_stream(table, spec, inputs, txn.time)
    written.bad.enforce(table.config.bad_rows)
    before_commit()
    commit = deltacommit(
        table,
        spec.name,
        txn.time,
        written.files,
        written.rows,
        written.bad,
        engine.name,
        stream_batch=stream_batch,
        timings=written.timings,
        **source,
    )
    return written, txn.complete(commit), commit


def compact_inline(
    table: TableHandle, engine: Engine, ingested: IngestResult, progress: Callable[[str], None]
) -> CompactionResult | None:
    """`compaction.inline`, after an ingest committed. A failure says the ingest stands (exit 1, never the
    compaction's own exit 3 or 4: retrying the ingest would find nothing to ingest, and hide the failure)."""
    progress("compacting inline (compaction.inline)")
    try:
        done = compaction.compact_inline(table, engine)
    except PlanUndone as exc:  # a restore took the plan back before it ran: nothing failed, the next run compacts
        progress(f"inline compaction skipped: {exc}")
        return None
    except StitchError as exc:
        pending = compaction.pending_plans(table)
        hint = (
            f"; compaction {pending[0].requested} is left pending: the next `stitch compact` or inline compaction "
            "runs it first"
            if pending
            else ""
        )
        raise StitchError(
            f"ingest {ingested.instant} committed ({ingested.message}), but the inline compaction after it failed: "
            f"{exc}{hint}"
        ) from exc
    return done
