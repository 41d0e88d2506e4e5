"""Streams fed from Kafka topics (issue 29): exactly-once ingest by offsets recorded in the table's commits.

Every test talks to a real single-node Kafka broker (KRaft) that the session starts (tests/support/kafka_server.py) and
runs the real `stitch` CLI in its own process; nothing stands in for the broker, the client or the CLI. The demo
generator's three streams (late, out-of-order and duplicate events, deletes) are produced into three topics and
the table is compared with the generator's ground truth; offsets are checked commit by commit (the ranges of the
completed commits tile each partition from its start to its end, no gap and no overlap), which is what "no event
lost, none repeated" means for a log.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake
from scripts import kafka_broker as broker
from stitchlake.api import Table
from stitchlake.paths import MARKERS_DIR, TIMELINE_DIR
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import OffsetRange
from tests.support.kafka_topics import as_json, commits, ingest, kafka_demo_table, new_topic
from tests.support.processes import ROOT, descendants, ended, kill_tree, run_stitch, start_stitch, stitch
from tests.support.tables import lock_held_elsewhere

#: Partitions of each stream's topic: several, one, and a stream whose topic grows later.
PARTITIONS = {"orders": 3, "payments": 2, "shipments": 1}


def read_landing(folder: Path) -> list[tuple[Any, bytes]]:
    """A demo stream's events in arrival order (its landing files in name order) as (key, JSON value): JSON lines
    as they are, Parquet and CSV rows as JSON objects (an empty CSV field is a null, as stitch reads it)."""
    records: list[tuple[Any, bytes]] = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".parquet":
            records += [(row["order_id"], as_json(row)) for row in pq.read_table(path).to_pylist()]
        elif path.suffix in (".json", ".jsonl"):
            for line in path.read_bytes().splitlines():
                if line.strip():
                    records.append((json.loads(line).get("order_id"), line))
        else:
            with path.open(newline="") as handle:
                for row in csv.DictReader(handle):
                    plain = {k: (v if v != "" else None) for k, v in row.items()}
                    records.append((plain.get("order_id"), as_json(plain)))
    return records


def keyed(records: list[tuple[Any, bytes]], partitions: int) -> list[tuple[int, bytes | None]]:
    """Records partitioned by the record key, as producers do: a key's events keep their order."""
    return [(zlib.crc32(str(key).encode()) % partitions, value) for key, value in records]


def assert_tiled(table: Table, stream: str, ends: dict[int, int]) -> None:
    """The offsets the stream's commits recorded cover each partition from 0 to its end exactly once."""
    ranges: dict[int, list[OffsetRange]] = {}
    for commit in commits(table, stream):
        for item in commit.offsets:
            ranges.setdefault(item.partition, []).append(item)
    assert sorted(ranges) == sorted(ends), f"partitions recorded {sorted(ranges)}, topic has {sorted(ends)}"
    for partition, items in ranges.items():
        items.sort(key=lambda r: (r.start, r.end))  # a position (an empty range) before what is read from it
        at = 0
        for item in items:
            assert item.start == at, f"partition {partition}: a gap or an overlap at offset {at}: {items}"
            at = item.end
        assert at == ends[partition], f"partition {partition} recorded up to {at}, topic ends at {ends[partition]}"


