"""The spark-submit launcher without a JVM: argv, shipping the package, settings files, exit-code mapping."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from stitchlake.concurrency.processes import exited, parent
from stitchlake.errors import BusyError, ConfigError, ConflictError, InputRejected, StitchError
from stitchlake.jobs import job_process, spark_conf, spark_submit
from stitchlake.jobs.job_process import JOB_MARK, end_leftovers
from stitchlake.jobs.spark_submit import (
    build_argv,
    error_for,
    spark_properties,
    write_properties,
)
from stitchlake.spark.errors import unwrap
from tests.support.jobs import job_files, spark_table_config
from tests.support.processes import alive, descendants, ended

#: prctl(2) option: orphans of our descendants become our children (and zombies until we reap them).
PR_SET_CHILD_SUBREAPER = 36


def test_local_master_runs_the_job_script_without_shipping_code(tmp_path: Path) -> None:
    argv = build_argv(spark_table_config(tmp_path, "local[2]"), "ingest", ["--table", "t"], job_files(tmp_path))
    assert argv[0].endswith("spark-submit") and argv[argv.index("--master") + 1] == "local[2]"
    assert "--py-files" not in argv
    script = argv.index("--request") - 1
    assert argv[script].endswith("stitchlake/spark/submit.py") and Path(argv[script]).is_file()
    assert argv[argv.index("--request") + 1] == str(tmp_path / "request.json")
    assert argv[-2:] == ["--table", "t"]


def test_settings_go_to_a_private_properties_file_not_the_command_line(tmp_path: Path) -> None:
    secret = "s3cr3t=with:odd\\chars"
    table_config = spark_table_config(tmp_path, "local[1]", {"spark.hadoop.fs.s3a.secret.key": secret})
    files = job_files(tmp_path)
    write_properties(files.properties, spark_properties(table_config))
    argv = build_argv(table_config, "ingest", ["--stream", "orders"], files)
    assert not any(secret in part for part in argv)
    assert stat.S_IMODE(os.stat(files.properties).st_mode) == 0o600
    text = files.properties.read_text(encoding="utf-8")
    assert "spark.hadoop.fs.s3a.secret.key=s3cr3t\\=with\\:odd\\\\chars" in text
    # What every job relies on wins over the user's settings.
    assert "spark.sql.session.timeZone=UTC" in text


def test_a_job_driver_maps_the_class_archive_unless_the_config_gives_its_own_java_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "jars" / "spark-classes.jsa"
    monkeypatch.setattr(spark_conf, "class_archive", lambda: archive)
    options = spark_properties(spark_table_config(tmp_path, "local[1]"))["spark.driver.extraJavaOptions"]
    assert options == "-XX:+UseParallelGC"  # not built: nothing to map
    archive.parent.mkdir()
    archive.write_bytes(b"an archive")
    spark_conf.class_archive_size(archive).write_text("10", encoding="utf-8")
    options = spark_properties(spark_table_config(tmp_path, "local[1]"))["spark.driver.extraJavaOptions"]
    assert options == f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"
    archive.write_bytes(b"an arc")  # cut short (a full disk): mapping it would kill the driver
    assert (
        spark_properties(spark_table_config(tmp_path, "local[1]"))["spark.driver.extraJavaOptions"]
        == "-XX:+UseParallelGC"
    )
    archive.write_bytes(b"an archive")
    own = spark_properties(spark_table_config(tmp_path, "local[1]", {"spark.driver.extraJavaOptions": "-Xss4m"}))
    assert own["spark.driver.extraJavaOptions"] == "-Xss4m"


@pytest.mark.parametrize(
    ("code", "kind"), [(2, ConfigError), (3, ConflictError), (4, BusyError), (5, InputRejected), (1, StitchError)]
)
def test_job_errors_come_back_as_the_same_class_and_exit_code(code: int, kind: type[StitchError]) -> None:
    name, exit_code, _message = unwrap(kind("why"))
    error = error_for(name, "why")
    assert type(error) is kind and error.exit_code == exit_code == code
    assert type(error_for("NotAnError", "why")) is StitchError  # an unknown name is a plain failure
    # One defined beside the code raising it comes back as itself too (a job's result named it; it was exit 1).
    from stitchlake.timeline.timeline import TimelineFileVanished

    assert type(vanished := error_for("TimelineFileVanished", "gone")) is TimelineFileVanished
    assert vanished.exit_code == 4


def test_errors_raised_on_executors_are_recovered_from_spark_wrappers() -> None:
    wrapped = RuntimeError(
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "/work/stitchlake/batch.py", line 99, in prepare\n'
        "stitchlake.errors.InputRejected: 2 bad rows (null key order_id: 2) in part-0001.parquet\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
    )
    assert unwrap(wrapped) == ("InputRejected", 5, "2 bad rows (null key order_id: 2) in part-0001.parquet")
    # One that lives beside the code raising it keeps its class and exit code too (a busy timeline is 4, not 1).
    gone = RuntimeError(
        "Traceback (most recent call last):\n"
        "stitchlake.timeline.timeline.TimelineFileVanished: t/.stitch/timeline/x.inflight: timeline file vanished\n"
    )
    assert unwrap(gone) == ("TimelineFileVanished", 4, "t/.stitch/timeline/x.inflight: timeline file vanished")
    # A chained traceback prints the error being handled first: the one raised last is the job's.
    chained = RuntimeError(
        f"{wrapped}\nDuring handling of the above exception, another exception occurred:\n\n"
        "stitchlake.timeline.timeline.TimelineFileVanished: x: timeline file vanished\n"
    )
    assert unwrap(chained)[:2] == ("TimelineFileVanished", 4)
    # A file named stitchlake.<something> quoted before it is no error class.
    named = RuntimeError(f"reading /etc/stitchlake.yaml: config\n{wrapped}")
    assert unwrap(named)[:2] == ("InputRejected", 5)
    assert unwrap(BusyError("stream orders is busy")) == ("BusyError", 4, "stream orders is busy")
    assert unwrap(ValueError("boom\nmore")) == ("StitchError", 1, "ValueError: boom")
    # A job that was itself stopped ends as `stitch` would have: 143 for SIGTERM, 130 for Ctrl-C.
    from stitchlake.errors import Terminated

    assert unwrap(Terminated("terminated by SIGTERM"))[:2] == ("Terminated", 143)
    assert unwrap(KeyboardInterrupt())[:2] == ("KeyboardInterrupt", 130)


def test_executors_on_a_cluster_get_the_s3_settings_by_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table on S3 and a cluster master: the AWS_* variables set here and the variables the `storage:` block
    refers to become `spark.executorEnv.*` (in the private properties file); a local master or table gets none."""
    from stitchlake.config import parse_config

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("LAKE_SECRET", "s3cr3t-value")
    document: dict[str, Any] = {
        "table": {"name": "t", "path": "s3://lake/t", "key": {"k": "long"}},
        "streams": {"s": {"columns": {"a": "long"}}},
        "storage": {"endpoint": "http://rgw:7480", "secret_access_key": "${LAKE_SECRET}"},
        "spark": {"master": "spark://host:7077"},
    }
    properties = spark_properties(parse_config(document, file="t.yaml", base=tmp_path))
    executor = {k: v for k, v in properties.items() if k.startswith("spark.executorEnv.")}
    assert executor == {"spark.executorEnv.AWS_REGION": "eu-west-1", "spark.executorEnv.LAKE_SECRET": "s3cr3t-value"}
    document["spark"] = {"master": "local[2]"}
    assert not [k for k in spark_properties(parse_config(document, file="t.yaml")) if "executorEnv" in k]
    document["spark"] = {"master": "yarn"}
    document["table"]["path"] = str(tmp_path / "t")
    assert not [k for k in spark_properties(parse_config(document, file="t.yaml")) if "executorEnv" in k]


