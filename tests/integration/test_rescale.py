"""Rescaling a table's buckets (issue 27.1): `stitch rescale` rewrites every file group of a partition (or of the
table) into N buckets as one instant, and writers of the old layout are fenced (exit 4, nothing published).

Expected rows come from the brute-force reference model (tests/support/reference.py) through the helpers of
tests/{unit,integration}/test_read.py; where keys live is checked against the specified bucket hash
(`layout.bucket.bucket_of`, pinned by test vectors in tests/unit/test_layout.py), never against stitchlake's own
reads. The core path runs on local disk and on the S3 server (tests/support/s3_server.py); the CLI, a SIGKILL
mid-rescale and the Spark engine on local disk.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake
from stitchlake.api import Table
from stitchlake.concurrency.lock import FileSystemLock
from stitchlake.concurrency.markers import marked_files
from stitchlake.errors import BusyError, ConfigError, UsageError
from stitchlake.layout.bucket import bucket_of
from stitchlake.services.rewrites import rescale as rescaling
from stitchlake.services.upkeep.clean import orphans
from stitchlake.services.upkeep.savepoint import delete as delete_savepoint
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommitPlan, RescaleCommit
from stitchlake.timeline.savepoints import savepoints
from stitchlake.writing.writer import write
from tests.support.histories import History, apply, plan_steps
from tests.support.processes import ROOT, ended, kill_tree, run_stitch, stitch
from tests.support.reads import changes, expected_changes
from tests.support.reference import Event
from tests.support.s3_server import Place
from tests.support.spark_fixtures import generated_data, write_config
from tests.support.tables import (
    ALL_COLUMNS,
    MODELS,
    THREE_STREAMS,
    as_rows,
    batch,
    config,
    instant_at,
    new_table,
    partition_of,
    pause_when_inflight,
)

MODEL = {m.name: m for m in MODELS}
KEYS = 80


# ------------------------------------------------------------------------------------------------ history


def orders_batch(keys: list[int], ots: int = 9) -> pa.Table:
    return batch(MODEL["orders"], [{"k": k, "amount": k, "status": "late", "ots": ots} for k in keys])


# ------------------------------------------------------------------------------------------------- checks


def rescale_commit(table: Table, instant: str) -> RescaleCommit:
    timeline = table.timeline()
    found = timeline.get(instant)
    assert found is not None and found.is_completed
    commit = timeline.commit(found)
    assert isinstance(commit, RescaleCommit)
    return commit


def assert_keys_in_their_buckets(table: Table, commit: RescaleCommit) -> None:
    """Every key the rescale wrote lies in file group `stable_hash(key) mod N` of its partition, once."""
    seen: set[tuple[int, str]] = set()
    for item in commit.added:
        assert int(item.file_group) < commit.buckets
        rows = pq.read_table(pa.BufferReader(table.storage.read_bytes(item.path)), columns=["k", "p"])
        groups = bucket_of([rows.column("k")], commit.buckets)
        assert set(groups.tolist()) == {int(item.file_group)}, item.path
        assert set(rows.column("p").to_pylist()) == {item.partition.split("=", 1)[1]}
        keys = set(zip(rows.column("k").to_pylist(), rows.column("p").to_pylist(), strict=True))
        assert not keys & seen and len(keys) == rows.num_rows
        seen |= keys


def assert_time_travel(table: Table, history: History) -> None:
    for number, at in history.times:
        assert as_rows(table.read(as_of=at)) == history.expected(number), f"as of {at} (commit {number})"


def assert_changes_across(table: Table, history: History, cut: str, keys: list[int] | None = None) -> None:
    """Incremental reads whose range holds the rescale (`since` before `cut`, `until` after) are the diff of two
    reference states; with `keys`, restricted to them (a key filter prunes file groups on both sides of it)."""
    before = [(n, t) for n, t in history.times if t < cut]
    after = [(n, t) for n, t in history.times if t > cut]
    assert before and after
    for first, since in [before[0], before[len(before) // 2], before[-1]]:
        for second, until in after:
            where = {"k": keys} if keys is not None else None
            got = changes(table.read(since=since, until=until, filter=where))
            want = expected_changes(history.expected(first), history.expected(second), ALL_COLUMNS)
            if keys is not None:
                want = {key: change for key, change in want.items() if key[0] in keys}
            assert got == want, f"changes in ({since}, {until}]"


def routed_by(table: Table, instant: str) -> set[tuple[str, int, int]]:
    """(partition, file group, recorded bucket count) of each file a completed deltacommit wrote."""
    found = table.timeline().get(instant)
    assert found is not None
    return {(f.partition, int(f.file_group), f.buckets) for f in table.timeline().commit(found).added_files}


# ------------------------------------------------------------------------------------------- the core path


def test_rescale_keeps_every_read_fences_old_writers_and_survives_restore_clean_and_archive(place: Place) -> None:
    """2 -> 5 buckets, then 5 -> 3: snapshot, read-optimized, time travel and incremental reads equal the reference
    before and after; a writer that began under 2 buckets and publishes after is refused (exit 4, nothing left);
    a savepoint before restores across it; clean and archive after keep every read right."""
    document = {**copy.deepcopy(THREE_STREAMS), "archive": {"keep_instants": 10}}
    table = new_table(place.root, document, path=place.table, buckets=2)
    assert table.storage.remote == (place.backend == "s3")
    history = apply(table, plan_steps(1, 8), History())
    table.savepoint("before")
    pinned, pinned_at = history.expected(), history.times[-1][0]
    history = apply(table, plan_steps(2, 3), history)  # commits after the savepoint, before the rescale

    # A writer of the old layout: it routes by 2 buckets, writes, and publishes after the rescale completed.
    writer = Table(config(place.root, document, path=place.table, buckets=2))
    writer.require()
    txn = Transaction.begin(writer, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))

    before = history.expected()
    assert as_rows(table.read()) == before
    done = table.rescale(5).done
    assert done is not None and done.buckets == 5 and done.whole_table and done.previous == {"2": 2}
    cut = done.instant
    commit = rescale_commit(table, cut)
    assert_keys_in_their_buckets(table, commit)
    assert as_rows(table.read()) == before
    assert as_rows(table.read(mode="read_optimized")) == before, "the rescale's base files hold every log"
    assert {p.buckets for p in table.status().partitions.values()} == {5}

    with pytest.raises(BusyError, match="was rescaled to 5 buckets") as refused:
        write(writer, "orders", orders_batch(list(range(0, KEYS, 7))), txn=txn)
    assert refused.value.exit_code == 4
    written = list(marked_files(writer.storage, txn.time))
    assert written, "the writer wrote its files before publishing"
    txn.abort()
    assert table.timeline().get(txn.time) is None and not any(table.storage.exists(p) for p in written)
    with pytest.raises(ConfigError, match="has 5 buckets per partition"):
        writer.require()  # its config says 2: the next run must say 5 (or run `stitch rescale`)

    history = apply(table, plan_steps(3, 6), history)
    assert as_rows(table.read()) == history.expected()
    assert_time_travel(table, history)
    assert_changes_across(table, history, cut)
    assert_changes_across(table, history, cut, keys=[1, 2, 3, 40, 77])
    last = table.timeline().latest_completed([Action.DELTACOMMIT])
    assert last is not None
    assert {(b, g < 5) for _p, g, b in routed_by(table, last.requested)} == {(5, True)}

    # Clean after: the old layout's files go, reads as of before the rescale (and not pinned) are refused.
    cleaned = table.clean(retain=1).result
    pinned_files = {path for _instant, saved in savepoints(table.timeline()) for path in saved.files}
    old = {f.path for f in table.view().live_files() if f.completed < cut and f.path not in pinned_files}
    assert cleaned.deleted and not old
    assert as_rows(table.read()) == history.expected()
    between = [t for n, t in history.times if pinned_at < n and t < cut]
    with pytest.raises(UsageError, match="clean removed"):
        table.read(as_of=between[-1])
    assert as_rows(table.read(as_of="before")) == pinned

    # Restore across it: the savepoint's state and its layout come back.
    table.restore("before")
    assert as_rows(table.read()) == pinned
    assert table.config.table.buckets == 2 and {p.buckets for p in table.status().partitions.values()} == {2}
    fresh = table.write("orders", orders_batch([1, 2]))
    assert {b for _p, _g, b in routed_by(table, fresh.instant)} == {2}
    restored = History(list(history.events), list(history.erases), [t for t in history.times if t[0] <= pinned_at])
    restored.events = [e for e in restored.events if e.commit <= pinned_at]
    restored.erases = [e for e in restored.erases if e.commit <= pinned_at]
    restored.events += [
        Event("orders", (k, partition_of(k)), {"amount": k, "status": "late", "ots": 9}, False, 10_000, pos)
        for pos, k in enumerate([1, 2])
    ]
    assert as_rows(table.read()) == restored.expected()

    # Archive after a rescale: the layout lives on in the checkpoint, and a fresh handle routes by it.
    delete_savepoint(table, "before")
    again = table.rescale(3).done
    assert again is not None and again.previous == {"2": 2}
    more = apply(table, plan_steps(4, 12), History(restored.events, restored.erases, [(10_000, fresh.completed or "")]))
    archived = table.archive().result
    assert archived.archived and table.timeline().get(again.instant) is None
    checkpoint = load_checkpoint(table.storage)
    assert checkpoint is not None and [r.requested for r in checkpoint.rescales][-1] == again.instant
    reopened = Table(config(place.root, document, path=place.table, buckets=3))
    assert as_rows(reopened.read()) == more.expected()
    assert reopened.status().timeline.buckets == 3
    late = reopened.write("orders", orders_batch([5, 6, 7]))
    assert {b for _p, _g, b in routed_by(reopened, late.instant)} == {3}


@pytest.mark.parametrize(("start", "end"), [(4, 2), (3, 8)])
def test_rescale_down_and_up_by_uneven_factors_reads_like_the_reference(tmp_path: Path, start: int, end: int) -> None:
    """4 -> 2 (new groups merge old ones) and 3 -> 8 (counts share no factor: every old group feeds every new one)."""
    table = new_table(tmp_path, buckets=start)
    history = apply(table, plan_steps(start * 10 + end, 10), History())
    done = table.rescale(end).done
    assert done is not None
    assert_keys_in_their_buckets(table, rescale_commit(table, done.instant))
    assert as_rows(table.read()) == history.expected()
    history = apply(table, plan_steps(start + end, 5), history)
    assert as_rows(table.read()) == history.expected()
    assert_time_travel(table, history)
    assert_changes_across(table, history, done.instant)
    table.compact()
    assert as_rows(table.read(mode="read_optimized")) == history.expected()


def test_a_pending_rescale_fences_writers_of_its_partitions_only(tmp_path: Path) -> None:
    """While a rescale of one partition is planned and not run: a write into it is refused at publish (exit 4,
    nothing published), a write into another partition publishes; a whole-table rescale refuses writes at once."""
    table = new_table(tmp_path, buckets=2)
    history = apply(table, plan_steps(5, 6), History())
    even, odd = [k for k in range(0, 20, 2)], [k for k in range(1, 20, 2)]
    planned = rescaling.schedule(table, 4, ["p=even"])
    assert planned is not None
    with pytest.raises(BusyError, match=f"rescale {planned} is rewriting partition p=even") as refused:
        table.write("orders", orders_batch(even + odd))
    assert refused.value.exit_code == 4
    assert not table.timeline().pending([Action.DELTACOMMIT]), "the refused write left nothing behind"
    table.write("orders", orders_batch(odd))  # the other partition is not fenced
    for pos, k in enumerate(odd):
        history.events.append(Event("orders", (k, "odd"), {"amount": k, "status": "late", "ots": 9}, False, 500, pos))
    assert as_rows(table.read()) == history.expected()

    done = table.rescale(4, ["p=even"]).done  # runs the pending plan first: nothing more to plan
    assert done is not None and done.instant == planned and not done.whole_table
    status = table.status()
    assert (status.partitions["p=even"].buckets, status.partitions["p=odd"].buckets) == (4, 2)
    assert status.timeline.buckets == 2, "a rescale of some partitions leaves the table's count"
    mixed = table.write("orders", orders_batch(even + odd, ots=10))
    assert {(p, b) for p, _g, b in routed_by(table, mixed.instant)} == {("p=even", 4), ("p=odd", 2)}
    for pos, k in enumerate(even + odd):
        history.events.append(
            Event("orders", (k, partition_of(k)), {"amount": k, "status": "late", "ots": 10}, False, 501, pos)
        )
    assert as_rows(table.read()) == history.expected()

    whole = rescaling.schedule(table, 4)
    assert whole is not None
    plan = table.timeline().plan(table.timeline().get(whole))  # type: ignore[arg-type]
    assert getattr(plan, "partitions", None) == {"p=odd": 2}, "only the partition not at 4 yet is rewritten"
    with pytest.raises(BusyError, match="nothing can be written right now"):
        table.write("orders", orders_batch([1]))
    assert table.rescale(4).done is not None
    assert table.status().timeline.buckets == 4
    assert as_rows(table.read()) == history.expected()
    with pytest.raises(UsageError, match="no such partition"):
        rescaling.schedule(table, 2, ["p=neither"])
    assert table.rescale(4).done is None, "every partition has 4 buckets already"


# ----------------------------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo landing files (`landing/`) and their ground truth (`truth.parquet`,
    tests/{unit,integration}/test_demo_data.py)."""
    return generated_data(tmp_path_factory, "rescale-data", orders=30_000, seed=11, files_per_stream=4)


