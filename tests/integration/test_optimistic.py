"""Backfills next to live writers (issue 14): `concurrency.mode: optimistic`.

Several writers of one stream may run at once; writes into disjoint file groups both commit, overlapping ones
conflict (exit 3, nothing left behind), early conflict detection stops a doomed write before it writes data, and a
pending compaction plan makes an overlapping write abort.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import stitchlake
from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.errors import ConflictError
from stitchlake.storage import LocalStorage
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan
from tests.support.processes import ROOT, ended, stitch
from tests.support.spark_fixtures import demo_table
from tests.support.tables import pause_when_inflight

OPTIMISTIC = {"mode": "optimistic", "heartbeat": {"interval_s": 1, "expire_s": 8}}
#: For a writer the test holds stopped while another runs (`overlapping`): it must not be presumed dead meanwhile.
OPTIMISTIC_PAUSED = {**OPTIMISTIC, "heartbeat": {"interval_s": 1, "expire_s": 3600}}


@pytest.fixture(scope="module")
def by_day(demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo orders split into one landing folder per order_date (a partition): a backfill and a live feed
    that touch disjoint file groups. Arrival order within each day is kept."""
    out = tmp_path_factory.mktemp("by-day")
    folders: dict[str, Path] = {}
    for source in sorted((demo_data / "landing" / "orders").iterdir()):
        rows = pq.read_table(source)
        for day in sorted(set(rows.column("order_date").to_pylist())):
            folder = folders.setdefault(str(day), out / str(day))
            folder.mkdir(exist_ok=True)
            pq.write_table(rows.filter(pc.equal(rows.column("order_date"), day)), folder / source.name)
    return folders


