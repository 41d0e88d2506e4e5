"""Launch a job script under `spark-submit` and map its outcome to DESIGN §8 exit codes.

The argv is always a list (never a shell string). Spark settings go in a properties file readable only by
us — secrets from `${ENV}` must not show in `ps` — and Spark's own log goes to `.stitch/logs/`, while the
terminal gets the job's progress lines and one summary.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stitchlake.errors import (
    BusyError,
    ConfigError,
    ConflictError,
    InputRejected,
    StitchError,
    UsageError,
)
from stitchlake.spark.job import PROGRESS_PREFIX
from stitchlake.spark.session import REQUIRED_CONF

if TYPE_CHECKING:
    from stitchlake.config import TableConfig
    from stitchlake.table import Table

LOGS_DIR = ".stitch/logs"
#: Defaults for jobs (the config's spark.conf overrides them; REQUIRED_CONF overrides everything).
DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
}
_ERRORS: dict[int, type[StitchError]] = {
    2: ConfigError,
    3: ConflictError,
    4: BusyError,
    5: InputRejected,
}


@dataclass(frozen=True)
class JobFiles:
    log: Path
    result: Path
    properties: Path


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


def job_script(job: str) -> str:
    path = Path(__file__).resolve().parent.parent / "jobs" / f"{job}.py"
    if not path.is_file():
        raise UsageError(f"no job script for {job!r} ({path})")
    return str(path)


def is_local(master: str) -> bool:
    return master.startswith("local")


def spark_properties(config: TableConfig) -> dict[str, str]:
    return {
        **DEFAULT_CONF,
        **config.spark.conf,
        **REQUIRED_CONF,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }


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
    return [*argv, job_script(job), "--result", str(files.result), *job_args]


def job_files(table: Table, job: str) -> JobFiles:
    from stitchlake.timeline.clock import from_millis, now_millis

    folder = Path(table.storage.abspath(LOGS_DIR))
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{job}-{from_millis(now_millis())}-{os.getpid()}"
    private = Path(tempfile.mkdtemp(prefix="stitch-job-"))
    return JobFiles(folder / f"{stem}.log", private / "result.json", private / "spark.properties")


def error_for(code: int, message: str) -> StitchError:
    return _ERRORS.get(code, StitchError)(message)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def run_job(
    table: Table,
    job: str,
    job_args: list[str],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run `stitchlake/jobs/<job>.py` under spark-submit; return its result or raise its mapped error."""
    files = job_files(table, job)
    config = table.config
    write_properties(files.properties, spark_properties(config))
    py_files = None if is_local(config.spark.master) else package_zip(files.properties.parent)
    argv = build_argv(config, job, job_args, files, py_files)
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_HOME": spark_home(),
    }
    if progress:
        progress(f"starting spark-submit ({config.spark.master}); Spark log: {files.log}")
    try:
        with open(files.log, "wb") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            _follow(process, files.log, progress)
    finally:
        with contextlib.suppress(OSError):
            files.properties.unlink()
    code = process.returncode
    result: dict[str, Any] | None = None
    if files.result.exists():
        result = json.loads(files.result.read_text(encoding="utf-8"))
        files.result.unlink()
    with contextlib.suppress(OSError):
        files.result.parent.rmdir()
    if result is None:
        raise StitchError(
            f"spark-submit for {job} exited with code {code} before reporting a result; "
            f"last lines of {files.log}:\n{_tail(files.log)}"
        )
    if not result.get("ok"):
        raise error_for(int(result.get("exit_code", 1)), f"{result.get('error')} (Spark log: {files.log})")
    result["log"] = str(files.log)
    return result


def _follow(process: subprocess.Popen[bytes], log: Path, progress: Callable[[str], None] | None) -> None:
    """Wait for the job, passing its progress lines on; stop the whole job if we are interrupted."""
    position = 0
    try:
        while process.poll() is None:
            time.sleep(0.3)
            position = _relay(log, position, progress)
        _relay(log, position, progress)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise


def _relay(log: Path, position: int, progress: Callable[[str], None] | None) -> int:
    if progress is None:
        return position
    try:
        with open(log, "rb") as handle:
            handle.seek(position)
            chunk = handle.read()
    except OSError:
        return position
    complete = chunk.rfind(b"\n") + 1
    for line in chunk[:complete].decode("utf-8", errors="replace").splitlines():
        if line.startswith(PROGRESS_PREFIX):
            progress(line[len(PROGRESS_PREFIX) :])
    return position + complete
