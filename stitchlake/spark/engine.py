"""The Spark engine: a job's parallel part as Spark tasks, calling the same core as the in-process engine.

Ingest is one read stage and one write stage. Read tasks take landing files (a few each), read them through
`Storage` with the core readers (no Hadoop file system, so `s3://` needs no jars), validate the rows and send each
file group's rows, as Arrow, to the task that owns the file group; write tasks precombine and write one log file
per file group. Arrow tables cross the shuffle as Arrow IPC buffers: no per-row Python, no JVM row conversion.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from stitchlake.badrows import FAIL, BadRows, quarantine_rows
from stitchlake.batch import Batch
from stitchlake.config import StreamSpec
from stitchlake.engine import Engine, StreamWrite, marker_for
from stitchlake.events import from_landing
from stitchlake.io.landing import LandingFile
from stitchlake.spark.errors import recovered
from stitchlake.timeline.metadata import DataFile, QuarantinedFile
from stitchlake.write import route, write_file_groups

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table

T = TypeVar("T")
R = TypeVar("R")
#: Shuffle keys that are not file groups: bad rows and whole rejected files go to one writer each.
BAD = "bad rows"
REJECTED = "rejected files"
#: Tasks per core for the read and write stages (a straggler file or group then holds up less).
TASKS_PER_CORE = 2


def stable_partition(key: Any) -> int:
    """The writer of a shuffle key: the same in every Python process (str hashes are salted per process)."""
    return zlib.crc32(repr(key).encode("utf-8"))


class SparkEngine(Engine):
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @property
    def cores(self) -> int:
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if not items:
            return []
        slices = min(len(items), self.cores * TASKS_PER_CORE * 4)
        return _collect(lambda: self.spark.sparkContext.parallelize(list(items), slices).map(fn).collect())

    def write_stream(self, table: Table, stream: StreamSpec, files: list[LandingFile], instant: str) -> StreamWrite:
        context = self.spark.sparkContext
        readers = max(1, min(len(files), self.cores * TASKS_PER_CORE))
        writers = max(1, self.cores * TASKS_PER_CORE)
        fail = table.config.bad_rows == FAIL

        def read(items: Iterable[tuple[int, LandingFile]]) -> Iterator[tuple[Any, Any]]:
            mark = marker_for(table, instant)
            for ordinal, file in items:
                events = from_landing(table, stream, file, ordinal, instant, mark)
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
                for partition, group, members in route(table.config, batch.rows):
                    yield (partition, group), rows.take(pa.array(members))

        def write(pairs: Iterable[tuple[Any, Any]]) -> Iterator[tuple[str, Any]]:
            from pyspark import TaskContext

            mark = marker_for(table, instant)
            parts: list[pa.Table] = []
            bad_parts: list[pa.Table] = []
            rejected: list[QuarantinedFile] = []
            for key, value in pairs:
                if key == BAD:
                    bad_parts.append(value)
                elif key == REJECTED:
                    rejected.append(value)
                else:
                    parts.append(value)
            bad = BadRows(rejected=rejected)
            if bad_parts:
                rows = pa.concat_tables(bad_parts, promote_options="permissive")
                bad.add_rows(rows)
                if not fail:
                    task = TaskContext.get()
                    tag = f"spark-{task.partitionId() if task else 0}"
                    bad.files.append(quarantine_rows(table.storage, instant, rows, tag, mark))
            yield "bad", bad
            if parts and not (fail and bad):
                batch = Batch.from_table(pa.concat_tables(parts))
                yield "rows", batch.rows.num_rows
                for written in write_file_groups(table, stream, batch, instant, mark):
                    yield "file", written

        pairs = context.parallelize(list(enumerate(files)), readers).mapPartitions(read)
        results = _collect(lambda: pairs.partitionBy(writers, stable_partition).mapPartitions(write).collect())
        out = StreamWrite()
        for kind, value in results:
            if kind == "bad":
                out.bad.merge(value)
            elif kind == "rows":
                out.rows += value
            else:
                assert isinstance(value, DataFile)
                out.files.append(value)
        if fail and out.bad:
            raise out.bad.rejection()
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
