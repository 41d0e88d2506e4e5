"""The `stitchlake` PySpark data source (PySpark 4 `pyspark.sql.datasource`), reader and writer.

Both sides call the same core as the in-process engine: the reader plans file slices with `read.plan_slices`
and each task merges one slice with `read.read_slice`; each writer task writes its file groups with
`write.write_file_groups`, and the driver-side commit publishes one deltacommit (or abort removes every file).

    spark.dataSource.register(StitchDataSource)     # or stitchlake.spark.session.register(spark)
    spark.read.format("stitchlake").load("/path/to/table")
    df.write.format("stitchlake").option("stream", "orders").mode("append").save("/path/to/table")
    df.writeStream.format("stitchlake").option("stream", "orders").option("checkpointLocation", ck).start(path)

Options: `config` (a YAML config, for the lock provider and other runtime settings), `as_of`, `mode`
(snapshot | read_optimized) for reads; `stream` (required), `instant` (an instant already begun by the
caller, e.g. `stitch ingest`; batch writes only) and `metadata` (a JSON object kept in each commit's `extra`) for
writes. Reading is `spark/read.py`, writing `spark/write.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter

from stitchlake.spark.read import StitchReader
from stitchlake.spark.tables import open_for_spark, spark_schema
from stitchlake.spark.write import StitchStreamWriter, StitchWriter

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class StitchDataSource(DataSource):
    """`format("stitchlake")`."""

    @classmethod
    def name(cls) -> str:
        return "stitchlake"

    def schema(self) -> StructType:
        """The table's current schema (or, with `as_of`, the one in force then)."""
        from stitchlake.reader import resolve_time

        table = open_for_spark(dict(self.options))
        table.require()
        return spark_schema(table.at_time(resolve_time(table, table.timeline(), self.options.get("as_of"))))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StitchReader(dict(self.options), [f.name for f in schema.fields])

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            from stitchlake.errors import UsageError

            raise UsageError("stitchlake tables are written with mode('append'): streams only add events")
        return StitchWriter(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        """`df.writeStream.format("stitchlake").option("stream", S)`: a deltacommit per micro-batch."""
        if overwrite:
            from stitchlake.errors import UsageError

            raise UsageError("stitchlake tables are written with outputMode('append'): streams only add events")
        return StitchStreamWriter(dict(self.options))
