"""Shared fixtures and the tier rule. Real parts only: real files on disk, real processes, real ZooKeeper, real
spark-submit, a real S3 server (Ceph's RADOS Gateway), a real Spark standalone cluster, a real Kafka broker and a real
Trino server, each started once per session (tests/support).

Markers come from the fixtures a test takes (FIXTURE_MARKERS), so none can be forgotten, and tests/unit may take none
of them: collection fails if one does, and a unit test that starts a JVM, spark-submit or the `stitch` CLI in a
subprocess fails where it starts it. `make test-fast` (tests/unit) therefore never waits on a JVM or a server. An
integration test that starts Spark itself (spark-submit, or `stitch ... --engine spark`) without a spark marker
fails where it starts it too: `-m "not spark"` would still run it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stitchlake.jobs.spark_conf import class_sharing_options

pytest_plugins = [
    "tests.support.zookeeper_server",
    "tests.support.spark_fixtures",
    "tests.support.s3_server",
    "tests.support.spark_cluster",
    "tests.support.trino_server",
    "tests.support.kafka_server",
    "tests.support.demo_landing",
    "tests.support.cli_tables",
    "tests.support.bad_input",
    "tests.support.lock_clock",
    "tests.support.storage_roots",
    "tests.support.small_histories",
    "tests.support.published_history",
    "tests.support.merge_harness",
]

UNIT = Path(__file__).resolve().parent / "unit"

#: The suite's Spark drivers (its own session and every spark-submit a test starts, through the environment they
#: inherit) compile with C1 only: they live seconds on little data, and C2 spent more than it saved. Measured here,
#: a session that writes and aggregates 200k rows: 12.2 s wall and 18.6 s CPU by default, 9.9 s and 11.0 s with it.
#: Only the suite's processes inherit it: `make bench` and its siblings run without it (the suite's smoke runs of
#: the benchmark scripts do run under it, and assert no speed). They also map Spark's classes from the archive `make
#: setup` builds (`spark_conf.class_archive`), as stitchlake's own jobs and sessions do: every driver of the suite
#: does. A value set outside wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", f"-XX:TieredStopAtLevel=1 {class_sharing_options()}".strip())

#: fixture -> the marker a test taking it gets (directly or through another fixture).
FIXTURE_MARKERS = {
    "spark": "spark",
    "jvm": "spark",
    "harness": "spark",
    "spark_master": "cluster",
    "s3_server": "s3",
    "s3_bucket": "s3",
    "place": "s3",
    "zookeeper_hosts": "zookeeper",
    "trino_server": "trino",
    "kafka_broker": "kafka",
}
#: markers a unit test may not carry, whether they came from a fixture or were written by hand.
SERVER_MARKERS = frozenset(FIXTURE_MARKERS.values())
#: what a unit test may not start: a JVM (pyspark starts its gateway through spark-submit), or the CLI.
FORBIDDEN_COMMANDS = ("java", "spark-submit", "spark-class", "stitch")


#: The slowest modules, slowest first (seconds of work in one `make test`, --durations=0, 2026-11-29: 311, 269, 247,
#: 194, 192, 187, 175, 156, 137, 115, 115, 110). xdist's loadfile hands modules out in collection order, where
#: test_torture.py came near the end: one worker then ran it for minutes while the others had nothing left. They go
#: first; every other module keeps its place. (`make test` passes `--no-loadscope-reorder`: xdist otherwise sorts
#: the modules again, by their number of tests, and the one-test modules, the slowest among them, went last.)
SLOWEST_FIRST = (
    "test_torture.py",
    "test_bench_peers.py",
    "test_jvm_conformance.py",
    "test_native_readers.py",
    "test_kafka.py",
    "test_partitions.py",
    "test_streaming.py",
    "test_rescale.py",
    "test_cluster.py",
    "test_spark_jobs.py",
    "test_jvm_conformance_alters.py",
    "test_airflow_example.py",
)


def schedule_rank(item: pytest.Item) -> int:
    """Where `item`'s module goes in the run: its place in SLOWEST_FIRST, else after all of them."""
    name = Path(str(item.path)).name
    return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST and not in_unit_tier(item) else len(SLOWEST_FIRST)


