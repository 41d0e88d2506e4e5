"""Spark session helpers: the settings stitchlake relies on, and data source registration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stitchlake.jobs.spark_conf import DEFAULT_CONF, REQUIRED_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.config import TableConfig

#: Spark's settings for packing file reads, which the data source follows for file slices (option name -> conf).
PACKING_CONF = {
    "maxpartitionbytes": "spark.sql.files.maxPartitionBytes",
    "opencostinbytes": "spark.sql.files.openCostInBytes",
    "minpartitions": "spark.sql.files.minPartitionNum",
}


def register(spark: SparkSession) -> SparkSession:
    """Register the `stitchlake` data source on a session (and switch on filter pushdown).

    The session's packing settings (`PACKING_CONF`, and its default parallelism as the minimum number of
    partitions) are read now: set them before registering, or pass them as options of a read.
    """
    from stitchlake.spark.datasource import configured

    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    spark.dataSource.register(configured(packing_defaults(spark)))
    return spark


def packing_defaults(spark: SparkSession) -> dict[str, str]:
    """The session's file-packing settings that are set, by data source option name."""
    import contextlib

    out = {option: str(value) for option, key in PACKING_CONF.items() if (value := spark.conf.get(key, None))}
    if "minpartitions" not in out:
        with contextlib.suppress(Exception):  # Spark Connect has no SparkContext: the host's cores are the fallback
            out["minpartitions"] = str(spark.sparkContext.defaultParallelism)
    return out


def session(config: TableConfig | None = None, app_name: str = "stitchlake") -> SparkSession:
    """A session for in-process use (tests, notebooks); under spark-submit the launcher sets master and conf."""
    import os
    import sys

    from pyspark.sql import SparkSession

    # In-process sessions take the workers' Python from the environment, not from spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    builder = builder.config("spark.pyspark.python", sys.executable).config(
        "spark.pyspark.driver.python", sys.executable
    )
    if config is not None:
        builder = builder.master(config.spark.master)
        for key, value in {**DEFAULT_CONF, **config.spark.conf}.items():
            builder = builder.config(key, value)
    for key, value in REQUIRED_CONF.items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
