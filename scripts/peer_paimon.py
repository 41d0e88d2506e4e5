"""Apache Paimon's part of `make bench-peers`: a primary-key table, `merge-engine = partial-update`, one
`sequence-group` per stream, 4 buckets.

Each stream's ordering column is the sequence field of a group holding the stream's other columns: a group is
updated only by an event with a newer sequence value, nulls included (`nulls: overwrite`), and a row whose group
fields are all null (the other streams' columns of a batch) leaves the group alone. For the `nulls: ignore` stream
the group's columns take `last_non_null_value`, which keeps the newest non-null value per column; an older event's
value fills a column only while it is null (Paimon's reversed aggregation), because Paimon keeps one sequence value
per group, not per column (docs/benchmarks.md counts what that costs). Batches go in as they arrive: Paimon
merges duplicates and late events itself. Paimon's writer compacts as it writes (its LSM tree), which is
included in the ingest figure; `CALL sys.compact` is the full compaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts import bench_workload as workload
from scripts.peer_job import WIDE, table_columns, widened
from scripts.spark_envs import PAIMON_VERSION

CONF = {
    "spark.sql.extensions": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
    "spark.sql.catalog.paimon": "org.apache.paimon.spark.SparkCatalog",
}
TABLE = "paimon.bench.wide"


def properties() -> dict[str, str]:
    out = {"primary-key": "order_id", "bucket": "4", "merge-engine": "partial-update"}
    for stream in workload.STREAMS:
        ordering = workload.ORDERING[stream]
        group = [c for c in workload.COLUMNS[stream] if c != ordering]
        out[f"fields.{ordering}.sequence-group"] = ",".join(group)
        if workload.NULLS[stream] == "ignore":
            for column in group:
                out[f"fields.{column}.aggregate-function"] = "last_non_null_value"
    return out


def versions(spark: Any) -> dict[str, str]:
    return {"paimon": PAIMON_VERSION}


class Job:
    def __init__(self, spark: Any, work: Path, data: Path) -> None:
        self.spark = spark
        self.warehouse = work / "paimon"
        spark.conf.set("spark.sql.catalog.paimon.warehouse", f"file:{self.warehouse}")
        spark.sql("CREATE DATABASE IF NOT EXISTS paimon.bench")
        props = ", ".join(f"'{k}' = '{v}'" for k, v in properties().items())
        spark.sql(f"CREATE TABLE {TABLE} ({table_columns()}) TBLPROPERTIES ({props})")

    def path(self) -> Path:
        return self.warehouse

    def ingest_batch(self, stream: str, file: Path) -> None:
        widened(self.spark.read.parquet(str(file)), stream).writeTo(TABLE).append()

    def frame(self) -> Any:
        return self.spark.table(TABLE).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql("CALL paimon.sys.compact(table => 'bench.wide')").collect()