@pytest.fixture(scope="module")
def landing(generated: Path) -> Path:
    return generated / "landing"


def matches_truth(table: Table, generated: Path) -> bool:
    from scripts.demo_data import compare

    differences: list[Any] = compare(table.read(), generated / "truth.parquet")
    return differences == []


def ingest_all(config: Path, *more: str) -> None:
    for stream in ("orders", "payments", "shipments"):
        done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--engine", "local", *more)
        assert done.returncode == 0, done.stderr


def set_buckets(config: Path, buckets: int) -> None:
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["table"]["buckets"] = buckets
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def cli_json(*args: str, code: int = 0) -> dict[str, Any]:
    done = run_stitch(*args, "--json", timeout=900)
    assert done.returncode == code, (done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_cli_rescales_fences_ingest_and_refuses_the_old_count(
    generated: Path, landing: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "t", landing)
    assert run_stitch("init", "-c", str(config)).returncode == 0
    ingest_all(config, "--max-files", "2")
    table = stitchlake.open(str(config))
    partition = table.view().partitions()[0]

    # A rescale of one partition, planned and not run: an ingest writing it is refused at its publish.
    planned = rescaling.schedule(table, 3, [partition])
    refused = cli_json("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", code=4)
    assert f"rescale {planned} is rewriting partition {partition}" in refused["error"]
    assert (
        not table.timeline().pending([Action.DELTACOMMIT])
        and len(table.timeline().completed([Action.DELTACOMMIT])) == 3
    )
    resumed = cli_json("rescale", "-c", str(config), "--resume")
    assert resumed["result"]["instant"] == planned and resumed["result"]["buckets"] == 3
    assert cli_json("status", "-c", str(config))["partitions"][partition]["buckets"] == 3

    # The whole table, 4 -> 8: then the config must say 8.
    done = cli_json("rescale", "-c", str(config), "--buckets", "8", "--engine", "local")
    assert done["engine"] == "local" and done["result"]["whole_table"] and done["result"]["buckets"] == 8
    assert done["result"]["previous"] == {"4": 1, "3": 1}
    assert f"set `buckets: 8` under `table:` in {config}" in done["message"]
    stale = cli_json("ingest", "-c", str(config), "--stream", "orders", code=2)
    assert "has 8 buckets per partition" in stale["error"] and "set `buckets: 8`" in stale["error"].lower()
    set_buckets(config, 8)
    ingest_all(config)
    assert matches_truth(stitchlake.open(str(config)), generated)

    # The other order: the config says 16 first (as for `stitch alter`), then `stitch rescale` makes it so.
    set_buckets(config, 16)
    ahead = cli_json("read", "-c", str(config), code=2)
    assert "stitch rescale" in ahead["error"] and "--buckets 16" in ahead["error"]
    first = cli_json("rescale", "-c", str(config), "--buckets", "16")
    assert first["result"]["buckets"] == 16 and "set `buckets" not in first["message"]
    assert cli_json("rescale", "-c", str(config), "--buckets", "16")["message"].startswith("nothing to rescale")
    assert matches_truth(stitchlake.open(str(config)), generated)
    usage = cli_json("rescale", "-c", str(config), code=2)
    assert "--buckets" in usage["error"]


def test_a_rescale_killed_midway_is_resumed_and_writers_wait_for_it(landing: Path, tmp_path: Path) -> None:
    """SIGKILL while the rescale writes its files: the plan stays pending, ingest is fenced (exit 4), and
    `stitch rescale --resume` runs it once its heartbeat expired; nothing the killed run wrote is left behind."""
    # The run may wait for the lock the test holds (below) as long as the test needs: its wait is not the point.
    lock = {"provider": "filesystem", "wait_s": 3600, "expire_s": 30}
    config = write_config(tmp_path / "t", landing, concurrency={"lock": lock})
    assert run_stitch("init", "-c", str(config)).returncode == 0
    ingest_all(config, "--max-files", "3")
    table = stitchlake.open(str(config))
    before = table.read().sort_by("order_id")
    with (tmp_path / "rescale.stderr").open("w") as stderr:
        job = subprocess.Popen(
            stitch("rescale", "-c", str(config), "--buckets", "7", "--engine", "local", "--json"),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    with ended(job):
        # Frozen once inflight (out of the lock, not published); the test then takes the table lock, so the run
        # writes its files but cannot publish, and the kill lands while it writes, however fast or slow it runs.
        running = pause_when_inflight(table, job, Action.RESCALE)
        gate = FileSystemLock(table.storage, owner="the test holding the rescale back", expire_s=3600)
        try:
            gate.acquire(wait_s=600)
            os.kill(job.pid, signal.SIGCONT)
            deadline = time.monotonic() + 1800  # (only turns a hang into a failure)
            while not marked_files(table.storage, running.requested):
                assert job.poll() is None, f"the rescale ended (exit {job.returncode}) before it wrote a file"
                assert time.monotonic() < deadline, "the rescale never began writing"
                time.sleep(0.01)
            kill_tree(job)
        finally:
            gate.release()
    assert job.returncode == -signal.SIGKILL
    marked = list(marked_files(table.storage, running.requested))
    assert marked and not instant_at(table, running.requested).is_completed
    pending = table.timeline().pending([Action.RESCALE])
    assert [i.requested for i in pending] == [running.requested], "the killed rescale stays pending"

    fenced = cli_json("ingest", "-c", str(config), "--stream", "payments", "--engine", "local", code=4)
    assert "nothing can be written right now" in fenced["error"]

    deadline = time.monotonic() + 300
    while True:  # refused (exit 4) while the killed run's heartbeat is fresh; then it runs
        done = run_stitch("rescale", "-c", str(config), "--resume", "--json", timeout=900)
        if done.returncode != 4 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])["result"]
    assert result["instant"] == running.requested and result["buckets"] == 7
    assert not table.timeline().pending()
    set_buckets(config, 7)
    resumed = stitchlake.open(str(config))
    assert resumed.read().sort_by("order_id").equals(before)
    assert orphans(resumed) == [], "the killed attempt's files were removed"
    assert not [
        p for p in marked if resumed.storage.exists(p) and p not in {f.path for f in resumed.view().live_files()}
    ]
    ingest_all(config)


