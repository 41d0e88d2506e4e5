"""`stitch stream`: a stream's landing folder (or Kafka topic) as one long-running Structured Streaming query.

The query's source lists the stream's landing files the table has not consumed yet, at most
`source.files_per_trigger` per micro-batch, every `source.trigger_interval_s` (or all there is now, in batches, with
Trigger.AvailableNow); each micro-batch runs the very ingest `stitch ingest` runs (`services.ingest.ingest` on the
Spark engine) on exactly those files. So formats, compression, bad rows, quarantine, changed-file refusals and
exactly-once per landing file are the same as under cron, and cron and a stream can even take turns on a stream.

Exactly once: a micro-batch's offset names its files, and the ingest skips files the table already consumed, so a
batch re-run after a crash adds nothing twice; its commit also records the query and batch ids. The checkpoint is
Spark's bookkeeping only: deleting it starts a new query that ingests whatever is pending.

A Kafka-fed stream works the same way: the source plans each micro-batch from the offsets the table recorded (the
next offset per partition) up to the topic's end offsets now, at most `source.records_per_trigger` records, and its
offset names the batch's end per partition; the micro-batch runs `stitch ingest`'s Kafka ingest up to that end, the
records read in Spark tasks with the Python Kafka client. The table, not the checkpoint, holds the offsets, so a
restart, a cron `stitch ingest` in between, a rollback or a restore are all followed (design.md §6 says why this is
not Spark's own Kafka source).

Stopping: the CLI asks for a graceful stop (a stop file) on SIGTERM or Ctrl-C; the query then finishes the batch it
is in and stops, and the job reports success. A SIGTERM to the job itself stops at once (the running ingest
aborts its instant).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyspark
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from stitchlake.errors import UsageError
from stitchlake.services.writes.streaming import StreamCommit, StreamResult, refuse_unfit_request
from stitchlake.spark.tables import open_for_spark

try:  # admission control for Python streaming sources arrived in PySpark 4.2; batch reads and writes need 4.1
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxFiles,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - depends on the installed PySpark
    raise UsageError(f"stitch stream needs PySpark 4.2 or newer; this job runs PySpark {pyspark.__version__}") from None

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.engine import Engine
    from stitchlake.jobs.requests import StreamRequest
    from stitchlake.services.writes.ingest import IngestResult
    from stitchlake.table.handle import TableHandle as Table
    from stitchlake.timeline.metadata import StreamBatch

#: How often the driver checks for a stop request and reports progress.
POLL_S = 1.0
#: Offsets name a batch's files separated by this (file names never hold a newline: `io.landing` refuses them).
SEPARATOR = "\n"


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream of the table (`option("stream", S)`) as a Structured Streaming source's reader. Offsets are
    `{"batch": n, KEY: ...}`: KEY says what micro-batch n reads, empty before the first."""

    #: The offset's key, and its value before the first micro-batch.
    KEY: ClassVar[str]
    EMPTY: ClassVar[Any]
    #: The query's option (and the stream's `source:` setting it overrides) bounding a micro-batch.
    PER_TRIGGER: ClassVar[str]

    def __init__(self, options: dict[str, str]) -> None:
        self.table = open_for_spark(options)
        self.stream = options["stream"]
        source = self.table.config.stream(self.stream).source
        assert source is not None
        self.source = source
        self.per_trigger = int(options.get(self.PER_TRIGGER) or getattr(source, self.PER_TRIGGER))

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0, self.KEY: self.EMPTY}

    def next_offset(self, start: dict[str, Any], value: Any) -> dict[str, Any]:
        """The offset of the micro-batch after `start`'s, reading `value`."""
        return {"batch": int(start.get("batch", 0)) + 1, self.KEY: value}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end or not end.get(self.KEY):
            return []
        return [InputPartition(self.partition_value(end[self.KEY]))]

    def partition_value(self, value: Any) -> str:
        """An offset's value as the one partition of its micro-batch holds it."""
        return str(value)


class LandingFilesReader(_StreamReader):
    """Offsets are `{"batch": n, "files": "<name>\\n<name>..."}`: each names the files of its micro-batch."""

    KEY = "files"
    EMPTY = ""
    PER_TRIGGER = "files_per_trigger"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        #: With Trigger.AvailableNow: the files pending when the query started (later arrivals wait for next time).
        self.target: set[str] | None = None

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = set(self._pending())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        # Files of the last batch that are pending again were put back by a rollback or restore of its commit, and
        # are taken again. (Spark asks only once the last batch committed, which consumed its files; a replay
        # names the same files and the ingest skips those already consumed.)
        pending = self._pending()
        if self.target is not None:
            pending = [name for name in pending if name in self.target]
        if not pending:
            return start
        if not isinstance(limit, ReadAllAvailable):
            most = limit.max_files if isinstance(limit, ReadMaxFiles) else self.per_trigger
            pending = pending[:most]
        return self.next_offset(start, SEPARATOR.join(pending))

    def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
        for name in str(partition.value).split(SEPARATOR):
            yield (name,)

    def _pending(self) -> list[str]:
        from stitchlake.services.writes.ingest import pending_files

        files, _ = pending_files(self.table, self.stream)
        return [f.name for f in files]


