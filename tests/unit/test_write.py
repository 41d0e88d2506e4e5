"""The write client (design.md §2, §3, §6): crashes leave no visible trace, input is validated and cast, log
files are named, listed and routed as specified, and a batch is precombined to one row per key per file group.

Crashes are simulated *around* the unit under test only: the data-file writer raises (or the whole process
dies) after some files exist. Everything else is real: tables on disk, the real timeline, real reads.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake.writing.writer
from stitchlake.api import Table
from stitchlake.errors import InputRejected, UsageError
from stitchlake.io.datafiles import read_table_file
from stitchlake.io.schemas import log_schema
from stitchlake.layout.bucket import bucket_of
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.tables import (
    CONCURRENCY,
    MODELS,
    THREE_STREAMS,
    as_rows,
    batch,
    new_table,
    orders_rows,
    partition_of,
    stream_doc,
    table_doc,
)

ORDERS, PAYMENTS, SHIPMENTS = MODELS
UTC = dt.UTC


def files_of(root: Path) -> set[str]:
    """Every file of a table except the lock provider's bookkeeping."""
    out = set()
    for path in root.rglob("*"):
        relative = str(path.relative_to(root))
        if path.is_file() and not relative.startswith(".stitch/locks"):
            out.add(relative)
    return out


def timeline_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".stitch" / "timeline").iterdir() if p.is_file())


# ------------------------------------------------------------------------------------------------ crashes


@pytest.mark.parametrize("when", ["before the third file", "after the third file"])
def test_a_write_failing_half_way_changes_nothing_and_is_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    table = new_table(tmp_path, buckets=4)
    root = Path(table.path)
    table.write("orders", batch(ORDERS, orders_rows(range(6))))
    table.write("payments", batch(PAYMENTS, [{"k": 1, "paid": 5, "note": "x", "pts": 1}]))
    before_rows = as_rows(table.read())
    before_files = files_of(root)
    before_timeline = timeline_names(root)

    real = getattr(stitchlake.writing.writer, "write_table_file")  # noqa: B009 - patched where write uses it
    guard = threading.Lock()
    attempted: list[str] = []
    written: list[str] = []

    def failing(storage: Any, path: str, rows: pa.Table, file_format: str = "parquet") -> int:
        with guard:
            attempted.append(path)
            number = len(attempted)
        if number >= 3 and when.startswith("before"):
            raise OSError("simulated: disk full")
        size = real(storage, path, rows, file_format)
        with guard:
            written.append(path)
        if number >= 3:
            raise OSError("simulated: connection lost after the write")
        return size

    monkeypatch.setattr(stitchlake.writing.writer, "write_table_file", failing)
    with pytest.raises(OSError, match="simulated"):
        table.write("orders", batch(ORDERS, orders_rows(range(20), ots=9)))
    monkeypatch.undo()

    assert len(written) >= 2, "the simulated crash must happen after some files exist"
    instant = Path(written[0]).name.split("_")[1]
    assert {Path(p).name.split("_")[1] for p in attempted} == {instant}
    for path in attempted:
        assert not (root / path).exists(), f"{path} of the aborted write is still on disk"
    assert not [n for n in timeline_names(root) if n.startswith(instant)], "the aborted instant is on the timeline"
    assert timeline_names(root) == before_timeline
    assert not (root / ".stitch" / "markers" / instant).exists()
    assert not (root / ".stitch" / "heartbeats" / instant).exists()
    assert files_of(root) == before_files
    assert as_rows(table.read()) == before_rows
    assert table.timeline().pending() == []
    # The table keeps working, and the retried batch lands in full.
    table.write("orders", batch(ORDERS, orders_rows(range(20), ots=9)))
    after = as_rows(table.read())
    assert sorted(k for k, _ in after) == list(range(20))
    assert all(row["ots"] == 9 and row["amount"] == row["k"] * 10 for row in after.values())


