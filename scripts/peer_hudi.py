"""Apache Hudi's part of `make bench-peers`: a merge-on-read table with a bucket index and partial updates.

Hudi orders a table's records by one ordering field (or by commit time) and merges whole records; it has no
per-column-group ordering. The mapping used (docs/benchmarks.md says what it costs):

- `hoodie.write.record.merge.mode = COMMIT_TIME_ORDERING`: the later commit wins. Each stream's events carry their
  own event time, and a table-wide event-time ordering would compare one stream's time with another's (an orders
  event at 10:00 arriving after a payment at 11:00 would be dropped whole), so commit time is the only ordering all
  three streams can share. Late events (10% of them) then overwrite newer ones.
- `hoodie.table.partial.update.mode = IGNORE_DEFAULTS` (what `OverwriteNonDefaultsWithLatestAvroPayload` became in
  Hudi 1.1): a null in an incoming record keeps the stored value. That is how a stream's batch leaves the other
  streams' columns alone, and it is `nulls: ignore` for every stream: a null of an `overwrite` stream is lost.
- Each batch is deduplicated first by the stream's own rule (`peer_job.latest_per_key`), as Hudi's precombine
  would do with an ordering field; Hudi's own pre-combine pass is then off (`TUNING`).

`STITCH_PEERS_HUDI_ROUTE=merge` writes through Spark SQL `MERGE INTO` instead, with Delta's and Iceberg's conditions
and `_v_` columns (`merges`). Hudi 1.2 drops records on that route (docs/benchmarks.md quotes the errors), so the
upsert is the default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from scripts import bench_workload as workload
from scripts.peer_job import (
    WIDE,
    SparkTableJob,
    latest_per_key,
    merge_sql,
    sql_properties,
    table_columns,
    version_columns,
    widened,
)
from scripts.spark_envs import HUDI_VERSION

VERSIONS = {"hudi": HUDI_VERSION}
CONF = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
}
#: Settings of both routes: log blocks as Parquet (Avro is the default), no precombine pass over a batch that is
#: already one row per key, no metadata table (it indexes files for object stores; on a local disk it is extra
#: writes per commit).
TUNING = {
    "hoodie.logfile.data.block.format": "parquet",
    "hoodie.combine.before.upsert": "false",
    "hoodie.metadata.enable": "false",
}
#: `upsert` (the datasource writer with partial updates) or `merge` (Spark SQL `MERGE INTO` with the same conditions
#: and `_v_` columns as Delta's and Iceberg's); chosen with STITCH_PEERS_HUDI_ROUTE.
ROUTE = os.environ.get("STITCH_PEERS_HUDI_ROUTE", "upsert")
if ROUTE not in ("upsert", "merge"):
    raise SystemExit(f"STITCH_PEERS_HUDI_ROUTE={ROUTE!r}: use upsert (the default) or merge")
OPTIONS = {
    "hoodie.table.name": "bench_wide",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.datasource.write.operation": "upsert",
    "hoodie.datasource.write.recordkey.field": "order_id",
    "hoodie.datasource.write.partitionpath.field": "",
    "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    "hoodie.index.type": "BUCKET",
    "hoodie.index.bucket.engine": "SIMPLE",
    "hoodie.bucket.index.num.buckets": "4",
    "hoodie.bucket.index.hash.field": "order_id",
    "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.OverwriteNonDefaultsWithLatestAvroPayload",
    "hoodie.compact.inline": "false",
    "hoodie.compact.schedule.inline": "false",
    "hoodie.datasource.compaction.async.enable": "false",
    "hoodie.upsert.shuffle.parallelism": "4",
    "hoodie.insert.shuffle.parallelism": "4",
    **TUNING,
}


def merges(target: str, source: str, stream: str) -> list[str]:
    """The `MERGE INTO` statements of one deduplicated batch (`latest_per_key(..., versions=True)`) for a
    merge-on-read Hudi table. A `nulls: overwrite` stream's is Delta's and Iceberg's (`peer_job.merge_sql`). Hudi
    refuses a target column on the right of an update of a MOR table ("Target table's field(...) cannot be the
    right-value of the update clause for MOR table"), which `merge_sql`'s per-column CASE for `nulls: ignore` needs;
    the same conditions hold with one statement per column instead: the ordering column when newer, then each value
    column from the batch's rows where it is not null, when its `_v_` version is newer."""
    if workload.NULLS[stream] == "overwrite":
        return [merge_sql(target, source, stream)]
    ordering = workload.ORDERING[stream]
    values = [c for c in workload.COLUMNS[stream] if c != ordering]
    inserted = ["order_id", ordering, *values, *(f"_v_{c}" for c in values)]
    out = [
        f"MERGE INTO {target} t USING {source} s ON t.order_id = s.order_id "
        f"WHEN MATCHED AND (t.{ordering} IS NULL OR s.{ordering} > t.{ordering}) "
        f"THEN UPDATE SET t.{ordering} = s.{ordering} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(inserted)}) VALUES ({', '.join('s.' + c for c in inserted)})"
    ]
    for c in values:
        out.append(
            f"MERGE INTO {target} t USING (SELECT * FROM {source} WHERE {c} IS NOT NULL) s "
            f"ON t.order_id = s.order_id WHEN MATCHED AND (t._v_{c} IS NULL OR s._v_{c} > t._v_{c}) "
            f"THEN UPDATE SET t.{c} = s.{c}, t._v_{c} = s._v_{c}"
        )
    return out


class Job(SparkTableJob):
    folder_name = "hudi"

    def settings(self) -> dict[str, str]:
        # Also for the SQL statements (MERGE INTO, run_compaction), which take no write options of their own
        return TUNING

    def create(self) -> None:
        if ROUTE != "merge":
            return  # the upsert route's first batch creates the table
        props = {
            "type": "mor",
            "primaryKey": "order_id",
            **{k: v for k, v in OPTIONS.items() if k.startswith("hoodie.") and "payload" not in k},
        }
        props.pop("hoodie.datasource.write.operation")
        self.spark.sql(
            f"CREATE TABLE bench_wide ({table_columns(version_columns())}) USING hudi "
            f"LOCATION '{self.folder}' TBLPROPERTIES ({sql_properties(props)})"
        )

    def ingest_batch(self, stream: str, file: Path) -> None:
        if ROUTE == "merge":
            for statement in merges("bench_wide", self.merge_view(stream, file), stream):
                self.spark.sql(statement).collect()
            return
        batch = widened(latest_per_key(self.spark.read.parquet(str(file)), stream), stream)
        batch.write.format("hudi").options(**OPTIONS).mode("append").save(str(self.folder))

    def frame(self) -> Any:
        return self.spark.read.format("hudi").load(str(self.folder)).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql(f"CALL run_compaction(op => 'scheduleandexecute', path => '{self.folder}')").collect()
