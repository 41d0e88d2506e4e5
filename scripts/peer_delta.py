"""Delta Lake's part of `make bench-peers`: one `MERGE INTO` per batch, with deletion vectors.

Delta has no merge rule of its own beyond "the MERGE says what happens": each batch is deduplicated by the stream's
rule (`peer_job.latest_per_key`), then merged with conditions that honour the stream's ordering and null rule
(`peer_job.merge_sql`). The `nulls: ignore` stream needs one extra column per value column (`_v_<column>`, the
ordering value it came from); reads select the wide table's columns. Deletion vectors (`delta.enableDeletionVectors`)
make a MERGE mark replaced rows instead of rewriting their files: Delta's merge-on-read. Optimized writes
(`delta.autoOptimize.optimizeWrite`, and the session's `spark.databricks.delta.optimizeWrite.enabled`) make each MERGE
write fewer, larger files. `OPTIMIZE` then `REORG ... APPLY (PURGE)` is the compaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.peer_job import WIDE, SparkTableJob, hash_every_column, merge_sql, table_columns, version_columns
from scripts.spark_envs import DELTA_VERSION

VERSIONS = {"delta": DELTA_VERSION}
CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Optimized writes: a MERGE shuffles its output by partition before writing, fewer and larger files
    "spark.databricks.delta.optimizeWrite.enabled": "true",
}


class Job(SparkTableJob):
    folder_name = "delta"

    @property
    def name(self) -> str:
        """The table in SQL: Delta names a table by its path."""
        return f"delta.`{self.folder}`"

    def create(self) -> None:
        self.spark.sql(
            f"CREATE TABLE {self.name} ({table_columns(version_columns())}) USING delta "
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.autoOptimize.optimizeWrite' = 'true')"
        )

    def ingest_batch(self, stream: str, file: Path) -> None:
        self.spark.sql(merge_sql(self.name, self.merge_view(stream, file), stream)).collect()

    def frame(self) -> Any:
        return self.spark.read.format("delta").load(str(self.folder)).select(*WIDE)

    def drain(self, frame: Any) -> None:
        """Delta 4.4 on Spark 4.1 refuses the `noop` sink over a table with deletion vectors ("Cannot work with a
        non-pinned table snapshot of the TahoeFileIndex"), time travel included: every column is hashed instead."""
        hash_every_column(frame)

    def compact(self) -> None:
        self.spark.sql(f"OPTIMIZE {self.name}").collect()
        self.spark.sql(f"REORG TABLE {self.name} APPLY (PURGE)").collect()