# ------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("missing", ["amount", "ots", "k", "p"])
def test_a_batch_missing_a_column_is_rejected_naming_it(tmp_path: Path, missing: str) -> None:
    table = new_table(tmp_path)
    table.write("orders", batch(ORDERS, orders_rows([1])))
    before_files = files_of(Path(table.path))
    data = batch(ORDERS, orders_rows([2, 3])).drop_columns([missing])
    with pytest.raises(InputRejected) as caught:
        table.write("orders", data)
    assert caught.value.exit_code == 5
    assert re.search(rf"missing column {missing}\b", str(caught.value)), str(caught.value)
    assert files_of(Path(table.path)) == before_files
    assert table.timeline().pending() == []
    assert sorted(k for k, _ in as_rows(table.read())) == [1]


def test_a_missing_column_is_rejected_even_with_bad_rows_quarantine(tmp_path: Path) -> None:
    document = {**THREE_STREAMS, "bad_rows": "quarantine"}
    table = new_table(tmp_path, document)
    with pytest.raises(InputRejected, match=r"missing column status\b"):
        table.write("orders", batch(ORDERS, orders_rows([1])).drop_columns(["status"]))
    assert table.timeline().completed() == []
    assert not (Path(table.path) / ".stitch" / "quarantine").exists()


@pytest.mark.parametrize(("value", "reason"), [(None, "null partition value p"), ("", "empty partition value p")])
def test_a_null_or_empty_partition_value_is_a_bad_row(tmp_path: Path, value: str | None, reason: str) -> None:
    failing = new_table(tmp_path / "fail")
    data = batch(ORDERS, orders_rows([1, 2, 3]))
    data = data.set_column(data.column_names.index("p"), "p", pa.array(["odd", value, "odd"], pa.string()))
    with pytest.raises(InputRejected, match=reason):
        failing.write("orders", data)
    assert failing.read().num_rows == 0

    quarantining = new_table(tmp_path / "quarantine", {**THREE_STREAMS, "bad_rows": "quarantine"})
    result = quarantining.write("orders", data)
    assert result.bad_rows == 1
    assert sorted(k for k, _ in as_rows(quarantining.read())) == [1, 3]
    assert result.quarantine is not None
    rejected = pq.read_table(Path(quarantining.path) / result.quarantine).to_pylist()
    assert [(r["k"], r["p"], r["_reason"]) for r in rejected] == [("2", value, reason)]


