"""spark-submit entry: `stitch clean` on Spark (deletions run on the executors)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from stitchlake.spark.job import main_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", default=None)
    parser.add_argument("--retain", type=int, default=None)
    parser.add_argument("--dry-run", action="store_true")


def run(spark: SparkSession, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from stitchlake.services.clean import clean
    from stitchlake.spark.services import deleter

    result = clean(table, args.policy, args.retain, args.dry_run, deleter(spark, table))
    return asdict(result)


if __name__ == "__main__":
    main_job("clean", run, arguments)
