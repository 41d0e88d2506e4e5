"""Streams that never stop (issue 12): the Structured Streaming sink, `stitch stream`, and what signals do to jobs.

Every job here is a real process (a Spark session or a spark-submit), killed or stopped the way a scheduler, a
crash or systemd would, and the table is compared with the ground truth afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import ROOT, alive, descendants, kill_tree, run_stitch, stitch, write_config

import stitchlake
from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan

QUERY = Path(__file__).resolve().parent / "stream_query.py"


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data with six landing files per stream, so a stream runs several micro-batches."""
    from demo_data import generate

    out = tmp_path_factory.mktemp("stream-data")
    generate(out, orders=2500, days=2, seed=21, files_per_stream=6)
    return out


def new_table(folder: Path, landing: Path, **changes: Any) -> tuple[Path, Table]:
    config = write_config(folder, landing, **changes)
    table = open_table(str(config))
    table.init()
    return config, table


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 240, process: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the process ended (exit {process.returncode}) while waiting for {what}: {err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def completed(table: Table, stream: str) -> list[DeltaCommit]:
    timeline = table.timeline()
    commits = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])]
    return [c for c in commits if isinstance(c, DeltaCommit) and c.stream == stream]


def pending_batches(table: Table) -> list[str]:
    timeline = table.timeline()
    found = []
    for instant in timeline.pending([Action.DELTACOMMIT]):
        plan = timeline.plan(instant)
        if isinstance(plan, DeltaCommitPlan) and plan.stream_batch is not None:
            found.append(instant.requested)
    return found


def query(config: Path, stream: str, landing: Path, checkpoint: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(QUERY), str(config), stream, str(landing), str(checkpoint), mode],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ingest_the_rest(config: Path, *streams: str) -> None:
    for stream in streams:
        done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local")
        assert done.returncode == 0, done.stderr


def test_a_streaming_query_killed_mid_batch_and_restarted_gives_the_ground_truth(
    many_files: Path, tmp_path: Path
) -> None:
    """`df.writeStream.format("stitchlake")`: SIGKILLed while a micro-batch is being written, three times, and
    restarted from its checkpoint each time; then run to the end. No event lost, none doubled."""
    from demo_data import compare

    config, table = new_table(tmp_path, many_files / "landing")
    landing, checkpoint = many_files / "landing" / "orders", tmp_path / "checkpoint"
    kills_mid_batch = 0
    for _round in range(3):
        job = query(config, "orders", landing, checkpoint, "continuous")
        try:
            before = len(completed(table, "orders"))
            wait_for("a micro-batch being written", lambda: bool(pending_batches(table)), process=job)
            if len(completed(table, "orders")) >= 6:
                break
            kills_mid_batch += 1
        finally:
            kill_tree(job)  # SIGKILL, as a crash would: no abort, no commit, the instant stays pending
        assert len(completed(table, "orders")) >= before
    assert kills_mid_batch >= 2, "the query kept finishing its batches before it could be killed mid-write"
    last = query(config, "orders", landing, checkpoint, "available_now")
    _, err = last.communicate(timeout=600)
    assert last.returncode == 0, err[-3000:]

    commits = completed(table, "orders")
    batches = [(c.stream_batch.query_id, c.stream_batch.batch_id) for c in commits if c.stream_batch]
    assert len(batches) == len(set(batches)) == len(commits), "a micro-batch was committed twice"
    assert len({q for q, _ in batches}) == 1, "the checkpoint keeps the query's id across restarts"
    assert sum(c.rows for c in commits) == sum(
        __import__("pyarrow.parquet").parquet.read_metadata(f).num_rows for f in sorted(landing.iterdir())
    )
    assert not table.timeline().pending(), "the re-run of the killed batch finished the instant it found"
    ingest_the_rest(config, "payments", "shipments")
    assert compare(stitchlake.read(str(config)), many_files / "truth.parquet") == []


def test_a_micro_batch_replayed_after_its_commit_adds_nothing(many_files: Path, tmp_path: Path) -> None:
    """The crash between our commit and Spark's commit log: Spark runs the batch again with the same ids."""
    config, table = new_table(tmp_path, many_files / "landing")
    landing, checkpoint = many_files / "landing" / "orders", tmp_path / "checkpoint"
    for _ in range(2):
        if _ == 1:
            commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
            last = [p for p in commits if p.name.isdigit()][-1]
            last.unlink()  # as if the process died right after the table committed the batch
            (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
            before = [(c.stream_batch, c.rows) for c in completed(table, "orders")]
            rows_before = table.read().num_rows
        job = query(config, "orders", landing, checkpoint, "available_now")
        _, err = job.communicate(timeout=600)
        assert job.returncode == 0, err[-3000:]
    assert [(c.stream_batch, c.rows) for c in completed(table, "orders")] == before
    assert table.read().num_rows == rows_before
    assert not table.timeline().pending()


def test_stitch_stream_stops_gracefully_on_sigterm_and_resumes_to_the_ground_truth(
    many_files: Path, tmp_path: Path
) -> None:
    from demo_data import compare

    config, table = new_table(tmp_path, many_files / "landing")
    args = ("stream", "-c", str(config), "--stream", "shipments", "--files-per-trigger", "1", "--json")
    for _round in range(2):
        want = len(completed(table, "shipments")) + 1
        job = subprocess.Popen(
            stitch(*args, "--trigger-interval", "2"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        target = want
        wait_for(f"{target} micro-batch(es)", lambda: len(completed(table, "shipments")) >= target, process=job)  # noqa: B023
        below = descendants(job.pid)
        assert below, "the JVM runs below the CLI"
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=300)
        assert job.returncode == 0, err[-3000:]
        result = json.loads(out)
        assert result["ok"] and "stopped on request" in result["stopped"]
        assert not alive(below), "a process of the job survived"
        assert not table.timeline().pending(), "a graceful stop finishes the batch it is in"
    finished = run_stitch(*args, "--available-now")
    assert finished.returncode == 0, finished.stderr
    assert sum(len(c.consumed()) for c in completed(table, "shipments")) == 6
    ingest_the_rest(config, "orders", "payments")
    assert compare(stitchlake.read(str(config)), many_files / "truth.parquet") == []
