"""Jobs a scheduler can trust (issue 12): SIGTERM, SIGKILL and overlapping runs of `stitch ingest`.

Airflow and systemd stop a task with SIGTERM; a machine or an OOM killer ends one with SIGKILL; cron starts the
next run whether or not the previous one finished. Each test does exactly that to real `stitch` processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import ROOT, alive, descendants, run_stitch, stitch, write_config

from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.concurrency.markers import marked_files
from stitchlake.timeline.instant import Action


@pytest.fixture(scope="module")
def bigger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough rows that an in-process ingest takes a moment, so a signal can land while it writes."""
    from demo_data import generate

    out = tmp_path_factory.mktemp("signal-data")
    generate(out, orders=60_000, days=2, seed=5, files_per_stream=6)
    return out


def new_table(folder: Path, landing: Path) -> tuple[Path, Table]:
    config = write_config(folder, landing)
    table = open_table(str(config))
    table.init()
    return config, table


def claimed(table: Table) -> str | None:
    pending = table.timeline().pending([Action.DELTACOMMIT])
    return pending[0].requested if pending else None


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(stitch(*args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(condition: Any, process: subprocess.Popen[str], timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found or process.poll() is not None:
            return found
        time.sleep(0.01)
    raise AssertionError("timed out")


def data_files(table: Table) -> set[str]:
    root = Path(table.path)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".stitch" not in p.parts}


def live_files(table: Table) -> set[str]:
    return {f.path for f in table.view().live_files()}


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_sigterm_aborts_the_ingest_and_the_next_run_proceeds_at_once(bigger: Path, tmp_path: Path, engine: str) -> None:
    for attempt in range(4):  # a run that publishes before the signal lands proves nothing: try again
        config, table = new_table(tmp_path / f"attempt-{attempt}", bigger / "landing")
        job = start("ingest", "-c", str(config), "--stream", "orders", "--engine", engine, "--json")
        instant = wait_until(lambda: claimed(table), job)  # noqa: B023 - waited for before the next iteration
        if engine == "spark" and instant:  # the signal must reach a job that is writing, not only the CLI
            wait_until(lambda: marked_files(table.storage, instant), job)  # noqa: B023
        below = descendants(job.pid)
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=120)
        current = table.timeline().get(instant) if instant else None
        if instant and (current is None or not current.is_completed):
            break
    else:
        pytest.fail("four ingests published before SIGTERM reached them")
    assert job.returncode == 143, err
    failure = json.loads(out)
    assert failure["ok"] is False and failure["exit_code"] == 143 and "SIGTERM" in failure["error"]
    assert not alive(below), "a process of the job outlived the CLI"
    assert not table.timeline().pending(), "the instant was aborted and rolled back on the way out"
    assert data_files(table) <= live_files(table) | set(), "the aborted write left files behind"
    rerun = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["source_files"] == 6


def test_a_sigkilled_cli_takes_its_spark_job_with_it_and_the_next_run_proceeds_at_once(
    bigger: Path, tmp_path: Path
) -> None:
    """SIGKILL cannot be caught: the kernel ends the job (parent-death signal), and the writer's process being
    gone from this host makes its claim dead at once, without waiting for the heartbeat to expire."""
    config, table = new_table(tmp_path, bigger / "landing")
    job = start("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark")
    instant = wait_until(lambda: claimed(table), job)
    wait_until(lambda: len(descendants(job.pid)) >= 3, job)
    below = descendants(job.pid)
    job.kill()  # the CLI alone, as an OOM killer would
    job.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive(below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(below), "the JVM or the job's Python outlived the killed CLI"
    pending = table.timeline().get(instant)
    assert pending is not None and not pending.is_completed, "nothing committed after the CLI died"
    status = run_stitch("status", "-c", str(config), "--json")
    writers = {w["instant"]: w for w in json.loads(status.stdout)["writers"]}
    assert writers[instant]["alive"] is False, "status shows the killed writer as dead at once"
    expire_s = table.config.concurrency.heartbeat.expire_s
    started = time.monotonic()
    rerun = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json")
    assert rerun.returncode == 0, rerun.stderr  # not 4: the dead writer is known dead
    assert json.loads(rerun.stdout)["source_files"] == 6
    assert time.monotonic() - started < 60 * expire_s  # (sanity: it did not hang)
    cleaned = run_stitch("clean", "-c", str(config), "--engine", "local")
    assert cleaned.returncode == 0, cleaned.stderr
    assert not table.timeline().pending() and data_files(table) <= live_files(table)


def test_an_overlapping_run_is_refused_while_the_first_is_still_starting_its_jvm(bigger: Path, tmp_path: Path) -> None:
    """The claim is taken before spark-submit starts, so a second cron run is refused before the first job has
    even begun writing (no marker yet)."""
    config, table = new_table(tmp_path, bigger / "landing")
    first = start("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark")
    try:
        instant = wait_until(lambda: claimed(table), first)
        assert instant and first.poll() is None
        began = time.monotonic()
        second = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--json")
        refused_after = time.monotonic() - began
        still_starting = not marked_files(table.storage, instant)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert second.returncode == 4, second.stderr
    assert json.loads(second.stdout)["exit_code"] == 4
    assert still_starting, "the first job had begun writing before the overlap was refused"
    print(f"overlapping `stitch ingest` refused after {refused_after:.2f}s (first job still starting its JVM)")
