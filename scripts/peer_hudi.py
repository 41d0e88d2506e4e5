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
  would do with an ordering field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.peer_job import latest_per_key, widened
from scripts.spark_envs import HUDI_VERSION

CONF = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
}
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
}


def versions(spark: Any) -> dict[str, str]:
    return {"hudi": HUDI_VERSION}


class Job:
    def __init__(self, spark: Any, work: Path, data: Path) -> None:
        self.spark = spark
        self.table = work / "hudi"

    def path(self) -> Path:
        return self.table

    def ingest_batch(self, stream: str, file: Path) -> None:
        batch = widened(latest_per_key(self.spark.read.parquet(str(file)), stream), stream)
        batch.write.format("hudi").options(**OPTIONS).mode("append").save(str(self.table))

    def frame(self) -> Any:
        from scripts.peer_job import WIDE

        return self.spark.read.format("hudi").load(str(self.table)).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql(f"CALL run_compaction(op => 'scheduleandexecute', path => '{self.table}')").collect()