def test_a_column_of_an_uncastable_type_is_rejected(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    data = batch(ORDERS, orders_rows([1, 2]))
    data = data.set_column(data.column_names.index("amount"), "amount", pa.array([[1], [2]], pa.list_(pa.int64())))
    with pytest.raises(InputRejected) as caught:
        table.write("orders", data)
    assert caught.value.exit_code == 5
    assert "amount" in str(caught.value)
    assert table.read().num_rows == 0
    assert table.timeline().pending() == []
    assert table.timeline().completed() == []


SCALARS = {"n": "long", "i": "int", "f": "double", "b": "boolean", "d": "date", "t": "timestamp", "s": "string"}
TYPED: dict[str, Any] = table_doc(
    "typed", {"s": stream_doc(SCALARS, "n", deletes=False)}, buckets=2, concurrency=CONCURRENCY
)


def text_batch(rows: Sequence[Mapping[str, str | None]]) -> pa.Table:
    names = ["k", "n", "i", "f", "b", "d", "t", "s"]
    return pa.table({name: pa.array([r.get(name) for r in rows], pa.string()) for name in names})


def test_strings_that_parse_are_cast_to_the_column_types(tmp_path: Path) -> None:
    table = new_table(tmp_path, TYPED)
    base = {"n": "1", "i": "-3", "f": "2.5", "b": "true", "d": "2026-11-21", "t": "2026-11-21T10:00:00Z", "s": "x"}
    rows = [
        {"k": "12", **base, "n": "12"},
        {"k": " 13 ", **base, "b": "false", "t": "2026-11-21T12:00:00+02:00", "f": "-1e3"},
        {"k": "14", **base, "b": "yes", "t": "2026-11-21T10:00:00.000001Z", "i": "2147483647"},
        {"k": "15", **base, "b": "0", "n": "-9000000000"},
    ]
    result = table.write("s", text_batch(rows))
    assert result.bad_rows == 0 and result.rows == 4
    ten = dt.datetime(2026, 11, 21, 10, tzinfo=UTC)
    day = dt.date(2026, 11, 21)
    expected = [
        {"k": 12, "n": 12, "i": -3, "f": 2.5, "b": True, "d": day, "t": ten, "s": "x"},
        {"k": 13, "n": 1, "i": -3, "f": -1000.0, "b": False, "d": day, "t": ten, "s": "x"},
        {"k": 14, "n": 1, "i": 2147483647, "f": 2.5, "b": True, "d": day, "t": ten.replace(microsecond=1), "s": "x"},
        {"k": 15, "n": -9000000000, "i": -3, "f": 2.5, "b": False, "d": day, "t": ten, "s": "x"},
    ]
    got = table.read()
    assert sorted(got.to_pylist(), key=lambda r: r["k"]) == expected
    assert got.schema.field("t").type == pa.timestamp("us", tz="UTC")
    assert got.schema.field("i").type == pa.int32()


def test_timestamp_strings_without_a_zone_are_utc(tmp_path: Path) -> None:
    """A timestamp without an offset means UTC everywhere in stitchlake (config defaults, as_of); so in data."""
    table = new_table(tmp_path, TYPED)
    base = {"n": "1", "i": "1", "f": "1", "b": "true", "d": "2026-11-21", "s": "x"}
    rows = [
        {"k": "1", **base, "t": "2026-11-21T10:00:00"},
        {"k": "2", **base, "t": "2026-11-21 10:00:00"},
        {"k": "3", **base, "t": "2026-11-21"},
    ]
    result = table.write("s", text_batch(rows))
    assert result.bad_rows == 0
    got = {r["k"]: r["t"] for r in table.read().to_pylist()}
    ten = dt.datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert got == {1: ten, 2: ten, 3: dt.datetime(2026, 11, 21, tzinfo=UTC)}


@pytest.mark.parametrize(
    ("column", "value"),
    [("n", "abc"), ("i", "99999999999"), ("f", "one"), ("b", "maybe"), ("d", "21/11/2026"), ("t", "noon"), ("k", "x")],
)
def test_an_unparsable_value_is_a_bad_row(tmp_path: Path, column: str, value: str) -> None:
    base = {"n": "1", "i": "1", "f": "1", "b": "true", "d": "2026-11-21", "t": "2026-11-21T10:00:00Z", "s": "x"}
    good = [{"k": "1", **base}, {"k": "3", **base}]
    bad = {"k": "2", **base, column: value}
    reason = f"unparsable value in {column}"

    failing = new_table(tmp_path / "fail", TYPED)
    with pytest.raises(InputRejected) as caught:
        failing.write("s", text_batch([good[0], bad, good[1]]))
    assert caught.value.exit_code == 5
    assert reason in str(caught.value)
    assert failing.read().num_rows == 0

    quarantining = new_table(tmp_path / "quarantine", {**TYPED, "bad_rows": "quarantine"})
    result = quarantining.write("s", text_batch([good[0], bad, good[1]]))
    assert result.bad_rows == 1 and result.rows == 2
    assert sorted(r["k"] for r in quarantining.read().to_pylist()) == [1, 3]
    assert result.quarantine is not None
    rejected = pq.read_table(Path(quarantining.path) / result.quarantine).to_pylist()
    assert len(rejected) == 1
    assert rejected[0]["_reason"] == reason
    assert rejected[0][column] == value
    assert rejected[0]["_row"] == 1


# ------------------------------------------------------------------------------------------ files written


LOG_NAME = re.compile(r"^(\d{5})_(\d{17})_([0-9a-z]+)\.log\.(parquet|avro)$")


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
def test_log_files_are_named_placed_and_listed_in_the_instant(tmp_path: Path, log_format: str) -> None:
    table = new_table(tmp_path, buckets=4, log_format=log_format)
    root = Path(table.path)
    table.write("payments", batch(PAYMENTS, [{"k": 3, "paid": 1, "note": "x", "pts": 1}]))
    result = table.write("orders", batch(ORDERS, orders_rows(range(30))))
    timeline = table.timeline()
    instant = timeline.get(result.instant)
    assert instant is not None and instant.is_completed and instant.completed == result.completed
    meta = timeline.commit(instant)
    assert isinstance(meta, DeltaCommit)
    assert meta.stream == "orders"
    assert meta.rows == 30
    listed = {entry.path: entry for entry in meta.added}
    assert listed == {f.path: f for f in result.files}
    on_disk = {str(p.relative_to(root)) for p in root.glob(f"p=*/*_{result.instant}_*")}
    assert set(listed) == on_disk, "files on disk and files listed by the instant differ"
    assert len(listed) == 8  # 2 partitions x 4 buckets, 30 keys cover them all
    total = 0
    for path, entry in listed.items():
        folder, name = path.split("/")
        match = LOG_NAME.match(name)
        assert match, f"{name} is not <5-digit fg>_<instant>_<token>.log.{log_format}"
        file_group, file_instant, _token, suffix = match.groups()
        assert suffix == log_format
        assert file_instant == result.instant
        assert folder in ("p=even", "p=odd")
        assert entry.partition == folder
        assert entry.file_group == file_group
        assert int(file_group) < 4
        assert entry.kind == "log" and entry.stream == "orders"
        assert entry.bytes == (root / path).stat().st_size > 0
        rows = read_table_file(table.storage, path, log_schema(table.config, table.config.streams["orders"]))
        assert entry.rows == rows.num_rows > 0
        total += rows.num_rows
    assert total == 30
    assert result.bytes == sum(e.bytes for e in listed.values())


def test_precombine_writes_one_summary_row_per_key_per_file_group(tmp_path: Path) -> None:
    table = new_table(tmp_path, buckets=2)
    root = Path(table.path)
    rows: list[dict[str, Any]] = [
        {"k": 1, "amount": 1, "status": "a", "ots": 3},
        {"k": 2, "amount": 20, "status": "x", "ots": 1},
        {"k": 1, "amount": 2, "status": "b", "ots": 9},
        {"k": 4, "amount": 40, "status": "x", "ots": 1},
        {"k": 1, "amount": 3, "status": "c", "ots": 5},
        {"k": 2, "amount": 21, "status": "y", "ots": 1},
        {"k": 3, "amount": 30, "status": "z", "ots": 2},
        {"k": 4, "amount": None, "status": None, "ots": 0, "deleted": True},
        {"k": 4, "amount": 41, "status": "w", "ots": 1},
    ]
    result = table.write("orders", batch(ORDERS, rows))
    assert result.rows == 9
    stored: dict[int, dict[str, Any]] = {}
    for entry in result.files:
        content = pq.read_table(root / entry.path).to_pylist()
        keys = [r["k"] for r in content]
        assert len(keys) == len(set(keys)), f"{entry.path} holds a key twice: {keys}"
        assert entry.rows == len(content)
        for r in content:
            stored[r["k"]] = r
    assert sorted(stored) == [1, 2, 3, 4]
    assert sum(e.rows for e in result.files) == 4
    assert (stored[1]["amount"], stored[1]["status"], stored[1]["ots"]) == (2, "b", 9)
    assert (stored[2]["amount"], stored[2]["status"]) == (21, "y")  # tie: the later row
    assert (stored[4]["amount"], stored[4]["status"]) == (41, "w")
    assert as_rows(table.read(columns=["k", "p", "amount", "status", "ots"])) == {
        (1, "odd"): {"k": 1, "p": "odd", "amount": 2, "status": "b", "ots": 9},
        (2, "even"): {"k": 2, "p": "even", "amount": 21, "status": "y", "ots": 1},
        (3, "odd"): {"k": 3, "p": "odd", "amount": 30, "status": "z", "ots": 2},
        (4, "even"): {"k": 4, "p": "even", "amount": 41, "status": "w", "ots": 1},
    }
    # Ignore-mode streams precombine to one row per key too, keeping per-column values.
    pay = table.write(
        "payments",
        batch(
            PAYMENTS,
            [
                {"k": 1, "paid": 5, "note": None, "pts": 1},
                {"k": 1, "paid": None, "note": "n", "pts": 2},
                {"k": 1, "paid": None, "note": None, "pts": 3},
            ],
        ),
    )
    assert [e.rows for e in pay.files] == [1]
    content = pq.read_table(root / pay.files[0].path).to_pylist()
    assert (content[0]["paid"], content[0]["note"], content[0]["pts"]) == (5, "n", 3)


def test_logs_and_the_bases_a_compaction_writes_hold_their_keys_in_ascending_order(tmp_path: Path) -> None:
    """Files are written in key order (docs/spark-reader.md, "What a file holds"): the JVM reader merges them as
    sorted runs. Keys arrive shuffled, sparse and negative, in both streams; each file's keys must rise."""
    table = new_table(tmp_path, buckets=2)
    root = Path(table.path)
    keys = [k * 7919 % 1009 - 500 for k in range(300)]
    written = table.write("orders", batch(ORDERS, orders_rows(keys))).files
    payments = [{"k": k, "paid": k, "note": None, "pts": 1} for k in reversed(keys[::2])]
    written += table.write("payments", batch(PAYMENTS, payments)).files
    assert len(written) == 8
    assert table.compact().done is not None
    bases = [path for path in root.rglob("*.parquet") if ".log." not in path.name]
    assert len(bases) == 4
    for path in [*(root / entry.path for entry in written), *bases]:
        stored = pq.read_table(path, columns=["k"]).column("k").to_pylist()
        assert stored == sorted(stored) and len(stored) == len(set(stored)), path
    # A rescale encodes each new base as its old slices' shares arrive: one rising run per old slice (2 here).
    table.rescale(3)
    rescaled = [path for path in root.rglob("*.parquet") if ".log." not in path.name and path not in bases]
    assert len(rescaled) == 6
    for path in rescaled:
        stored = pq.read_table(path, columns=["k"]).column("k").to_pylist()
        falls = sum(1 for before, after in itertools.pairwise(stored) if after <= before)
        assert falls <= 1 and len(stored) == len(set(stored)), path
    assert sorted(r["k"] for r in table.read(columns=["k"]).to_pylist()) == sorted(keys)


@pytest.mark.parametrize("buckets", [1, 3, 8])
def test_rows_route_to_the_file_group_of_their_key_bucket(tmp_path: Path, buckets: int) -> None:
    table = new_table(tmp_path, buckets=buckets)
    keys = list(range(-20, 60, 3))
    result = table.write("orders", batch(ORDERS, orders_rows(keys)))
    seen: list[int] = []
    for entry in result.files:
        content = pq.read_table(Path(table.path) / entry.path)
        for k, p in zip(content.column("k").to_pylist(), content.column("p").to_pylist(), strict=True):
            bucket = int(bucket_of([pa.array([k], pa.int64())], buckets)[0])
            assert entry.file_group == f"{bucket:05d}", f"key {k} in file group {entry.file_group}"
            assert entry.partition == f"p={partition_of(k)}" == f"p={p}"
            seen.append(k)
    assert sorted(seen) == keys
    expected_groups = {
        (f"p={partition_of(k)}", f"{int(bucket_of([pa.array([k], pa.int64())], buckets)[0]):05d}") for k in keys
    }
    assert {(e.partition, e.file_group) for e in result.files} == expected_groups


def test_composite_keys_route_by_the_hash_of_all_key_columns(tmp_path: Path) -> None:
    document = {
        "table": {"name": "composite", "path": "table", "key": {"id": "long", "region": "string"}, "buckets": 4},
        "streams": {"s": {"columns": {"v": "long"}}},
        "concurrency": CONCURRENCY,
    }
    table = new_table(tmp_path, document)
    ids = [i for i in range(12) for _ in ("eu", "us")]
    regions = [r for _ in range(12) for r in ("eu", "us")]
    data = pa.table({"id": pa.array(ids, pa.int64()), "region": regions, "v": pa.array(range(24), pa.int64())})
    result = table.write("s", data)
    expected = bucket_of([pa.array(ids, pa.int64()), pa.array(regions)], 4)
    where = {(i, r): f"{int(b):05d}" for i, r, b in zip(ids, regions, expected, strict=True)}
    for entry in result.files:
        assert entry.partition == ""
        assert "/" not in entry.path
        content = pq.read_table(Path(table.path) / entry.path)
        for i, r in zip(content.column("id").to_pylist(), content.column("region").to_pylist(), strict=True):
            assert where[(i, r)] == entry.file_group
    assert sum(e.rows for e in result.files) == 24
    read = sorted((r["id"], r["region"], r["v"]) for r in table.read().to_pylist())
    assert read == sorted(zip(ids, regions, range(24), strict=True))


def test_an_empty_batch_commits_nothing_visible(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    table.write("orders", batch(ORDERS, orders_rows([1, 2])))
    before = as_rows(table.read())
    result = table.write("orders", batch(ORDERS, []))
    assert result.rows == 0 and result.files == []
    assert as_rows(table.read()) == before


def test_config_file_table_writes_the_same_as_a_dict_config(tmp_path: Path) -> None:
    """A YAML config with relative paths writes where the dict config (same base) does."""
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(THREE_STREAMS))
    from stitchlake.config import load_config

    table = Table(load_config(tmp_path / "wide.yaml"))
    table.init()
    table.write("shipments", batch(SHIPMENTS, [{"k": 2, "carrier": "dhl", "ship_no": 1}]))
    assert Path(table.path) == (tmp_path / "table").resolve()
    assert sorted(os.listdir(tmp_path / "table")) == [".stitch", "p=even"]


def test_log_files_are_lz4_with_delta_encoded_positions_and_base_files_zstd(tmp_path: Path) -> None:
    """Logs are re-read by every snapshot read until compacted, bases live long: see io/datafiles.py."""
    table = new_table(tmp_path)
    rows = [{"k": k, "p": "a", "amount": k, "status": "x", "ots": k} for k in range(50)]
    table.write("orders", batch(MODELS[0], rows))
    table.compact("all")
    timeline = table.timeline()
    logs = [e.path for e in timeline.commit(timeline.completed([Action.DELTACOMMIT])[0]).added_files]
    bases = [f.path for f in table.view().live_files() if ".log." not in f.path]
    assert logs and bases
    for path in logs:
        chunks = pq.ParquetFile(os.path.join(table.path, path)).metadata.row_group(0)
        columns = {chunks.column(i).path_in_schema: chunks.column(i) for i in range(chunks.num_columns)}
        assert {c.compression for c in columns.values()} == {"LZ4"}
        assert "DELTA_BINARY_PACKED" in columns["_sl__orders__pos"].encodings
    for path in bases:
        chunks = pq.ParquetFile(os.path.join(table.path, path)).metadata.row_group(0)
        assert {chunks.column(i).compression for i in range(chunks.num_columns)} == {"ZSTD"}


def quarantining_csv_orders(root: Path) -> tuple[Table, Path]:
    """A table with `bad_rows: quarantine` whose orders land as CSV in `root/landing`, one file of one row there."""
    landing = root / "landing"
    landing.mkdir()
    document = copy.deepcopy(THREE_STREAMS) | {"bad_rows": "quarantine"}
    document["streams"]["orders"]["source"] = {"format": "csv", "path": str(landing)}
    table = new_table(root, document)
    (landing / "0001.csv").write_text("k,p,amount,status,ots,op\n1,odd,10,new,1,\n", encoding="utf-8")
    return table, landing


def stopped_between_listing_and_read(
    table: Table, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object], refusal: str
) -> None:
    """An ingest during which `meanwhile` happens to a listed landing file before its read: stopped with `refusal`,
    nothing committed, nothing set aside."""
    import stitchlake.writing.events as events_module

    reader = getattr(events_module, "read_landing_rows")  # noqa: B009 - patched where ingest reads

    def read_after(*args: Any, **kwargs: Any) -> Any:
        meanwhile()
        return reader(*args, **kwargs)

    monkeypatch.setattr(events_module, "read_landing_rows", read_after)
    with pytest.raises(InputRejected, match=refusal):
        table.ingest("orders", engine="local")
    assert table.timeline().completed() == []
    assert not (Path(table.path) / ".stitch" / "quarantine").exists()
    monkeypatch.undo()


