"""What the Spark launcher takes: a job's files and a table config with a `spark:` section."""

from __future__ import annotations

from pathlib import Path

from stitchlake.config import TableConfig
from stitchlake.jobs.spark_submit import (
    JobFiles,
)
from tests.support.tables import THREE_STREAMS, config


def job_files(tmp_path: Path) -> JobFiles:
    """A job's log, result, properties and request files, in `tmp_path`."""
    return JobFiles(
        tmp_path / "job.log", tmp_path / "result.json", tmp_path / "spark.properties", tmp_path / "request.json"
    )


def spark_table_config(tmp_path: Path, master: str, conf: dict[str, str] | None = None) -> TableConfig:
    """THREE_STREAMS with Spark's `master` and `conf`."""
    document = {**THREE_STREAMS, "spark": {"master": master, "conf": conf or {}}}
    return config(tmp_path, document)
