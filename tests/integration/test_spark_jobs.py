"""`stitch` jobs as real spark-submit processes: concurrent writers, re-runs, kills, overlaps, exit codes.

Each test here starts the CLI exactly as cron would; every job is its own spark-submit (~20-30 s of JVM and
Python worker start-up on 2 cores), so the file keeps to as few jobs as prove the issue's points.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import stitchlake
from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.lock import FileSystemLock
from stitchlake.concurrency.markers import marked_files
from stitchlake.timeline.instant import Action
from tests.support.processes import ROOT, concurrent_ingests, descendants, ended, run_stitch, stitch
from tests.support.spark_fixtures import demo_table
from tests.support.tables import instant_at, pause_when_inflight

STREAMS = ("orders", "payments", "shipments")

pytestmark = pytest.mark.spark  # every test here runs spark-submit, most through a module fixture


def data_files(table: Table) -> list[Path]:
    return sorted(p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts)


def one_json(stdout: str) -> dict[str, Any]:
    """`--json` prints exactly one object on stdout (progress goes to stderr)."""
    return json.loads(stdout.strip())


@pytest.fixture(scope="module")
def concurrent(demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A table whose three streams were ingested by three `stitch ingest` spark-submit jobs at once."""
    config, _ = demo_table(tmp_path_factory.mktemp("concurrent"), demo_data / "landing", through_cli=True)
    ran = concurrent_ingests(config, STREAMS)
    results = {}
    for stream, (code, out, err) in ran.items():
        assert code == 0, f"ingest {stream} exited {code}:\n{err[-3000:]}"
        results[stream] = one_json(out)
    return config, results


def test_three_concurrent_ingest_jobs_give_the_ground_truth(
    concurrent: tuple[Path, dict[str, Any]], demo_data: Path
) -> None:
    from scripts.demo_data import compare

    config, results = concurrent
    table = open_table(str(config))
    for stream, result in results.items():
        assert result["engine"] == "spark" and result["stream"] == stream
        assert result["source_files"] == 3 and result["rows"] > 0 and Path(result["log"]).is_file()
    timeline = table.timeline()
    commits = timeline.completed([Action.DELTACOMMIT])
    assert sorted(str(timeline.commit(c).stream) for c in commits) == sorted(STREAMS)  # type: ignore[attr-defined]
    assert timeline.pending() == []
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []


def test_rerun_after_success_ingests_nothing_and_exits_0(concurrent: tuple[Path, dict[str, Any]]) -> None:
    config, _ = concurrent
    table = open_table(str(config))
    before = [i.file_name for i in table.timeline().instants]
    logs = sorted(Path(table.path, ".stitch", "logs").iterdir())
    done = run_stitch("ingest", "-c", str(config), "--stream", "payments", "--json")
    assert done.returncode == 0, done.stderr
    result = one_json(done.stdout)
    assert result["message"] == "nothing to ingest for stream payments" and result["rows"] == 0
    assert [i.file_name for i in table.timeline().instants] == before
    assert sorted(Path(table.path, ".stitch", "logs").iterdir()) == logs  # decided without starting Spark


def _change_rows(path: Path) -> dict[tuple[Any, str], dict[str, Any]]:
    """JSON-lines change rows by (key, _op), timestamps parsed (the writers spell them differently)."""
    import datetime as dt

    files = sorted(path.glob("part-*")) if path.is_dir() else [path]
    rows = [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines() if line]
    for row in rows:
        row["pay_ts"] = dt.datetime.fromisoformat(row["pay_ts"]) if row["pay_ts"] else None
    by = {(row["order_id"], row["_op"]): row for row in rows}
    assert len(by) == len(rows)
    return by


