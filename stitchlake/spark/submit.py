"""The spark-submit entry of every job: a request (JSON) in, a result (JSON) out: the job's typed result as
plain data, which the launcher reads back into the same type (`stitchlake.jobs.results`).

It opens the table, builds the session, and runs the request with `stitchlake.jobs.run.run` on a `SparkEngine`:
the very function the in-process engine runs. Errors raised inside Spark tasks arrive wrapped in Java and Python
exceptions; the original stitchlake error is dug out, so a bad row on an executor still exits 5 with its own
message. The result names the error's class; the launcher raises that class again, so exit codes come from
the error classes alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
import traceback
from typing import Any

from stitchlake.concurrency.processes import die_with_parent
from stitchlake.jobs.job_process import PROGRESS_PREFIX


def progress(message: str) -> None:
    """Tell the launcher what we are doing (it relays these lines to the terminal)."""
    print(f"{PROGRESS_PREFIX}{message}", file=sys.stderr, flush=True)


def quiet_lock_client_logs() -> None:
    """kazoo logs every failed connection with its host list (maybe a secret); STITCH_DEBUG keeps it (as in the
    CLI)."""
    from stitchlake.errors import debugging

    if not debugging():
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="stitchlake spark job")
    parser.add_argument("--request", required=True, help="the job request (JSON file)")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--config", help="the table config YAML")
    parser.add_argument("--table", help="a table folder or URI (when there is no config file)")
    args = parser.parse_args(argv)
    from stitchlake.errors import Terminated

    die_with_parent()  # the JVM that runs us went away (its `stitch` command was killed): so do we

    def terminate(signum: int, _frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, terminate)  # unwind: the job's own instants abort on the way out
    spark = None
    secrets: frozenset[str] = frozenset()
    job = "job"
    quiet_lock_client_logs()
    try:
        from pyspark.sql import SparkSession

        from stitchlake.jobs.requests import SparkReadRequest, StreamRequest
        from stitchlake.jobs.results import plain
        from stitchlake.jobs.run import run
        from stitchlake.jobs.specs import from_json
        from stitchlake.spark.engine import SparkEngine
        from stitchlake.spark.session import register
        from stitchlake.table.handle import TableHandle as Table
        from stitchlake.table.handle import open_table

        with open(args.request, encoding="utf-8") as handle:
            request = from_json(json.load(handle))
        job = request.job
        table: Table = open_table(args.config or args.table)
        secrets = table.config.secret_values
        # Only `read` reads through `format("stitchlake")`, at once: the planner starts with its first read.
        spark = register(SparkSession.builder.appName(f"stitch-{job}").getOrCreate(), start_planner=False)
        spark.sparkContext.setLogLevel("WARN")
        started = time.monotonic()  # the job's own part: the JVM and the session are up
        if isinstance(request, StreamRequest):
            from stitchlake.spark.streaming import run_stream  # PySpark 4.2+: the rest runs on 4.1

            result: Any = run_stream(spark, table, request, progress)
        elif isinstance(request, SparkReadRequest):
            from stitchlake.spark.read_job import run_read

            result = run_read(spark, table, request, progress)
        else:
            result = run(table, request, SparkEngine(spark), progress)
        outcome: dict[str, Any] = {"ok": True, "result": plain(result), "job_seconds": time.monotonic() - started}
        code = 0
    except BaseException as error:  # report every failure as a result the launcher can raise again
        from stitchlake.config import redact
        from stitchlake.spark.errors import details, unwrap

        name, code, message = unwrap(error)
        outcome = {"ok": False, "exit_code": code, "error_type": name, "error": redact(message, secrets), "job": job}
        outcome["details"] = {k: redact(v, secrets) for k, v in details(error).items()}
        outcome["notes"] = [redact(str(note), secrets) for note in getattr(error, "__notes__", ())]
        print(redact(traceback.format_exc(), secrets), file=sys.stderr, flush=True)  # the log may be shared
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(outcome, handle, default=str)
    sys.exit(code)


if __name__ == "__main__":
    main()
