"""An Airflow DAG for one stitchlake table: ingest each of its streams every 10 minutes, then compact.

The streams are the table config's (`STITCH_CONFIG`), so the file runs unchanged on any table: one `ingest_<stream>`
task per stream the config lists, and the DAG is `stitch_<table name>`.

The task states follow stitch's exit codes:

- 0: success.
- 3 (a write conflict, nothing published): retried inside the task by `--retries` with a growing pause.
- 4 (busy: another live run has the stream, or a service holds the table): the task is **skipped**, and the next
  DAG run picks the work up.
- 1, 2, 5 (failure, bad config, rejected input): the task fails at once and alerts; Airflow retries are off
  because they would only meet the same wall again.

With `--json` the summary is the only line on stdout, so the BashOperator pushes it to XCom. SIGTERM, what Airflow
sends to stop or time out a task, makes `stitch` abort its instant and exit 143; the next run proceeds at once.

Deploying it (docs/operations.md, "Airflow"): set `STITCH_CONFIG` (the table's YAML) and `STITCH_BIN` (the `stitch`
executable) in the environment of the Airflow processes that parse DAGs and run tasks, or keep the defaults below.
The DAG processor reads the config's table name and stream names when it parses this file (`table_streams`: plain
YAML, no `stitch` process and none of the `${VAR}`s the config refers to, which the tasks get when they run); each
task runs `stitch`, which checks the whole config.
A table on S3 takes its credentials from the worker's environment (AWS_* variables, an instance profile) or from
the Airflow connection `stitch_s3` when there is one (login: access key id, password: secret access key, extra
`endpoint_url` and `region_name`): it is read when the task runs and passed as AWS_* variables, never rendered into
the command. Without that connection nothing is passed, so a local table needs no connection at all.
Works with Airflow 2.6+ and 3 (tested with 3.3.2: tests/integration/test_airflow_example.py runs `airflow dags test`).
"""

from __future__ import annotations

import json
import os
import shlex
from datetime import timedelta
from typing import Any

import pendulum
import yaml
from airflow import DAG

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.python import PythonOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator  # type: ignore[no-redef]
    from airflow.operators.python import PythonOperator  # type: ignore[no-redef]

CONFIG = os.environ.get("STITCH_CONFIG", "/srv/stitch/configs/orders_wide.yaml")
STITCH = os.environ.get("STITCH_BIN", "/srv/stitch/.venv/bin/stitch")


def table_streams(config: str) -> tuple[str, tuple[str, ...]]:
    """The table's name and its streams, in the order the config lists them (`stitch validate -c CONFIG --json`
    says the same, `table` and `streams`). Read from the YAML itself: the file is parsed every few seconds, and
    the `${VAR}`s a config refers to (secrets) need only be set where the tasks run. A config without them fails
    the DAG's import, naming the file."""
    with open(config, encoding="utf-8") as stream:
        document = yaml.safe_load(stream)
    table = document.get("table") if isinstance(document, dict) else None
    streams = document.get("streams") if isinstance(document, dict) else None
    if not isinstance(table, dict) or not table.get("name") or not isinstance(streams, dict) or not streams:
        raise ValueError(f"{config}: not a stitchlake table config (no table.name or no streams)")
    return str(table["name"]), tuple(str(name) for name in streams)


TABLE, STREAMS = table_streams(CONFIG)
#: The optional connection that holds S3 credentials (see the module docstring).
S3_CONNECTION = "stitch_s3"

#: task id -> the stitch command it runs (after `stitch`, before `-c CONFIG --json`).
TASKS = {
    **{f"ingest_{stream}": f"ingest --stream {stream} --retries 3" for stream in STREAMS},
    "compact": "compact --retries 3",
}
#: Exit codes that mark the task skipped rather than failed.
SKIP_ON = 4


def s3_environment(connection: Any) -> dict[str, str]:
    """The AWS_* variables stitch's S3 client reads, from an Airflow connection (only the fields it sets)."""
    extra = connection.extra_dejson or {}
    found = {
        "AWS_ACCESS_KEY_ID": connection.login,
        "AWS_SECRET_ACCESS_KEY": connection.password,
        "AWS_ENDPOINT_URL": extra.get("endpoint_url"),
        "AWS_REGION": extra.get("region_name"),
    }
    return {name: str(value) for name, value in found.items() if value}


class StitchOperator(BashOperator):  # type: ignore[misc]
    """A BashOperator that adds the S3 connection's credentials to the environment when the connection exists.

    They are looked up when the task runs, not templated: a template naming a missing connection fails the task,
    and a rendered secret would show in the UI.
    """

    def get_env(self, context: Any) -> dict[str, str]:
        env: dict[str, str] = super().get_env(context)
        connection = context["conn"].get(S3_CONNECTION)  # None when it is not configured
        if connection is not None:
            env.update(s3_environment(connection))
        return env


def stitch_task(task_id: str, **kwargs: Any) -> BashOperator:
    return StitchOperator(
        task_id=task_id,
        bash_command=f"{shlex.quote(STITCH)} {TASKS[task_id]} -c {shlex.quote(CONFIG)} --json",
        skip_on_exit_code=SKIP_ON,
        retries=0,
        do_xcom_push=True,
        execution_timeout=timedelta(minutes=30),  # on timeout Airflow sends SIGTERM: stitch aborts cleanly
        # The command runs with the worker's environment: PATH (java 17+ for Spark jobs) or JAVA_HOME, and the
        # ${VAR}s the YAML refers to. Secrets go through the environment, never into bash_command.
        **kwargs,
    )


def report(ti: Any) -> None:
    for stream in STREAMS:
        summary = ti.xcom_pull(task_ids=f"ingest_{stream}")
        if summary:  # None when the task was skipped (busy)
            result = json.loads(summary)
            print(stream, result.get("rows", 0), "rows", result.get("bad_rows", 0), "bad rows", result["message"])


with DAG(
    dag_id=f"stitch_{TABLE}",
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