def test_a_landing_file_gone_before_it_is_read_stops_the_ingest_even_under_quarantine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `bad_rows: quarantine` a listed file moved away before its read was set aside as unreadable, with no
    copy, and recorded as consumed: moved back (same size and time), it was skipped for ever. The ingest stops
    (nothing committed) and the next one lists again."""
    table, landing = quarantining_csv_orders(tmp_path)
    moved_away = lambda: (landing / "0001.csv").rename(tmp_path / "away.csv")  # noqa: E731 - listed, gone before read
    stopped_between_listing_and_read(table, monkeypatch, moved_away, "vanished between the listing and the read")
    (tmp_path / "away.csv").rename(landing / "0001.csv")
    table.ingest("orders", engine="local")
    assert [k for k, _ in as_rows(table.read())] == [1]


def test_a_storage_error_reading_a_good_landing_file_fails_the_ingest_instead_of_quarantining_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passing storage error (an S3 503, a timeout: obstore's are OSErrors) on a good file was taken for bad
    input: under quarantine the file was set aside as unreadable and counted consumed, its rows never ingested.
    It fails the ingest (exit 1, nothing committed), and the next run ingests the file."""
    import errno

    from stitchlake.storage.local import LocalStorage

    table, _landing = quarantining_csv_orders(tmp_path)
    reader, failures = LocalStorage.read_versioned, [OSError(errno.EIO, "the store is unavailable")]

    def unavailable_once(self: LocalStorage, path: str) -> tuple[bytes, str]:
        if path.endswith("0001.csv") and failures:
            raise failures.pop()
        return reader(self, path)

    monkeypatch.setattr(LocalStorage, "read_versioned", unavailable_once)
    with pytest.raises(OSError, match="unavailable"):
        table.ingest("orders", engine="local")
    assert table.timeline().completed() == []
    assert not (Path(table.path) / ".stitch" / "quarantine").exists()
    table.ingest("orders", engine="local")
    assert [k for k, _ in as_rows(table.read())] == [1]


