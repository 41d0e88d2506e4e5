"""Apache Iceberg's part of `make bench-peers`: one `MERGE INTO` per batch on a merge-on-read table.

As for Delta (`peer_delta.py`): each batch deduplicated by the stream's rule, then merged with conditions that honour
the stream's ordering and null rule, with `_v_<column>` columns for the `nulls: ignore` stream. The table is
format version 3 (deletion vectors), `write.merge.mode = merge-on-read` (a MERGE writes delete vectors and new rows,
not whole files), bucketed into 4 by key like the other tables, in a Hadoop catalog on the local disk.
`rewrite_data_files` with `rewrite-all` is the compaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.peer_job import WIDE, latest_per_key, merge_sql, table_columns, version_columns
from scripts.spark_envs import ICEBERG_VERSION

CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.ice": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.ice.type": "hadoop",
}
TABLE = "ice.bench.wide"
PROPERTIES = {
    "format-version": "3",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}


def versions(spark: Any) -> dict[str, str]:
    return {"iceberg": ICEBERG_VERSION}


class Job:
    def __init__(self, spark: Any, work: Path, data: Path, existing: bool = False) -> None:
        self.spark = spark
        self.warehouse = work / "iceberg"
        spark.conf.set("spark.sql.catalog.ice.warehouse", str(self.warehouse))
        if existing:
            return
        extra = ", ".join(f"{c} TIMESTAMP" for c in version_columns())
        props = ", ".join(f"'{k}' = '{v}'" for k, v in PROPERTIES.items())
        spark.sql(
            f"CREATE TABLE {TABLE} ({table_columns()}, {extra}) USING iceberg "
            f"PARTITIONED BY (bucket(4, order_id)) TBLPROPERTIES ({props})"
        )

    def path(self) -> Path:
        return self.warehouse

    def ingest_batch(self, stream: str, file: Path) -> None:
        latest_per_key(self.spark.read.parquet(str(file)), stream, versions=True).createOrReplaceTempView("batch")
        self.spark.sql(merge_sql(TABLE, "batch", stream)).collect()

    def frame(self) -> Any:
        return self.spark.table(TABLE).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql(
            "CALL ice.system.rewrite_data_files(table => 'bench.wide', options => map('rewrite-all', 'true'))"
        ).collect()
