"""Streams that never stop (issue 12): the Structured Streaming sink, `stitch stream`, and what signals do to jobs.

Every job here is a real process (a Spark session or a spark-submit), killed or stopped the way a scheduler, a
crash or systemd would, and the table is compared with the ground truth afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stitchlake
from stitchlake.api import Table
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan
from tests.support.processes import ROOT, alive, descendants, ended, kill_tree, run_stitch, start_stitch
from tests.support.spark_fixtures import demo_table, generated_data

QUERY = Path(__file__).resolve().parents[1] / "support" / "stream_query.py"


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo data with six landing files per stream, so a stream runs several micro-batches."""
    return generated_data(tmp_path_factory, "stream-data", orders=2500, seed=21, files_per_stream=6)


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 900, process: Any = None) -> None:
    """Poll `condition`; fail at once if `process` ends. The deadline only turns a hang into a failure, and is
    generous: a JVM starts slowly on a machine at load 30."""
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


def held_back(data: Path, folder: Path, stream: str) -> tuple[Path, list[Path]]:
    """A copy of `data`'s landing folder in `folder` with `stream`'s files held back: the test lands them one
    by one (`land`), so a job always has work when the test needs it to, and never waits for a batch that
    cannot come because an earlier one took every file."""
    landing = folder / "landing"
    shutil.copytree(data / "landing", landing)
    files = sorted((landing / stream).iterdir())
    held = folder / "held-back"
    held.mkdir()
    for path in files:
        path.rename(held / path.name)
    return landing, [held / path.name for path in files]


def land(source: Path, folder: Path) -> None:
    """Land one file as a producer does: written under a hidden name, then renamed into place."""
    hidden = folder / f".{source.name}.landing"
    shutil.copyfile(source, hidden)
    hidden.rename(folder / source.name)


def ingest_the_rest(config: Path, *streams: str) -> None:
    for stream in streams:
        done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local")
        assert done.returncode == 0, done.stderr


def test_a_streaming_query_killed_mid_batch_and_restarted_gives_the_ground_truth(
    many_files: Path, tmp_path: Path
) -> None:
    """`df.writeStream.format("stitchlake")`: SIGKILLed while a micro-batch is being written, twice, and
    restarted from its checkpoint each time; then run to the end. No event lost, none doubled.

    Files land one at a time, so each start has a batch to write: the kill waits for that batch's instant, and a
    batch that finished before the kill reached it (the machine is busy) is not counted; the next file lands."""
    from scripts.demo_data import compare

    landing_root, files = held_back(many_files, tmp_path, "orders")
    config, table = demo_table(tmp_path, landing_root)
    landing, checkpoint = landing_root / "orders", tmp_path / "checkpoint"
    kills_mid_batch = 0
    while kills_mid_batch < 2:
        assert len(files) > 1, "every batch finished before its kill reached it (one file is kept for the end)"
        land(files.pop(0), landing)
        killed = set(pending_batches(table))  # an earlier kill's batch: the restart re-runs it first
        with ended(query(config, "orders", landing, checkpoint, "continuous")) as job:
            wait_for("the new file's micro-batch", lambda: bool(set(pending_batches(table)) - killed), process=job)  # noqa: B023
            kill_tree(job)  # SIGKILL, as a crash would: no abort, no commit, the instant stays pending
        kills_mid_batch += bool(set(pending_batches(table)) - killed)
    for path in files:
        land(path, landing)
    with ended(query(config, "orders", landing, checkpoint, "available_now")) as last:
        _, err = last.communicate(timeout=1800)
    assert last.returncode == 0, err[-3000:]

    commits = completed(table, "orders")
    batches = [(c.stream_batch.query_id, c.stream_batch.batch_id) for c in commits if c.stream_batch]
    assert len(batches) == len(set(batches)) == len(commits), "a micro-batch was committed twice"
    assert len({q for q, _ in batches}) == 1, "the checkpoint keeps the query's id across restarts"
    assert all(q for q, _ in batches), "a micro-batch that ran before start() returned recorded no query id"
    assert sum(c.rows for c in commits) == sum(
        __import__("pyarrow.parquet").parquet.read_metadata(f).num_rows for f in sorted(landing.iterdir())
    )
    assert not table.timeline().pending(), "the re-run of the killed batch finished the instant it found"
    ingest_the_rest(config, "payments", "shipments")
    assert compare(stitchlake.read(str(config)), many_files / "truth.parquet") == []


