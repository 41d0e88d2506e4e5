"""Writing through the `stitchlake` data source: tasks write file groups, the driver publishes one deltacommit.

Each task validates its rows (the bad-row policy applies) and writes its file groups with
`write.write_file_groups`, as the in-process engine does; the driver-side commit publishes, abort removes every file.

Batch writes (`df.write`) claim the stream on the driver when the writer is made. Streaming writes
(`df.writeStream`) are one deltacommit per micro-batch: the tasks of a batch find its instant by the query and
batch ids Spark gives them (`services.streaming`), so a micro-batch re-run after a crash commits nothing twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from stitchlake.spark.tables import open_for_spark
from stitchlake.writing.badrows import Rejected

if TYPE_CHECKING:
    import pyarrow as pa

    from stitchlake.table.handle import TableHandle as Table
    from stitchlake.table.transaction import ConflictCheck
    from stitchlake.timeline.metadata import DataFile, StreamBatch

#: Task-local properties Spark sets on the jobs of a streaming query's micro-batch.
log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class FilesWritten(WriterCommitMessage):
    files: list[DataFile] = field(default_factory=list)
    rows: int = 0
    bad: Rejected = field(default_factory=Rejected)
    #: The instant the task wrote into (streaming: found per micro-batch by the task), None if it wrote nothing.
    instant: str | None = None


class _Target:
    """The table and stream a writer writes, resolved and checked on the driver (travels to the tasks)."""

    def __init__(self, options: dict[str, str]) -> None:
        from stitchlake.errors import UsageError

        self.options = options
        stream = options.get("stream")
        if not stream:
            raise UsageError("writing to stitchlake needs .option('stream', <name>)")
        self.table = open_for_spark(options)
        self.table.require_config()  # on the driver, before a task runs: a write names the table's config
        self.table.require()
        self.table.config.stream(stream)
        self.stream = stream
        self.extra = _metadata_option(options.get("metadata"))


class StitchWriter(_Target, DataSourceArrowWriter):
    """`df.write`: one deltacommit for the whole DataFrame.

    The table is resolved on the driver and travels with the writer to the executors (its storage settings
    included), so no task needs the config file.
    """

    def __init__(self, options: dict[str, str]) -> None:
        from stitchlake.services.writes.ingest import claim

        super().__init__(options)
        self.began = "instant" not in options
        if self.began:
            # Beats come from the tasks and the commit: a planning worker is too short-lived for a thread.
            txn = claim(self.table, self.stream, heartbeat=False)
            _beat(self.table, txn.time)
            self.instant = txn.time
        else:
            self.instant = options["instant"]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        return write_task(self.table, self.stream, self.instant, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self.table, self.stream, self.instant, messages, self.extra)
        if self.began:
            _tidy_after(self.table, self.instant)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard(self.table, self.instant, messages, abort_instant=self.began)


class StitchStreamWriter(_Target, DataSourceStreamArrowWriter):
    """`df.writeStream`: one deltacommit per micro-batch, exactly once across restarts from the checkpoint."""

    def __init__(self, options: dict[str, str]) -> None:
        from stitchlake.errors import UsageError

        if "instant" in options:
            raise UsageError("option instant is for a batch write the caller began; a stream's batches begin their own")
        super().__init__(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        from stitchlake.services.writes.streaming import batch_instant

        batch = _current_batch()
        instant = batch_instant(self.table, self.stream, batch)
        if instant is None:
            for _ in iterator:  # committed by an earlier run of this batch: nothing to write
                pass
            return FilesWritten()
        return write_task(self.table, self.stream, instant, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from stitchlake.services.writes.streaming import BatchAlreadyCommitted, exactly_once

        instant = _batch_instant_of(messages)
        if instant is None:
            return  # every task found the batch committed already
        batch = self._batch_of(instant)
        try:
            publish(self.table, self.stream, instant, messages, self.extra, batch, exactly_once(self.stream, batch))
        except BatchAlreadyCommitted:
            discard(self.table, instant, messages, abort_instant=True)
            return
        _tidy_after(self.table, instant)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        instant = _batch_instant_of(messages)
        if instant is not None:
            discard(self.table, instant, messages, abort_instant=True)

    def _batch_of(self, instant: str) -> StreamBatch:
        from stitchlake.timeline.metadata import DeltaCommitPlan

        timeline = self.table.timeline()
        found = timeline.get(instant)
        plan = timeline.plan(found) if found is not None else None
        if not isinstance(plan, DeltaCommitPlan) or plan.stream_batch is None:
            from stitchlake.errors import StitchError

            raise StitchError(f"instant {instant} is no longer a pending micro-batch write; nothing was published")
        return plan.stream_batch


def _current_batch() -> StreamBatch:
    """This task's micro-batch, from the properties Spark sets on a streaming query's jobs."""
    from pyspark import TaskContext

    from stitchlake.errors import UsageError
    from stitchlake.timeline.metadata import StreamBatch

    task = TaskContext.get()
    query = task.getLocalProperty(QUERY_ID_PROPERTY) if task else None
    batch = task.getLocalProperty(BATCH_ID_PROPERTY) if task else None
    if not query or batch is None:
        raise UsageError("the stitchlake stream writer runs only in a micro-batch streaming query")
    return StreamBatch(query_id=query, batch_id=int(batch))


def _batch_instant_of(messages: list[WriterCommitMessage | None]) -> str | None:
    instants = {m.instant for m in messages if isinstance(m, FilesWritten) and m.instant is not None}
    if len(instants) > 1:
        from stitchlake.errors import StitchError

        raise StitchError(f"the tasks of one micro-batch wrote into several instants ({sorted(instants)})")
    return next(iter(instants), None)


def write_task(table: Table, stream_name: str, instant: str, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
    """One task's part of a write: validate its rows and write the file groups they touch, beating all along:
    the rows arrive as Spark computes them (a join, a read of many files), for minutes maybe, and an instant with
    no beat for heartbeat.expire_s is taken back by the next clean."""
    from stitchlake.concurrency.heartbeat import Heartbeat

    spec = table.config.concurrency.heartbeat
    beating = Heartbeat(
        table.storage,
        instant,
        interval_s=spec.interval_s,
        expire_s=spec.expire_s,
        delete_on_exit=False,
        process_bound=False,
    )
    with beating:
        return _write_rows(table, stream_name, instant, iterator)


def _write_rows(table: Table, stream_name: str, instant: str, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
    import pyarrow as pa
    from pyspark import TaskContext

    from stitchlake.engine import marker_for
    from stitchlake.io.landing import positions
    from stitchlake.writing.batch import prepare
    from stitchlake.writing.writer import write_file_groups

    stream = table.config.stream(stream_name)
    batches = list(iterator)
    if not batches:
        return FilesWritten(instant=instant)
    data = pa.Table.from_batches(batches)
    task = TaskContext.get()
    partition = task.partitionId() if task else 0
    batch = prepare(
        table.config,
        stream,
        data,
        source=f"spark partition {partition}",
        pos=positions(partition, data.num_rows),
        fill=table.late_columns(stream_name),
    )
    mark = marker_for(table, instant)
    bad = Rejected()
    bad.apply_policy(table.config.bad_rows, [batch.bad], table.storage, instant, f"spark-{partition}", mark)
    files = write_file_groups(table, stream, batch, instant, mark)
    return FilesWritten(files=files, rows=batch.rows.num_rows, bad=bad, instant=instant)


def publish(
    table: Table,
    stream: str,
    instant: str,
    messages: list[WriterCommitMessage | None],
    extra: dict[str, Any],
    batch: StreamBatch | None = None,
    conflict_check: ConflictCheck | None = None,
) -> None:
    """The driver's commit: one deltacommit naming every file the tasks wrote."""
    from stitchlake.table.transaction import Transaction
    from stitchlake.writing.writer import deltacommit

    written = [m for m in messages if isinstance(m, FilesWritten)]
    bad = Rejected()
    for message in written:
        bad.merge(message.bad)
    txn = Transaction.attach(table, instant)
    files = sorted((f for m in written for f in m.files), key=lambda f: f.path)
    rows = sum(m.rows for m in written)
    commit = deltacommit(table, stream, instant, files, rows, bad, "spark", stream_batch=batch, extra=extra)
    txn.complete(commit, conflict_check)