def ingest(config: Path, source: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        stitch(
            "ingest", "-c", str(config), "--stream", "orders", "--source", str(source), "--engine", "local", "--json"
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def overlapping(config: Path, table: Table, first: Path, second: Path) -> list[tuple[int, str, str]]:
    """Two ingests of orders that overlap in time for certain: the first is stopped (SIGSTOP) once its instant is
    inflight and it is out of the lock, the second runs to its end meanwhile, then the first goes on. Their
    (exit code, stdout, stderr), first's first. Chance decides nothing, however busy the machine is."""
    with ended(ingest(config, first)) as job:
        pause_when_inflight(table, job, Action.DELTACOMMIT)
        try:
            other = ingest(config, second)
            with ended(other):
                out2, err2 = other.communicate(timeout=900)
        finally:
            os.kill(job.pid, signal.SIGCONT)
        out1, err1 = job.communicate(timeout=900)
    return [(job.returncode, out1, err1), (other.returncode, out2, err2)]


def orders_commits(table: Table) -> list[tuple[str, str]]:
    timeline = table.timeline()
    return [
        (i.requested, i.completed or "")
        for i in timeline.completed([Action.DELTACOMMIT])
        if isinstance(commit := timeline.commit(i), DeltaCommit) and commit.stream == "orders"
    ]


def outside_meta(table: Table, instant: str) -> list[Path]:
    return [p for p in Path(table.path).rglob(f"*{instant}*") if ".stitch" not in p.parts]


def test_writers_of_one_stream_into_disjoint_partitions_both_commit(
    by_day: dict[str, Path], demo_data: Path, tmp_path: Path
) -> None:
    """Real processes: a backfill of one day and a feed of the other run at once; both commit, and the table is
    the ground truth. (In lock_free mode the second would exit 4.)"""
    from scripts.demo_data import compare

    first_day, second_day = sorted(by_day)
    config, table = demo_table(tmp_path, demo_data / "landing", concurrency=OPTIMISTIC_PAUSED)
    for code, _out, err in overlapping(config, table, by_day[first_day], by_day[second_day]):
        assert code == 0, err
    (a_req, a_done), (b_req, b_done) = orders_commits(table)
    assert a_req < b_done and b_req < a_done, "the two ingests ran at the same time"
    for stream in ("payments", "shipments"):
        done = subprocess.run(
            stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []


def test_overlapping_writers_one_commits_the_other_exits_3_leaving_nothing(
    by_day: dict[str, Path], demo_data: Path, tmp_path: Path
) -> None:
    """Real processes writing the same day (the same file groups) from two folders: exactly one commits."""
    day = sorted(by_day)[0]
    twin = tmp_path / "twin"
    twin.mkdir()
    for source in sorted(by_day[day].iterdir()):
        (twin / f"again-{source.name}").write_bytes(source.read_bytes())
    config, table = demo_table(tmp_path, demo_data / "landing", concurrency=OPTIMISTIC_PAUSED)
    (first, out, err), (second, _out2, err2) = overlapping(config, table, by_day[day], twin)
    assert (first, second) == (3, 0), f"{err}\n{err2}"  # the one that published first wins
    loser = json.loads(out)
    assert loser["exit_code"] == 3 and "concurrency.mode: optimistic" in loser["error"]
    assert len(orders_commits(table)) == 1
    assert not table.timeline().pending(), "the loser left no instant"
    winner = orders_commits(table)[0][0]
    stray = [p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts]
    assert all(winner in p.name for p in stray), "the loser left data files"
    assert not list((Path(table.path) / ".stitch" / "markers").glob("*")), "the loser left markers"


class RecordingStorage(LocalStorage):
    """The real local storage, noting every path written (how the test knows what a writer wrote)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.written: list[str] = []

    def write_bytes(self, path: str, data: bytes) -> None:
        self.written.append(path)
        super().write_bytes(path, data)

    def put_if_absent(self, path: str, data: bytes, ready: Any = None) -> bool:
        self.written.append(path)
        return super().put_if_absent(path, data, ready)

    def write_atomic(self, path: str, data: bytes, ready: Any = None) -> None:
        self.written.append(path)
        super().write_atomic(path, data, ready)


def rows(keys: list[int], day: str = "2026-11-20") -> pa.Table:
    import datetime as dt

    return pa.table(
        {
            "order_id": pa.array(keys, pa.int64()),
            "order_date": pa.array([dt.date.fromisoformat(day)] * len(keys)),
            "customer_id": pa.array(keys, pa.int64()),
            "amount": pa.array([1.0] * len(keys)),
            "currency": pa.array(["EUR"] * len(keys)),
            "order_ts": pa.array([dt.datetime(2026, 11, 20, tzinfo=dt.UTC)] * len(keys)),
            "op": pa.array(["I"] * len(keys)),
        }
    )


@pytest.mark.parametrize("early", [True, False])
def test_early_conflict_detection_stops_a_doomed_write_before_it_writes_data(
    demo_data: Path, tmp_path: Path, early: bool
) -> None:
    """A live writer (begun first, mid-write) holds day 2026-11-20; a second writer of the same file groups is
    stopped before it writes any data file when early detection is on: the recording storage shows every path it
    wrote, and none is outside `.stitch/`. With it off, the second writes its files and the first loses at
    publish instead."""
    config, _ = demo_table(
        tmp_path, demo_data / "landing", concurrency={**OPTIMISTIC, "early_conflict_detection": early}
    )
    first = open_table(str(config))
    txn = Transaction.begin(first, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    from stitchlake.writing.batch import prepare
    from stitchlake.writing.writer import write_file_groups

    stream = first.config.stream("orders")
    files = write_file_groups(first, stream, prepare(first.config, stream, rows([1, 2, 3])), txn.time, txn.mark)

    second = open_table(str(config))
    recording = RecordingStorage(second.path)
    second.storage = recording
    if early:
        with pytest.raises(ConflictError, match=f"live writer {txn.time} of stream orders.*stopped before writing"):
            second.write("orders", rows([2, 3, 4]))
        data = [p for p in recording.written if not p.startswith(".stitch/")]
        assert data == [], f"the doomed write wrote data files: {data}"
        assert not outside_meta(second, recording.written[0].split("/")[-1].split(".")[0])
        txn.complete(DeltaCommit(stream="orders", added=tuple(files), rows=3))  # the first one commits
    else:
        done = second.write("orders", rows([2, 3, 4]))
        assert [p for p in recording.written if not p.startswith(".stitch/")], "without early detection it wrote"
        with pytest.raises(ConflictError, match=f"deltacommit {done.instant} of stream orders completed while"):
            txn.complete(DeltaCommit(stream="orders", added=tuple(files), rows=3))
        txn.abort()
    assert not first.timeline().pending()
    assert len(first.timeline().completed([Action.DELTACOMMIT])) == 1


def test_spark_ingest_tasks_detect_an_early_conflict_before_writing(
    spark: Any, demo_data: Path, tmp_path: Path
) -> None:
    """The Spark engine's write tasks run the same early check as the in-process writer: with a live writer
    holding day 2026-11-20, a Spark ingest of the orders (which cover that day) stops with exit 3 before any task
    writes a data file of its own, and leaves no instant behind."""
    from stitchlake.services.writes.ingest import ingest as run_ingest
    from stitchlake.spark.engine import SparkEngine
    from stitchlake.writing.batch import prepare
    from stitchlake.writing.writer import write_file_groups

    config, table = demo_table(tmp_path, demo_data / "landing", concurrency=OPTIMISTIC)
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    stream = table.config.stream("orders")
    files = write_file_groups(table, stream, prepare(table.config, stream, rows([1, 2, 3])), txn.time, txn.mark)
    before = {p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts}
    with pytest.raises(ConflictError, match=f"live writer {txn.time} of stream orders.*stopped before writing") as err:
        run_ingest(open_table(str(config)), SparkEngine(spark), "orders")
    assert err.value.exit_code == 3
    after = {p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts}
    assert after == before, "the doomed Spark write left data files"
    assert [i.requested for i in table.timeline().pending()] == [txn.time], "the doomed write left its instant"
    txn.complete(DeltaCommit(stream="orders", added=tuple(files), rows=3))
    assert run_ingest(open_table(str(config)), SparkEngine(spark), "orders").source_files == 3


def test_a_pending_compaction_plan_makes_an_overlapping_write_abort(demo_data: Path, tmp_path: Path) -> None:
    _config, table = demo_table(tmp_path, demo_data / "landing", concurrency=OPTIMISTIC)
    table.write("orders", rows([1, 2, 3]))
    table.write("orders", rows([4], day="2026-11-21"))
    from stitchlake.services.rewrites.compaction import run, schedule

    planned = schedule(table)
    assert planned is not None
    before = table.timeline()
    with pytest.raises(ConflictError, match=f"compaction {planned} is pending on file group") as err:
        table.write("orders", rows([2]))
    assert "if its process died, `stitch compact` runs it" in str(err.value)  # a crashed plan blocks until run
    after = table.timeline()
    assert [i.requested for i in after.pending()] == [planned], "the aborted write left its instant"
    assert len(after.completed()) == len(before.completed())
    # A write into other file groups (another day) is not held up by it; the plan runs and then the write works.
    assert len(table.write("orders", rows([7], day="2026-11-22")).files) == 1
    run(table, planned)
    assert table.write("orders", rows([2])).completed


def test_lock_free_mode_keeps_one_live_writer_per_stream(demo_data: Path, tmp_path: Path) -> None:
    """The default: a second writer of a live stream is busy (exit 4), never a conflict."""
    config, table = demo_table(tmp_path, demo_data / "landing")
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"), exclusive_stream="orders")
    try:
        done = subprocess.run(
            stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        txn.abort()
    assert done.returncode == 4 and "already being written" in json.loads(done.stdout)["error"]
