"""A table's metadata tables as Spark DataFrames: the same names and columns as `t$<name>` in `stitch sql`.

    from stitchlake.spark import metadata
    metadata.table(spark, "warehouse/orders_wide", "files").where("kind = 'log'").groupBy("stream").count()

Built on the driver from metadata only (`stitchlake.services.inspect.metadata_tables`: the timeline, the
file-system view, savepoints, rescale history, recorded Kafka offsets), handed to Spark as Arrow; no data file is
read and nothing is written. Each call is a snapshot of the metadata at that moment.
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING

from stitchlake.services.inspect.metadata_tables import KAFKA_TIMEOUT_S, NAMES, build

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["NAMES", "table"]


def table(
    spark: SparkSession, path: str | PathLike[str], name: str, kafka_timeout_s: float = KAFKA_TIMEOUT_S
) -> DataFrame:
    """Metadata table `name` (`timeline`, `files`, `file_groups`, `streams`, `savepoints`, `rescales`) of the table
    at `path` (its folder or URI, or its config YAML) as a DataFrame."""
    from stitchlake.api import open as open_table

    rows = build(open_table(path), name, kafka_timeout_s)
    return spark.createDataFrame(rows)