def test_a_micro_batch_replayed_after_its_commit_adds_nothing(many_files: Path, tmp_path: Path) -> None:
    """The crash between our commit and Spark's commit log: Spark runs the batch again with the same ids."""
    config, table = demo_table(tmp_path, many_files / "landing")
    landing, checkpoint = many_files / "landing" / "orders", tmp_path / "checkpoint"
    for _ in range(2):
        if _ == 1:
            commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
            last = [p for p in commits if p.name.isdigit()][-1]
            last.unlink()  # as if the process died right after the table committed the batch
            (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
            before = [(c.stream_batch, c.rows) for c in completed(table, "orders")]
            rows_before = table.read().num_rows
        with ended(query(config, "orders", landing, checkpoint, "available_now")) as job:
            _, err = job.communicate(timeout=1800)
        assert job.returncode == 0, err[-3000:]
    assert [(c.stream_batch, c.rows) for c in completed(table, "orders")] == before
    assert table.read().num_rows == rows_before
    assert not table.timeline().pending()


def test_stitch_stream_stops_gracefully_on_sigterm_and_resumes_to_the_ground_truth(
    many_files: Path, tmp_path: Path
) -> None:
    """SIGTERM reaches `stitch stream` while it has work: a micro-batch in progress, or a file landed that no
    batch has taken yet; then a new `stitch stream` resumes where it stopped. Files land one at a time, so the test
    never waits for a batch that cannot come."""
    from scripts.demo_data import compare

    landing_root, files = held_back(many_files, tmp_path, "shipments")
    config, table = demo_table(tmp_path, landing_root)
    landing = landing_root / "shipments"
    args = ("stream", "-c", str(config), "--stream", "shipments", "--files-per-trigger", "1", "--json")
    land(files.pop(0), landing)
    want = len(completed(table, "shipments")) + 1
    job = start_stitch(*args, "--trigger-interval", "2")
    with ended(job):
        wait_for(f"micro-batch {want}", lambda: len(completed(table, "shipments")) >= want, process=job)
        below = descendants(job.pid)
        assert below, "the JVM runs below the CLI"
        land(files.pop(0), landing)  # work for the job when the signal comes: in a batch, or about to be
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=900)
    assert job.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["ok"] and "stopped on request" in result["stopped"]
    # The answer names each micro-batch that committed, with its rows, as its progress lines did.
    timeline = table.timeline()
    commits = {i.requested: timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])}
    rows = {instant: c.rows for instant, c in commits.items() if isinstance(c, DeltaCommit)}
    assert result["commits"] and {c["instant"] for c in result["commits"]} <= set(rows)
    for said in result["commits"]:
        assert said["rows"] == rows[said["instant"]]
        assert f"micro-batch {said['batch_id']} committed instant {said['instant']}: " in err
    assert not alive(below), "a process of the job survived"
    assert not table.timeline().pending(), "a graceful stop finishes the batch it is in"
    for path in files:
        land(path, landing)
    finished = run_stitch(*args, "--available-now", timeout=1800)  # a second start resumes where it stopped
    assert finished.returncode == 0, finished.stderr
    assert sum(len(c.consumed()) for c in completed(table, "shipments")) == 6
    ingest_the_rest(config, "orders", "payments")
    assert compare(stitchlake.read(str(config)), many_files / "truth.parquet") == []


def test_a_stream_takes_again_the_files_a_rollback_of_its_last_batch_put_back(many_files: Path, tmp_path: Path) -> None:
    """`stitch rollback --stream S` of a bad micro-batch makes its files pending again; the next `stitch stream`
    (the same checkpoint) must ingest them, not skip them because its last batch named them."""
    from scripts.demo_data import compare

    config, table = demo_table(tmp_path, many_files / "landing")
    args = ("stream", "-c", str(config), "--stream", "shipments", "--available-now", "--json")
    first = run_stitch(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert sum(len(c.consumed()) for c in completed(table, "shipments")) == 6
    rolled = run_stitch("rollback", "-c", str(config), "--stream", "shipments", "--json")
    assert rolled.returncode == 0, rolled.stderr
    left = sum(len(c.consumed()) for c in completed(table, "shipments"))
    assert left < 6, "the rollback put no file back"
    again = run_stitch(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sum(len(c.consumed()) for c in completed(table, "shipments")) == 6, "the put-back files were skipped"
    ingest_the_rest(config, "orders", "payments")
    assert compare(stitchlake.read(str(config)), many_files / "truth.parquet") == []
