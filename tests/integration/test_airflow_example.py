"""examples/airflow_dag.py as shipped, run by a real Airflow (`airflow dags test`) against a real local table.

Airflow 3 lives in its own virtual environment (tests/support/airflow_env.py, installed on first use); the DAG file is
copied unchanged into the test's DAG folder and pointed at the test's table and the project's `stitch` through the
variables it documents (STITCH_CONFIG, STITCH_BIN). Task states are read back from Airflow's metadata database.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import stitchlake
from stitchlake.services.writes.ingest import claim
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.airflow_env import Airflow
from tests.support.processes import ROOT
from tests.support.spark_fixtures import demo_table, write_config

DAG_FILE = ROOT / "examples" / "airflow_dag.py"
DAG_ID = "stitch_orders_wide"
TASKS = {"ingest_orders", "ingest_payments", "ingest_shipments", "compact", "report"}


def run_dag(
    airflow: Airflow, logical_date: str, env: dict[str, str], expected: dict[str, str], dag_id: str = DAG_ID
) -> str:
    """`airflow dags test` for one logical date; every task of that run must end in its `expected` state (read
    back from Airflow's database), and no other task may exist. Returns what the run printed."""
    done = airflow.run("dags", "test", dag_id, logical_date, env=env, check=False)
    out = done.stdout + done.stderr
    runs = [r for r in airflow.json("dags", "list-runs", dag_id) if r["logical_date"].startswith(logical_date)]
    assert len(runs) == 1, f"{runs}\n{out[-8000:]}"
    rows = airflow.json("tasks", "states-for-dag-run", dag_id, runs[0]["run_id"])
    states = {row["task_id"]: row["state"] for row in rows}
    assert states == expected, f"task states {states}\n{out[-8000:]}"
    assert done.returncode == 0 and runs[0]["state"] == "success", out[-8000:]
    return out


def latest_streams(table: Any) -> dict[str, int]:
    timeline = table.timeline()
    rows: dict[str, int] = {}
    for instant in timeline.completed([Action.DELTACOMMIT]):
        commit = timeline.commit(instant)
        assert isinstance(commit, DeltaCommit) and commit.stream is not None
        rows[commit.stream] = rows.get(commit.stream, 0) + commit.rows
    return rows


def test_the_example_dag_runs_in_airflow_and_its_tasks_follow_the_exit_codes(demo_data: Path, tmp_path: Path) -> None:
    from scripts.demo_data import compare

    config, table = demo_table(tmp_path / "table", demo_data / "landing")
    stitch_bin = Path(sys.executable).parent / "stitch"
    assert stitch_bin.is_file(), f"{stitch_bin}: the project's `stitch` script (make setup installs it)"
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)  # the file as shipped
    airflow = Airflow.create(tmp_path / "airflow", dags)
    env = {"STITCH_CONFIG": str(config), "STITCH_BIN": str(stitch_bin)}

    # A local table and no `stitch_s3` connection: every task succeeds, the table holds the whole dataset.
    out = run_dag(airflow, "2026-11-20", env, dict.fromkeys(TASKS, "success"))
    expected = {"orders": 3990, "payments": 3548, "shipments": 3343}
    assert latest_streams(table) == expected
    for stream, rows in expected.items():  # what the report task printed from the ingests' XComs
        assert f"{stream} {rows} rows 0 bad rows ingested 3 file(s), {rows} rows into stream {stream}" in out
    timeline = table.timeline()
    assert len(timeline.completed([Action.COMPACTION])) == 1
    assert compare(table.read(mode="read_optimized"), demo_data / "truth.parquet") == []

    # A live writer holds `orders` (exit 4: that task is skipped, the others run), and a `stitch_s3` connection
    # exists: its credentials reach stitch as AWS_* variables (this config refers to one; without it, exit 2).
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["spark"]["conf"]["spark.stitch.test.secret"] = "${AWS_SECRET_ACCESS_KEY}"
    with_secret = config.with_name("with-secret.yaml")
    with_secret.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    connection = '{"conn_type": "aws", "login": "key-id", "password": "s3cr3t-value", "extra": {"region_name": "eu"}}'
    env = {**env, "STITCH_CONFIG": str(with_secret), "AIRFLOW_CONN_STITCH_S3": connection}
    held = claim(table, "orders")
    try:
        out = run_dag(airflow, "2026-11-21", env, {**dict.fromkeys(TASKS, "success"), "ingest_orders": "skipped"})
    finally:
        held.abort()
    assert "payments 0 rows 0 bad rows nothing to ingest for stream payments" in out
    assert not [line for line in out.splitlines() if line.startswith("orders ")]  # the skipped task pushed nothing
    assert "s3cr3t-value" not in out
    assert latest_streams(table) == expected


def test_the_example_dag_takes_its_streams_and_name_from_the_table_config(
    demo_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file as shipped, on another table: no `payments` stream (it used to fail there, exit 2) and another
    name. Its tasks are the config's streams, its id `stitch_<table name>`, and its config refers to a secret that
    only the tasks get (the DAG processor parses the file without it)."""
    config = write_config(tmp_path / "table", demo_data / "landing")
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    del document["streams"]["payments"]
    document["table"]["name"] = "meters"
    document["spark"]["conf"]["spark.stitch.test.secret"] = "${AWS_SECRET_ACCESS_KEY}"
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    airflow = Airflow.create(tmp_path / "airflow", dags)
    connection = '{"conn_type": "aws", "login": "key-id", "password": "s3cr3t-value"}'
    env = {
        "STITCH_CONFIG": str(config),
        "STITCH_BIN": str(Path(sys.executable).parent / "stitch"),
        "AIRFLOW_CONN_STITCH_S3": connection,
    }
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "here-only")  # to open the table in this process, then gone
    table = stitchlake.open(str(config))
    table.init()
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")

    tasks = {"ingest_orders", "ingest_shipments", "compact", "report"}
    out = run_dag(airflow, "2026-11-20", env, dict.fromkeys(tasks, "success"), dag_id="stitch_meters")
    expected = {"orders": 3990, "shipments": 3343}
    assert latest_streams(table) == expected
    for stream, rows in expected.items():
        assert f"{stream} {rows} rows 0 bad rows ingested 3 file(s), {rows} rows into stream {stream}" in out
    assert "ingest_payments" not in out and not [line for line in out.splitlines() if line.startswith("payments ")]
    assert len(table.timeline().completed([Action.COMPACTION])) == 1
