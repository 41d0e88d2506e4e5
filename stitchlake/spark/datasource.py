"""The `stitchlake` PySpark data source (PySpark 4 `pyspark.sql.datasource`), reader and writer.

Both sides call the same core as the in-process engine: the reader plans file slices with `read.plan_slices`
and each task merges one slice with `read.read_slice`; each writer task writes its file groups with
`write.write_file_groups`, and the driver-side commit publishes one deltacommit (or abort removes every file).

    spark.dataSource.register(StitchDataSource)     # or stitchlake.spark.session.register(spark)
    spark.read.format("stitchlake").load("/path/to/table")
    df.write.format("stitchlake").option("stream", "orders").mode("append").save("/path/to/table")

Options: `config` (a YAML config, for the lock provider and other runtime settings), `as_of`, `mode`
(snapshot | read_optimized) for reads; `stream` (required), `instant` (an instant already begun by the
caller, e.g. `stitch ingest`) and `metadata` (JSON merged into the commit) for writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)

from stitchlake.badrows import BadRows

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from stitchlake.table import Table
    from stitchlake.timeline.metadata import DataFile


def open_for_spark(options: dict[str, str]) -> Table:
    """The table named by the `path` option, with the runtime settings of `config` when given."""
    from stitchlake.config import load_config
    from stitchlake.table import Table, open_table

    path = options.get("path")
    if options.get("config"):
        config = load_config(options["config"])
        return Table(config.with_path(path) if path else config)
    if not path:
        from stitchlake.errors import UsageError

        raise UsageError("the stitchlake data source needs a table path: .load(path) / .save(path)")
    return open_table(path)


def spark_schema(table: Table) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from stitchlake.io.schemas import table_schema

    return from_arrow_schema(table_schema(table.config))


class StitchDataSource(DataSource):
    """`format("stitchlake")`."""

    @classmethod
    def name(cls) -> str:
        return "stitchlake"

    def schema(self) -> StructType:
        return spark_schema(open_for_spark(dict(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StitchReader(dict(self.options), [f.name for f in schema.fields])

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            from stitchlake.errors import UsageError

            raise UsageError("stitchlake tables are written with mode('append'): streams only add events")
        return StitchWriter(dict(self.options))


# ------------------------------------------------------------------------------------------------ reading


class SliceInput(InputPartition):
    """One file slice, planned on the driver."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        super().__init__(value)


class StitchReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[str]) -> None:
        self.options = options
        self.columns = columns
        self.where: dict[str, list[Any]] = {}

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Equality/IN on partition columns prunes partitions exactly; on key columns prunes file groups.

        Key filters are still handed back: a bucket holds other keys too, so Spark checks the rows.
        """
        table = open_for_spark(self.options)
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
        from stitchlake.reader import plan_slices, resolve_time
        from stitchlake.timeline.metadata import dump

        table = open_for_spark(self.options)
        table.require()
        timeline = table.timeline()
        as_of = resolve_time(table, timeline, self.options.get("as_of"))
        slices = plan_slices(table.config, table.view(timeline), as_of, prune(table.config, self.where or None))
        return [SliceInput(dump(s)) for s in slices] or [SliceInput(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from stitchlake.reader import SNAPSHOT, read_slice
        from stitchlake.timeline.metadata import FileSlice, load

        if partition.value is None:
            return
        table = open_for_spark(self.options)
        rows = read_slice(table, load(FileSlice, partition.value), self.columns, self.options.get("mode", SNAPSHOT))
        yield from rows.to_batches(max_chunksize=65536)


# ------------------------------------------------------------------------------------------------ writing


@dataclass
class FilesWritten(WriterCommitMessage):
    files: list[DataFile] = field(default_factory=list)
    rows: int = 0
    bad: BadRows = field(default_factory=BadRows)


class StitchWriter(DataSourceArrowWriter):
    """Each task validates its rows (the bad-row policy applies), writes its file groups; the driver publishes.

    The table is resolved on the driver and travels with the writer to the executors (its storage settings
    included), so no task needs the config file.
    """

    def __init__(self, options: dict[str, str]) -> None:
        from stitchlake.errors import UsageError
        from stitchlake.services.ingest import claim

        self.options = options
        stream = options.get("stream")
        if not stream:
            raise UsageError("writing to stitchlake needs .option('stream', <name>)")
        self.table = open_for_spark(options)
        self.table.require()
        self.table.config.stream(stream)
        self.stream = stream
        self.began = "instant" not in options
        if self.began:
            # Beats come from the tasks and the commit: a planning worker is too short-lived for a thread.
            txn = claim(self.table, stream, heartbeat=False)
            _beat(self.table, txn.time)
            self.instant = txn.time
        else:
            self.instant = options["instant"]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        import pyarrow as pa
        from pyspark import TaskContext

        from stitchlake.badrows import FAIL, quarantine_rows
        from stitchlake.batch import prepare
        from stitchlake.engine import marker_for
        from stitchlake.io.landing import positions
        from stitchlake.write import write_file_groups

        table = self.table
        stream = table.config.stream(self.stream)
        batches = list(iterator)
        if not batches:
            return FilesWritten()
        data = pa.Table.from_batches(batches)
        task = TaskContext.get()
        partition = task.partitionId() if task else 0
        batch = prepare(
            table.config, stream, data, source=f"spark partition {partition}", pos=positions(partition, data.num_rows)
        )
        mark = marker_for(table, self.instant)
        bad = BadRows()
        bad.add_rows(batch.bad)
        if bad and table.config.bad_rows == FAIL:
            raise bad.rejection()
        if bad:
            bad.files.append(quarantine_rows(table.storage, self.instant, batch.bad, f"spark-{partition}", mark))
        _beat(table, self.instant)
        files = write_file_groups(table, stream, batch, self.instant, mark)
        _beat(table, self.instant)
        return FilesWritten(files=files, rows=batch.rows.num_rows, bad=bad)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from stitchlake.paths import quarantine_folder
        from stitchlake.timeline.metadata import DeltaCommit
        from stitchlake.transaction import Transaction

        table = self.table
        written = [m for m in messages if isinstance(m, FilesWritten)]
        bad = BadRows()
        for message in written:
            bad.merge(message.bad)
        txn = Transaction.attach(table, self.instant)
        txn.complete(
            DeltaCommit(
                stream=self.stream,
                added=tuple(sorted((f for m in written for f in m.files), key=lambda f: f.path)),
                rows=sum(m.rows for m in written),
                bad_rows=bad.count,
                quarantine=quarantine_folder(self.instant) if bad.files else None,
                quarantine_files=tuple(bad.files),
                engine="spark",
            )
        )
        if self.began:
            from stitchlake.concurrency import heartbeat

            heartbeat.delete(table.storage, self.instant)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from stitchlake.transaction import Transaction

        table = self.table
        current = table.timeline().get(self.instant)
        if current is not None and current.is_completed:
            return  # published: what failed came after the commit, which stands
        for message in messages:
            if isinstance(message, FilesWritten):
                for item in message.files:
                    table.storage.delete(item.path)
        if self.began:
            Transaction.attach(table, self.instant).abort()


def _beat(table: Table, instant: str) -> None:
    from stitchlake.concurrency.heartbeat import Heartbeat

    spec = table.config.concurrency.heartbeat
    Heartbeat(table.storage, instant, interval_s=spec.interval_s, expire_s=spec.expire_s).beat()
