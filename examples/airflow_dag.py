"""An Airflow DAG for the orders_wide table: ingest three streams every 10 minutes, then compact.

The task states follow stitch's exit codes:

- 0: success.
- 3 (a write conflict, nothing published): retried inside the task by `--retries` with a growing pause.
- 4 (busy: another live run has the stream, or a service holds the table): the task is **skipped**, and the next
  DAG run picks the work up.
- 1, 2, 5 (failure, bad config, rejected input): the task fails at once and alerts; Airflow retries are off
  because they would only meet the same wall again.

With `--json` the summary is the only line on stdout, so the BashOperator pushes it to XCom. SIGTERM, what Airflow
sends to stop or time out a task, makes `stitch` abort its instant and exit 143; the next run proceeds at once.
Works with Airflow 2.6+ and 3.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pendulum
from airflow import DAG

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.python import PythonOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator  # type: ignore[no-redef]
    from airflow.operators.python import PythonOperator  # type: ignore[no-redef]

CONFIG = "/srv/stitch/configs/orders_wide.yaml"
STITCH = "/srv/stitch/.venv/bin/stitch"
STREAMS = ("orders", "payments", "shipments")

#: task id -> the stitch command it runs (after `stitch`, before `-c CONFIG --json`).
TASKS = {
    **{f"ingest_{stream}": f"ingest --stream {stream} --retries 3" for stream in STREAMS},
    "compact": "compact --retries 3",
}
#: Exit codes that mark the task skipped rather than failed.
SKIP_ON = 4


def stitch_task(task_id: str, **kwargs: Any) -> BashOperator:
    return BashOperator(
        task_id=task_id,
        bash_command=f"{STITCH} {TASKS[task_id]} -c {CONFIG} --json",
        skip_on_exit_code=SKIP_ON,
        retries=0,
        do_xcom_push=True,
        execution_timeout=timedelta(minutes=30),  # on timeout Airflow sends SIGTERM: stitch aborts cleanly
        # Secrets go through the environment (referenced as ${VAR} in the YAML), never into bash_command.
        env={"S3_SECRET": "{{ conn.s3_stitch.password }}", "JAVA_HOME": "/usr/lib/jvm/java-17-openjdk-amd64"},
        append_env=True,
        **kwargs,
    )


def report(ti: Any) -> None:
    for stream in STREAMS:
        summary = ti.xcom_pull(task_ids=f"ingest_{stream}")
        if summary:  # None when the task was skipped (busy)
            result = json.loads(summary)
            print(stream, result.get("rows", 0), "rows", result.get("bad_rows", 0), "bad rows", result["message"])


with DAG(
    dag_id="stitch_orders_wide",
    schedule=timedelta(minutes=10),
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"email_on_failure": True},
) as dag:
    ingests = [stitch_task(f"ingest_{stream}") for stream in STREAMS]
    summary = PythonOperator(task_id="report", python_callable=report, trigger_rule="all_done")
    compact = stitch_task("compact", trigger_rule="none_failed")
    ingests >> summary
    ingests >> compact
