"""The Spark engine's guards that need no Spark: what it refuses or skips before asking Spark for anything."""

from __future__ import annotations

from typing import Any


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
