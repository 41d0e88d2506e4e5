"""Spark's own Iceberg reader on a published table, for the publish tests.

Spark fetches Iceberg's runtime jar from Maven Central, which this project's CI cannot reach, and no PyPI, Debian
or npm package ships one for Spark 4. PyPI does ship Iceberg 1.10.2's runtime for Spark 3.5 (the
`snowpark-connect-deps-iceberg` wheel), but stripped of the Jackson classes it relocates under
`org.apache.iceberg.shaded`; the same vendor's `snowpark-connect-deps-2` wheel holds Jackson 2.18.8, which Debian's
jarjar relocates to where the runtime looks. With PySpark 3.5 beside them in a folder of the virtual environment,
this file runs in its own process as a Spark user's job would: a session whose Iceberg catalog is the JDBC catalog
over the SQLite file that `stitch publish` keeps (Debian's SQLite JDBC driver). What it proves is the format: the
catalog rows, metadata, manifests and data files stitchlake publishes are what Iceberg's Java reader expects.
It prints what each query returned as one JSON object.

Run as a script: `python spark_iceberg_reader.py <jdbc-uri> <warehouse> <identifier> <snapshot-id>...`
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from script_modules import load_script

#: What the reader environment holds, pinned: the newest Spark that an offline Iceberg runtime exists for.
PACKAGES = (
    "pyspark==3.5.9",
    "py4j==0.10.9.9",
    "snowpark-connect-deps-iceberg==1.0.3",
    "snowpark-connect-deps-2==3.56.7",
)
RUNTIME_JAR = "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON_JARS = tuple(
    f"snowpark_connect_deps_2/jars/jackson-{n}-2.18.8.jar" for n in ("core", "databind", "annotations")
)
#: Jackson moved to where the runtime's own classes look for it.
RELOCATED_JACKSON = "iceberg-shaded-jackson.jar"
RELOCATION = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
#: Debian packages: the SQLite JDBC driver (Iceberg's JDBC catalog over our SQLite file) and jarjar.
DEBIAN = {
    "libxerial-sqlite-jdbc-java": "/usr/share/java/sqlite-jdbc.jar",
    "libjarjar-java": "/usr/share/java/jarjar.jar",
}
INSTALL_TIMEOUT_S = 900


def reader_environment() -> Path:
    """The folder that holds PySpark 3.5 and the jars, installed on first use (one installer at a time when
    several test workers ask at once). A failed install fails the test that needed it; it is never skipped."""
    folder = Path(sys.prefix) / "spark-3.5-iceberg"
    done = folder / ".installed"
    wanted = "\n".join([*PACKAGES, RELOCATION])
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done.read_text() if done.exists() else "") == wanted and all(map(os.path.exists, DEBIAN.values())):
            return folder
        missing = [package for package, jar in DEBIAN.items() if not os.path.exists(jar)]
        failed = load_script("local_daemons").apt_install(missing, INSTALL_TIMEOUT_S) if missing else ""
        if failed:
            raise RuntimeError(failed)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        _run([*pip, "--upgrade", "--target", str(folder), *PACKAGES])
        _relocate_jackson(folder)
        done.write_text(wanted)
    return folder


def _relocate_jackson(folder: Path) -> None:
    """One jar of Jackson's classes (no multi-release or signature files), relocated by jarjar."""
    merged, rules = folder / "jackson-merged.jar", folder / "jackson.rules"
    with zipfile.ZipFile(merged, "w") as out:
        for jar in JACKSON_JARS:
            with zipfile.ZipFile(folder / jar) as source:
                for entry in source.namelist():
                    if entry.endswith(".class") and not entry.startswith("META-INF/"):
                        out.writestr(entry, source.read(entry))
    rules.write_text(RELOCATION)
    _run(
        ["java", "-jar", DEBIAN["libjarjar-java"], "process", str(rules), str(merged), str(folder / RELOCATED_JACKSON)]
    )
    merged.unlink()


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


def read_through_spark(published: dict[str, Any], snapshots: list[int], timeout_s: float = 600) -> dict[str, Any]:
    """Run this file under PySpark 3.5 on what `stitch publish --format iceberg --json` reported (the default
    SQLite catalog): what Spark's Iceberg reader returns for the current table, each of `snapshots` (time travel)
    and a partition filter."""
    catalog = "jdbc:sqlite:" + published["catalog"].removeprefix("sqlite:///")
    folder = reader_environment()
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYTHONPATH")}
    env["PYTHONPATH"] = str(folder)
    jars = [str(folder / RUNTIME_JAR), str(folder / RELOCATED_JACKSON), DEBIAN["libxerial-sqlite-jdbc-java"]]
    env["STITCH_SPARK_READER_JARS"] = ",".join(jars)
    argv = [sys.executable, __file__, catalog, published["location"], published["identifier"], *map(str, snapshots)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise AssertionError(f"Spark's Iceberg reader failed (exit {done.returncode}):\n{done.stderr[-6000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _main(catalog: str, warehouse: str, identifier: str, snapshots: list[str]) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("stitchlake-test-iceberg-reader")
        .config("spark.jars", os.environ["STITCH_SPARK_READER_JARS"])
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.catalog.stitchlake", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.stitchlake.type", "jdbc")
        .config("spark.sql.catalog.stitchlake.uri", catalog)
        .config("spark.sql.catalog.stitchlake.warehouse", warehouse)
        .getOrCreate()
    )
    name = f"stitchlake.{identifier}"

    def rows(sql: str) -> list[dict[str, Any]]:
        return [row.asDict() for row in spark.sql(sql).collect()]

    result = {
        "spark": spark.version,
        "columns": spark.table(name).columns,
        "current": rows(f"SELECT * FROM {name}"),
        "versions": {s: rows(f"SELECT * FROM {name} VERSION AS OF {s}") for s in snapshots},
        "odd": rows(f"SELECT * FROM {name} WHERE p = 'odd'"),
        "snapshots": [row["snapshot_id"] for row in rows(f"SELECT snapshot_id FROM {name}.snapshots")],
    }
    spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
