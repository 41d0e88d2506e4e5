"""Compactions that never resume (issue 24): plain `stitch compact` runs pending plans before it plans anew.

Airflow's `execution_timeout` stops a task with SIGTERM; a compaction stopped that way leaves its plan pending,
and so does `stitch compact --schedule`. A plan nobody runs keeps its file groups out of every later plan, so the
scheduled command must run it first, and `stitch status` must say when one waits too long.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from stitchlake.api import Table
from stitchlake.concurrency import heartbeat
from stitchlake.services.inspect.status import status
from stitchlake.services.rewrites import compaction
from stitchlake.timeline.instant import Action
from tests.support.processes import ROOT, alive, descendants, ended, hold_back, run_stitch, stitch, wait_until
from tests.support.spark_fixtures import demo_table, generated_data


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough rows that a Spark compaction spends a moment in its tasks, in files that can be ingested in turns."""
    return generated_data(tmp_path_factory, "resume-data", orders=60_000, seed=7, files_per_stream=4) / "landing"


def ingest_each_stream(config: Path, max_files: int | None = None) -> None:
    """`stitch ingest` of each stream once, `max_files` files of it if given: what the compactions here compact."""
    for stream in ("orders", "payments", "shipments"):
        more = ["--max-files", str(max_files)] if max_files else []
        done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local", *more)
        assert done.returncode == 0, done.stderr


def compact_json(config: Path, *args: str) -> dict[str, Any]:
    done = run_stitch("compact", "-c", str(config), "--json", *args, timeout=900)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def running_plan(table: Table) -> tuple[str, int] | None:
    """A pending compaction whose run has begun (the job's driver took it over: inflight, with a heartbeat): the
    plan and the pid of the driver, which its beat names."""
    for instant in table.timeline().pending([Action.COMPACTION]):
        beat = heartbeat.read_beat(table.storage, instant.requested)
        if instant.state.label == "inflight" and beat:
            return instant.requested, int(beat["pid"])
    return None


