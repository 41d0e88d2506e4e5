"""spark-submit entry: `stitch ingest` on Spark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from stitchlake.spark.job import main_job, progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stream", required=True)
    parser.add_argument("--source", action="append", default=None)
    parser.add_argument("--max-files", type=int, default=None)


def run(spark: SparkSession, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from stitchlake.spark.ingest import ingest_spark

    return ingest_spark(spark, table, args.stream, args.source, args.max_files, progress).to_json()


if __name__ == "__main__":
    main_job("ingest", run, arguments)
