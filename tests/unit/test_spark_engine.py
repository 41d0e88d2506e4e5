"""The Spark engine's guards that need no Spark: what it refuses or skips before asking Spark for anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_the_spark_engine_writes_a_plan_of_positions_only_without_a_spark_job() -> None:
    """The first ingest of a `starting_offsets: latest` stream, or a `--reset-offsets`, plans no range to read:
    Spark was asked for zero tasks (`parallelize([], 0)`: ZeroDivisionError) and the ingest exited 1, every
    `stitch stream` of the topic on its first micro-batch. No Spark is reached for no input."""
    from stitchlake.spark.engine import SparkEngine

    class NoSpark:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"Spark was asked for {name} with nothing to read")

    written = SparkEngine(NoSpark()).write_stream(None, None, [], "20260101000000000")  # type: ignore[arg-type]
    assert written.files == [] and written.rows == 0


def test_files_the_executors_wrote_elsewhere_are_refused_before_the_commit(tmp_path: Path) -> None:
    """A table on local disk with executors on other machines: each wrote its log files to its own disk, and the
    commit named files no reader on this machine could find. The ingest is refused before its commit."""
    from types import SimpleNamespace

    from stitchlake.errors import StitchError
    from stitchlake.spark.engine import SparkEngine
    from stitchlake.timeline.metadata import DataFile
    from tests.support.tables import new_table

    table = new_table(tmp_path)
    here = DataFile("p=a/0.log.parquet", "p=a", "0", "log", "x", 1, 1, "c")
    (tmp_path / "table" / "p=a").mkdir(parents=True)
    (tmp_path / "table" / "p=a" / "0.log.parquet").write_bytes(b"x")
    elsewhere = DataFile("p=a/1.log.parquet", "p=a", "1", "log", "x", 1, 1, "c")
    cluster = SparkEngine(SimpleNamespace(sparkContext=SimpleNamespace(master="spark://cluster:7077")))  # type: ignore[arg-type]
    cluster._refuse_unseen(table, [here])
    with pytest.raises(StitchError, match=r"1 file\(s\) the Spark executors wrote are not on this machine"):
        cluster._refuse_unseen(table, [here, elsewhere])
