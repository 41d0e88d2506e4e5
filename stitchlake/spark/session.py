"""Spark session helpers: the settings stitchlake relies on, and data source registration."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from stitchlake.jobs.spark_conf import DEFAULT_CONF, REQUIRED_CONF, class_sharing_options, reader_conf, reader_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.config import TableConfig

#: Spark's settings for packing file reads, which the data source follows for file slices (option name -> conf).
PACKING_CONF = {
    "maxpartitionbytes": "spark.sql.files.maxPartitionBytes",
    "opencostinbytes": "spark.sql.files.openCostInBytes",
    "minpartitions": "spark.sql.files.minPartitionNum",
}


#: Spark's error when a name is a JVM data source already: the reader's jar is on the classpath.
ALREADY_EXISTS = "DATA_SOURCE_ALREADY_EXISTS"


def fallback_notice() -> str:
    return f"stitchlake: the JVM reader is not on the classpath ({reader_jar()}); reading with the Python data source"


def register(spark: SparkSession, start_planner: bool = True) -> SparkSession:
    """Register the Python data source on a session as `stitchlake_python` (and switch on filter pushdown).

    When the JVM reader's jar is on the session's classpath, it owns `format("stitchlake")` and hands writes and
    incremental reads to `stitchlake_python` (docs/spark-reader.md). Without it the Python source takes the name
    `stitchlake` too, and a one-line notice says so. Spark itself tells the two apart (it refuses a Python source
    under a JVM source's name), so this works on Spark Connect as well. With the JVM reader, `start_planner` starts
    its planner process now, so the session's first read does not wait for it (a session that never reads
    through `format("stitchlake")`, as a write job, passes False).

    The session's packing settings (`PACKING_CONF`, and its default parallelism as the minimum number of
    partitions) are read now: set them before registering, or pass them as options of a read.
    """
    from stitchlake.spark.datasource import SHORT_NAME, configured

    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    defaults = packing_defaults(spark)
    spark.dataSource.register(configured(defaults))
    try:
        spark.dataSource.register(configured(defaults, SHORT_NAME))
    except Exception as exc:  # AnalysisException (classic or Connect): which one depends on the session
        if ALREADY_EXISTS not in str(exc):
            raise
    else:
        print(fallback_notice(), file=sys.stderr)
        return spark
    if start_planner:
        _start_planner(spark)
    return spark


def _start_planner(spark: SparkSession) -> None:
    """The JVM reader's planner, started in the background (`PlannerClient.prestart`)."""
    import contextlib

    jvm = getattr(spark, "_jvm", None)
    with contextlib.suppress(Exception):  # Spark Connect has no JVM in this process: the first read starts it
        if jvm is not None:
            jvm.io.stitchlake.spark.PlannerClient.prestart()


def packing_defaults(spark: SparkSession) -> dict[str, str]:
    """The session's file-packing settings that are set, by data source option name."""
    import contextlib

    out = {option: str(value) for option, key in PACKING_CONF.items() if (value := spark.conf.get(key, None))}
    if "minpartitions" not in out:
        with contextlib.suppress(Exception):  # Spark Connect has no SparkContext: the host's cores are the fallback
            out["minpartitions"] = str(spark.sparkContext.defaultParallelism)
    return out


def session_settings(config: TableConfig | None = None, jvm_reader: bool | None = None) -> dict[str, str]:
    """The settings `session` builds a session with: the workers' Python, the config's (over the defaults), the
    required ones, the JVM reader's and the class archive's driver options (unless the config gives its own)."""
    settings = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}
    if config is not None:
        settings.update({**DEFAULT_CONF, **config.spark.conf})
    settings.update(REQUIRED_CONF)
    given = dict(config.spark.conf) if config is not None else {}
    settings.update(reader_conf(given, jvm_reader))
    sharing = class_sharing_options()
    if sharing and "spark.driver.extraJavaOptions" not in given:  # a new JVM starts faster (spark_conf.class_archive)
        settings["spark.driver.extraJavaOptions"] = sharing
    return settings


def session(
    config: TableConfig | None = None, app_name: str = "stitchlake", jvm_reader: bool | None = None
) -> SparkSession:
    """A session for in-process use (tests, notebooks); under spark-submit the launcher sets master and conf.

    `jvm_reader`: put the JVM reader's jar on the session's classpath (None: as `spark_conf.reader_enabled`). It
    only takes effect for a new session: a JVM's classpath is fixed when it starts.
    """
    import os

    from pyspark.sql import SparkSession

    # In-process sessions take the workers' Python from the environment, not from spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if config is not None:
        builder = builder.master(config.spark.master)
    for key, value in session_settings(config, jvm_reader).items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
