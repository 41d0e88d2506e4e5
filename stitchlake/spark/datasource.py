"""The `stitchlake_python` PySpark data source (PySpark 4 `pyspark.sql.datasource`), reader and writer.

With the JVM reader's jar on the classpath, `format("stitchlake")` is the JVM source, which reads itself and hands
writes and incremental reads to this one; without it this source is registered as `stitchlake` too (the fallback,
`stitchlake.spark.session.register`). docs/spark-reader.md says who reads what.

Both sides call the same core as the in-process engine: the reader plans file slices with `read.plan_slices`
and each task merges one slice with `read.read_slice`; each writer task writes its file groups with
`write.write_file_groups`, and the driver-side commit publishes one deltacommit (or abort removes every file).

    stitchlake.spark.session.register(spark)        # `stitchlake_python`, and `stitchlake` without the jar
    spark.read.format("stitchlake").load("/path/to/table")
    df.write.format("stitchlake").option("stream", "orders").option("config", "table.yaml").mode("append").save()
    df.writeStream.format("stitchlake").option("stream", "orders").option("config", cfg)
        .option("checkpointLocation", ck).start()

Options: `config` (a YAML config, for the lock provider and other runtime settings; writes need it, a read of
the path alone uses the table's stored schema); for reads `as_of`, `mode` (snapshot | read_optimized), `since`,
`until` and `before_images` (a change read), and the packing options `maxPartitionBytes`, `openCostInBytes`,
`minPartitions` (an option close to one of these, or another format's time travel, is refused); for writes
`stream` (required), `instant` (an instant already begun by the caller, e.g. `stitch ingest`; batch writes only,
refused by a stream) and `metadata` (a JSON object kept in each commit's `extra`). Reading is `spark/read.py`,
writing `spark/write.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter

from stitchlake.spark.read import StitchReader, catalog_schema
from stitchlake.spark.tables import open_for_spark, spark_schema
from stitchlake.spark.write import StitchStreamWriter, StitchWriter

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


#: An option only the session catalog passes, when CREATE TABLE infers the schema (Spark's PROP_PROVIDER).
CATALOG_PROVIDER = "provider"


#: The name this source always has, and the one users write (the JVM reader's when its jar is present).
PYTHON_NAME = "stitchlake_python"
SHORT_NAME = "stitchlake"


class StitchDataSource(DataSource):
    """`format("stitchlake_python")`, and `format("stitchlake")` when the JVM reader is absent."""

    #: The name it registers under (`configured` makes a class per name).
    source_name: ClassVar[str] = PYTHON_NAME

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    #: The session's packing settings, recorded by `stitchlake.spark.session.register` (see `configured`).
    session_defaults: ClassVar[dict[str, str]] = {}

    def schema(self) -> StructType:
        """The table's current schema (with `as_of`, the one in force then; with `since`/`until`, the one at
        `until` and `_op`). When the session catalog creates a table, it also carries the read options."""
        from pyspark.sql.types import StringType, StructField, StructType

        from stitchlake.reading.changes import CHANGE_COLUMNS
        from stitchlake.reading.snapshot import resolve_time

        options = dict(self.options)
        table = open_for_spark(options)
        table.require()
        changes = options.get("since") is not None or options.get("until") is not None
        at = resolve_time(table, table.read_timeline(), options.get("until" if changes else "as_of"))
        schema = spark_schema(table.at_time(at))
        if changes:
            schema = StructType([*schema.fields, *(StructField(c, StringType(), True) for c in CHANGE_COLUMNS)])
        if CATALOG_PROVIDER in options:
            schema = catalog_schema(schema, options)
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return StitchReader(dict(self.options), schema, self.session_defaults)

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


def configured(defaults: Mapping[str, str], name: str = PYTHON_NAME) -> type[StitchDataSource]:
    """`StitchDataSource` with a session's packing settings, registered as `name`: a Python data source sees its
    options, never the session's conf, so `register` bakes them into a class of its own (pickled by value, with
    them, to Spark)."""
    attributes = {
        "session_defaults": dict(defaults),
        "source_name": name,
        "__module__": __name__,
        "__qualname__": "configured.<locals>.StitchDataSource",
    }
    return type("StitchDataSource", (StitchDataSource,), attributes)