@pytest.mark.spark
def test_a_compaction_stopped_by_sigterm_on_spark_is_run_by_the_next_plain_compact(
    landing: Path, tmp_path: Path
) -> None:
    # The driver may wait for the lock the test holds (below) as long as the test needs: its wait is not the point.
    lock = {"provider": "filesystem", "wait_s": 3600, "expire_s": 30}
    config, table = demo_table(tmp_path, landing, through_cli=True, concurrency={"lock": lock})
    ingest_each_stream(config)
    before = table.read().sort_by("order_id")
    job = subprocess.Popen(
        stitch("compact", "-c", str(config), "--engine", "spark", "--json"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with ended(job):
        taken = wait_until(lambda: running_plan(table), job)
        assert taken is not None, f"the compaction ended (exit {job.poll()}) before its job took the plan over"
        plan, driver = taken
        # Held back: the job runs its Spark tasks but cannot publish, so the signal lands inside the compaction.
        gate = hold_back(table, plan, lambda: [driver], "compaction")
        try:
            below = descendants(job.pid)
            assert driver in below, "the plan's runner is the CLI's Spark job"
            job.send_signal(signal.SIGTERM)
            wait_until(lambda: not alive(below), job)  # the job is gone (the CLI ends it before it returns)
        finally:
            gate.release()
        out, err = job.communicate(timeout=600)
    assert job.returncode == 143, err
    assert json.loads(out)["exit_code"] == 143, err
    assert not alive(below), "a process of the compaction job outlived the CLI"
    pending = [i.requested for i in table.timeline().pending([Action.COMPACTION])]
    assert pending == [plan], "the interrupted plan stays pending"
    beat = heartbeat.read_beat(table.storage, plan)
    # Runnable at once: a beat left by the job's driver names a process that has ended (a zombie counts).
    assert compaction.runnable_plans(table) == table.timeline().pending([Action.COMPACTION]), beat

    # What cron or the next Airflow run does: plain `stitch compact`, which used to say "nothing to compact".
    result = compact_json(config, "--engine", "spark")
    assert result["result"]["instant"] == plan, result
    # Nothing new qualified after the resumed plan, so the report is that plan's own run.
    assert result["scheduled"] is None and result["resumed"] == [], result
    assert result["message"].startswith(f"pending compaction {plan} completed: "), result["message"]
    assert not table.timeline().pending(), "no plan is left behind"
    completed = table.timeline().get(plan)
    assert completed is not None and completed.is_completed
    assert table.read().sort_by("order_id").equals(before)
    assert table.read(mode="read_optimized").sort_by("order_id").equals(before), "every slice compacted"


def test_plain_compact_runs_a_scheduled_plan_first_then_plans_anew(landing: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, landing, through_cli=True)
    ingest_each_stream(config, 2)
    scheduled = compact_json(config, "--schedule")["scheduled"]
    assert scheduled is not None
    for stream in ("orders", "payments", "shipments"):  # logs the scheduled plan does not cover
        assert run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local").returncode == 0
    expected = table.read().sort_by("order_id")

    result = compact_json(config)
    assert [r["result"]["instant"] for r in result["resumed"]] == [scheduled]
    assert result["result"]["instant"] > scheduled, "a new plan took the logs completed after the first one"
    assert f"ran pending compaction plan(s) {scheduled} first" in result["message"]
    timeline = table.timeline()
    assert not timeline.pending()
    assert [i.requested for i in timeline.completed([Action.COMPACTION])] == [scheduled, result["result"]["instant"]]
    assert table.read(mode="read_optimized").sort_by("order_id").equals(expected)

    # Nothing pending and nothing new: the plain command has nothing to do.
    assert compact_json(config)["message"] == "nothing to compact"


def test_plain_compact_leaves_a_plan_a_live_process_runs_alone(landing: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, landing, through_cli=True)
    ingest_each_stream(config, 1)
    scheduled = compact_json(config, "--schedule")["scheduled"]
    # Another process has taken the plan over and is running it: its heartbeat is fresh.
    beat = heartbeat.Heartbeat(table.storage, scheduled, interval_s=1, expire_s=60)
    beat.start()
    try:
        assert compaction.runnable_plans(table) == []
        result = compact_json(config)
        assert result["resumed"] == [] and result["result"] is None, "its file groups are the plan's: nothing new"
        assert [i.requested for i in table.timeline().pending([Action.COMPACTION])] == [scheduled]
    finally:
        beat.stop(delete=True)
    assert compact_json(config)["result"]["instant"] == scheduled, "once nobody runs it, the next run does"


def test_table_compact_and_inline_compaction_resume_pending_plans(landing: Path, tmp_path: Path) -> None:
    config, table = demo_table(
        tmp_path, landing, through_cli=True, compaction={"inline": True, "after_delta_commits": 1000}
    )
    ingest_each_stream(config, 1)
    first = compaction.schedule(table)
    assert first is not None
    # An ingest with compaction.inline runs the plan nobody runs, although too few deltacommits piled up for a
    # new one.
    done = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["compaction"]["instant"] == first
    assert not table.timeline().pending()

    second = compaction.schedule(table)
    assert second is not None
    # New logs for a new plan, written without an ingest (`Table.write` never compacts inline).
    orders = pq.read_table(landing / "orders" / "part-0001.parquet").slice(0, 500)
    table.write("orders", orders.select(["order_id", "order_date", "customer_id", "amount", "currency", "order_ts"]))
    runs = table.compact()
    assert [r.result.instant for r in runs.resumed if r.result is not None] == [second]
    assert runs.done is not None and runs.done.instant > str(second)
    assert not table.timeline().pending()


def test_status_warns_about_a_plan_that_waited_too_long(landing: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, landing, through_cli=True)
    ingest_each_stream(config, 1)
    planned = compaction.schedule(table)
    assert planned is not None
    now = time.time()
    assert status(table, now=now).warnings == [], "a fresh plan is no news"
    later = status(table, now=now + 61 * 60)
    [warning] = later.warnings
    assert planned in warning and "stitch compact" in warning
    [entry] = later.pending_compactions
    assert entry.instant == planned and entry.alive is False and entry.pending_s > 3600
    # The human report shows it (here the plan is not late, so no warning line, but its age and state).
    shown = run_stitch("status", "-c", str(config))
    assert shown.returncode == 0 and "no (not running)" in shown.stdout
    table.compact()
    assert status(table, now=now + 61 * 60).warnings == []


def test_status_warns_about_a_plan_a_live_process_has_run_too_long(landing: Path, tmp_path: Path) -> None:
    """A run that still beats but has held its plan past `stale_plan_minutes` may be hung: named, with its process,
    since nothing else would ever flag it (plain `stitch compact` leaves a live run's plan alone)."""
    beats = {"interval_s": 1, "expire_s": 3 * 3600}  # a beat written now is still fresh an hour later
    config, table = demo_table(tmp_path, landing, through_cli=True, concurrency={"heartbeat": beats})
    ingest_each_stream(config, 1)
    planned = compaction.schedule(table)
    assert planned is not None
    now = time.time()
    with heartbeat.Heartbeat(table.storage, planned, interval_s=1, expire_s=3 * 3600, owner="a hung compaction"):
        assert status(table, now=now).warnings == [], "a fresh run is no news"
        [warning] = status(table, now=now + 61 * 60).warnings
    assert planned in warning and f"process {os.getpid()} on {socket.gethostname()}" in warning, warning
    assert "still beats for it" in warning and "if it is hung, stop it" in warning, warning
    assert "pending for 61 min" in warning, warning  # minutes up to 100 (it said "1.0 h", and "0.0 h" for 1 min)
    with heartbeat.Heartbeat(table.storage, planned, interval_s=1, expire_s=3 * 3600, owner="a hung compaction"):
        [later] = status(table, now=now + 150 * 60).warnings
    assert "pending for 2.5 h" in later, later