def test_a_change_read_on_spark_keeps_what_the_local_change_read_keeps(
    concurrent: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """(Before the compaction and clean below, which leave no history to read changes of.)

    Changes since the first commit with before-images, a value filter and two columns named, written as JSON
    lines: the change columns come too, `D` rows stay whatever the filter says, an update's `-U` row goes with its
    `+U` row, null fields are kept and timestamps keep their microseconds, as the local read writes them."""
    config, _ = concurrent
    table = open_table(str(config))
    first = table.timeline().completed([Action.DELTACOMMIT])[0].completed
    assert first is not None
    args = [
        "--since",
        first,
        "--before-images",
        "--columns",
        "order_id,paid_amount,pay_ts",
        "--where",
        "paid_amount>=20",
        "--where",
        "_op!=I",  # a change column: compared as text, on each change row
    ]
    local = tmp_path / "local.json"
    assert run_stitch("read", "-c", str(config), *args, "--out", str(local)).returncode == 0
    out = tmp_path / "spark.json"
    wrote = run_stitch("read", "-c", str(config), "--engine", "spark", *args, "--out", str(out), "--json")
    assert wrote.returncode == 0, wrote.stderr
    expected = _change_rows(local)
    ops = {op for _key, op in expected}
    assert {"-U", "+U"} <= ops and "I" not in ops and len(expected) > 10, ops  # the filter kept updates as pairs
    # The `_op` filter splits the range's change rows. Which rows are inserts depends on which of the three
    # concurrent ingests committed first (none when it was the stream with every key, as CI30 found under load):
    # `_op=I` must give exactly the inserts of the same read without the filter, `_op!=I` the rest.
    inserted, unfiltered = tmp_path / "inserted.json", tmp_path / "unfiltered.json"
    assert run_stitch("read", "-c", str(config), *args[:-1], "_op=I", "--out", str(inserted)).returncode == 0
    assert run_stitch("read", "-c", str(config), *args[:-2], "--out", str(unfiltered)).returncode == 0
    inserts = _change_rows(inserted)
    assert {op for _key, op in inserts} <= {"I"} and _change_rows(unfiltered) == {**expected, **inserts}
    assert one_json(wrote.stdout)["rows"] == len(expected)
    assert _change_rows(out) == expected
    # A -U row is judged by its +U row's values: on Spark `_op=-U` was applied first and dropped every -U with them.
    before, spark_before = tmp_path / "before.json", tmp_path / "spark_before.json"
    assert run_stitch("read", "-c", str(config), *args[:-1], "_op=-U", "--out", str(before)).returncode == 0
    olds = _change_rows(before)
    assert olds and {op for _key, op in olds} == {"-U"}
    again = run_stitch("read", "-c", str(config), "--engine", "spark", *args[:-1], "_op=-U", "--out", str(spark_before))
    assert again.returncode == 0, again.stderr
    assert _change_rows(spark_before) == olds


def test_compact_and_clean_jobs_run_on_spark(concurrent: tuple[Path, dict[str, Any]], demo_data: Path) -> None:
    from scripts.demo_data import compare

    config, _ = concurrent
    table = open_table(str(config))
    logs_before = data_files(table)
    done = run_stitch("compact", "-c", str(config), "--engine", "spark", "--json")
    assert done.returncode == 0, done.stderr
    result = one_json(done.stdout)
    assert result["engine"] == "spark" and result["result"]["file_groups"] > 0
    assert compare(stitchlake.read(str(config), mode="read_optimized"), demo_data / "truth.parquet") == []

    cleaned = run_stitch("clean", "-c", str(config), "--retain", "1", "--engine", "spark", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert one_json(cleaned.stdout)["engine"] == "spark"
    remaining = data_files(table)
    assert remaining and not set(logs_before) & set(remaining)  # every pre-compaction log was superseded
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []


def test_overlap_exits_4_and_a_killed_ingest_leaves_no_trace(demo_data: Path, tmp_path: Path) -> None:
    from scripts.demo_data import compare

    # The job may wait for the lock the test holds (below) as long as the test needs: its wait is not the point.
    lock = {"provider": "filesystem", "wait_s": 3600, "expire_s": 30}
    config, table = demo_table(tmp_path, demo_data / "landing", concurrency={"lock": lock})
    writer = subprocess.Popen(
        stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with ended(writer):
        # The CLI claims the stream (inflight) before spark-submit starts; frozen there, out of the lock, it lets the
        # test take the table lock. The job then writes its files but cannot publish, however fast or slow it runs.
        instant = pause_when_inflight(table, writer, Action.DELTACOMMIT).requested
        gate = FileSystemLock(table.storage, owner="the test holding the ingest back", expire_s=3600)
        try:
            gate.acquire(wait_s=600)
            os.kill(writer.pid, signal.SIGCONT)
            deadline = time.monotonic() + 1800  # (only turns a hang into a failure)
            while not any(table.storage.exists(p) for p in marked_files(table.storage, instant)):
                assert writer.poll() is None, f"the ingest ended (exit {writer.returncode}) before it wrote a file"
                assert time.monotonic() < deadline, "the ingest never began writing data files"
                time.sleep(0.02)
            # Hold the job mid-write (the CLI keeps beating for its claim), so the overlap meets a live writer; its
            # driver, frozen, cannot publish once the test lets go of the lock, which the overlap needs.
            for pid in descendants(writer.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
        finally:
            gate.release()
        overlap = run_stitch("ingest", "-c", str(config), "--stream", "orders")
    # (`ended` SIGKILLed the CLI and its whole job, frozen or not)

    assert overlap.returncode == 4, overlap.stderr
    assert f"stream orders is already being written by instant {instant}" in overlap.stderr
    assert table.timeline().get(instant) is not None and not instant_at(table, instant).is_completed
    killed = [p for p in data_files(table) if instant in p.name]
    assert killed, "the job was killed after writing files: they stay on disk until clean"

    # Until its heartbeat expires a killed writer looks alive; afterwards a re-run takes over.
    expire_s = table.config.concurrency.heartbeat.expire_s
    deadline = time.monotonic() + 600
    while not heartbeats.is_expired(table.storage, instant, expire_s):  # the killed job's claim is dead
        assert time.monotonic() < deadline, "the killed job's heartbeat never expired"
        time.sleep(0.1)
    rerun = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert one_json(rerun.stdout)["source_files"] == 3
    for stream in ("payments", "shipments"):
        assert run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local").returncode == 0
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []
    assert all(p.exists() for p in killed)  # still there, yet invisible: the read above matched the truth

    cleaned = run_stitch("clean", "-c", str(config), "--engine", "local", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert not any(p.exists() for p in killed)
    assert table.timeline().pending() == []
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []


def test_bad_rows_exit_5_through_spark_submit(tmp_path: Path) -> None:
    folder = tmp_path / "landing" / "orders"
    folder.mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "order_id": pa.array([1, None], pa.int64()),
                "order_date": pa.array(["2026-11-20", "2026-11-20"]),
                "customer_id": pa.array([1, 2], pa.int64()),
                "amount": pa.array([1.0, 2.0]),
                "currency": pa.array(["EUR", "EUR"]),
                "order_ts": pa.array(["2026-11-20T00:00:00Z", "2026-11-20T00:00:01Z"]),
                "op": pa.array(["I", "I"]),
            }
        ),
        folder / "part-0001.parquet",
    )
    config, table = demo_table(tmp_path, tmp_path / "landing", bad_rows="fail")
    done = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark", "--json")
    assert done.returncode == 5, done.stderr
    assert "1 bad row" in done.stderr and "part-0001.parquet" in done.stderr and "order_id" in done.stderr
    failure = one_json(done.stdout)  # where the problem is, recovered from the executor's traceback
    assert failure["exit_code"] == 5 and failure["error_type"] == "InputRejected"
    assert failure["file"].endswith("part-0001.parquet") and failure["column"] == "order_id"
    assert "stitchlake-details" not in failure["error"]
    assert table.timeline().completed() == [] and table.timeline().pending() == []
    assert data_files(table) == []


def _by_key(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {row["order_id"]: row for row in rows}


def test_read_on_spark_prints_and_writes_what_the_local_read_returns(
    concurrent: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """`stitch read --engine spark`: a spark-submit job reads through format("stitchlake") with the JVM reader; its
    sample (every row, --limit 0) and the folder it writes (columns, a filter on a stream column, a re-run over its
    earlier output) hold the local read's rows, cell for cell."""
    import pyarrow.parquet as pq

    config, _ = concurrent
    table = open_table(str(config))
    whole = table.read()

    printed = run_stitch("read", "-c", str(config), "--engine", "spark", "--limit", "0", "--json")
    assert printed.returncode == 0, printed.stderr
    answer = one_json(printed.stdout)
    assert answer["engine"] == "spark" and answer["reader"] == "jvm" and Path(answer["log"]).is_file()
    assert answer["rows"] == answer["shown"] == whole.num_rows > 0
    assert answer["columns"] == whole.column_names
    local = json.loads(run_stitch("read", "-c", str(config), "--limit", "0", "--json").stdout)["records"]
    assert _by_key(answer["records"]) == _by_key(local)

    out = tmp_path / "paid.parquet"
    out.mkdir()
    (out / "_STITCH_READ").touch()  # an earlier run's output: replaced whole
    (out / "part-old.parquet").write_bytes(b"stale")
    columns = ["order_id", "pay_status", "paid_amount", "currency", "order_ts"]
    where = "paid_amount>=50"
    wrote = run_stitch(
        "read", "-c", str(config), "--engine", "spark", "--columns", ",".join(columns), "--where", where,
        "--out", str(out), "--json",
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    result = one_json(wrote.stdout)
    expected = table.read(columns=columns, filter=where)
    assert 0 < expected.num_rows < whole.num_rows  # the filter keeps some rows, not all
    assert result["rows"] == expected.num_rows and result["format"] == "parquet" and result["files"] >= 1
    assert not (out / "part-old.parquet").exists() and (out / "_STITCH_READ").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left beside it
    written = pq.read_table(out)
    assert written.schema == expected.schema.remove_metadata()  # timestamps too: INT64 microseconds in UTC
    assert _by_key(written.to_pylist()) == _by_key(expected.to_pylist())


def test_read_on_spark_refuses_bad_arguments_before_any_jvm(
    concurrent: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    config, _ = concurrent
    table = open_table(str(config))
    logs = sorted(Path(table.path, ".stitch", "logs").iterdir())
    kept = tmp_path / "mine.parquet"
    kept.mkdir()
    (kept / "_SUCCESS").touch()  # another Spark job's output: not ours to replace
    left = tmp_path / ".rows.parquet.abcd1234.tmp"
    left.mkdir()  # what a killed job left beside its `--out`: named, never deleted
    named = run_stitch(
        "read", "-c", str(config), "--engine", "spark", "--where", "nope=1", "--out", str(left.parent / "rows.parquet")
    )
    assert named.returncode == 2 and f"{left}: left by an interrupted `stitch read --engine spark`" in named.stderr
    assert left.is_dir()
    refusals = {
        ("--columns", "order_id,nope"): "unknown column nope",
        ("--where", "nope=1"): "'nope' is not a column",
        ("--out", str(kept)): "is not the output of an earlier `stitch read --engine spark`",
        ("--out", str(tmp_path / "rows.txt")): "unknown file type",
        ("--out", "s3://bucket/rows.parquet"): "give a local path",
        ("--as-of", "nonsense"): "is neither an instant time",
        ("--before-images",): "before_images is for change reads",
    }
    for args, words in refusals.items():
        done = run_stitch("read", "-c", str(config), "--engine", "spark", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr, (args, done.stderr)
    assert (kept / "_SUCCESS").is_file()
    assert sorted(Path(table.path, ".stitch", "logs").iterdir()) == logs  # refused without starting Spark
