"""Table services on Spark: the distribution layer only; the per-file-group work is the library's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stitchlake.services.compaction import (
    CompactionResult,
    compact_file_group,
    finish,
    run_failed,
    schedule,
    start_run,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.config import TableConfig
    from stitchlake.services.clean import Deleter
    from stitchlake.table import Table


def _compact_task(config: TableConfig, instant: str, operation: dict[str, Any]) -> dict[str, Any]:
    from stitchlake.concurrency.markers import create_marker
    from stitchlake.table import Table

    table = Table(config)
    return compact_file_group(table, operation, instant, lambda path: create_marker(table.storage, instant, path))


def run_compaction(spark: SparkSession, table: Table, instant_time: str | None = None) -> CompactionResult:
    """Execute a compaction plan with one Spark task per file group; the driver holds the heartbeat."""
    txn, operations = start_run(table, instant_time)
    config, instant = table.config, txn.time
    try:
        if operations:
            rdd = spark.sparkContext.parallelize(operations, len(operations))
            files = rdd.map(lambda op: _compact_task(config, instant, op)).collect()
        else:
            files = []
        return finish(txn, files)
    except BaseException as exc:
        run_failed(txn, exc)
        raise


def compact(spark: SparkSession, table: Table, strategy: str | None = None) -> CompactionResult | None:
    """Schedule and run on Spark; None when nothing needed compacting."""
    instant = schedule(table, strategy)
    return None if instant is None else run_compaction(spark, table, instant)


def deleter(spark: SparkSession, table: Table) -> Deleter:
    """Delete many files from the executors (object stores delete one key per request)."""
    config = table.config

    def run(paths: list[str]) -> int:
        if len(paths) < 64:
            return sum(1 for path in paths if table.storage.delete(path))

        def delete_all(chunk: Any) -> list[int]:
            from stitchlake.table import Table

            storage = Table(config).storage
            return [sum(1 for path in chunk if storage.delete(path))]

        return sum(spark.sparkContext.parallelize(paths, min(64, len(paths) // 16)).mapPartitions(delete_all).collect())

    return run
