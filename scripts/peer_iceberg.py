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

from scripts.peer_job import WIDE, SparkTableJob, merge_sql, sql_properties, table_columns, version_columns
from scripts.spark_envs import ICEBERG_VERSION

VERSIONS = {"iceberg": ICEBERG_VERSION}
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


class Job(SparkTableJob):
    folder_name = "iceberg"

    def settings(self) -> dict[str, str]:
        return {"spark.sql.catalog.ice.warehouse": str(self.folder)}

    def create(self) -> None:
        self.spark.sql(
            f"CREATE TABLE {TABLE} ({table_columns(version_columns())}) USING iceberg "
            f"PARTITIONED BY (bucket(4, order_id)) TBLPROPERTIES ({sql_properties(PROPERTIES)})"
        )

    def ingest_batch(self, stream: str, file: Path) -> None:
        self.spark.sql(merge_sql(TABLE, self.merge_view(stream, file), stream)).collect()

    def frame(self) -> Any:
        return self.spark.table(TABLE).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql(
            "CALL ice.system.rewrite_data_files(table => 'bench.wide', options => map('rewrite-all', 'true'))"
        ).collect()