def test_what_a_finished_job_leaves_in_its_process_group_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's JVM can exit while Python workers it started are still on their way out: when the launcher returns,
    nothing of the job runs (here a shell that exits at once, leaving a child that would sleep for a minute).

    A leftover ended by SIGTERM counts as ended although nobody reaps it (an init that does not reap orphans keeps
    it a zombie for good): that is made certain here by adopting the orphan (a child subreaper) and reaping it only
    afterwards. And the launcher must not wait out its grace for it: the grace is an hour here, so returning at all
    shows it did not."""
    monkeypatch.setattr(job_process, "LEFTOVER_GRACE_S", 3600)
    pid_file = tmp_path / "child.pid"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    job = subprocess.Popen(
        ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; exit 0"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    child = None
    try:
        assert job.wait(timeout=300) == 0
        child = int(pid_file.read_text())
        assert parent(child) == os.getpid(), "the orphan is ours to reap"
        assert alive([child]), "the leftover runs after its parent exited"
        ending = threading.Thread(target=end_leftovers, args=(job.pid,), daemon=True)
        ending.start()
        ending.join(timeout=600)  # (only turns a wait for the grace into a failure; no machine is that slow)
        assert not ending.is_alive(), "the launcher waited out its grace for a leftover SIGTERM had ended"
        assert exited(child), "ended, and still unreaped when the launcher saw it as ended"
        _pid, status = os.waitpid(child, 0)
        child = None
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, "ended by SIGTERM"
        end_leftovers(job.pid)  # an empty group: nothing to do
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        if child is not None:  # adopted: ours to reap, whatever happened
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)


def test_ended_ends_a_job_process_that_outlived_its_cli(tmp_path: Path) -> None:
    """The tests' own guard (`processes.ended`): a process of a Spark job orphaned when its CLI died (here one
    carrying a job mark, whose parent exits at once) is ended with the CLI, although no process tree reaches it."""
    pid_file = tmp_path / "orphan.pid"
    cli = subprocess.Popen(
        ["sh", "-c", f"sleep 600 & echo $! > {pid_file}; exit 0"],
        env={**os.environ, JOB_MARK: uuid.uuid4().hex},
        stdin=subprocess.DEVNULL,
    )
    with ended(cli):
        assert cli.wait(timeout=300) == 0
        orphan = int(pid_file.read_text())
        assert alive([orphan]) and orphan not in descendants(os.getpid()), "outside every tree of this process"
    assert not alive([orphan]), "ended with its CLI"


def test_a_launch_removes_the_private_folders_of_launchers_that_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILLed `stitch` cannot remove its private folder (its properties file may hold secrets): the next launch
    does, once the pid the folder names is gone. A live launcher's folder, and anything else, stay."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # a pid that is gone (reaped)
    with ended(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])) as running:
        folders = {
            "gone": tmp_path / f"stitch-job-{finished.pid}-abc_12",
            "running": tmp_path / f"stitch-job-{running.pid}-def_34",
            "older naming": tmp_path / "stitch-job-ghi_56",
            "not ours": tmp_path / f"stitch-jobs-{finished.pid}-x",
        }
        for folder in folders.values():
            folder.mkdir()
            (folder / "spark.properties").write_text("spark.executorEnv.SECRET=s3cr3t\n")
        spark_submit.sweep_private_folders()
        assert not folders["gone"].exists()
        assert all(folders[name].exists() for name in ("running", "older naming", "not ours"))


def test_an_in_process_session_maps_the_class_archive_unless_the_config_gives_its_own_java_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stitchlake.spark.session import session_settings

    archive = tmp_path / "jars" / "spark-classes.jsa"
    monkeypatch.setattr(spark_conf, "class_archive", lambda: archive)
    assert "spark.driver.extraJavaOptions" not in session_settings(
        spark_table_config(tmp_path, "local[1]")
    )  # not built
    archive.parent.mkdir()
    archive.write_bytes(b"an archive")
    spark_conf.class_archive_size(archive).write_text("10", encoding="utf-8")
    for table_config in (None, spark_table_config(tmp_path, "local[1]")):
        settings = session_settings(table_config)
        assert (
            settings["spark.driver.extraJavaOptions"]
            == f"-XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"
        )
        assert settings["spark.sql.session.timeZone"] == "UTC"
    own = session_settings(spark_table_config(tmp_path, "local[1]", {"spark.driver.extraJavaOptions": "-Xss4m"}))
    assert own["spark.driver.extraJavaOptions"] == "-Xss4m"
