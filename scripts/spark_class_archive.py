"""Build the class-data-sharing archive stitchlake's Spark drivers map (`make setup`; `spark_conf.class_archive`).

A short Spark job (write Parquet, read it, aggregate, join, a Python UDF) runs under `spark-submit` with
`-XX:ArchiveClassesAtExit`: the JVM writes every class it loaded from Spark's jars into the archive as it exits. A
second driver must start with it under `-Xshare:on`; only then is it renamed into place and its size recorded, so a
driver never maps half of one. It belongs to this Java and these jars: the Makefile builds it again when either
changes, and a driver that finds it stale just does not use it.

Run: python -m scripts.spark_class_archive [--out PATH]. Failing is not fatal to `make setup` (drivers then start the
ordinary way); it says why.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scripts import child_env, run_captured
from stitchlake.jobs.spark_conf import CLASS_ARCHIVE_QUIET, class_archive, class_archive_size
from stitchlake.jobs.spark_submit import spark_home, spark_submit

#: A few minutes on a busy 2-core machine; a stuck build must not hold `make setup` for ever.
BUILD_TIMEOUT_S = 900


def train(folder: Path) -> None:
    """What a stitchlake driver does, in small: the classes these load are the ones archived."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    spark = SparkSession.builder.master("local[2]").appName("stitchlake-class-archive").getOrCreate()
    try:
        rows = spark.range(2000).selectExpr("id", "cast(id % 7 as string) as s", "id * 1.5 as x")
        rows.write.mode("overwrite").parquet(str(folder / "rows"))
        read = spark.read.parquet(str(folder / "rows"))
        plus_one = f.udf(lambda v: v + 1, "long")
        grouped = read.groupBy("s").agg(f.sum("x"), f.max_by("id", "x"), f.count(f.lit(1)))
        joined = read.join(grouped, "s").select(plus_one("id").alias("id"), "s")
        joined.toArrow()
        grouped.toPandas()
        spark.sql("SELECT s, count(*) FROM parquet.`" + str(folder / "rows") + "` GROUP BY s").collect()
    finally:
        spark.stop()


def verify() -> None:
    """A driver that starts (`-Xshare:on` refuses to start without mapping the archive)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").appName("stitchlake-class-archive-check").getOrCreate()
    try:
        assert spark.range(5).count() == 5
    finally:
        spark.stop()


def _submit(java_options: str, *args: str) -> None:
    """This file's `args` step under spark-submit with `java_options`; SystemExit (not fatal to `make setup`)
    saying what went wrong when it fails."""
    env = child_env()
    env.update(SPARK_HOME=spark_home(), PYSPARK_PYTHON=sys.executable, SPARK_SUBMIT_OPTS=java_options)
    done = run_captured([spark_submit(), "--master", "local[2]", __file__, *args], BUILD_TIMEOUT_S, env=env)
    if done.returncode != 0:
        raise SystemExit(
            f"no class-data-sharing archive (Spark drivers will start the ordinary way): {' '.join(args)} exited "
            f"{done.returncode}\n{(done.stdout + done.stderr)[-2000:]}"
        )


def build(out: Path) -> None:
    """Dump, prove a driver maps it, then put it in place with its size (`spark_conf.class_sharing_options` maps
    only an archive of that size: a cut one would kill every driver)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    size = class_archive_size(out)
    size.unlink(missing_ok=True)  # from here until the end the old archive is not mapped
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="stitch-class-archive-") as folder:
            _submit(f"-XX:ArchiveClassesAtExit={partial}", "--train", folder)
        if not partial.is_file():
            raise SystemExit("no class-data-sharing archive: the training driver wrote none (a Java without it?)")
        _submit(f"-Xshare:on -XX:SharedArchiveFile={partial} {CLASS_ARCHIVE_QUIET}", "--verify")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    size.write_text(str(out.stat().st_size), encoding="utf-8")
    print(f"built the Spark class-data-sharing archive {out} ({out.stat().st_size / 2**20:.0f} MiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=class_archive(), help="where to write it (default: %(default)s)")
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)  # the steps spark-submit runs
    parser.add_argument("--verify", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train is not None:
        train(args.train)
    elif args.verify:
        verify()
    else:
        build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
