"""Launch a job request under `spark-submit` (`stitchlake/spark/submit.py`) and raise its error, if any, again.

The argv is always a list (never a shell string). Spark settings and the request go in files readable only by
us — secrets from `${ENV}` must not show in `ps` — and Spark's own log goes to `.stitch/logs/` of a local table
(for a table on an object store, to `$STITCH_LOG_DIR` or `~/.local/state/stitchlake/logs/<table>/`: the only
thing stitchlake keeps on local disk), while the terminal gets the job's progress lines and one summary.

On a cluster (any master but `local[...]`) the executors run on other hosts: they get the stitchlake package as
`--py-files`, and as `spark.executorEnv.*` in the private properties file (redacted in Spark's UI and event log):
when the table or a landing folder is on S3, the AWS_* variables of this process and the variables the config's
`storage:` block refers to (`${VAR}`); for a Kafka source, the variables its client options refer to (its
secrets). They reach S3 through stitchlake's own storage (obstore), never through Hadoop's s3a connector.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stitchlake import errors
from stitchlake.concurrency.processes import die_with_parent, exists
from stitchlake.errors import StitchError
from stitchlake.jobs.job_process import JOB_MARK, end_leftovers, follow
from stitchlake.jobs.spark_conf import DEFAULT_CONF as SESSION_CONF
from stitchlake.jobs.spark_conf import REQUIRED_CONF, class_sharing_options, reader_conf
from stitchlake.paths import LOGS_DIR

if TYPE_CHECKING:
    from stitchlake.config import TableConfig
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.table.handle import TableHandle

#: Defaults for spark-submit jobs: a session's, and no web UI (a job is a batch run, and its port could clash with
#: another job's); the config's spark.conf overrides them, REQUIRED_CONF everything.
JOB_CONF = {
    **SESSION_CONF,
    "spark.ui.enabled": "false",
}
#: The driver's Java options unless the config gives its own: the throughput collector, and the class-data-sharing
#: archive's when it was built (`spark_conf.class_archive`).
JOB_DRIVER_OPTIONS = "-XX:+UseParallelGC"


@dataclass(frozen=True)
class JobFiles:
    log: Path
    result: Path
    properties: Path
    request: Path


@dataclass(frozen=True)
class SubmittedJob:
    """A finished spark-submit job: its result (the type its job returns), the seconds its driver spent on the job
    once Spark was up, and its Spark log."""

    result: Any
    job_seconds: float
    log: Path


def spark_home() -> str:
    """SPARK_HOME if set, else the one bundled with the pyspark package (found without importing it)."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StitchError("pyspark is not installed in this Python; run `make setup`")
    return str(Path(spec.origin).parent)


def spark_submit() -> str:
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    return str(Path(spark_home()) / "bin" / "spark-submit")


def submit_script() -> str:
    """The driver program spark-submit runs: `stitchlake/spark/submit.py` (found by path, not imported: importing
    the engine layer from here would point an import upwards)."""
    return str(Path(__file__).resolve().parent.parent / "spark" / "submit.py")


def is_local(master: str) -> bool:
    return master.startswith("local")


def spark_properties(config: TableConfig) -> dict[str, str]:
    """The job's Spark settings. Executors run this Python unless the config names the workers' own
    (`spark.pyspark.python`: on a cluster whose hosts keep the environment at another path)."""
    forwarded = executor_environment(config)
    properties = {
        **JOB_CONF,
        **forwarded,
        "spark.pyspark.python": sys.executable,
        **config.spark.conf,
        **REQUIRED_CONF,
        "spark.pyspark.driver.python": sys.executable,
    }
    properties.update(reader_conf(properties))  # the JVM reader, when switched on (spark_conf.READER_DEFAULT)
    if "spark.driver.extraJavaOptions" not in config.spark.conf:  # the config's own options win, as given
        properties["spark.driver.extraJavaOptions"] = f"{JOB_DRIVER_OPTIONS} {class_sharing_options()}".strip()
    names = sorted(key.removeprefix(EXECUTOR_ENV) for key in forwarded)
    if names:
        # Spark shows executorEnv values in its UI and event log unless this matches their names or values.
        mine = "|".join(names)
        theirs = properties.get("spark.redaction.regex", SPARK_REDACTION_REGEX)
        properties["spark.redaction.regex"] = f"(?:{theirs})|(?:{mine})"
    return properties


