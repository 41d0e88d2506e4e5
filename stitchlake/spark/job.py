"""The common shell of every `stitchlake/jobs/*.py` script run by spark-submit.

It opens the table, builds the session, runs the job body, and reports one JSON result file plus an exit
code that follows DESIGN §8. Errors raised inside Spark tasks arrive wrapped in Java and Python exceptions;
the original stitchlake error is dug out so a bad row on an executor still exits 5 with its own message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stitchlake.table import Table

PROGRESS_PREFIX = "STITCH-PROGRESS: "
_WRAPPED = re.compile(r"stitchlake\.errors\.(\w+): (.+?)(?:\n\s*(?:at |\tat |JVM stacktrace|\n)|$)", re.S)

Body = Callable[["SparkSession", "Table", argparse.Namespace], dict[str, Any]]


def progress(message: str) -> None:
    """Tell the launcher what we are doing (it relays these lines to the terminal)."""
    print(f"{PROGRESS_PREFIX}{message}", file=sys.stderr, flush=True)


def unwrap(error: BaseException) -> tuple[int, str]:
    """Exit code and message for any exception, recovering stitchlake errors raised on executors."""
    from stitchlake import errors

    if isinstance(error, errors.StitchError):
        return error.exit_code, str(error)
    if isinstance(error, OSError) and error.errno:
        return 1, errors.describe_os_error(error)
    text = str(error)
    match = _WRAPPED.search(text)
    if match:
        kind = getattr(errors, match.group(1), errors.StitchError)
        message = match.group(2).strip().splitlines()[0]
        return getattr(kind, "exit_code", 1), message
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return 1, f"{type(error).__name__}: {first}"


def quiet_lock_client_logs() -> None:
    """kazoo logs every failed connection with its host list (maybe a secret); STITCH_DEBUG=1 keeps it."""
    import logging
    import os

    if os.environ.get("STITCH_DEBUG") != "1":
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def main_job(name: str, body: Body, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"stitchlake job {name}")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--config", help="the table config YAML")
    parser.add_argument("--table", help="a table folder (when there is no config file)")
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    spark = None
    secrets: frozenset[str] = frozenset()
    quiet_lock_client_logs()
    try:
        from stitchlake.spark.session import register
        from stitchlake.table import open_table

        table = open_table(args.config or args.table)
        secrets = table.config.secret_values
        from pyspark.sql import SparkSession

        spark = register(SparkSession.builder.appName(f"stitch-{name}").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        outcome: dict[str, Any] = {"ok": True, **body(spark, table, args)}
        code = 0
    except BaseException as error:  # report every failure as a result the launcher can map
        from stitchlake.config import redact

        code, message = unwrap(error)
        outcome = {"ok": False, "exit_code": code, "error": redact(message, secrets), "job": name}
        print(redact(traceback.format_exc(), secrets), file=sys.stderr, flush=True)  # the log may be shared
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(outcome, handle, default=str)
    sys.exit(code)
