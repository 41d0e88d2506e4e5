"""spark-submit entry: `stitch compact` on Spark (schedule, run, or both)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from stitchlake.spark.job import main_job, progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", action="store_true")
    parser.add_argument("--run", action="store_true")
    parser.add_argument("--instant", default=None)
    parser.add_argument("--strategy", default=None)


def run(spark: SparkSession, table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from stitchlake.services.compaction import schedule
    from stitchlake.spark.services import run_compaction

    both = not args.schedule and not args.run
    instant = args.instant
    if args.schedule or both:
        instant = schedule(table, args.strategy)
        progress(f"scheduled compaction {instant}" if instant else "no file group needs compacting")
        if instant is None or args.schedule:
            return {"scheduled": instant, "result": None}
    progress(f"running compaction {instant or '(oldest pending)'}")
    return {"scheduled": instant if both else None, "result": asdict(run_compaction(spark, table, instant))}


if __name__ == "__main__":
    main_job("compact", run, arguments)
