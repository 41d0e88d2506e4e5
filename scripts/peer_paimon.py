"""Apache Paimon's part of `make bench-peers`: a primary-key table, `merge-engine = partial-update`, sequence groups,
4 buckets, `write-only = true`.

Each `nulls: overwrite` stream's ordering column is the sequence field of a group holding the stream's other
columns: a group is updated only by an event with a newer sequence value, nulls included, and a row whose sequence
field is null (the other streams' rows) leaves the group alone. The `nulls: ignore` stream needs a sequence per
column, as Delta's and Iceberg's MERGE keep `_v_` columns (`peer_job.version_columns`): each of its columns is a group
of one, sequenced by a version column the job writes, `_v_<column>` = the newest ordering value at which the column
was not null in the batch (null when it never was, so the group is skipped), and `_v_<ordering>` = the batch's
newest ordering value for the ordering column itself. So each batch of that stream is first deduplicated by its rule
(`peer_job.latest_per_key(..., versions=True)`); the other streams' batches go in as they arrive (Paimon merges
duplicates and late events by their sequence groups). `write-only = true`: the writer never compacts, so the
"uncompacted" table is the sorted runs the ingest wrote and `CALL sys.compact` does the whole compaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts import bench_workload as workload
from scripts.peer_job import (
    WIDE,
    SparkTableJob,
    latest_per_key,
    sql_properties,
    sql_type,
    table_columns,
    version_columns,
)
from scripts.spark_envs import PAIMON_VERSION

VERSIONS = {"paimon": PAIMON_VERSION}
CONF = {
    "spark.sql.extensions": "org.apache.paimon.spark.extensions.PaimonSparkSessionExtensions",
    "spark.sql.catalog.paimon": "org.apache.paimon.spark.SparkCatalog",
}
TABLE = "paimon.bench.wide"


def ignore_versions() -> dict[str, str]:
    """The `nulls: ignore` stream's columns, each with the version column that sequences it."""
    return {c: f"_v_{c}" for s in workload.STREAMS if workload.NULLS[s] == "ignore" for c in workload.COLUMNS[s]}


def extra_columns() -> list[str]:
    """The version columns in the table beside the wide table's: `peer_job.version_columns` and the ordering
    column's own."""
    return [*version_columns(), *(v for v in ignore_versions().values() if v not in version_columns())]


def properties() -> dict[str, str]:
    out = {"primary-key": "order_id", "bucket": "4", "merge-engine": "partial-update", "write-only": "true"}
    for stream in workload.STREAMS:
        ordering = workload.ORDERING[stream]
        if workload.NULLS[stream] == "overwrite":
            group = [c for c in workload.COLUMNS[stream] if c != ordering]
            out[f"fields.{ordering}.sequence-group"] = ",".join(group)
    for column, version in ignore_versions().items():
        out[f"fields.{version}.sequence-group"] = column
    return out


def rows(frame: Any) -> Any:
    """A batch with the table's every column: the other streams' columns and the version columns it has no value
    for as typed nulls."""
    from pyspark.sql import functions as F

    have = set(frame.columns)
    wanted = [(c, sql_type(c)) for c in WIDE] + [(c, "TIMESTAMP") for c in extra_columns()]
    return frame.select(*[F.col(c) if c in have else F.lit(None).cast(t).alias(c) for c, t in wanted])


class Job(SparkTableJob):
    folder_name = "paimon"

    def settings(self) -> dict[str, str]:
        return {"spark.sql.catalog.paimon.warehouse": f"file:{self.folder}"}

    def create(self) -> None:
        self.spark.sql("CREATE DATABASE IF NOT EXISTS paimon.bench")
        columns, props = table_columns(extra_columns()), sql_properties(properties())
        self.spark.sql(f"CREATE TABLE {TABLE} ({columns}) TBLPROPERTIES ({props})")

    def ingest_batch(self, stream: str, file: Path) -> None:
        batch = self.spark.read.parquet(str(file))
        if workload.NULLS[stream] == "ignore":
            ordering = workload.ORDERING[stream]
            batch = latest_per_key(batch, stream, versions=True)
            batch = batch.withColumn(f"_v_{ordering}", batch[ordering])
        rows(batch).writeTo(TABLE).append()

    def frame(self) -> Any:
        return self.spark.table(TABLE).select(*WIDE)

    def compact(self) -> None:
        self.spark.sql("CALL paimon.sys.compact(table => 'bench.wide')").collect()