def test_a_landing_file_redelivered_between_the_listing_and_the_read_is_taken_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit records each landing file's listed version as consumed, but the rows came from whatever the read
    found: a file re-delivered in between had its new rows ingested under its old version (the old rows lost, the
    next run refusing it as "changed after it was ingested", and --reingest-changed ingesting it twice). The ingest
    now stops (nothing committed) when the bytes are not the version listed; the next run takes the new one."""
    table, landing = quarantining_csv_orders(tmp_path)

    def redelivered() -> None:  # listed, then replaced by a new delivery before its read
        target = landing / "0001.csv"
        target.write_text("k,p,amount,status,ots,op\n7,odd,70,late,9,\n8,even,80,late,9,\n", encoding="utf-8")
        os.utime(target, ns=(1, 1))

    stopped_between_listing_and_read(table, monkeypatch, redelivered, "changed between the listing and the read")
    table.ingest("orders", engine="local")
    assert sorted(k for k, _ in as_rows(table.read())) == [7, 8]
    assert table.ingest("orders", engine="local").result.rows == 0, "the version ingested is the one recorded"


def test_a_bad_landing_file_gone_before_its_copy_is_taken_stops_the_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file rejected for its content is set aside with a copy; one gone before the copy was taken was set aside
    with none and recorded as consumed, so, moved back, it was skipped for ever. The ingest stops instead."""
    import stitchlake.writing.events as events_module

    table, landing = quarantining_csv_orders(tmp_path)

    def rejected_then_moved_away(*_args: Any, **_kwargs: Any) -> Any:
        (landing / "0001.csv").rename(tmp_path / "away.csv")
        raise InputRejected("0001.csv: cannot read csv file (a bad byte)", file="0001.csv")

    monkeypatch.setattr(events_module, "read_landing_rows", rejected_then_moved_away)
    with pytest.raises(InputRejected, match="vanished before it could be set aside"):
        table.ingest("orders", engine="local")
    assert table.timeline().completed() == []
    monkeypatch.undo()
    (tmp_path / "away.csv").rename(landing / "0001.csv")
    table.ingest("orders", engine="local")
    assert [k for k, _ in as_rows(table.read())] == [1]


