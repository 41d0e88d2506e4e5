"""examples/airflow_dag.py: its commands work as written and its tasks follow the exit-code contract.

The commands are run for real against a table (Airflow is not needed for that); the DAG itself is loaded with
Airflow when Airflow is installed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from spark_fixtures import ROOT, stitch, write_config

DAG_FILE = ROOT / "examples" / "airflow_dag.py"


def constants() -> dict[str, object]:
    """The DAG file's top-level constants (STREAMS, TASKS, SKIP_ON ...), run without importing Airflow."""
    tree = ast.parse(DAG_FILE.read_text(encoding="utf-8"))
    kept = [node for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.expr)]
    kept = [node for node in kept if all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)]
    body: list[ast.stmt] = list(kept)
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(DAG_FILE), "exec"), namespace)
    return namespace


def test_the_dags_commands_run_as_written_and_exit_as_the_dag_expects(demo_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, demo_data / "landing")
    assert subprocess.run(stitch("init", "-c", str(config)), cwd=ROOT, check=False).returncode == 0
    found = constants()
    tasks = found["TASKS"]
    assert isinstance(tasks, dict) and set(tasks) == {"ingest_orders", "ingest_payments", "ingest_shipments", "compact"}
    for task_id, command in tasks.items():
        done = subprocess.run(
            [*stitch(*command.split()), "-c", str(config), "--json", "--engine", "local"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{task_id}: {done.stderr}"
        summary = json.loads(done.stdout)  # the one line the BashOperator pushes to XCom
        assert summary["ok"] and "message" in summary, task_id
    assert found["SKIP_ON"] == 4


def test_the_dag_loads_in_airflow() -> None:
    pytest.importorskip("airflow", reason="Airflow is not installed here; the DAG's commands are tested above")
    from airflow.models import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE), include_examples=False)
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("stitch_orders_wide")
    assert dag is not None
    for task in dag.tasks:
        if task.task_id == "report":
            continue
        assert task.skip_on_exit_code == [4] or task.skip_on_exit_code == 4
        assert task.retries == 0
        assert "--json" in task.bash_command and "--retries 3" in task.bash_command


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
