"""Reading through the `stitchlake` data source: file slices planned on the driver, merged by the tasks.

Each task calls the same core reader as `stitchlake.read`: `reader.read_slice` for snapshot and read-optimized
reads, `changes.change_parts` (restricted to the task's file groups) for incremental ones. Input partitions are
packed by size the way Spark packs files (`maxPartitionBytes`, `openCostInBytes`, at least `minPartitions` when
the data allows), so a small table is a handful of tasks and a large one keeps every core busy.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSourceReader, EqualTo, Filter, In, InputPartition

from stitchlake.spark.packing import Packing
from stitchlake.spark.read_request import PLAN_OPTION, READ_OPTIONS
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from stitchlake.layout.fsview import FileSlice, FileSystemView
    from stitchlake.reading.filters import Pruning
    from stitchlake.timeline.timeline import Timeline

T = TypeVar("T")

#: Field metadata key, on the first column of a catalog table's schema, holding the table's read options.
CATALOG_OPTIONS_KEY = "stitchlake.options"
#: Slices a task keeps in flight: the next slice's files are read while the last one's rows go to Spark.
READ_AHEAD = 2


class SliceInput(InputPartition):
    """The file slices one task reads (their JSON form), packed by size on the driver."""

    def __init__(self, value: list[dict[str, Any]]) -> None:
        super().__init__(value)


class ChangesInput(InputPartition):
    """The file groups (partition path, file group) whose changes one task reads."""

    def __init__(self, value: list[tuple[str, str]]) -> None:
        super().__init__(value)


def catalog_schema(schema: StructType, options: Mapping[str, str]) -> StructType:
    """`schema` carrying the table's read options, for a catalog table.

    Spark's session catalog hands a Python data source none of a table's OPTIONS or LOCATION when the table is
    read (`PythonDataSourceV2.getTable` drops them; only the per-query options reach the reader), but it does keep
    the schema it inferred at CREATE TABLE, field metadata included. So the options ride in the schema.
    """
    from pyspark.sql.types import StructField, StructType

    kept = {name: str(options[name]) for name in READ_OPTIONS if options.get(name) not in (None, "")}
    if not schema.fields or not kept:
        return schema
    first = schema.fields[0]
    metadata = {**(first.metadata or {}), CATALOG_OPTIONS_KEY: json.dumps(kept, sort_keys=True)}
    return StructType([StructField(first.name, first.dataType, first.nullable, metadata), *schema.fields[1:]])


def stored_options(schema: StructType) -> dict[str, str]:
    """The read options a catalog table's schema carries (none for `spark.read...load(path)`)."""
    if not schema.fields:
        return {}
    text = (schema.fields[0].metadata or {}).get(CATALOG_OPTIONS_KEY)
    return dict(json.loads(text)) if text else {}


def read_options(options: Mapping[str, str], schema: StructType) -> dict[str, str]:
    """A read's options: a catalog table's stored ones, overridden by those of the query itself."""
    return {**stored_options(schema), **{k: v for k, v in options.items() if v is not None}}