def test_a_named_landing_file_that_is_gone_says_so_rather_than_asking_for_a_folder(tmp_path: Path) -> None:
    """A file named to ingest (`--source`, a `stitch stream` micro-batch's files) that no longer exists was taken
    for a folder: "create the folder, or fix the stream's source.path"."""
    table, landing = quarantining_csv_orders(tmp_path)
    with pytest.raises(UsageError, match=r"landing file .*0002\.csv does not exist \(moved or deleted"):
        table.ingest("orders", sources=[str(landing / "0002.csv")], engine="local")


def test_a_replayed_stream_micro_batch_leaves_out_the_landing_files_the_table_already_consumed(
    tmp_path: Path,
) -> None:
    """A `stitch stream` micro-batch that committed before Spark recorded it is run again with the same files. A
    retention rule may have deleted them meanwhile (they are consumed): the replay named them all to the ingest,
    which refused the file that was gone, on every restart. Now it ingests only what the table has not consumed."""
    from stitchlake.engine import LocalEngine
    from stitchlake.spark.streaming import ingest_landing_batch
    from stitchlake.timeline.metadata import StreamBatch

    table, landing = quarantining_csv_orders(tmp_path)
    (landing / "0002.csv").write_text("k,p,amount,status,ots,op\n2,even,20,new,1,\n", encoding="utf-8")
    first = ingest_landing_batch(
        table, LocalEngine(), "orders", ["0001.csv", "0002.csv"], lambda: StreamBatch("query-1", 1)
    )
    assert first is not None and first.source_files == 2
    (landing / "0001.csv").unlink()  # consumed, and taken by the landing folder's retention
    replayed = ingest_landing_batch(
        table, LocalEngine(), "orders", ["0001.csv", "0002.csv"], lambda: StreamBatch("query-1", 1)
    )
    assert replayed is None, "the replay ingested again"
    (landing / "0003.csv").write_text("k,p,amount,status,ots,op\n3,odd,30,new,1,\n", encoding="utf-8")
    again = ingest_landing_batch(table, LocalEngine(), "orders", ["0002.csv", "0003.csv"], lambda: StreamBatch("q", 2))
    assert again is not None and again.source_files == 1
    assert sorted(k for k, _ in as_rows(table.read())) == [1, 2, 3]
