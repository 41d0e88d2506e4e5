"""The Spark settings stitchlake relies on: one definition for the launcher (spark-submit's properties) and for
sessions built in-process (`stitchlake.spark.session`). Plain values: importing them starts no JVM."""

from __future__ import annotations

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
