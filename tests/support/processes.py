"""The processes the tests start: `stitch` commands, their process trees, and ending every one of them.

Split from the Spark fixtures: a test that runs `stitch` in a subprocess needs these whether or not it uses Spark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: A fresh value in the environment of this test session, so every process it starts carries it, as every process of
#: a spark-submit job carries the launcher's JOB_MARK. Together they find a job's processes that outlived the CLI
#: that started them (a JVM or Python worker orphaned when the CLI died), which no process tree reaches any more.
SESSION_MARK = "STITCHLAKE_TEST_SESSION"
os.environ[SESSION_MARK] = uuid.uuid4().hex  # never inherited: a nested session must not take the outer's for its own


def stitch(*args: str | Path) -> list[str]:
    """argv of the `stitch` CLI in this environment."""
    return [sys.executable, "-m", "stitchlake", *map(str, args)]


def run_stitch(*args: str | Path, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(stitch(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def start_stitch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`stitch ...` started in the background (to signal, kill or watch), its output captured as text."""
    return subprocess.Popen(stitch(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (spark-submit starts its JVM in a new session, so a process group is
    not enough to find it)."""
    from stitchlake.concurrency.processes import parent

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        above = parent(int(entry.name)) if entry.name.isdigit() else None
        if above is not None:
            children.setdefault(above, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pids: list[int]) -> list[int]:
    """The processes of `pids` that still run (the launcher's own test of it)."""
    from stitchlake.concurrency.processes import still_running

    return still_running(pids)


def stray_job_processes() -> list[int]:
    """Running processes of Spark jobs this session started that no longer run below it: they carry this session's
    mark and a launcher's job mark, and their parent chain does not reach this process (their CLI died). Session
    servers that detach on purpose carry no job mark; other sessions' jobs carry another session mark."""
    from stitchlake.concurrency.processes import parent, with_environment
    from stitchlake.jobs.job_process import JOB_MARK

    job_entry = f"{JOB_MARK}=".encode()
    found = []
    for pid in with_environment(f"{SESSION_MARK}={os.environ[SESSION_MARK]}"):
        above: int | None = pid
        while above is not None and above > 1 and above != os.getpid():
            above = parent(above)
        if above == os.getpid():
            continue
        try:
            entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(entry.startswith(job_entry) for entry in entries):
            found.append(pid)
    return found


def kill_tree(process: subprocess.Popen[Any], limit_s: float = 600) -> None:
    """SIGKILL a process and everything it started, as a machine crash would, and wait until none of it runs: its
    process tree while it runs, and the processes of its Spark jobs that outlived it (found by their marks) whether
    it runs or not. An ended, reaped process is never signalled (its pid may be another process's by now). The limit
    only turns a process that survives SIGKILL into a failure."""
    from stitchlake.concurrency.processes import still_running

    deadline = time.monotonic() + limit_s
    while True:
        running = process.poll() is None
        targets = still_running(([process.pid, *descendants(process.pid)] if running else []) + stray_job_processes())
        if not targets and not running:
            break
        assert time.monotonic() < deadline, f"processes {targets} of {process.args!r} survived SIGKILL"
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    process.wait(timeout=limit_s)


@contextlib.contextmanager
def ended(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """`process` for the body of a `with`; on the way out, however the test went, SIGKILL it, every process below
    it (its JVM, its Python workers) and every process of its Spark jobs that outlived it, whether or not it still
    runs, so a failed test leaves nothing running."""
    try:
        yield process
    finally:
        kill_tree(process)


def wait_until(condition: Callable[[], Any], process: subprocess.Popen[Any], timeout: float = 1800) -> Any:
    """`condition()` once truthy, or whatever it gives when `process` ended; the deadline only turns a hang into a
    failure (generous: a JVM starts slowly on a machine at load 30)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found or process.poll() is not None:
            return found
        time.sleep(0.01)
    raise AssertionError("timed out")


def hold_back(table: Any, instant: str, job: Callable[[], list[int]], what: str) -> Any:
    """Take the table lock while `instant` is claimed and unpublished, so the job (the processes `job()` lists)
    cannot publish until the test lets go: an interrupt then lands on a running job for certain, however fast or
    slow the machine. The job is frozen (SIGSTOP) while the test looks; if one of its processes holds the lock (a
    claim, a plan), it is let go and looked at again a moment later. The lease outlasts anything the test does
    meanwhile; the job's config must let it wait that long for the lock (`concurrency.lock.wait_s`)."""
    from stitchlake.concurrency.lock import FileSystemLock
    from tests.support.tables import lock_holder_pid

    gate = FileSystemLock(table.storage, owner=f"the test holding the {what} back", expire_s=3600)
    deadline = time.monotonic() + 600  # (only turns a job that keeps the lock for good into a failure)
    while True:
        tree = job()
        assert alive(tree), f"the {what} ended before the test could hold it back"
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        try:
            current = table.timeline().get(instant)
            assert current is not None and not current.is_completed, f"the {what} published before it was held"
            if lock_holder_pid(table) not in tree:
                gate.acquire(wait_s=600)
                return gate
        finally:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < deadline, f"the {what} held the table lock at every look"
        time.sleep(0.001)


def concurrent_ingests(
    config: Path, streams: Iterable[str], env: dict[str, str] | None = None
) -> dict[str, tuple[int, str, str]]:
    """Each stream ingested by its own `stitch ingest --engine spark` job, all started at once: (exit code, stdout,
    stderr) per stream. However it goes (a later job failing to start too), none is left running."""
    jobs: dict[str, subprocess.Popen[str]] = {}
    with contextlib.ExitStack() as running:
        for stream in streams:
            jobs[stream] = running.enter_context(
                ended(
                    subprocess.Popen(
                        stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "spark", "--json"),
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            )
        outputs = {s: job.communicate(timeout=3600) for s, job in jobs.items()}
    return {s: (jobs[s].returncode, *outputs[s]) for s in jobs}


#: A Python program (argv[1]: a THREE_STREAMS config) whose write of 20 orders dies hard after its second data file,
#: as a killed writer does: its instant stays pending, its files stay behind.
CRASHING_WRITER = textwrap.dedent(
    """
    import os
    import sys

    import pyarrow as pa

    import stitchlake
    import stitchlake.writing.writer as write_module

    table = stitchlake.open(sys.argv[1])
    real = write_module.write_table_file
    count = [0]

    def write_then_die(*args, **kwargs):
        size = real(*args, **kwargs)
        count[0] += 1
        if count[0] == 2:
            os._exit(1)  # a hard crash: no exception handler, no abort, no heartbeat cleanup
        return size

    write_module.write_table_file = write_then_die
    write_module.WRITE_THREADS = 1
    keys = list(range(20))
    data = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "p": ["even" if k % 2 == 0 else "odd" for k in keys],
            "amount": pa.array([999] * 20, pa.int64()),
            "status": ["crashed"] * 20,
            "ots": pa.array([99] * 20, pa.int64()),
        }
    )
    table.write("orders", data)
    sys.exit(3)  # not reached
    """
)
