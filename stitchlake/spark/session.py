"""Spark session helpers: the settings stitchlake relies on, and data source registration."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.config import TableConfig

#: Settings every stitchlake job needs whatever the user configures: UTC timestamps, Arrow transfer, and
#: pushdown into Python data sources (without it the reader's pushFilters is refused).
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
}
DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
}


def register(spark: SparkSession) -> SparkSession:
    """Register the `stitchlake` data source on a session (and switch on filter pushdown)."""
    from stitchlake.spark.datasource import StitchDataSource

    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    spark.dataSource.register(StitchDataSource)
    return spark


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