def in_unit_tier(item: pytest.Item) -> bool:
    return UNIT in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the fixtures it takes; refuse the run when a unit test needs a JVM or a server; schedule
    the slowest modules first."""
    broken = []
    for item in items:
        needs = sorted({FIXTURE_MARKERS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_MARKERS})
        for marker in needs:
            item.add_marker(marker)
        if in_unit_tier(item):
            carried = sorted(SERVER_MARKERS & {mark.name for mark in item.iter_markers()})
            if carried:
                broken.append(f"{item.nodeid} needs {', '.join(carried)}")
    if broken:
        raise pytest.UsageError(
            "tests/unit may not use a JVM or a server (move these to tests/integration):\n  " + "\n  ".join(broken)
        )
    items.sort(key=schedule_rank)  # stable: each module's tests stay together and in order


class UnitGuard:
    """Fails a unit test where it starts a JVM, spark-submit or `stitch` (an audit hook sees every subprocess)."""

    def __init__(self) -> None:
        self.current: pytest.Item | None = None
        #: The integration test running, whose Spark must be marked (`-m "not spark"` must leave it out).
        self.integration: pytest.Item | None = None
        self.ran = 0
        self.started: list[str] = []

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
            return
        argv = args[1]  # (executable, args, ...) for Popen, (path, argv, ...) for posix_spawn and exec
        words = [str(word) for word in argv] if isinstance(argv, list | tuple) else str(argv).split()
        item = self.integration
        if item is not None and starts_spark(words) and unmarked(item):
            raise RuntimeError(
                f"{item.nodeid} starts Spark ({' '.join(words)[:100]}) but carries no spark marker, so `-m 'not "
                "spark'` would run it: take a Spark fixture, or mark it (pytest.mark.spark, or a pytest.param's marks)"
            )
        if self.current is None:
            return
        self.started.append(" ".join(words))
        if forbidden(words):
            raise RuntimeError(f"a unit test may not start {' '.join(words)[:200]!r}: it belongs in tests/integration")


#: The markers of a test that may start Spark.
SPARK_MARKERS = frozenset({"spark", "cluster"})


def unmarked(item: pytest.Item) -> bool:
    """Whether a test carries none of the markers of tests that may start Spark."""
    return not SPARK_MARKERS & {mark.name for mark in item.iter_markers()}


def starts_spark(words: list[str]) -> bool:
    """spark-submit (pyspark's gateway, a job) by name, or a `stitch` command told `--engine spark`."""
    names = [Path(word).name for word in words]
    return (bool(names) and names[0] in ("spark-submit", "spark-class")) or any(
        names[i] == "--engine" and names[i + 1] == "spark" for i in range(len(names) - 1)
    )


def forbidden(words: list[str]) -> bool:
    """A JVM or the CLI: java/spark-submit by name, `python -m stitchlake`, or the `stitch` entry point."""
    names = [Path(word).name for word in words]
    if any(name in FORBIDDEN_COMMANDS for name in names[:1]):
        return True
    return any(names[i] == "-m" and names[i + 1].startswith("stitchlake") for i in range(len(names) - 1))


GUARD = UnitGuard()
sys.addaudithook(GUARD.audit)  # audit hooks cannot be removed; it does nothing outside a unit test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    GUARD.current = item if in_unit_tier(item) else None
    GUARD.integration = None if in_unit_tier(item) else item
    GUARD.ran += GUARD.current is not None
    try:
        yield
    finally:
        GUARD.current = GUARD.integration = None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say what the unit tier started, so `make test-fast` shows it ran without a JVM."""
    if not GUARD.ran:
        return
    jvm = "pyspark.sql" in sys.modules and _spark_context_started()
    terminalreporter.write_line(
        f"tier guard: {GUARD.ran} unit tests started {len(GUARD.started)} subprocesses, none a JVM or `stitch`; "
        f"JVM in this process: {'yes' if jvm else 'no'}"
    )


def _spark_context_started() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is not None