def test_three_topics_with_late_and_duplicate_events_equal_the_ground_truth(
    demo_data: Path, kafka_broker: str, tmp_path: Path
) -> None:
    """Each stream from its own topic, produced in two halves with ingests in between (one capped by
    --max-records); the table equals the ground truth, and the offsets tile every partition once."""
    from scripts.demo_data import compare

    topics = {s: new_topic(kafka_broker, s, n) for s, n in PARTITIONS.items()}
    config, table = kafka_demo_table(tmp_path, demo_data / "landing", kafka_broker, topics)
    events = {s: keyed(read_landing(demo_data / "landing" / s), PARTITIONS[s]) for s in PARTITIONS}
    for stream, records in events.items():
        broker.produce(kafka_broker, topics[stream], records[: len(records) // 2])
    first = ingest(config, "orders", "--max-records", "100")
    assert first["records"] == 100 and first["rows"] == 100, first
    for stream in PARTITIONS:
        ingest(config, stream)
    for stream, records in events.items():
        broker.produce(kafka_broker, topics[stream], records[len(records) // 2 :])
    for stream in PARTITIONS:
        done = ingest(config, stream)
        assert done["records"] > 0 and done["offsets"], done
    again = ingest(config, "orders")
    assert again["message"] == "nothing to ingest for stream orders", again
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []
    for stream, records in events.items():
        ends = {p: sum(1 for q, _ in records if q == p) for p in range(PARTITIONS[stream])}
        assert_tiled(table, stream, ends)
        assert sum(c.rows + c.bad_rows for c in commits(table, stream)) == len(records)


def test_sigkill_of_the_ingest_at_random_points_never_loses_or_repeats_an_event(
    demo_data: Path, kafka_broker: str, tmp_path: Path
) -> None:
    """A real `stitch ingest` SIGKILLed at random moments (while it reads, writes or publishes), over and over,
    with records arriving meanwhile; runs after each kill go on from the table's offsets."""
    from scripts.demo_data import compare

    topics = {s: new_topic(kafka_broker, s, PARTITIONS[s]) for s in PARTITIONS}
    config, table = kafka_demo_table(tmp_path, demo_data / "landing", kafka_broker, topics)
    events = {s: keyed(read_landing(demo_data / "landing" / s), PARTITIONS[s]) for s in PARTITIONS}
    for stream in ("payments", "shipments"):
        broker.produce(kafka_broker, topics[stream], events[stream])
    orders = events["orders"]
    rng = random.Random(29)
    chunks = [orders[i : i + len(orders) // 4 + 1] for i in range(0, len(orders), len(orders) // 4 + 1)]
    timeline = Path(table.storage.describe(TIMELINE_DIR))
    killed_mid_instant = finished = 0
    for chunk in chunks:
        broker.produce(kafka_broker, topics["orders"], chunk)
        for _attempt in range(2):
            # Where to kill is chosen by progress, not by the clock: as soon as its instant is requested (records
            # read, nothing written), or once it is inflight (files being written).
            phase = rng.choice([".deltacommit.requested", ".deltacommit.inflight"])
            before = set(os.listdir(timeline))
            job = start_stitch("ingest", "-c", str(config), "--stream", "orders", "--max-records", "700", "--json")
            started: str | None = None
            try:
                while job.poll() is None and started is None:
                    started = next((n for n in set(os.listdir(timeline)) - before if n.endswith(phase)), None)
                    time.sleep(0.002)
            finally:
                kill_tree(job)
            if job.returncode == 0:
                finished += 1
            else:
                assert job.returncode == -signal.SIGKILL or job.returncode == 4, job.stderr.read() if job.stderr else ""
                requested = (started or "").split(".")[0]
                if requested and not any(n.startswith(f"{requested}_") for n in os.listdir(timeline)):
                    killed_mid_instant += 1
    assert killed_mid_instant >= 3, f"{killed_mid_instant} ingest(s) killed inside an instant, {finished} finished"
    wait_for("the killed ingests' heartbeats to expire", lambda: _ingest_until_done(config, "orders"))
    for stream in ("payments", "shipments"):
        ingest(config, stream)
    done = run_stitch("rollback", "-c", str(config), "--failed")
    assert done.returncode == 0, done.stderr
    assert not table.timeline().pending()
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []
    ends = {p: sum(1 for q, _ in orders if q == p) for p in range(PARTITIONS["orders"])}
    assert_tiled(table, "orders", ends)
    assert sum(c.rows for c in commits(table, "orders")) == len(orders), "an event was ingested twice"


def test_an_ingest_frozen_past_its_heartbeat_cannot_publish_offsets_another_run_consumed(
    kafka_broker: str, tmp_path: Path
) -> None:
    """Retries and overlapping cron runs: a real `stitch ingest` is frozen (SIGSTOP) once it has planned its offset
    ranges and started writing; its heartbeat expires, so a second run, presumed alone, reads and publishes the
    same offsets. Resumed, the first one must refuse to publish (exit 3, `offsets.still_unconsumed`): publishing
    would ingest every one of those records twice."""
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    markers = Path(table.storage.describe(MARKERS_DIR))
    produced = 0
    frozen: subprocess.Popen[str] | None = None
    instant = ""
    for attempt in range(5):
        more = 20_000 * (attempt + 1)
        broker.produce(kafka_broker, topic, [(k % 2, _order(k)) for k in range(produced, produced + more)])
        produced += more
        job = start_stitch("ingest", "-c", str(config), "--stream", "orders", "--json")
        try:
            # Frozen by progress: once its first data file is marked, its ranges are planned under its claim.
            while job.poll() is None and not (markers.is_dir() and os.listdir(markers)):
                time.sleep(0.002)
            os.kill(job.pid, signal.SIGSTOP)
            for pid in descendants(job.pid):
                os.kill(pid, signal.SIGSTOP)
            pending = pending_writes(table)
            if job.poll() is None and pending and not lock_held_elsewhere(table):
                frozen, instant = job, pending[0]
                break
            # It got to its publish first (a fast machine): let it finish; more records, and again.
            for pid in [job.pid, *descendants(job.pid)]:
                os.kill(pid, signal.SIGCONT)
            job.communicate(timeout=600)
        except BaseException:
            kill_tree(job)
            raise
    assert frozen is not None and instant, "every ingest finished before it could be frozen"
    try:
        wait_for("the frozen ingest's heartbeat to expire", lambda: _ingest_once(config, "orders"))
        taken = commits(table, "orders")[-1]
        assert taken.rows + sum(c.rows for c in commits(table, "orders")[:-1]) == produced, "it read them all"
        for pid in [frozen.pid, *descendants(frozen.pid)]:
            os.kill(pid, signal.SIGCONT)
        _out, err = frozen.communicate(timeout=900)
    finally:
        if frozen.poll() is None:
            kill_tree(frozen)
    assert frozen.returncode == 3, err[-3000:]
    assert f"were ingested by instant {taken_instant(table)} of another process while it ran" in err, err[-3000:]
    assert not any(i == instant for i in pending_writes(table)), "the refused run undid its claim"
    assert instant not in [i.requested for i in table.timeline().completed([Action.DELTACOMMIT])]
    assert_tiled(table, "orders", {0: produced // 2, 1: produced // 2})
    assert sum(c.rows for c in commits(table, "orders")) == produced, "an event was ingested twice"
    assert len(stitchlake.read(str(config))) == produced


def taken_instant(table: Table) -> str:
    """The newest completed deltacommit's requested time."""
    return table.timeline().completed([Action.DELTACOMMIT])[-1].requested


def _order(key: int) -> bytes:
    return as_json({"order_id": key, "order_date": "2026-11-20", "amount": 1.0, "order_ts": "2026-11-20T10:00:00Z"})


def _ingest_until_done(config: Path, stream: str) -> bool:
    """One more ingest; True once it says nothing is left (a killed run's fresh heartbeat says busy, exit 4)."""
    done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--json")
    if done.returncode == 4:
        return False
    assert done.returncode == 0, done.stdout + done.stderr
    return bool(json.loads(done.stdout)["message"].startswith("nothing to ingest"))


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def pending_writes(table: Table) -> list[str]:
    """Pending deltacommits (a micro-batch of `stitch stream` claims its stream like any ingest)."""
    return [i.requested for i in table.timeline().pending([Action.DELTACOMMIT])]


def test_stitch_stream_from_a_topic_killed_and_restarted_is_exactly_once(
    demo_data: Path, kafka_broker: str, tmp_path: Path
) -> None:
    """`stitch stream` on a Kafka-fed stream (Spark micro-batches reading the topic in tasks), SIGKILLed while a
    micro-batch is being written, restarted from its checkpoint, with records arriving meanwhile and a cron
    `stitch ingest` taking a turn; then run to the end with --available-now."""
    from scripts.demo_data import compare

    topics = {s: new_topic(kafka_broker, s, PARTITIONS[s]) for s in PARTITIONS}
    config, table = kafka_demo_table(tmp_path, demo_data / "landing", kafka_broker, topics)
    events = {s: keyed(read_landing(demo_data / "landing" / s), PARTITIONS[s]) for s in PARTITIONS}
    orders = events["orders"]
    broker.produce(kafka_broker, topics["orders"], orders[: len(orders) // 2])
    args = ("stream", "-c", str(config), "--stream", "orders", "--records-per-trigger", "700", "--json")
    kills = 0
    for _round in range(2):
        job = start_stitch(*args, "--trigger-interval", "1")
        try:
            before = len(commits(table, "orders"))

            def busy(job: subprocess.Popen[str] = job, before: int = before) -> bool:
                if job.poll() is not None:
                    raise AssertionError(f"the stream ended (exit {job.returncode}): {job.communicate()[1][-3000:]}")
                return bool(pending_writes(table)) and len(commits(table, "orders")) > before

            wait_for("a micro-batch being written after one committed", busy, timeout=900)
            assert descendants(job.pid), "the JVM runs below the CLI"
            kills += 1
        finally:
            kill_tree(job)
        if _round == 0:
            broker.produce(kafka_broker, topics["orders"], orders[len(orders) // 2 :])
            wait_for(
                "the killed batch's heartbeat to expire", lambda: _ingest_once(config, "orders", "--max-records", "200")
            )
    assert kills == 2
    # A restart must not count on Spark starting slower than the killed batch's heartbeat expires (its beats from
    # Spark tasks name no process): wait for the expiry, read from the heartbeat, as docs/operations.md says.
    wait_for("the killed batch's heartbeat to expire", lambda: writers_presumed_dead(table))
    last = subprocess.run(stitch(*args, "--available-now"), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert last.returncode == 0, last.stderr[-3000:]
    for stream in ("payments", "shipments"):
        broker.produce(kafka_broker, topics[stream], events[stream])
        ingest(config, stream)
    assert run_stitch("rollback", "-c", str(config), "--failed").returncode == 0
    assert not table.timeline().pending()
    ends = {p: sum(1 for q, _ in orders if q == p) for p in range(PARTITIONS["orders"])}
    assert_tiled(table, "orders", ends)
    assert sum(c.rows for c in commits(table, "orders")) == len(orders), "an event was ingested twice"
    assert any(c.stream_batch is not None and c.engine == "spark" for c in commits(table, "orders"))
    assert compare(stitchlake.read(str(config)), demo_data / "truth.parquet") == []


def writers_presumed_dead(table: Table) -> bool:
    """Whether every pending deltacommit's heartbeat says its writer is dead (expired, or its process gone)."""
    from stitchlake.concurrency.heartbeat import is_expired

    expire = table.config.concurrency.heartbeat.expire_s
    return all(is_expired(table.storage, instant, expire) for instant in pending_writes(table))


def _ingest_once(config: Path, stream: str, *more: str) -> bool:
    """One `stitch ingest`; False while a killed writer's heartbeat still says busy (exit 4)."""
    done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--json", *more)
    if done.returncode == 4:
        return False
    assert done.returncode == 0, done.stdout + done.stderr
    return True


def test_a_partition_added_to_the_topic_is_picked_up_from_its_start(kafka_broker: str, tmp_path: Path) -> None:
    topic = new_topic(kafka_broker, "orders", 1)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    ts = "2026-11-20T10:00:00Z"

    def order(key: int, amount: float) -> bytes:
        return as_json({"order_id": key, "order_date": "2026-11-20", "amount": amount, "order_ts": ts, "op": "I"})

    broker.produce(kafka_broker, topic, [(0, order(k, 1.0)) for k in range(10)])
    assert ingest(config, "orders")["records"] == 10
    broker.add_partitions(kafka_broker, topic, 3)
    broker.produce(kafka_broker, topic, [(1, order(k, 2.0)) for k in range(10, 15)])
    broker.produce(kafka_broker, topic, [(2, order(k, 3.0)) for k in range(15, 18)])
    done = ingest(config, "orders")
    assert done["records"] == 8, done
    rows = {r["order_id"]: r["amount"] for r in stitchlake.read(str(config)).to_pylist()}
    assert rows == {**dict.fromkeys(range(10), 1.0), **dict.fromkeys(range(10, 15), 2.0), 15: 3.0, 16: 3.0, 17: 3.0}
    assert_tiled(table, "orders", {0: 10, 1: 5, 2: 3})


def test_first_records_retention_took_from_a_partition_never_read_are_refused_until_reset(
    kafka_broker: str, tmp_path: Path
) -> None:
    """A partition the table has not read yet is owed its records from offset 0: one that was empty at the last
    ingest (recorded as a position) and one added since (numbered past the partitions recorded), whose first
    records retention took before any ingest, are refused like a read partition, not started where they now
    start."""
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")

    def order(key: int) -> bytes:
        return as_json({"order_id": key, "order_date": "2026-11-20", "amount": 1.0, "order_ts": "2026-11-20T10:00:00Z"})

    broker.produce(kafka_broker, topic, [(0, order(k)) for k in range(10)])
    assert ingest(config, "orders")["records"] == 10  # partition 1 empty: recorded where it stands
    broker.add_partitions(kafka_broker, topic, 3)
    broker.produce(kafka_broker, topic, [(1, order(k)) for k in range(10, 15)])
    broker.produce(kafka_broker, topic, [(2, order(k)) for k in range(15, 18)])
    broker.delete_records_before(kafka_broker, topic, 1, 2)
    broker.delete_records_before(kafka_broker, topic, 2, 1)
    # The lag counts what the ingest owes: partition 2's records from offset 0, not from where the topic starts.
    lag = table.sql('SELECT "partition", lag FROM "t$streams" WHERE stream = \'orders\' ORDER BY 1').to_pylist()
    assert [(r["partition"], r["lag"]) for r in lag] == [(0, 0), (1, 5), (2, 3)], lag
    refused = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--json")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert "partition 1: next offset 0, but the topic starts at 2 (2 record(s) gone)" in error, error
    assert "partition 2: next offset 0, but the topic starts at 1 (1 record(s) gone) (a partition added" in error
    assert len(commits(table, "orders")) == 1, "nothing was ingested"
    done = ingest(config, "orders", "--reset-offsets", "earliest")
    assert done["records"] == 5, done
    resets = commits(table, "orders")[-1].offset_resets
    assert [(r.partition, r.recorded, r.to) for r in resets] == [(1, 0, 2), (2, 0, 1)]
    keys = {r["order_id"] for r in stitchlake.read(str(config)).to_pylist()}
    assert keys == set(range(18)) - {10, 11, 15}
    assert_tiled_from(table, "orders", {0: 10, 1: 5, 2: 3})


def test_stitch_stream_reads_again_the_records_a_rollback_of_its_last_batch_put_back(
    kafka_broker: str, tmp_path: Path
) -> None:
    """A rollback of a stream's last micro-batch rewinds the table's offsets to where that batch began; the next
    `stitch stream` (the same checkpoint, its last batch ending where the topic still ends) must read those
    records again, not take the unchanged end for nothing new."""
    topic = new_topic(kafka_broker, "orders", 1)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    ts = "2026-11-20T10:00:00Z"
    values = [{"order_id": k, "order_date": "2026-11-20", "amount": 1.0, "order_ts": ts, "op": "I"} for k in range(10)]
    broker.produce(kafka_broker, topic, [(0, as_json(v)) for v in values])
    args = ("stream", "-c", str(config), "--stream", "orders", "--available-now", "--json")
    first = run_stitch(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert table.read().num_rows == 10
    rolled = run_stitch("rollback", "-c", str(config), "--stream", "orders", "--json")
    assert rolled.returncode == 0, rolled.stderr
    assert table.read().num_rows == 0
    again = run_stitch(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(r["order_id"] for r in table.read().to_pylist()) == list(range(10)), "the records were skipped"
    assert_tiled(table, "orders", {0: 10})


def test_offsets_the_topic_no_longer_holds_fail_clearly_until_reset(kafka_broker: str, tmp_path: Path) -> None:
    """Retention passed records never ingested: exit 5 naming the partition and the way on; --reset-offsets
    earliest skips them, recorded in the commit; --reset-offsets latest skips to the end."""
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")

    def order(key: int) -> bytes:
        return as_json({"order_id": key, "order_date": "2026-11-20", "amount": 1.0, "order_ts": "2026-11-20T10:00:00Z"})

    broker.produce(kafka_broker, topic, [(k % 2, order(k)) for k in range(20)])
    assert ingest(config, "orders")["records"] == 20
    broker.produce(kafka_broker, topic, [(k % 2, order(k)) for k in range(20, 40)])
    broker.delete_records_before(kafka_broker, topic, 0, 15)  # partition 0 held 10..19 unread; 10..14 are gone
    refused = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--json")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert "partition 0: next offset 10, but the topic starts at 15 (5 record(s) gone)" in error, error
    assert "--reset-offsets earliest" in error and "retention" in error
    assert len(commits(table, "orders")) == 1, "nothing was ingested"
    done = ingest(config, "orders", "--reset-offsets", "earliest")
    assert done["records"] == 15 and len(done["offset_resets"]) == 1, done
    last = commits(table, "orders")[-1]
    assert [(r.partition, r.recorded, r.to) for r in last.offset_resets] == [(0, 10, 15)]
    keys = {r["order_id"] for r in stitchlake.read(str(config)).to_pylist()}
    assert keys == set(range(40)) - {k for k in range(20, 30) if k % 2 == 0}

    broker.produce(kafka_broker, topic, [(0, order(k)) for k in range(100, 104)])
    broker.delete_records_before(kafka_broker, topic, 0, 22)
    done = ingest(config, "orders", "--reset-offsets", "latest")
    assert done["records"] == 0 and done["offset_resets"], done
    assert ingest(config, "orders")["message"].startswith("nothing to ingest")
    assert_tiled_from(table, "orders", {0: 24, 1: 20})


def assert_tiled_from(table: Table, stream: str, ends: dict[int, int]) -> None:
    """The latest recorded range of each partition ends at the topic's end."""
    latest: dict[int, int] = {}
    for commit in commits(table, stream):
        for item in commit.offsets:
            latest[item.partition] = item.end
    assert latest == ends


def test_bad_values_follow_bad_rows_with_topic_partition_and_offset(kafka_broker: str, tmp_path: Path) -> None:
    topic = new_topic(kafka_broker, "orders", 1)
    good = {"order_id": 1, "order_date": "2026-11-20", "amount": 1.0, "order_ts": "2026-11-20T10:00:00Z"}
    records: list[tuple[int, bytes | None]] = [(0, as_json(good)), (0, b"{not json"), (0, b"[1, 2]"), (0, None)]
    records.append((0, as_json({**good, "order_id": 2, "amount": "lots"})))
    broker.produce(kafka_broker, topic, records)
    config, table = kafka_demo_table(
        tmp_path / "fail", tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail"
    )
    refused = run_stitch("ingest", "-c", str(config), "--stream", "orders", "--json")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert f"Kafka topic {topic} partition 0 offset 1 (undecodable record value (not JSON" in error, error
    assert not commits(table, "orders")

    config, table = kafka_demo_table(tmp_path / "q", tmp_path / "landing", kafka_broker, {"orders": topic})
    done = ingest(config, "orders")
    assert done["rows"] == 1 and done["bad_rows"] == 4, done
    quarantined = pa.concat_tables(
        [pq.read_table(p) for p in (Path(table.path) / done["quarantine"]).glob("rows-*.parquet")],
        promote_options="permissive",
    ).to_pylist()
    found = {int(r["_kafka_offset"]): r for r in quarantined}
    assert sorted(found) == [1, 2, 3, 4]
    assert all(r["_kafka_topic"] == topic and r["_kafka_partition"] == "0" for r in found.values())
    assert found[1]["_value"] == "{not json" and "not JSON" in found[1]["_reason"]
    assert "tombstone" in found[3]["_reason"]
    assert found[4]["_reason"] == "unparsable value in amount"
    assert [r["order_id"] for r in stitchlake.read(str(config)).to_pylist()] == [1]
    assert ingest(config, "orders")["message"].startswith("nothing to ingest"), "bad records are consumed too"


def test_avro_values_with_the_configured_writer_schema(kafka_broker: str, tmp_path: Path) -> None:
    import io

    import fastavro

    schema = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "order_id", "type": "long"},
            {"name": "customer_id", "type": ["null", "long"], "default": None},
            {"name": "currency", "type": ["null", "string"], "default": None},
            {"name": "order_date", "type": "string"},
            {"name": "amount", "type": ["null", "double"]},
            {"name": "order_ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    parsed = fastavro.parse_schema(schema)

    def encode(key: int) -> bytes:
        out = io.BytesIO()
        row = {"order_id": key, "order_date": "2026-11-20", "amount": key / 2, "order_ts": 1_795_000_000_000_000 + key}
        row |= {"customer_id": key, "currency": "EUR"}
        fastavro.schemaless_writer(out, parsed, row)
        return out.getvalue()

    topic = new_topic(kafka_broker, "orders", 1)
    broker.produce(kafka_broker, topic, [(0, encode(k)) for k in range(5)] + [(0, b"\x01")])
    config, _table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic})
    document = yaml.safe_load(config.read_text())
    document["streams"]["orders"]["source"].update({"value_format": "avro", "avro_schema": schema})
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    done = ingest(config, "orders")
    assert done["rows"] == 5 and done["bad_rows"] == 1, done
    rows = sorted(stitchlake.read(str(config)).to_pylist(), key=lambda r: r["order_id"])
    assert [(r["order_id"], r["amount"]) for r in rows] == [(k, k / 2) for k in range(5)]


def test_restore_and_rollback_rewind_the_offsets_and_archive_keeps_them(kafka_broker: str, tmp_path: Path) -> None:
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")

    def orders(keys: range, amount: float) -> list[tuple[int, bytes | None]]:
        rows = [
            {"order_id": k, "order_date": "2026-11-20", "amount": amount, "order_ts": f"2026-11-20T10:00:{k % 60:02d}Z"}
            for k in keys
        ]
        return [(k % 2, as_json(row)) for k, row in zip(keys, rows, strict=True)]

    broker.produce(kafka_broker, topic, orders(range(10), 1.0))
    ingest(config, "orders")
    assert run_stitch("savepoint", "create", "-c", str(config), "--name", "before").returncode == 0
    broker.produce(kafka_broker, topic, orders(range(10, 20), 1.0))
    ingest(config, "orders")
    restored = run_stitch("savepoint", "restore", "-c", str(config), "--name", "before")
    assert restored.returncode == 0, restored.stderr
    assert len(stitchlake.read(str(config))) == 10
    again = ingest(config, "orders")
    assert again["records"] == 10, "the restore rewound the offsets: the undone records are read again"
    rolled = run_stitch("rollback", "-c", str(config), "--stream", "orders")
    assert rolled.returncode == 0, rolled.stderr
    assert ingest(config, "orders")["records"] == 10, "the rollback rewound them too"

    def on(partition: int, keys: range) -> list[tuple[int, bytes | None]]:
        return [(partition, value) for _p, value in orders(keys, 2.0)]

    # Partition 1 is written once more, then only partition 0, in enough instants that the archive takes every
    # commit that recorded partition 1: where it goes on is then known from the archive's checkpoint alone.
    broker.produce(kafka_broker, topic, on(1, range(99, 100)))
    last_of_1 = ingest(config, "orders")["offsets"]
    assert last_of_1 == [f"{topic}/1:10-11"], last_of_1
    for n in range(12):
        broker.produce(kafka_broker, topic, on(0, range(100 + n, 101 + n)))
        ingest(config, "orders")
    assert run_stitch("savepoint", "delete", "-c", str(config), "--name", "before").returncode == 0
    archived = run_stitch("archive", "-c", str(config), "--keep", "10", "--json")
    assert archived.returncode == 0 and json.loads(archived.stdout)["archived"] > 0, archived.stdout + archived.stderr
    still_active = [c for c in commits(table, "orders") if any(r.partition == 1 and r.size for r in c.offsets)]
    assert not still_active, "partition 1's reads must live only in archived instants"
    checkpoint = load_checkpoint(table.storage)
    assert checkpoint is not None
    assert {r.partition: r.end for r in checkpoint.offsets["orders"]}[1] == 11, checkpoint.offsets
    assert ingest(config, "orders")["message"].startswith("nothing to ingest"), "the checkpoint keeps the offsets"
    broker.produce(kafka_broker, topic, on(1, range(200, 203)) + on(0, range(203, 205)))
    done = ingest(config, "orders")
    assert done["records"] == 5, done
    assert sorted(done["offsets"]) == [f"{topic}/0:22-24", f"{topic}/1:11-14"], "partition 1 goes on exactly"
    assert len(stitchlake.read(str(config))) == 20 + 1 + 12 + 5


#: A Kafka client secret: given only to the `stitch` processes a test starts (never to this pytest process, so
#: never to the Spark cluster's worker), as `${STITCH_TEST_KAFKA_SASL_PASSWORD}` in the config.
KAFKA_SECRET = "kafka-S3cr3t-29-value"
SECRET_VARIABLE = "STITCH_TEST_KAFKA_SASL_PASSWORD"


@pytest.mark.spark
@pytest.mark.cluster
def test_a_kafka_ingest_on_a_spark_cluster_gets_its_secret_option_and_shows_it_nowhere(
    kafka_broker: str, spark_master: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`sasl.password: ${VAR}` on a SASL-free broker (the client accepts and ignores it), the variable set only in
    the `stitch` commands' environment. A Spark ingest on a standalone cluster works, so its executors (started by a
    worker that never had the variable) got it from the launcher, or `client_settings` would have failed there
    ("environment variable ... is not set"). The secret's value is nowhere: not in `validate`/`status`/`ingest`
    output (--json or not) nor an error, not in the job's request, properties or result files or spark-submit's
    argv (watched while the job runs), not under the table (Spark's log included) nor in the executors' logs."""
    from tests.support.session_servers import shared_root
    from tests.support.spark_cluster import CLUSTER_APP_CONF

    assert SECRET_VARIABLE not in os.environ
    topic = new_topic(kafka_broker, "orders", 2)
    broker.produce(kafka_broker, topic, [(k % 2, _order(k)) for k in range(40)])
    config, _table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    document = yaml.safe_load(config.read_text())
    document["streams"]["orders"]["source"]["options"] = {"sasl.password": f"${{{SECRET_VARIABLE}}}"}
    document["spark"] = {"master": spark_master, "conf": dict(CLUSTER_APP_CONF)}
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    private = tmp_path / "tmp"  # TMPDIR of the commands: the job's private files are made here
    private.mkdir()
    env = {**os.environ, SECRET_VARIABLE: KAFKA_SECRET, "TMPDIR": str(private), "COLUMNS": "200"}
    outputs: list[str] = []

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(stitch(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        outputs.append(done.stdout + done.stderr)
        return done

    for args in (("validate", "-c", str(config)), ("validate", "-c", str(config), "--json")):
        assert cli(*args).returncode == 0, outputs[-1]
    seen: dict[str, str] = {}  # what the job's private files and processes' argv held while it ran
    modes: dict[str, int] = {}
    job = start_stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark", "--json", env=env)
    with ended(job):
        while job.poll() is None:
            with contextlib.suppress(OSError):  # the job deletes them as it ends: read again next time
                for path in private.rglob("*"):
                    if path.is_file():
                        seen[str(path)] = path.read_text(errors="replace")
                        modes[str(path)] = path.stat().st_mode & 0o777
            for pid in descendants(job.pid):
                with contextlib.suppress(OSError):
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                    seen[f"argv of {pid}, sample {len(seen)}"] = argv
            time.sleep(0.05)
        out, err = job.communicate()
    outputs.append(out + err)
    assert job.returncode == 0, err[-3000:]
    done = json.loads(out)
    assert done["engine"] == "spark" and done["records"] == 40 and done["rows"] == 40, done
    # The job ran from its private files (that spark-submit is handed them by `--properties-file`, never the values
    # themselves, is test_security's: the launcher's argv lives too briefly to be sampled here for sure).
    assert any(name.endswith("request.json") for name in seen), list(seen)
    # The one place the value is: the private properties file, for the executors (0600, gone after the job).
    properties = next(name for name in seen if name.endswith("spark.properties"))
    assert f"spark.executorEnv.{SECRET_VARIABLE}={KAFKA_SECRET}" in seen.pop(properties).splitlines()
    assert modes[properties] == 0o600 and not [p for p in private.rglob("*") if p.is_file()]
    for args in (("status", "-c", str(config)), ("status", "-c", str(config), "--json")):
        assert cli(*args).returncode == 0, outputs[-1]
    document["streams"]["orders"]["source"]["topic"] = "no-such-topic"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    refused = cli("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark")
    assert refused.returncode != 0 and "no-such-topic" in refused.stderr, refused.stderr

    for text in [*outputs, *seen.values()]:
        assert KAFKA_SECRET not in text and "S3cr3t" not in text
    root, _shared = shared_root(tmp_path_factory)
    executor_logs = root / "spark-cluster" / "work"
    written = [p for folder in (tmp_path, executor_logs) for p in folder.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" and ".stitch" in p.parts for p in written), "Spark's log is under the table"
    for path in written:
        with contextlib.suppress(OSError):
            assert b"S3cr3t" not in path.read_bytes(), path
