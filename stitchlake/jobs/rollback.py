"""spark-submit entry: `stitch rollback` on Spark."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from stitchlake.spark.job import main_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instant", default=None)
    parser.add_argument("--failed", action="store_true")


def run(spark: SparkSession, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from stitchlake.services.rollback import rollback, rollback_failed

    del spark  # rollback deletes a handful of files: the driver does it
    result = rollback_failed(table) if args.failed else rollback(table, args.instant)
    return asdict(result)


if __name__ == "__main__":
    main_job("rollback", run, arguments)
