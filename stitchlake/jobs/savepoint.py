"""spark-submit entry: `stitch savepoint create|delete|restore` on Spark."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from stitchlake.spark.job import main_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "delete", "restore"])
    parser.add_argument("--name", default=None)
    parser.add_argument("--instant", default=None)
    parser.add_argument("--savepoint", default=None)
    parser.add_argument("--force", action="store_true")


def run(spark: SparkSession, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from stitchlake.services import savepoint

    del spark  # savepoints are metadata; restore deletes what later instants wrote, from the driver
    if args.action == "create":
        return asdict(savepoint.create(table, args.instant, args.name))
    if args.action == "delete":
        return asdict(savepoint.delete(table, args.savepoint))
    return asdict(savepoint.restore(table, args.savepoint, args.force))


if __name__ == "__main__":
    main_job("savepoint", run, arguments)
