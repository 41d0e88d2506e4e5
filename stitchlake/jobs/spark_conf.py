"""The Spark settings stitchlake relies on: one definition for the launcher (spark-submit's properties) and for
sessions built in-process (`stitchlake.spark.session`). Plain values: importing them starts no JVM."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

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

#: The JVM Spark reader (docs/spark-reader.md), built by `make setup` into the environment's `jars/` folder.
READER_JAR_NAME = "stitchlake-spark.jar"
#: Where the reader jar is looked for instead, when set (a jar built elsewhere).
READER_JAR_ENV = "STITCHLAKE_SPARK_JAR"
#: "1" puts the JVM reader on the classpath of stitchlake's sessions and jobs, "0" keeps them on the Python data
#: source; unset: `READER_DEFAULT`.
READER_SWITCH_ENV = "STITCHLAKE_JVM_READER"
#: Whether sessions and jobs get the JVM reader when the switch is unset: on (issue 35), the suite runs with it.
READER_DEFAULT = True
#: The Python the reader's planner runs with (`python -m stitchlake.spark.planner`).
PLANNER_PYTHON_CONF = "spark.stitchlake.python"


#: A class-data-sharing archive of the classes a Spark driver loads from Spark's own jars (`make setup` builds it:
#: scripts/spark_class_archive.py). A driver mapping it starts in about half the CPU (measured: a tiny job 14.4 s of
#: CPU and 13 s wall without, 8.2 s and 7 s with). The JVM checks that it was made by the same JVM from the same
#: jars, and runs as if it were absent when not: a stale archive costs the saving, never a job.
CLASS_ARCHIVE_NAME = "spark-classes.jsa"
#: Without its logging a JVM that cannot use the archive (another Java, another Spark) says nothing on stdout.
CLASS_ARCHIVE_QUIET = "-Xlog:cds=off,cds+dynamic=off"


def class_archive() -> Path:
    """Where the class-data-sharing archive is (or would be): beside the reader jar in `<sys.prefix>/jars/`."""
    return Path(sys.prefix) / "jars" / CLASS_ARCHIVE_NAME


def class_archive_size(archive: Path) -> Path:
    """The file recording the archive's size when it was built and proven to map."""
    return archive.with_name(archive.name + ".size")


def class_sharing_options() -> str:
    """The driver's Java options that map the class-data-sharing archive; empty when none was built, or when it is
    not the size it was built at: a JVM mapping a cut archive dies (SIGBUS, measured on Java 17), where it would
    step over one from another Java or Spark."""
    archive = class_archive()
    try:
        whole = int(class_archive_size(archive).read_text(encoding="utf-8")) == archive.stat().st_size
    except (OSError, ValueError):
        return ""
    return f"-XX:SharedArchiveFile={archive} {CLASS_ARCHIVE_QUIET}" if whole else ""


def reader_jar() -> Path:
    """Where the JVM reader's jar is (or would be): `$STITCHLAKE_SPARK_JAR`, else `<sys.prefix>/jars/`."""
    given = os.environ.get(READER_JAR_ENV)
    return Path(given) if given else Path(sys.prefix) / "jars" / READER_JAR_NAME


def reader_enabled() -> bool:
    """Whether stitchlake's sessions and jobs put the JVM reader on their classpath."""
    switch = os.environ.get(READER_SWITCH_ENV, "").strip().lower()
    if switch in ("1", "true", "yes", "on"):
        return True
    if switch in ("0", "false", "no", "off"):
        return False
    return READER_DEFAULT


def reader_conf(conf: Mapping[str, str] | None = None, enabled: bool | None = None) -> dict[str, str]:
    """The settings that give a session or job the JVM reader: its jar added to `spark.jars` (kept: the jars `conf`
    already lists) and the planner's Python. Empty when the reader is switched off or its jar is not built."""
    jar = reader_jar()
    if not (reader_enabled() if enabled is None else enabled) or not jar.is_file():
        return {}
    jars = [j for j in (conf or {}).get("spark.jars", "").split(",") if j.strip()]
    if str(jar) not in jars:
        jars.append(str(jar))
    return {"spark.jars": ",".join(jars), PLANNER_PYTHON_CONF: sys.executable}
