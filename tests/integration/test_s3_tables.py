"""The core behaviours on both backends: a table on local disk and the same on the S3 server
(tests/support/s3_server.py).

Writes, snapshot / read-optimized / as-of / incremental reads, compaction, clean, savepoint and restore, archive,
erase, exactly-once ingest from landing folders on the same backend, a crashed writer whose heartbeat expires
and whose write `clean` rolls back, and the table lock raced by processes. Expected rows come from the reference
model (tests/support/reference.py) through the helpers of tests/{unit,integration}/test_read.py, never from
stitchlake's merge.

On S3 the process has no `storage:` block: the AWS_* variables of the test bucket configure obstore, as they
would on a host with credentials in its environment (tests/integration/test_s3_cli.py covers the `storage:` block).
"""

from __future__ import annotations

import io
import multiprocessing as mp
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.markers import marked_files
from stitchlake.errors import UsageError
from stitchlake.storage import LocalStorage, Storage, storage_for
from stitchlake.timeline.instant import Action
from tests.support.cli import python
from tests.support.histories import apply, random_plan
from tests.support.processes import CRASHING_WRITER
from tests.support.reads import changes, expected_changes
from tests.support.tables import (
    ORDERS,
    PAYMENTS,
    SHIPMENTS,
    THREE_STREAMS,
    as_rows,
    batch,
    new_table,
    new_table_file,
    orders_rows,
    partition_of,
)


@dataclass(frozen=True)
class Place:
    """Where a test's table and landing folders live: a local folder or an S3 prefix."""

    backend: str
    root: Path  # a local scratch folder (configs and scripts live here on both backends)
    table: str  # the table's location, as a config's table.path gives it
    landing: str

    def storage(self, location: str | None = None) -> Storage:
        return storage_for(location or self.table)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    if request.param == "local":
        return Place("local", tmp_path, str(tmp_path / "table"), str(tmp_path / "landing"))
    bucket = request.getfixturevalue("s3_bucket")
    for name, value in bucket.env.items():  # child processes inherit them too
        monkeypatch.setenv(name, value)
    return Place("s3", tmp_path, f"{bucket.url}/warehouse/wide", f"{bucket.url}/landing")


def put_parquet(storage: Storage, path: str, rows: pa.Table) -> None:
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    storage.write_bytes(path, sink.getvalue())


# ------------------------------------------------------------------------------------------------- reads


def test_writes_compactions_and_an_erase_read_like_the_reference(place: Place) -> None:
    table = new_table(place.root, path=place.table)
    assert table.storage.remote == (place.backend == "s3")
    history = apply(table, random_plan(7))  # writes of all streams, two compactions, an erase
    expected = history.expected()
    assert as_rows(table.read()) == expected
    for number, completed in history.times:  # as-of every completion time (0: before the first commit)
        assert as_rows(table.read(as_of=completed)) == history.expected(number), f"as of commit {number}"
    columns = ["k", "p", "amount", "paid", "carrier"]
    (first, start), (last, end) = history.times[2], history.times[-1]
    got = changes(table.read(since=start, until=end, columns=columns))
    assert got == expected_changes(history.expected(first), history.expected(last), columns)
    table.compact()
    assert as_rows(table.read(mode="read_optimized")) == expected
    assert as_rows(table.read(filter="p=even")) == {k: v for k, v in expected.items() if k[1] == "even"}


def test_clean_savepoint_and_restore(place: Place) -> None:
    table = new_table(place.root, path=place.table)
    table.write("orders", batch(ORDERS, orders_rows(range(10))))
    table.write("payments", batch(PAYMENTS, [{"k": k, "paid": k, "note": "n", "pts": 1} for k in range(5)]))
    pinned = as_rows(table.read())
    table.savepoint("before-fix")
    table.write("orders", batch(ORDERS, orders_rows(range(5, 15), ots=2)))
    table.compact()
    table.write("shipments", batch(SHIPMENTS, [{"k": 3, "carrier": "dhl", "ship_no": 1}]))
    table.compact()
    latest = as_rows(table.read())
    storage = table.storage
    data_before = {p for p in storage.walk_files() if not p.startswith(".stitch/")}
    cleaned = table.clean(retain=1).result
    data_after = {p for p in storage.walk_files() if not p.startswith(".stitch/")}
    assert cleaned.deleted and data_after < data_before
    assert as_rows(table.read()) == latest
    assert as_rows(table.read(as_of="before-fix")) == pinned  # a savepoint's files are never cleaned
    table.restore("before-fix")
    assert as_rows(table.read()) == pinned