def _tidy_after(table: Table, instant: str) -> None:
    """The instant's beat, deleted once it is published. A failure here must not fail the write: Spark would call
    `abort`, the commit standing, and the caller retrying a write it was told failed would write its rows twice."""
    from stitchlake.concurrency import heartbeat

    try:
        heartbeat.delete(table.storage, instant)
    except Exception:
        log.warning("instant %s is published; its heartbeat could not be deleted (`stitch clean` removes it)", instant)


def discard(table: Table, instant: str, messages: list[WriterCommitMessage | None], abort_instant: bool) -> None:
    """Spark's abort: remove what the tasks wrote (and the instant we began), unless it was published.

    The instant is aborted under the table lock, pending still: a micro-batch's instant may be another run's too
    (a restarted query beside a zombie driver of the same checkpoint), whose publish holds the lock from its last
    check to its completed file; aborting meanwhile deleted the files of the commit it completed."""
    from stitchlake.concurrency.heartbeat import sent_unanswered
    from stitchlake.table.transaction import Transaction

    current = table.timeline().get(instant)
    if current is not None and current.is_completed:
        log.warning("instant %s was published before Spark aborted the write: the commit stands", instant)
        return
    if current is not None and sent_unanswered(table.storage, instant):
        # The driver's commit (another process) sent its create and was stopped waiting for the answer.
        log.warning(
            "instant %s: its commit was sent and no answer came, so it may still land; its files are kept and "
            "`stitch clean` rolls it back once its heartbeat has expired if it did not",
            instant,
        )
        return
    for message in messages:
        if isinstance(message, FilesWritten):
            for item in message.files:
                table.storage.delete(item.path)
    if abort_instant and current is not None:
        with table.lock():
            now = table.timeline().get(instant)
            if now is not None and not now.is_completed:
                Transaction.attach(table, instant).abort()


def _metadata_option(text: str | None) -> dict[str, Any]:
    """`.option("metadata", '{"job": "backfill"}')`: a JSON object kept in each commit's `extra`."""
    if not text:
        return {}
    from stitchlake.errors import UsageError

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"option metadata: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError("option metadata: must be a JSON object")
    return value


def _beat(table: Table, instant: str) -> None:
    from stitchlake.concurrency.heartbeat import Heartbeat

    spec = table.config.concurrency.heartbeat
    Heartbeat(table.storage, instant, interval_s=spec.interval_s, expire_s=spec.expire_s).beat()
