"""A planned read as a stream of Arrow record batches (`Scan`), merged a few parts ahead (`bounded`).

Both kinds of read hand their parts through here, a file slice (a snapshot) or a file group (changes) at a time, so
a read's memory is bounded by its largest parts, never by the table (design.md §7).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    pass

READ_THREADS = 4
#: A scan merges slices ahead of its consumer while their files add up to at most this many bytes (and always one
#: slice, however large), as a Spark read task packs slices up to `maxPartitionBytes`: a small table's slices are
#: all merged at once, as fast as before, while a large table holds about one slice being merged and one being
#: consumed. Merging a slice needs all its files at once, so the largest file group, not the table, sets a read's
#: peak memory (docs/operations.md, "Sizing file groups").
READ_AHEAD_BYTES = 128 * 1024 * 1024
#: Rows per record batch a scan hands on (a slice's rows are cut into batches of at most this many).
BATCH_ROWS = 128 * 1024
U = TypeVar("U")
R = TypeVar("R")

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _slice_pool() -> ThreadPoolExecutor:
    """One pool for the process: starting threads for every read costs more than a small read itself.

    Its tasks (`read_slice`) never submit to it, so they cannot wait on each other.
    """
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="stitch-read")
        return _POOL


def bounded(
    fn: Callable[[U], R],
    items: Sequence[U],
    weight: Callable[[U], int],
    max_bytes: int | None = None,
    max_count: int = READ_THREADS,
    pool: ThreadPoolExecutor | None = None,
) -> Iterator[tuple[U, R]]:
    """`fn` over `items` in `pool` (the shared read pool by default), results in item order, with at most
    `max_count` calls in flight whose `weight`s add up to at most `max_bytes` (one call always runs, whatever its
    weight).

    A result is handed on and dropped before the next call starts, so at most the calls in flight plus the one
    result the consumer holds are alive: an unbounded `pool.map` would buffer the whole table. A consumer that
    stops early (a closed generator) cancels the calls not started yet.
    """
    limit = READ_AHEAD_BYTES if max_bytes is None else max_bytes
    pending: deque[tuple[U, int, Future[R]]] = deque()
    in_flight = 0
    position = 0
    pool = pool or _slice_pool()
    try:
        while position < len(items) or pending:
            while position < len(items) and len(pending) < max_count:
                cost = weight(items[position])
                if pending and in_flight + cost > limit:
                    break
                pending.append((items[position], cost, pool.submit(fn, items[position])))
                in_flight += cost
                position += 1
            item, cost, future = pending.popleft()
            result = future.result()
            in_flight -= cost
            yield item, result
            del result  # the consumer had its turn: never keep a slice alive while the next one is merged
    finally:
        for _item, _cost, future in pending:
            future.cancel()


@dataclass
class Scan:
    """A planned read as a stream of Arrow record batches, one part at a time (a file slice, or for changes a file
    group), merged a few parts ahead (`bounded`): memory is bounded by the largest parts, never by the table.

    Each pass (`batches`, `reader`, iterating, or a consumer of the Arrow C stream interface such as DuckDB, which
    asks once per scan of the view) reads what was planned when the scan was made, so two passes see the same
    state. A slice cleaned under a pass (a compaction replaced it) makes the pass plan the file groups it has not
    read yet once more, from the new timeline, as `read` plans again.
    """

    schema: pa.Schema
    #: One pass over the planned parts, in order; its argument is `resume` (see `batches`).
    parts: Callable[[bool], Iterator[pa.Table]]
    #: The error that ended the last pass: DuckDB passes on only its text; `reading.sql` re-raises this.
    error: BaseException | None = None

    def batches(self, resume: bool = True) -> Iterator[pa.RecordBatch]:
        """One pass. `resume=False`: a slice cleaned under the pass is an error (`read` then plans the whole read
        again, so its rows are one state of the table)."""
        self.error = None
        try:
            for rows in self.parts(resume):
                yield from self._conform(rows).to_batches(max_chunksize=BATCH_ROWS)
                del rows  # never hold a part while the next one is merged
        except BaseException as exc:
            self.error = exc
            raise

    def _conform(self, rows: pa.Table) -> pa.Table:
        rows = rows.select(self.schema.names)
        return rows if rows.schema.equals(self.schema) else rows.cast(self.schema)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches()

    def reader(self) -> pa.RecordBatchReader:
        """One pass as a RecordBatchReader (Parquet writers, DuckDB, Polars, `pa.dataset` take one)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def read_all(self, resume: bool = True) -> pa.Table:
        """The whole result as one Arrow table: memory proportional to the result, the caller's choice."""
        return pa.Table.from_batches(list(self.batches(resume)), self.schema)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.reader().__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()
