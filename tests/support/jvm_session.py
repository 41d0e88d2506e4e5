"""A Spark session with the JVM reader's jar, in a process of its own, driven by the test over a pipe.

A JVM's classpath is fixed when it starts, and the test process's own session (the `spark` fixture) has no jar: so
the JVM reader's tests talk to this process. Each request is one JSON line `{"code": "..."}`, Python run with
`spark` in scope that sets `result`; each answer is one JSON line `{"ok": true, "result": ...}` or
`{"ok": false, "error": "..."}` (cells through `spark_native_reader.encode`).

Run as a module from the repository root: `python -m tests.support.jvm_session` (the jar: `STITCHLAKE_SPARK_JAR`,
else the environment's).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: More jars for the session (comma-separated), after the reader's, and more settings (a JSON object).
EXTRA_JARS_ENV = "STITCH_TEST_EXTRA_JARS"
EXTRA_CONF_ENV = "STITCH_TEST_EXTRA_CONF"


def rows(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as JSON-safe dicts."""
    from tests.support.spark_native_reader import encode

    return [{key: encode(value) for key, value in row.asDict().items()} for row in frame.collect()]


def plan_text(frame: Any) -> str:
    """The physical plan as `explain()` prints it."""
    return str(frame._jdf.queryExecution().executedPlan().toString())


def end_through_stdin(process: subprocess.Popen[str], timeout: float) -> None:
    """End a process that a test drives over its stdin (this session, the merge harness) the way it ends by itself:
    stdin closed, its loop ends. Killed only when it has not within `timeout` s, so no test leaves a JVM behind."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _main() -> None:
    sys.path.insert(0, str(ROOT))
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # Spark and the code under test print; the answers have a stream of their own
    from pyspark.sql import SparkSession

    from stitchlake.jobs.spark_conf import DEFAULT_CONF, reader_conf
    from stitchlake.spark.session import register

    builder = SparkSession.builder.master("local[1]").appName("stitchlake-jvm-reader-tests")
    conf = {
        **DEFAULT_CONF,
        "spark.driver.memory": "768m",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.default.parallelism": "1",
        "spark.pyspark.python": sys.executable,
        **reader_conf(enabled=True),
    }
    extra = os.environ.get(EXTRA_JARS_ENV)
    if extra:  # e.g. Hadoop's S3 connector
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), extra]))
    conf.update(json.loads(os.environ.get(EXTRA_CONF_ENV) or "{}"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = register(builder.getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    scope: dict[str, Any] = {"spark": spark, "rows": rows, "plan_text": plan_text}
    try:
        for line in sys.stdin:
            request = json.loads(line)
            scope["result"] = None
            try:
                exec(request["code"], scope)  # test code, from the test process
                answer = {"ok": True, "result": scope["result"]}
            except Exception as exc:
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            answers.write(json.dumps(answer) + "\n")
    finally:
        spark.stop()


class JvmSession:
    """The test side: `run(code)` is the `result` the code set in the JVM reader's session."""

    def __init__(self, stderr: Path, jars: Sequence[Path] = (), conf: Mapping[str, str] | None = None) -> None:
        self.stderr_path = stderr
        self._stderr = open(stderr, "w")  # noqa: SIM115 (closed in `close`)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.jvm_session"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
            env={
                **os.environ,
                "TZ": "UTC",
                "PYSPARK_PYTHON": sys.executable,
                EXTRA_JARS_ENV: ",".join(map(str, jars)),
                EXTRA_CONF_ENV: json.dumps(dict(conf or {})),
            },
        )

    def run(self, code: str) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"code": code}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the JVM reader's session ended:\n{self.stderr()[-6000:]}"
        answer = json.loads(line)
        if not answer["ok"]:
            raise JvmError(answer["error"], answer["trace"])
        return answer["result"]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        end_through_stdin(self.process, timeout=120)
        self._stderr.close()


class JvmError(Exception):
    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self.trace = trace


@contextlib.contextmanager
def jvm_session(stderr: Path, jars: Sequence[Path] = (), conf: Mapping[str, str] | None = None) -> Iterator[JvmSession]:
    session = JvmSession(stderr, jars, conf)
    try:
        yield session
    finally:
        session.close()


if __name__ == "__main__":
    _main()