@pytest.mark.spark
def test_rescale_runs_on_spark(landing: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, landing)
    assert run_stitch("init", "-c", str(config)).returncode == 0
    ingest_all(config)
    table = stitchlake.open(str(config))
    before = table.read().sort_by("order_id")
    done = cli_json("rescale", "-c", str(config), "--buckets", "6", "--engine", "spark")
    assert done["engine"] == "spark" and done["result"]["buckets"] == 6 and done["result"]["rows"] > 0
    set_buckets(config, 6)
    after = stitchlake.open(str(config))
    assert after.read().sort_by("order_id").equals(before)
    commit = rescale_commit(after, done["result"]["instant"])
    assert {int(f.file_group) for f in commit.added} <= set(range(6)) and len(commit.added) == 12
    # The config edited first (as for `stitch alter`): the Spark job opens the table from that YAML too.
    set_buckets(config, 9)
    again = cli_json("rescale", "-c", str(config), "--buckets", "9", "--engine", "spark")
    assert again["engine"] == "spark" and again["result"]["buckets"] == 9, again
    assert stitchlake.open(str(config)).read().sort_by("order_id").equals(before)


def test_spark_change_reads_across_a_rescale_equal_stitchlake_read(spark: Any, tmp_path: Path) -> None:
    """The data source's incremental read packs file groups as of `until`: keys written under the old count
    must be found in their new file groups, each once."""
    from tests.support.reads import spark_rows

    table = new_table(tmp_path, buckets=2)
    history = apply(table, plan_steps(9, 6), History())
    done = table.rescale(5).done
    assert done is not None
    history = apply(table, plan_steps(10, 4), history)
    since, until = history.times[2][1], history.times[-1][1]
    for where, stitch_filter in [(None, None), ("k IN (1, 2, 3, 44)", {"k": [1, 2, 3, 44]})]:
        expected = table.read(since=since, until=until, filter=stitch_filter).sort_by([("k", "ascending")])
        frame = spark.read.format("stitchlake").options(since=since, until=until).load(table.path)
        actual = spark_rows(frame.where(where) if where else frame).sort_by([("k", "ascending")])
        assert actual.num_rows == expected.num_rows > 0 and actual.equals(expected), where