def test_archive_keeps_every_answer_and_refuses_reads_before_its_horizon(place: Place) -> None:
    document = {"archive": {"keep_instants": 10}}
    from tests.support.tables import THREE_STREAMS

    table = new_table(place.root, {**THREE_STREAMS, **document}, path=place.table)
    for step in range(24):
        table.write("orders", batch(ORDERS, orders_rows([step % 7, 10 + step], ots=step)))
    before = as_rows(table.read())
    early = table.timeline().completed()[3].completed
    result = table.archive().result
    assert result.archived == 14 and len(table.timeline()) == 10
    assert as_rows(table.read()) == before
    with pytest.raises(UsageError, match="older than the archived timeline"):
        table.read(as_of=early)
    table.write("payments", batch(PAYMENTS, [{"k": 1, "paid": 1, "note": None, "pts": 0}]))
    table.compact()
    assert as_rows(table.read(mode="read_optimized")) == as_rows(table.read())


# ------------------------------------------------------------------------------------------------ ingest


def test_ingest_from_landing_folders_is_exactly_once(place: Place) -> None:
    from tests.support.tables import THREE_STREAMS

    document = {
        **THREE_STREAMS,
        "streams": {
            **THREE_STREAMS["streams"],
            "orders": {
                **THREE_STREAMS["streams"]["orders"],
                "source": {"format": "parquet", "path": f"{place.landing}/orders"},
            },
        },
    }
    table = new_table(place.root, document, path=place.table)
    landing = place.storage(place.landing)
    put_parquet(landing, "orders/2026/part-0001.parquet", batch(ORDERS, orders_rows(range(4))))
    put_parquet(landing, "orders/2026/part-0002.parquet", batch(ORDERS, orders_rows(range(2, 8), ots=2)))
    put_parquet(landing, "orders/_tmp/part-0003.parquet", batch(ORDERS, orders_rows(range(50, 60))))  # hidden
    first = table.ingest("orders").result
    assert first.source_files == 2 and first.rows == 10
    assert table.ingest("orders").result.source_files == 0  # nothing new: nothing ingested twice
    put_parquet(landing, "orders/2026/part-0004.parquet", batch(ORDERS, orders_rows([1], ots=9)))
    assert table.ingest("orders").result.source_files == 1
    rows = as_rows(table.read())
    assert sorted(k for k, _ in rows) == list(range(8))
    assert rows[(1, "odd")]["ots"] == 9 and rows[(3, "odd")]["ots"] == 2 and rows[(0, "even")]["ots"] == 1
    # A landing file rewritten under a consumed name (a new ETag on S3) is noticed, not skipped in silence.
    put_parquet(landing, "orders/2026/part-0001.parquet", batch(ORDERS, orders_rows(range(4), ots=5)))
    with pytest.raises(Exception, match="changed after it was ingested"):
        table.ingest("orders")


# ---------------------------------------------------------------------------------- crashes and liveness


