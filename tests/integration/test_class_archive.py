"""Spark drivers start from the class-data-sharing archive `make setup` builds (`spark_conf.class_archive`,
scripts/spark_class_archive.py): a driver that maps it starts in about half the CPU.

A JVM that cannot use the archive runs without it and says nothing, so the saving could vanish unseen; here the
driver runs with `-Xshare:on`, under which it refuses to start instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stitchlake.jobs.spark_conf import class_archive
from stitchlake.jobs.spark_submit import spark_home, spark_properties, spark_submit
from tests.support.tables import THREE_STREAMS, config

pytestmark = pytest.mark.spark

JOB = "from pyspark.sql import SparkSession\nprint('rows', SparkSession.builder.getOrCreate().range(5).count())\n"


def _driver(tmp_path: Path, java_options: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    argv = [spark_submit(), "--master", "local[1]", "--conf", f"spark.driver.extraJavaOptions={java_options}"]
    env = {**os.environ, "SPARK_HOME": spark_home(), "PYSPARK_PYTHON": sys.executable}
    env["SPARK_SUBMIT_OPTS"] = "-Xshare:on"  # no archive mapped: the JVM does not start
    return subprocess.run(
        [*argv, str(script)], env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


def test_a_job_driver_maps_the_archive_setup_built(tmp_path: Path) -> None:
    archive = class_archive()
    assert archive.is_file(), f"{archive}: `make setup` builds it (python -m scripts.spark_class_archive)"
    options = spark_properties(config(tmp_path, {**THREE_STREAMS, "spark": {"master": "local[1]"}}))
    assert str(archive) in options["spark.driver.extraJavaOptions"]
    done = _driver(tmp_path, options["spark.driver.extraJavaOptions"])
    assert done.returncode == 0 and "rows 5" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]

    # The check can fail: an archive this JVM cannot map stops it. (Not a cut copy of the real one: mapping that
    # kills the JVM, which is why `class_sharing_options` maps only an archive of the size it was built at.)
    other = tmp_path / "other.jsa"
    other.write_bytes(b"not a class-data-sharing archive" * 1024)
    done = _driver(tmp_path, options["spark.driver.extraJavaOptions"].replace(str(archive), str(other)))
    assert done.returncode != 0 and "rows 5" not in done.stdout
