"""Engines: where a job's heavy, parallel part runs. Every job is written once over this interface.

A job (ingest, compact, clean, erase, ...) plans and publishes on the driver; an engine only distributes the
per-file and per-file-group work, calling the same core functions either way. `LocalEngine` runs it in this
process with a few threads; `stitchlake.spark.engine.SparkEngine` runs it as Spark tasks.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from stitchlake.concurrency.markers import create_marker
from stitchlake.config import StreamSpec
from stitchlake.reading.scan import READ_AHEAD_BYTES, bounded
from stitchlake.timeline.metadata import DataFile
from stitchlake.writing.badrows import Rejected
from stitchlake.writing.batch import Batch
from stitchlake.writing.events import Input, LandingEvents, read_input
from stitchlake.writing.writer import write_file_groups

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

T = TypeVar("T")
R = TypeVar("R")
#: Threads of the in-process engine: reading and encoding release the GIL, so a few help.
LOCAL_THREADS = 4
#: Bytes of input the in-process engine's weighted tasks (compaction and erase: one file slice each) read at once,
#: one task always: small tables use every thread, a large file group is merged alone (a merge holds its whole
#: slice, ~8x its file bytes: docs/operations.md, "Sizing file groups").
LOCAL_BYTES_IN_FLIGHT = READ_AHEAD_BYTES


@dataclass
class StreamWrite:
    """What writing a batch of landing files produced: log files, good rows, and what was rejected."""

    files: list[DataFile] = field(default_factory=list)
    rows: int = 0
    bad: Rejected = field(default_factory=Rejected)
    #: Where the time went (seconds; for Spark, summed over tasks): recorded in the commit's `timings` and in
    #: `stitch ingest --json`; the profile `make bench` reports.
    timings: dict[str, float] = field(default_factory=dict)


class Engine(ABC):
    """Runs the parallel part of a job."""

    name: str

    @abstractmethod
    def map(self, fn: Callable[[T], R], items: Sequence[T], weight: Callable[[T], int] | None = None) -> list[R]:
        """`fn` applied to every item (as tasks), results in item order. `fn` must not touch the driver's state.

        `weight` is what an item's task reads, in bytes (a file slice's files): the in-process engine then runs at
        once only tasks whose weights add up to `LOCAL_BYTES_IN_FLIGHT` (and always one), so a compaction or erase
        holds a few file groups in memory, not the table. A Spark task is one item whatever its weight.
        """

    @abstractmethod
    def write_stream(self, table: TableHandle, stream: StreamSpec, files: Sequence[Input], instant: str) -> StreamWrite:
        """Read, validate and write landing files (or Kafka offset ranges) as log files of `instant` (one per
        touched file group).

        Under `bad_rows: fail` a bad row or file raises InputRejected (the caller aborts the instant, which removes
        anything written); under `quarantine` they are set aside and reported.
        """


def marker_for(table: TableHandle, instant: str) -> Callable[[str], None]:
    """What `Transaction.mark` does, as a plain picklable function (engines mark from their tasks)."""
    return functools.partial(create_marker, table.storage, instant)


class LocalEngine(Engine):
    """In this process: a few threads, for small tables, tests, and metadata-sized work."""

    name = "local"

    def map(self, fn: Callable[[T], R], items: Sequence[T], weight: Callable[[T], int] | None = None) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(LOCAL_THREADS, len(items))) as pool:
            if weight is None:
                return list(pool.map(fn, items))
            ran = bounded(fn, items, weight, LOCAL_BYTES_IN_FLIGHT, LOCAL_THREADS, pool)
            return [result for _item, result in ran]

    def write_stream(self, table: TableHandle, stream: StreamSpec, files: Sequence[Input], instant: str) -> StreamWrite:
        mark = marker_for(table, instant)
        started = time.perf_counter()
        read: list[LandingEvents] = self.map(
            lambda item: read_input(table, stream, item[1], item[0], instant, mark), list(enumerate(files))
        )
        bad = Rejected(rejected=[events.rejected for events in read if events.rejected is not None])
        batches = [events.batch for events in read if events.batch is not None]
        bad.apply_policy(table.config.bad_rows, [b.bad for b in batches], table.storage, instant, "local", mark)
        if not batches:
            return StreamWrite(bad=bad)
        batch = Batch.concat(batches)
        read_s = time.perf_counter() - started
        written = write_file_groups(table, stream, batch, instant, mark)
        timings = {"read_s": round(read_s, 3), "write_s": round(time.perf_counter() - started - read_s, 3)}
        return StreamWrite(written, batch.rows.num_rows, bad, timings)
