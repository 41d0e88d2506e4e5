"""pytest plugin for the Spark tests: one in-process session, small demo datasets, and table configs.

The in-process session is real Spark (pyspark starts its JVM through `spark-submit`); the CLI tests start
`stitch ingest` and friends (`tests.support.processes`), which run their own `spark-submit` per job. Both use
`local[1]` and a small heap so they fit beside each other on a 2-core CI machine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.support.processes import ROOT
from tests.support.tables import new_table_file, write_table_yaml

if TYPE_CHECKING:
    from stitchlake.api import Table

SPARK_CONF = {
    "spark.driver.memory": "768m",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.default.parallelism": "1",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One in-process Spark session for the whole run, with the stitchlake data source registered."""
    from pyspark.sql import SparkSession

    from stitchlake.jobs.spark_conf import DEFAULT_CONF, reader_conf
    from stitchlake.spark.session import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[1]").appName("stitchlake-tests")
    conf = {**DEFAULT_CONF, **SPARK_CONF, "spark.pyspark.python": sys.executable}
    for key, value in {**conf, **reader_conf(conf)}.items():  # the JVM reader, as stitchlake's own sessions get it
        builder = builder.config(key, value)
    session = register(builder.getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def generated_data(
    tmp_path_factory: pytest.TempPathFactory, name: str, orders: int, seed: int, files_per_stream: int
) -> Path:
    """Demo data of two days (`landing/` and its ground truth `truth.parquet`, scripts/demo_data.py) in a new
    folder: the one way a test makes a dataset of its size."""
    from scripts.demo_data import generate

    out = tmp_path_factory.mktemp(name)
    generate(out, orders=orders, days=2, seed=seed, files_per_stream=files_per_stream)
    return out


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small three-stream dataset with late, out-of-order and duplicate events, and its ground truth."""
    return generated_data(tmp_path_factory, "demo-data", orders=3000, seed=11, files_per_stream=3)


def demo_config(
    folder: Path, landing: Path, sources: dict[str, tuple[str, Path]] | None = None, **changes: Any
) -> dict[str, Any]:
    """configs/demo.yaml pointed at `landing` and a table in `folder/table`, sized for tests.

    `sources` replaces streams' (format, folder); `changes` override top-level sections (merged one level
    deep), e.g. `bad_rows="fail"`.
    """
    document: dict[str, Any] = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    document["table"]["path"] = str(folder / "table")
    for name, stream in document["streams"].items():
        stream["source"]["path"] = str(landing / name)
        if sources and name in sources:
            stream["source"] = {"format": sources[name][0], "path": str(sources[name][1])}
    document["spark"] = {"master": "local[1]", "conf": dict(SPARK_CONF)}
    document["concurrency"]["heartbeat"] = {"interval_s": 1, "expire_s": 8}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key].update(value)
        else:
            document[key] = value
    return document


def write_config(
    folder: Path, landing: Path, sources: dict[str, tuple[str, Path]] | None = None, **changes: Any
) -> Path:
    """`demo_config` as the config file `folder/table.yaml`."""
    return write_table_yaml(folder, demo_config(folder, landing, sources, **changes))


def demo_table(
    folder: Path,
    landing: Path,
    sources: dict[str, tuple[str, Path]] | None = None,
    *,
    through_cli: bool = False,
    **changes: Any,
) -> tuple[Path, Table]:
    """`write_config`'s table, created (`new_table_file`, with `stitch init` if `through_cli`): its config path and
    the opened `stitchlake.api.Table`."""
    table, config = new_table_file(folder, demo_config(folder, landing, sources, **changes), through_cli=through_cli)
    return config, table