class KafkaOffsetsReader(_StreamReader):
    """Offsets are `{"batch": n, "until": {"<partition>": end, ...}}`: the end of each partition's range in the
    micro-batch; where a range starts is the table's business (its recorded offsets when the batch runs)."""

    KEY = "until"
    EMPTY: ClassVar[dict[str, int]] = {}
    PER_TRIGGER = "records_per_trigger"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        assert self.source.is_kafka
        #: With Trigger.AvailableNow: the topic's end offsets when the query started.
        self.target: dict[int, int] | None = None

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        from stitchlake.io.kafka import topic_offsets

        self.target = {partition: high for partition, (_low, high) in topic_offsets(self.source).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        from stitchlake.services.offsets import plan

        most = None
        if not isinstance(limit, ReadAllAvailable):
            most = limit.max_rows if isinstance(limit, ReadMaxRows) else self.per_trigger
        todo = plan(self.table, self.stream, max_records=most, until=self.target)
        if not todo:
            return start
        # A new batch whenever the table has records to take, even up to the same ends as the last batch: a
        # rollback or restore of that batch put the table's offsets back, and its records must be read again.
        # (Spark asks only once the last batch committed; a replay plans again from the table, so nothing repeats.)
        return self.next_offset(start, {str(r.partition): r.end for r in todo.ranges})

    def partition_value(self, value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
        yield (str(partition.value),)


class _StreamSource(DataSource):
    """A stream of the table as a Structured Streaming source: its short name (`spark.readStream.format(...)`),
    its one column and its reader."""

    SHORT_NAME: ClassVar[str]
    COLUMN: ClassVar[str]
    READER: ClassVar[type[_StreamReader]]

    @classmethod
    def name(cls) -> str:
        return cls.SHORT_NAME

    def schema(self) -> str:
        return self.COLUMN

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return self.READER(dict(self.options))


class LandingFiles(_StreamSource):
    """The landing files of one stream (`option("stream", S)`) that the table has not consumed yet."""

    SHORT_NAME = "stitchlake_landing"
    COLUMN = "name string"
    READER = LandingFilesReader


class KafkaOffsets(_StreamSource):
    """The records of one Kafka-fed stream (`option("stream", S)`) past the offsets the table recorded."""

    SHORT_NAME = "stitchlake_kafka"
    COLUMN = "until string"
    READER = KafkaOffsetsReader


def checkpoint_folder(table: Table, stream: str) -> str:
    """The query's checkpoint: beside the table on local disk; in local state for a table on an object store
    (Spark would need Hadoop's s3a to write there, and losing it costs nothing: the table knows what it has), in a
    folder of that table's own (name and id: two tables of one name, or a table made again, never share one)."""
    from stitchlake.paths import STREAMS_DIR

    local = table.storage.local_path(f"{STREAMS_DIR}/{stream}/checkpoint")
    if local is not None:
        return local
    base = os.environ.get("STITCH_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".local", "state", "stitchlake")
    return os.path.join(base, "streams", f"{table.config.table.name}-{table.table_id}", stream, "checkpoint")


def ingest_landing_batch(
    table: Table, engine: Engine, stream: str, names: list[str], stream_batch: Callable[[], StreamBatch]
) -> IngestResult | None:
    """A landing micro-batch's ingest of the files its offset names (`stream_batch()` says which batch it is);
    None when the table consumed them all already."""
    from stitchlake.services.writes.ingest import consumed, ingest

    # A replay of a batch that committed before Spark recorded it: its files are consumed, and may be gone
    # (a retention rule deletes consumed files), which would fail the replay on every restart.
    taken = consumed(table, table.timeline(), stream)
    names = [name for name in names if name not in taken]
    if not names:
        return None
    return ingest(table, engine, stream, names=names, stream_batch=stream_batch())


def ingest_kafka_batch(
    table: Table,
    engine: Engine,
    stream: str,
    ends: list[dict[str, Any]],
    per_trigger: int,
    stream_batch: Callable[[], StreamBatch],
) -> IngestResult | None:
    """A Kafka micro-batch's ingest up to the ends its offset names (the last of `ends`), at most `per_trigger`
    records; None when the offset names none."""
    from stitchlake.services.writes.ingest import ingest

    if not ends:
        return None
    until = {int(partition): int(end) for partition, end in ends[-1].items()}
    return ingest(
        table,
        engine,
        stream,
        max_records=per_trigger,  # planned again here: offsets rewound since must not widen the batch
        until=until,
        stream_batch=stream_batch(),
    )


def run_stream(
    spark: SparkSession,
    table: Table,
    request: StreamRequest,
    progress: Callable[[str], None],
) -> StreamResult:
    """Run the query until it is asked to stop (or, with available_now, until nothing is pending)."""
    from stitchlake.spark.engine import SparkEngine
    from stitchlake.timeline.metadata import StreamBatch

    refuse_unfit_request(table, request.stream, request.files_per_trigger, request.records_per_trigger)
    spec = table.config.stream(request.stream)
    assert spec.source is not None
    kafka = spec.source.is_kafka
    source = KafkaOffsets if kafka else LandingFiles
    spark.dataSource.register(source)
    interval = request.trigger_interval_s or spec.source.trigger_interval_s
    per_trigger_option = source.READER.PER_TRIGGER
    per_trigger = getattr(request, per_trigger_option) or getattr(spec.source, per_trigger_option)
    checkpoint = request.checkpoint or checkpoint_folder(table, request.stream)
    engine = SparkEngine(spark)
    totals = StreamResult(request.stream, query_id="", checkpoint=checkpoint, stopped="")
    query_id: list[str] = []
    failed: list[BaseException] = []
    started = threading.Event()  # the first micro-batch may run before `start()` returns the query's id
    frame = (
        spark.readStream.format(source.name())
        .option("path", table.path)
        .option("config", table.config.source_file or "")
        .option("stream", request.stream)
        .option(per_trigger_option, str(per_trigger))
        .load()
    )

    def this_batch(batch_id: int) -> StreamBatch:
        started.wait()
        return StreamBatch(query_id=query_id[0], batch_id=batch_id)

    def each_batch(batch: Any, batch_id: int) -> None:
        try:
            one_batch(batch, batch_id)
        except BaseException as exc:
            failed.append(exc)  # what a stop request's wait reads: Spark's own record mixes in its interruptions
            raise

    def one_batch(batch: Any, batch_id: int) -> None:
        if kafka:
            return each_kafka_batch(batch, batch_id)
        names = [row["name"] for row in batch.collect()]
        done = ingest_landing_batch(table, engine, request.stream, names, lambda: this_batch(batch_id))
        if done is None:
            return
        totals.source_files += done.source_files
        counted(batch_id, done)

    def each_kafka_batch(batch: Any, batch_id: int) -> None:
        ends = [json.loads(row["until"]) for row in batch.collect()]
        done = ingest_kafka_batch(table, engine, request.stream, ends, per_trigger, lambda: this_batch(batch_id))
        if done is None:
            return
        totals.records += done.records
        counted(batch_id, done)

    def counted(batch_id: int, done: IngestResult) -> None:
        """Add a micro-batch's ingest to the totals and say so; a batch that committed names its instant."""
        totals.batches += 1
        totals.rows += done.rows
        totals.bad_rows += done.bad_rows
        if done.instant is not None and done.completed is not None:
            totals.commits.append(StreamCommit(batch_id, done.instant, done.rows))
            progress(f"micro-batch {batch_id} committed instant {done.instant}: {done.message}")
        else:
            progress(f"micro-batch {batch_id}: {done.message}")

    writer = frame.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True)
        if request.available_now
        else writer.trigger(processingTime=f"{interval} seconds")
    )
    query = writer.queryName(f"stitch-stream-{table.config.table.name}-{request.stream}").start()
    query_id.append(str(query.id))
    started.set()
    unit = "record(s)" if kafka else "file(s)"
    progress(f"streaming {request.stream}: {per_trigger} {unit} per micro-batch, checkpoint {checkpoint}")
    stopped_by = _await(query, request.stop_file, failed)
    totals.query_id, totals.stopped = str(query.id), stopped_by
    read = f"{totals.records} record(s)" if kafka else f"{totals.source_files} file(s)"
    totals.message = (
        f"stream {request.stream}: {totals.batches} micro-batch(es), {read}, {totals.rows} rows; {stopped_by}"
    )
    return totals


def _await(query: Any, stop_file: str | None, failed: list[BaseException]) -> str:
    """Wait for the query to end; on a stop request, let the running micro-batch finish, then stop it. The batch
    running at the request fails the stream if it failed (`failed`: what the batches raised): a scheduler told
    "stopped" would take a batch that never committed (bad rows under `fail`, a conflict, a store error) for done.
    A batch the stop itself interrupts (one that began in between) is no failure."""
    while query.isActive:
        if stop_file and os.path.exists(stop_file):
            while query.isActive and query.status.get("isTriggerActive"):
                time.sleep(0.2)  # the batch in progress finishes and commits
            before_the_stop = list(failed)
            query.stop()
            if before_the_stop:
                raise before_the_stop[0]
            return "stopped on request after the running micro-batch"
        query.awaitTermination(POLL_S)
    error = query.exception()
    if error is not None:
        raise error
    return "nothing left to ingest (available now)"
