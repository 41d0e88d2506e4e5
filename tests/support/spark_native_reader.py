"""Spark's own Delta and Iceberg readers on the published tables (issue 26), in a process of their own.

The reader is a Spark user's session, not stitchlake: PySpark 4.1.4 with `delta-spark_4.1_2.13` 4.4.0 and
`iceberg-spark-runtime-4.1_2.13` 1.12.0 (the side environment `SPARK_4_1` of scripts/spark_envs.py, the newest
Spark both runtimes exist for), the SQLite JDBC driver for Iceberg's JDBC catalog over the SQLite file `stitch
publish` keeps, and Hadoop's S3 connector (`spark_envs.S3A`) when the tables are on S3. The test process never
imports this PySpark: it writes a request (catalogs, S3 settings, queries), runs this file under the side
environment, and reads back one JSON object with what each query returned (its rows, or the error it was refused
with). `session_conf` is the whole Spark configuration the session gets; docs/operations.md shows the same
properties.

Run as a module from the repository root: `python -m tests.support.spark_native_reader <request.json>`
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

#: One Iceberg catalog of the session: `type` jdbc (with `uri` jdbc:sqlite:... and `warehouse`) or rest (`uri`);
#: `io-impl` names the FileIO: HadoopFileIO reads `s3://` files through S3A with the `fs.s3a.*` settings, as the
#: JDBC catalog does by default (a REST catalog's default, ResolvingFileIO, hands them to Iceberg's own S3FileIO,
#: which takes `s3.*` catalog properties instead).
IcebergCatalog = TypedDict(
    "IcebergCatalog", {"name": str, "type": str, "uri": str, "warehouse": str, "io-impl": str}, total=False
)


class S3Settings(TypedDict):
    endpoint: str
    region: str
    access_key: str
    secret_key: str


class Request(TypedDict, total=False):
    """What to read: the catalogs, S3 settings (None on local disk) and the queries, by name."""

    iceberg: list[IcebergCatalog]
    s3: S3Settings | None
    queries: dict[str, str]


def session_conf(request: Request) -> dict[str, str]:
    """The Spark properties of the reader's session (jars come from `STITCH_SPARK_JARS`)."""
    conf = {
        "spark.master": "local[1]",
        "spark.driver.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.session.timeZone": "UTC",
        # Delta: SQL on paths (delta.`...`, VERSION AS OF) and its catalog; one task per log replay, not 50.
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.snapshotPartitions": "1",
    }
    for catalog in request.get("iceberg", []):
        prefix = f"spark.sql.catalog.{catalog['name']}"
        conf[prefix] = "org.apache.iceberg.spark.SparkCatalog"
        conf.update({f"{prefix}.{key}": str(value) for key, value in catalog.items() if key != "name"})
    s3 = request.get("s3")
    if s3:
        conf.update(
            {
                "spark.hadoop.fs.s3a.endpoint": s3["endpoint"],
                "spark.hadoop.fs.s3a.endpoint.region": s3["region"],
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": str(s3["endpoint"].startswith("https:")).lower(),
                "spark.hadoop.fs.s3a.access.key": s3["access_key"],
                "spark.hadoop.fs.s3a.secret.key": s3["secret_key"],
                # Iceberg's metadata names its files s3://...: the same connector reads them.
                "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            }
        )
    return conf


def read_with_spark(request: Request, timeout_s: float = 900) -> dict[str, Any]:
    """Run the request in its own process under the side environment (installed on first use, with Hadoop's S3
    connector when the request reads S3); what each query returned, by name."""
    from scripts import spark_envs

    trees = (spark_envs.S3A,) if request.get("s3") else ()
    installed = spark_envs.install(spark_envs.SPARK_4_1, trees)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="spark-reader-", delete=False) as handle:
        json.dump(request, handle)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.spark_native_reader", handle.name],
            cwd=Path(__file__).resolve().parents[2],
            env={**installed.environ(), "TZ": "UTC"},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.unlink(handle.name)
    if done.returncode != 0:
        raise AssertionError(f"Spark's reader failed (exit {done.returncode}):\n{done.stderr[-6000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    for answer in result["results"].values():
        answer["rows"] = [{key: decode(value) for key, value in row.items()} for row in answer.get("rows", [])]
    return result


def encode(value: Any) -> Any:
    """A cell as JSON without losing what it is: decimals as their exact text, timestamps as the UTC instant
    (PySpark hands a naive datetime in the process's local time, which `astimezone` reads as such), dates as ISO
    days; `decode` turns them back."""
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"timestamp": value.astimezone(datetime.UTC).isoformat()}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    return value


def decode(value: Any) -> Any:
    """The inverse of `encode`: Decimal, aware datetime (UTC), date."""
    if isinstance(value, dict):
        ((kind, text),) = value.items()
        if kind == "decimal":
            return decimal.Decimal(text)
        if kind == "timestamp":
            return datetime.datetime.fromisoformat(text)
        assert kind == "date", value
        return datetime.date.fromisoformat(text)
    return value


def _main(path: str) -> None:
    from pyspark.sql import SparkSession

    request: Request = json.loads(Path(path).read_text())
    builder = SparkSession.builder.appName("stitchlake-test-native-reader")
    for key, value in {**session_conf(request), "spark.jars": os.environ["STITCH_SPARK_JARS"]}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        results: dict[str, Mapping[str, Any]] = {}
        for name, sql in request.get("queries", {}).items():
            try:
                frame = spark.sql(sql)
                rows = frame.collect()
            except Exception as exc:  # a refused query (time travel past a purge) is an answer too
                results[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                continue
            results[name] = {
                "columns": frame.columns,
                "rows": [{key: encode(value) for key, value in row.asDict().items()} for row in rows],
                "files": sorted(frame.inputFiles()),
            }
        print(json.dumps({"spark": spark.version, "results": results}))
    finally:
        spark.stop()


if __name__ == "__main__":
    _main(sys.argv[1])
