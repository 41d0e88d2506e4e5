"""The Spark engine: a job's parallel part as Spark tasks, calling the same core as the in-process engine.

Ingest is one read stage, one shuffle and one write stage. Read tasks take landing files (balanced by size), read
them through `Storage` with the core readers (no Hadoop file system, so `s3://` needs no jars), validate the rows,
hash them to file groups once, and send each file group's rows as one Arrow IPC buffer (lz4) to the task that owns
the file group; write tasks precombine and write one log file per file group, without routing again. No per-row
Python and no JVM row conversion: the JVM only moves the buffers (docs/benchmarks.md has the profile).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from stitchlake.config import BadRows, StreamSpec
from stitchlake.engine import Engine, StreamWrite, marker_for
from stitchlake.spark.errors import recovered
from stitchlake.timeline.metadata import DataFile, QuarantinedFile
from stitchlake.writing.badrows import Rejected
from stitchlake.writing.batch import Batch
from stitchlake.writing.events import Input, read_input
from stitchlake.writing.writer import before_writing, route, write_file_group

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table.handle import TableHandle as Table

T = TypeVar("T")
R = TypeVar("R")
#: Shuffle keys that are not file groups: bad rows and whole rejected files go to one writer each.
BAD = "bad rows"
REJECTED = "rejected files"
TIMINGS = "timings"
#: Tasks per core for the read and write stages (a straggler file or group then holds up less).
TASKS_PER_CORE = 2
#: Compression of the Arrow IPC buffers crossing the shuffle: lz4 halves the bytes Spark writes and reads back
#: for less CPU than it saves.
SHUFFLE_COMPRESSION: str | None = "lz4"


def stable_partition(key: Any) -> int:
    """The write task of a shuffle key (Spark takes it modulo the writers), the same in every Python process
    (str hashes are salted per process). A partition's file groups go to consecutive writers, so its buckets
    spread evenly over them instead of colliding by chance."""
    if isinstance(key, tuple):
        partition, group = key
        return zlib.crc32(str(partition).encode("utf-8")) + int(group)
    return zlib.crc32(repr(key).encode("utf-8"))


class Clock:
    """Seconds a task spent per step, for the job's profile (`StreamWrite.timings`)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.spent[step] = self.spent.get(step, 0.0) + now - self.last
        self.last = now


