"""stitchlake's part of `make bench-peers`: `SparkEngine` ingest, `format("stitchlake")` reads, compaction on Spark.

The table is `make bench`'s (scripts/bench_workload.table_document: 4 buckets, Parquet logs) with each stream's
source the workload's landing folder; each batch is one `ingest` of one landing file (one deltacommit), through the
same Spark session the reads use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stitchlake
from scripts.peer_job import WIDE
from stitchlake.jobs.spark_conf import reader_conf

VERSIONS = {"stitchlake": getattr(stitchlake, "__version__", "source tree")}
#: The JVM reader (its jar and the planner's Python) when it is switched on, as stitchlake's own sessions get it.
CONF: dict[str, str] = reader_conf()


class Job:
    def __init__(self, spark: Any, work: Path, data: Path, existing: bool = False) -> None:
        from scripts.bench import spark_table
        from stitchlake.spark.engine import SparkEngine
        from stitchlake.spark.session import register

        self.spark = register(spark)
        self.folder = work / "stitchlake"
        if existing:
            return
        self.engine = SparkEngine(spark)
        self.table = spark_table(self.folder, data / "landing")

    def path(self) -> Path:
        return self.folder

    def ingest_batch(self, stream: str, file: Path) -> None:
        from stitchlake.services.writes.ingest import ingest

        ingest(self.table, self.engine, stream, paths=[str(file)])

    def frame(self) -> Any:
        return self.spark.read.format("stitchlake").load(str(self.folder)).select(*WIDE)

    def compact(self) -> None:
        self.table.compact(engine=self.engine)