def test_a_crashed_writer_expires_and_clean_rolls_its_files_back(place: Place) -> None:
    document = {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "path": place.table, "buckets": 4}}
    table, config = new_table_file(place.root, document)
    table.write("orders", batch(ORDERS, orders_rows(range(0, 20, 3))))
    before = as_rows(table.read())
    script = place.root / "crash.py"
    script.write_text(CRASHING_WRITER)
    done = python(script, config)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr  # its hard crash, not a refusal
    pending = table.timeline().pending()
    assert len(pending) == 1 and pending[0].action == Action.DELTACOMMIT
    instant = pending[0].requested
    storage = table.storage
    leftovers = marked_files(storage, instant)
    assert len(leftovers) == 2 and all(storage.exists(path) for path in leftovers)
    assert as_rows(table.read()) == before  # the crashed write's files are invisible

    # Its process is gone from this host, so it is a failed write at once (elsewhere it would be once its
    # heartbeat expired, see tests/{unit,integration}/test_heartbeat.py), and clean rolls it back.
    expire = table.config.concurrency.heartbeat.expire_s
    assert heartbeats.is_expired(storage, instant, expire, now=heartbeats.last_beat(storage, instant))
    table.clean()
    assert table.timeline().get(instant) is None and table.timeline().pending() == []
    assert not any(storage.exists(path) for path in leftovers)
    assert marked_files(storage, instant) == [] and heartbeats.last_beat(storage, instant) is None
    assert as_rows(table.read()) == before


def _lock_worker(location: str, env: dict[str, str], rounds: int, start: Any, results: Any) -> None:
    import os

    os.environ.update(env)
    from stitchlake.concurrency.providers import lock_spec, make_lock

    storage = storage_for(location)
    start.wait()
    for _ in range(rounds):
        lock = make_lock(storage, lock_spec({"provider": "storage", "wait_s": 60, "expire_s": 30}))
        with lock:
            count = int(storage.read_bytes("counter")) if storage.exists("counter") else 0
            storage.write_atomic("counter", str(count + 1).encode())
    results.put(rounds)


def test_the_storage_lock_is_exclusive_across_processes(place: Place) -> None:
    """Read-modify-write of a counter under the lock by 4 processes: no increment is lost."""
    import os

    ctx = mp.get_context("spawn")  # never fork after obstore did I/O
    start = ctx.Event()
    results = ctx.Queue()
    location = f"{place.table}-lock"
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    procs = [ctx.Process(target=_lock_worker, args=(location, env, 8, start, results)) for _ in range(4)]
    for proc in procs:
        proc.start()
    start.set()
    assert sum(results.get(timeout=900) for _ in procs) == 32
    for proc in procs:
        proc.join(timeout=600)
        assert proc.exitcode == 0
    assert storage_for(location).read_bytes("counter") == b"32"


def test_only_local_tables_use_the_local_disk(place: Place) -> None:
    table = new_table(place.root, path=place.table)
    table.write("orders", batch(ORDERS, orders_rows(range(3))))
    table.write("payments", batch(PAYMENTS, [{"k": 1, "paid": 1, "note": "x", "pts": 1}]))
    table.compact()
    local = [p for p in place.root.rglob("*") if p.is_file() and p.name != "test.yaml"]
    if place.backend == "s3":
        assert not isinstance(table.storage, LocalStorage) and local == []
        names = set(table.storage.walk_files())
        assert {".stitch/table.json"} < names and any(n.startswith(".stitch/timeline/") for n in names)
        assert any(n.startswith(f"p={partition_of(1)}/") for n in names)
    else:
        assert local


def test_two_tables_of_one_name_never_share_a_stream_checkpoint(
    place: Place, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stitch stream`'s checkpoint: inside the table on local disk; for a table on S3, in local state, in a folder
    of that table's own (name and id). A second table of the same name (another prefix, or the table made again)
    gets another folder: Spark's offsets of one query never resume another table's stream."""
    from stitchlake.spark.streaming import checkpoint_folder

    monkeypatch.setenv("STITCH_STATE_DIR", str(tmp_path / "state"))
    first = new_table(place.root, path=place.table)
    other_root = tmp_path / "other"
    other_root.mkdir()
    second = new_table(other_root, path=f"{place.table}-again")
    assert first.config.table.name == second.config.table.name and first.table_id != second.table_id
    folders = [checkpoint_folder(table, "orders") for table in (first, second)]
    assert folders[0] != folders[1]
    if place.backend == "s3":
        assert all(Path(f).is_relative_to(tmp_path / "state" / "streams") for f in folders)
        assert first.table_id in folders[0] and second.table_id in folders[1]
    else:
        assert folders[0].startswith(place.table + "/") and folders[1].startswith(f"{place.table}-again/")
