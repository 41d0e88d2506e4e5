"""The spark-submit launcher without a JVM: argv, shipping the package, settings files, exit-code mapping.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_launcher.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from stitchlake.errors import StitchError
from stitchlake.jobs import spark_submit
from stitchlake.jobs.job_process import JOB_MARK, end_leftovers
from stitchlake.jobs.spark_submit import (
    build_argv,
    package_zip,
)
from tests.support.jobs import job_files, spark_table_config
from tests.support.processes import alive


def test_cluster_master_ships_an_importable_package_zip(tmp_path: Path) -> None:
    archive = package_zip(tmp_path)
    argv = build_argv(spark_table_config(tmp_path, "yarn"), "compact", [], job_files(tmp_path), archive)
    assert argv[argv.index("--py-files") + 1] == archive
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"stitchlake/__init__.py", "stitchlake/merge/rules.py", "stitchlake/jobs/run.py"} <= names
    # An executor imports the package from the zip alone (first on its path, as --py-files puts it).
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import stitchlake.merge.rules as r; print(r.__file__)"
    done = subprocess.run([sys.executable, "-c", probe, archive], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(archive)


def test_a_worker_that_left_the_jobs_process_group_is_ended_too(tmp_path: Path) -> None:
    """PySpark's worker daemon moves itself and its workers to a process group of their own, so the job's group
    does not reach them; the job's mark in their environment does. Here a child that left the group and ignores
    SIGTERM (a worker busy writing) is still ended, and waited for, before the launcher returns."""
    pid_file = tmp_path / "child.pid"
    mark = uuid.uuid4().hex
    # The child names itself only once it has left the group and ignores SIGTERM, and the job exits only once it
    # has: the test never guesses how long a busy machine takes to start an interpreter.
    inner = (
        "import os, signal, sys, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1]); "
        "time.sleep(60)"
    )
    script = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {inner!r}, {str(pid_file)!r}])\n"
        f"while not os.path.exists({str(pid_file)!r}):\n"
        "    time.sleep(0.01)\n"
    )
    env = {**os.environ, JOB_MARK: mark}
    job = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, env=env, stdin=subprocess.DEVNULL)
    child = None
    try:
        assert job.wait(timeout=600) == 0
        child = int(pid_file.read_text())
        assert alive([child]) and os.getpgid(child) != job.pid, "the leftover runs outside the job's group"
        end_leftovers(job.pid)  # the group alone misses it
        assert alive([child])
        end_leftovers(job.pid, mark)
        assert not alive([child]), "the marked leftover ended (SIGKILL after the grace: it ignores SIGTERM)"
    finally:  # (only what still runs: a pid that ended may be another process's by now)
        for pid in ([job.pid] if job.poll() is None else []) + alive([child] if child else []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


#: A spark-submit whose job reports that it was stopped by SIGTERM (as `spark/submit.py` reports any failure).
STOPPED_JOB = """import json, sys
result = sys.argv[sys.argv.index("--result") + 1]
answer = {"ok": False, "exit_code": 143, "error_type": "Terminated", "error": "terminated by SIGTERM"}
json.dump(answer, open(result, "w"))
sys.exit(143)
"""


@pytest.mark.spark
def test_a_job_stopped_by_sigterm_ends_the_launch_as_a_stop_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stitch` exits 143 when the job it launched was terminated, as when it was itself (README's exit codes)."""
    from stitchlake.api import open as open_table
    from stitchlake.errors import Terminated
    from stitchlake.jobs.requests import IngestRequest

    table = open_table(spark_table_config(tmp_path, "local[1]"))
    fake = tmp_path / "spark-submit"
    fake.write_text(f"#!{sys.executable}\n{STOPPED_JOB}")
    fake.chmod(0o755)
    monkeypatch.setattr(spark_submit, "spark_submit", lambda: str(fake))
    with pytest.raises(Terminated, match="the ingest job was stopped: terminated by SIGTERM"):
        spark_submit.run_job(table, IngestRequest(stream="orders"), ["--table", table.path])


@pytest.mark.spark
def test_a_spark_submit_that_cannot_start_is_a_clear_error_and_leaves_no_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The properties file may hold secrets: it goes however the launch ends, also before the job ever started."""
    import tempfile

    from stitchlake.api import open as open_table
    from stitchlake.jobs.requests import IngestRequest

    table = open_table(spark_table_config(tmp_path, "local[1]", {"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}))
    private = tmp_path / "private"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    missing = tmp_path / "no-spark" / "spark-submit"
    monkeypatch.setattr(spark_submit, "spark_submit", lambda: str(missing))
    with pytest.raises(StitchError, match="could not start spark-submit") as raised:
        spark_submit.run_job(table, IngestRequest(stream="orders"), ["--table", table.path])
    assert str(missing) in str(raised.value) and "SPARK_HOME" in str(raised.value)
    assert list(private.iterdir()) == [], "a private file of the launch was left behind"
