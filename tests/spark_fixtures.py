"""pytest plugin for the Spark tests: one in-process session, small demo datasets, and table configs.

The in-process session is real Spark (pyspark starts its JVM through `spark-submit`); the CLI tests start
`stitch ingest` and friends, which run their own `spark-submit` per job. Both use `local[1]` and a small
heap so they fit beside each other on a 2-core CI machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

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

    from stitchlake.jobs.spark_conf import DEFAULT_CONF
    from stitchlake.spark.session import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[1]").appName("stitchlake-tests")
    for key, value in {**DEFAULT_CONF, **SPARK_CONF, "spark.pyspark.python": sys.executable}.items():
        builder = builder.config(key, value)
    session = register(builder.getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small three-stream dataset with late, out-of-order and duplicate events, and its ground truth."""
    from demo_data import generate

    out = tmp_path_factory.mktemp("demo-data")
    generate(out, orders=3000, days=2, seed=11, files_per_stream=3)
    return out


def write_config(
    folder: Path, landing: Path, sources: dict[str, tuple[str, Path]] | None = None, **changes: Any
) -> Path:
    """configs/demo.yaml pointed at `landing` and a table in `folder/table`, sized for tests.

    `sources` replaces streams' (format, folder); `changes` override top-level sections (merged one level
    deep), e.g. `bad_rows="fail"`.
    """
    document = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
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
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "table.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def stitch(*args: str) -> list[str]:
    """argv of the `stitch` CLI in this environment."""
    return [sys.executable, "-m", "stitchlake", *args]


def run_stitch(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(stitch(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (spark-submit starts its JVM in a new session, so a process group is
    not enough to find it)."""
    from stitchlake.concurrency.processes import parent

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        above = parent(int(entry.name)) if entry.name.isdigit() else None
        if above is not None:
            children.setdefault(above, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pids: list[int]) -> list[int]:
    """The processes of `pids` that still run (the launcher's own test of it)."""
    from stitchlake.concurrency.processes import still_running

    return still_running(pids)


def kill_tree(process: subprocess.Popen[Any]) -> None:
    """SIGKILL a process and everything it started, as a machine crash would."""
    for pid in [process.pid, *descendants(process.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=120)


@contextlib.contextmanager
def ended(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """`process` for the body of a `with`; on the way out, however the test went, SIGKILL it and every process
    below it (its JVM, its Python workers) if it still runs, so a failed test leaves nothing running."""
    try:
        yield process
    finally:
        if process.poll() is None:
            kill_tree(process)
