"""Reading through the `stitchlake` data source: file slices planned on the driver, merged by the tasks.

Each task calls the same core reader as `stitchlake.read` (`reader.read_slice`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, EqualTo, Filter, In, InputPartition

from stitchlake.spark.tables import open_for_spark

if TYPE_CHECKING:
    import pyarrow as pa


class SliceInput(InputPartition):
    """One file slice, planned on the driver."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        super().__init__(value)


class StitchReader(DataSourceReader):
    """Plans file slices on the driver; each task reads one with the core reader.

    The table (its config and schema versions, as of the read's time) is resolved once on the driver and travels
    with the reader to the executors: no task needs the config file or the timeline.
    """

    def __init__(self, options: dict[str, str], columns: list[str]) -> None:
        from stitchlake.reader import resolve_time

        self.options = options
        self.columns = columns
        self.where: dict[str, list[Any]] = {}
        table = open_for_spark(options)
        table.require()
        self.as_of = resolve_time(table, table.timeline(), options.get("as_of"))
        self.table = table.at_time(self.as_of)

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
                self.where[name] = values
                if name in partition:
                    continue
            yield item

    def partitions(self) -> Sequence[InputPartition]:
        from stitchlake.filters import prune
        from stitchlake.reader import plan_slices
        from stitchlake.timeline.metadata import dump

        table = self.table
        slices = plan_slices(table.config, table.view(), self.as_of, prune(table.config, self.where or None))
        return [SliceInput(dump(s)) for s in slices] or [SliceInput(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from stitchlake.reader import SNAPSHOT, read_slice
        from stitchlake.timeline.metadata import FileSlice, load

        if partition.value is None:
            return
        rows = read_slice(
            self.table, load(FileSlice, partition.value), self.columns, self.options.get("mode", SNAPSHOT)
        )
        yield from rows.to_batches(max_chunksize=65536)