def to_ipc(rows: pa.Table, compression: str | None = SHUFFLE_COMPRESSION) -> bytes:
    """A table as one Arrow IPC stream: what crosses the shuffle (pickling a table would copy it twice)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, rows.schema, options=options) as writer:
        writer.write_table(rows)
    return bytes(sink.getvalue())


def from_ipc(blobs: list[bytes]) -> pa.Table:
    return pa.concat_tables([pa.ipc.open_stream(blob).read_all() for blob in blobs])


def balanced(files: Sequence[Input], tasks: int) -> list[list[tuple[int, Input]]]:
    """Inputs (with their ordinal in the batch) dealt to `tasks` read tasks, largest first to the lightest (a landing
    file's size is bytes, an offset range's records: a batch holds one kind)."""
    bins: list[list[tuple[int, Input]]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for ordinal, file in sorted(enumerate(files), key=lambda item: -item[1].size):
        lightest = loads.index(min(loads))
        bins[lightest].append((ordinal, file))
        loads[lightest] += max(file.size, 1)
    return [b for b in bins if b]


class SparkEngine(Engine):
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.shuffle_compression = SHUFFLE_COMPRESSION

    @property
    def cores(self) -> int:
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    def map(self, fn: Callable[[T], R], items: Sequence[T], weight: Callable[[T], int] | None = None) -> list[R]:
        """One Spark task per item at most (a task's memory is its item's: a file slice's merge for a compaction or
        an erase); `weight` is not needed, the executors run as many tasks as they have cores."""
        if not items:
            return []
        slices = min(len(items), self.cores * TASKS_PER_CORE * 4)
        return _collect(lambda: self.spark.sparkContext.parallelize(list(items), slices).map(fn).collect())

    def write_stream(self, table: Table, stream: StreamSpec, files: Sequence[Input], instant: str) -> StreamWrite:
        if not files:  # a Kafka plan of positions only (`starting_offsets: latest`, a reset): Spark has no task
            return StreamWrite()
        context = self.spark.sparkContext
        shares = balanced(files, max(1, min(len(files), self.cores * TASKS_PER_CORE)))
        writers = max(1, self.cores * TASKS_PER_CORE)
        policy = table.config.bad_rows
        fail = policy == BadRows.FAIL
        compression = self.shuffle_compression

        def read(share: Iterable[list[tuple[int, Input]]]) -> Iterator[tuple[Any, Any]]:
            mark = marker_for(table, instant)
            clock = Clock()
            for ordinal, file in (item for items in share for item in items):
                events = read_input(table, stream, file, ordinal, instant, mark)
                clock.lap("read_task_s")
                if events.rejected is not None:
                    yield REJECTED, events.rejected
                    continue
                assert events.batch is not None
                batch = events.batch
                if batch.bad is not None and batch.bad.num_rows:
                    yield BAD, batch.bad
                    if fail:
                        continue  # nothing will be written: spare the shuffle
                rows = batch.to_table()
                routed = [
                    ((partition, group), to_ipc(rows.take(pa.array(members)), compression))
                    for partition, group, members in route(table.config, batch.rows, table.routing)
                ]
                clock.lap("route_task_s")
                yield from routed
                clock.lap("shuffle_write_s")
            yield TIMINGS, clock.spent

        def write(pairs: Iterable[tuple[Any, Any]]) -> Iterator[tuple[str, Any]]:
            from pyspark import TaskContext

            mark = marker_for(table, instant)
            clock = Clock()
            groups: dict[tuple[str, str], list[bytes]] = {}
            bad_parts: list[pa.Table] = []
            rejected: list[QuarantinedFile] = []
            for key, value in pairs:
                if key == TIMINGS:
                    yield "timings", value
                elif key == BAD:
                    bad_parts.append(value)
                elif key == REJECTED:
                    rejected.append(value)
                else:
                    groups.setdefault(key, []).append(value)
            clock.lap("shuffle_read_s")
            bad = Rejected(rejected=rejected)
            task = TaskContext.get()
            tag = f"spark-{task.partitionId() if task else 0}"
            # `fail` is enforced on the driver, whose one message counts every task's bad rows.
            bad.apply_policy(policy, bad_parts, table.storage, instant, tag, mark, enforce=False)
            yield "bad", bad
            if fail and bad:
                return
            before_writing(table, stream, instant, sorted(groups))  # optimistic mode: early conflict detection
            for (partition, group), blobs in sorted(groups.items()):
                batch = Batch.from_table(from_ipc(blobs))
                yield "rows", batch.rows.num_rows
                yield "file", write_file_group(table, stream, partition, group, batch, instant, mark)
            clock.lap("write_task_s")
            yield "timings", clock.spent

        pairs = context.parallelize(shares, len(shares)).mapPartitions(read)
        started = time.perf_counter()
        results = _collect(lambda: pairs.partitionBy(writers, stable_partition).mapPartitions(write).collect())
        out = StreamWrite(timings={"spark_job_s": round(time.perf_counter() - started, 3)})
        for kind, value in results:
            if kind == "timings":
                for name, seconds in value.items():
                    out.timings[name] = round(out.timings.get(name, 0.0) + seconds, 3)
            elif kind == "bad":
                out.bad.merge(value)
            elif kind == "rows":
                out.rows += value
            else:
                assert isinstance(value, DataFile)
                out.files.append(value)
        out.bad.enforce(policy)
        out.files.sort(key=lambda f: f.path)
        return out


def _collect(action: Callable[[], list[Any]]) -> list[Any]:
    """Run a Spark action; a stitchlake error raised in a task comes back as itself (a bad row is exit 5)."""
    try:
        return action()
    except Exception as exc:
        found = recovered(exc)
        if found is None:
            raise
        raise found from exc