class StitchReader(DataSourceReader):
    """Plans file slices on the driver; each task reads a few of them with the core reader.

    The table (its config and schema versions, as of the read's time) is resolved once on the driver and travels
    with the reader to the executors: no task needs the config file. Snapshot reads need no timeline in the tasks;
    an incremental read's tasks load it, as `stitchlake.read` does, for the instants up to a fixed `until`.
    """

    def __init__(self, options: dict[str, str], schema: StructType, defaults: Mapping[str, str] | None = None) -> None:
        from stitchlake.errors import UsageError
        from stitchlake.reading.changes import CHANGE_COLUMNS, OP
        from stitchlake.spark.read_request import ReadRequest

        options = read_options(options, schema)
        self.options = options
        self.columns = [f.name for f in schema.fields if f.name not in CHANGE_COLUMNS]
        self.where: dict[str, list[Any]] = {}
        self.packing = Packing.of(options, defaults or {})
        if (options.get("since") is not None or options.get("until") is not None) and OP not in schema.fieldNames():
            raise UsageError(
                "since/until add an _op column the table's schema lacks: a catalog table reads changes only when "
                "created with them (CREATE TABLE ... USING stitchlake OPTIONS (path '...', since '...'))"
            )
        if options.get(PLAN_OPTION):
            raise UsageError(
                "option plan is read by the JVM reader only (its jar is not on this session's classpath, or "
                "STITCHLAKE_JVM_READER is off); the Python data source plans the read itself: drop the option"
            )
        request = ReadRequest(options)
        self.mode, self.changes, self.before_images = request.mode, request.changes, request.before_images
        self.as_of, self.since, self.until = request.as_of, request.since, request.until
        self.table = request.table

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Equality/IN on partition columns prunes partitions exactly; on key columns prunes file groups.

        Key filters are still handed back: a bucket holds other keys too, so Spark checks the rows.
        """
        table = self.table
        partition = set(table.config.table.partition_names)
        keys = set(table.config.table.key_names)
        for item in filters:
            if not isinstance(item, EqualTo | In):
                yield item
                continue
            name = item.attribute[0] if len(item.attribute) == 1 else None
            if name in partition | keys:
                values = [item.value] if isinstance(item, EqualTo) else list(item.value)
                values = [v for v in values if v is not None]  # `= NULL` holds for no row in SQL
                if name in self.where:  # `c = 1 AND c IN (1, 2)`: both hold
                    values = [v for v in values if v in self.where[name]]
                self.where[name] = values
                if name in partition:
                    continue
            yield item

    def partitions(self) -> list[InputPartition]:
        from stitchlake.reading.filters import prune
        from stitchlake.reading.snapshot import plan_slices
        from stitchlake.timeline.metadata import dump

        table = self.table
        if any(not values for values in self.where.values()):
            # `p IN ('a', 'c') AND p IN ('b', 'd')`: no value is left, so no row holds (pruning would take none
            # as no condition, and Spark does not check a partition filter taken here).
            return [ChangesInput([])] if self.changes else [SliceInput([])]
        pruning = prune(table.config, self.where or None)
        timeline = table.read_timeline()
        view = table.view(timeline)
        if self.changes:
            return self._change_partitions(timeline, view, pruning)
        slices = plan_slices(table.config, view, self.as_of, pruning)
        weights = [self._weight(s) for s in slices]
        packed: list[InputPartition] = [SliceInput([dump(slices[i]) for i in p]) for p in self.packing.pack(weights)]
        return packed or [SliceInput([])]

    def _weight(self, fslice: FileSlice) -> int:
        """What a task pays to read a slice: its files' bytes plus the cost of opening each (as Spark counts)."""
        files = fslice.files if self.mode == ReadMode.SNAPSHOT else [fslice.base] if fslice.base else []
        return sum(f.bytes + self.packing.open_cost for f in files) or self.packing.open_cost

    def _change_partitions(self, timeline: Timeline, view: FileSystemView, pruning: Pruning) -> list[InputPartition]:
        """The file groups the range's deltacommits and erases touched (and the read's filters allow), packed by
        the size of their slice as of `until`: each task diffs its groups' two states."""
        from stitchlake.reading.changes import plan_changes

        planned = plan_changes(self.table, timeline, view, self.since, self.until, pruning)
        groups = [(g.partition, g.file_group) for g in planned]
        weights = [self._weight(g.after) if g.after is not None else self.packing.open_cost for g in planned]
        packed: list[InputPartition] = [ChangesInput([groups[i] for i in p]) for p in self.packing.pack(weights)]
        return packed or [ChangesInput([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangesInput):
            yield from self._read_changes(partition.value)
            return
        from stitchlake.reading.snapshot import read_slice
        from stitchlake.timeline.metadata import FileSlice, load

        def rows(value: dict[str, Any]) -> pa.Table:
            return read_slice(self.table, load(FileSlice, value), self.columns, self.mode)

        for table in _ahead(rows, partition.value or []):
            yield from table.to_batches(max_chunksize=65536)

    def _read_changes(self, groups: list[tuple[str, str]]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from stitchlake.io.schemas import table_schema
        from stitchlake.reading.changes import CHANGE_COLUMNS, change_parts
        from stitchlake.reading.filters import prune

        if not groups:
            return
        table = self.table
        timeline = table.read_timeline()
        view = table.view(timeline)
        schema = table_schema(table.config)
        wanted = pa.schema(
            [*(schema.field(c) for c in self.columns), *(pa.field(c, pa.string()) for c in CHANGE_COLUMNS)]
        )
        # One plan for all of the task's groups: planning walks the range's commits and reads its erases' keys.
        pruning = replace(prune(table.config, self.where or None), only=frozenset((p, g) for p, g in groups))
        for rows in change_parts(
            table, timeline, view, self.since, self.until, self.columns, pruning, self.before_images
        ):
            yield from rows.cast(wanted).to_batches(max_chunksize=65536)


_POOL: ThreadPoolExecutor | None = None


def _ahead(fn: Callable[[Any], T], items: Sequence[Any]) -> Iterator[T]:
    """`fn` over `items` in order, with up to READ_AHEAD calls running in a pool (file reads and decoding release
    the GIL; on an object store the next slice's requests are in flight while this one is merged)."""
    global _POOL
    if len(items) <= 1:
        yield from (fn(item) for item in items)
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=READ_AHEAD, thread_name_prefix="stitch-spark-read")
    pending: deque[Future[T]] = deque()
    for item in items:
        pending.append(_POOL.submit(fn, item))
        if len(pending) >= READ_AHEAD:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