#: The settings that give executors environment variables (`spark.executorEnv.VAR`).
EXECUTOR_ENV = "spark.executorEnv."
#: Settings in `spark.conf` that give executors a variable another way: stitch then does not forward it.
PROVIDED_ENV = (EXECUTOR_ENV, "spark.kubernetes.executor.secretKeyRef.")
#: Spark's default `spark.redaction.regex`, kept when ours is added to it.
SPARK_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key"


def executor_environment(config: TableConfig) -> dict[str, str]:
    """`spark.executorEnv.*` for executors on other hosts: AWS_* and the `storage:` block's `${VAR}`s when the
    table or a landing folder is on a remote store, and the variables Kafka sources' options refer to (`${VAR}`:
    their secrets, which every process reads from its own environment).

    They live only in the 0600 properties file, never on a command line; `spark_properties` makes Spark redact
    them in its UI and event log. A variable `spark.conf` already gives executors (`spark.executorEnv.VAR`, a
    Kubernetes secret by `spark.kubernetes.executor.secretKeyRef.VAR`) is left to it. Local masters need none:
    their Python workers inherit this process's environment and the config.
    """
    from stitchlake.storage.registry import storage_for

    if is_local(config.spark.master):
        return {}
    env: dict[str, str] = {}
    locations = [config.table.path] + [
        s.source.path for s in config.streams.values() if s.source is not None and s.source.path
    ]
    if any(storage_for(location, config.storage.options).remote for location in locations):
        from stitchlake.storage.s3 import environment

        env.update(environment(config.storage.options))
    kafka_sources = [s.source for s in config.streams.values() if s.source is not None and s.source.is_kafka]
    if kafka_sources:
        from stitchlake.io.kafka import environment as kafka_environment

        for source in kafka_sources:
            env.update(kafka_environment(source))
    provided = {
        key.removeprefix(prefix) for key in config.spark.conf for prefix in PROVIDED_ENV if key.startswith(prefix)
    }
    return {f"{EXECUTOR_ENV}{name}": value for name, value in env.items() if name not in provided}


def write_properties(path: Path, properties: dict[str, str]) -> None:
    """A Java properties file, created 0600 because values may be secrets."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace("=", "\\=").replace(":", "\\:")

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        for key, value in properties.items():
            handle.write(f"{escape(key)}={escape(value)}\n")


def package_zip(folder: Path) -> str:
    """The stitchlake package as a zip for `--py-files`, so executors on other hosts can import it."""
    root = Path(__file__).resolve().parent.parent
    target = folder / "stitchlake.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in root.rglob("*.py"):
            archive.write(file, Path("stitchlake") / file.relative_to(root))
    return str(target)


def build_argv(
    config: TableConfig, job: str, job_args: list[str], files: JobFiles, py_files: str | None = None
) -> list[str]:
    """spark-submit's argv: the submit script, `--request`, `--result` and the target (`job_args`)."""
    argv = [
        spark_submit(),
        "--master",
        config.spark.master,
        "--name",
        f"stitch-{job}-{config.table.name}",
        "--properties-file",
        str(files.properties),
    ]
    if py_files:
        argv += ["--py-files", py_files]
    return [*argv, submit_script(), "--request", str(files.request), "--result", str(files.result), *job_args]


def job_files(table: TableHandle, job: str) -> JobFiles:
    from stitchlake.timeline.clock import from_millis, now_millis

    folder = log_folder(table)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{job}-{from_millis(now_millis())}-{os.getpid()}"
    sweep_private_folders()
    private = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-"))
    return JobFiles(
        folder / f"{stem}.log", private / "result.json", private / "spark.properties", private / "request.json"
    )


#: A launch's private folder (request, properties, result) in the temporary folder: `stitch-job-<pid>-<random>`.
PRIVATE_PREFIX = "stitch-job-"


def sweep_private_folders() -> None:
    """Remove the private folders of launchers that are gone: a SIGKILLed `stitch` cannot remove its own, and its
    properties file may hold secrets. The folder names its launcher's pid; only our own user's are touched, and a
    pid that runs (or was reused) keeps its folder."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PRIVATE_PREFIX}*-*"):
        launcher = folder.name.removeprefix(PRIVATE_PREFIX).split("-", 1)[0]
        if not launcher.isdigit() or exists(int(launcher)):
            continue
        with contextlib.suppress(OSError):
            if folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)


def log_folder(table: TableHandle) -> Path:
    """Where spark-submit's own log goes: the table's `.stitch/logs` on local disk, else a local state folder."""
    local = table.storage.local_path(LOGS_DIR)
    if local is not None:
        return Path(local)
    base = os.environ.get("STITCH_LOG_DIR") or str(Path.home() / ".local" / "state" / "stitchlake" / "logs")
    return Path(base) / table.config.table.name


def error_for(name: str, message: str, details: dict[str, str] | None = None) -> StitchError:
    """The job's error as its own class again (its exit code comes with the class), with where it is."""
    kind = errors.error_class(name)
    known = {k: v for k, v in (details or {}).items() if k in ("file", "column", "yaml_path")}
    return kind(message, **known)


def write_private(path: Path, text: str) -> None:
    """A file only we can read (it may hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def run_job(
    table: TableHandle,
    request: JobRequest[Any],
    target_args: list[str],
    progress: Callable[[str], None] | None = None,
    graceful_stop_s: float | None = None,
) -> SubmittedJob:
    """Run a job request under spark-submit; return its result (the type its job returns) or raise its error again.

    Interrupted (SIGTERM, Ctrl-C), the whole job is stopped: SIGTERM to its process group, then SIGKILL after
    `job_process.STOP_GRACE_S`. A job that can stop gracefully (`graceful_stop_s`: `stitch stream`) is first asked
    to, through a stop file named in its request, and given that long to finish the batch it is in.
    """
    job = request.job
    files = job_files(table, job)
    stop_file = None
    if graceful_stop_s is not None and hasattr(request, "stop_file"):
        stop_file = files.request.parent / "stop"
        request = replace(request, stop_file=str(stop_file))  # type: ignore[call-arg]
    config = table.config
    py_files: str | None = None
    try:  # from the first private file on: the properties may hold secrets, and go however this ends
        write_properties(files.properties, spark_properties(config))
        write_private(files.request, json.dumps(request.to_json()))
        py_files = None if is_local(config.spark.master) else package_zip(files.properties.parent)
        argv = build_argv(config, job, target_args, files, py_files)
        mark = uuid.uuid4().hex
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_HOME": spark_home(),
            JOB_MARK: mark,  # every process of the job inherits it, whatever process group it moves to
        }
        if progress:
            progress(f"starting spark-submit ({config.spark.master}); Spark log: {files.log}")
        with open(files.log, "wb") as log:
            try:
                process = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # its own process group: signals reach the JVM and its Python workers
                    preexec_fn=die_with_parent,  # and if we are SIGKILLed, the kernel ends the job for us
                )
            except OSError as error:
                raise StitchError(
                    f"could not start spark-submit ({argv[0]}): {error.strerror or error}; "
                    "run `make setup`, or point SPARK_HOME at a Spark installation"
                ) from error
            try:
                follow(process, files.log, progress, stop_file, graceful_stop_s or 0)
            finally:
                # Finished or stopped, nothing of the job may run when we return: a Python worker still writing
                # would leave a file after the caller aborted the instant and deleted what its markers name.
                end_leftovers(process.pid, mark)
    finally:
        for leftover in (files.properties, files.request, stop_file, Path(py_files) if py_files else None):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    leftover.unlink()
        if not files.result.exists():  # the job never reported: nothing of the private folder is needed
            with contextlib.suppress(OSError):
                files.result.parent.rmdir()
    code = process.returncode
    outcome: dict[str, Any] | None = None
    if files.result.exists():
        outcome = json.loads(files.result.read_text(encoding="utf-8"))
        files.result.unlink()
    with contextlib.suppress(OSError):
        files.result.parent.rmdir()
    if outcome is None:
        raise StitchError(
            f"spark-submit for {job} exited with code {code} before reporting a result; "
            f"last lines of {files.log}:\n{_tail(files.log)}"
        )
    if not outcome.get("ok"):
        stopped = {"Terminated": errors.Terminated, "KeyboardInterrupt": KeyboardInterrupt}.get(
            str(outcome.get("error_type"))
        )
        failure: BaseException
        if stopped is not None:  # the job itself was stopped (not this process): unwind as a stop, exit 143 / 130
            failure = stopped(f"the {job} job was stopped: {outcome.get('error')} (Spark log: {files.log})")
        else:
            failure = error_for(
                str(outcome.get("error_type", "StitchError")),
                f"{outcome.get('error')} (Spark log: {files.log})",
                outcome.get("details"),
            )
        for note in outcome.get("notes") or ():  # e.g. that its commit may still land: the launcher must not abort
            failure.add_note(str(note))
        raise failure
    from stitchlake.jobs.specs import decode

    return SubmittedJob(decode(request, outcome["result"]), round(float(outcome["job_seconds"]), 2), files.log)
