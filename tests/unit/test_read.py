"""Readers (design.md §7): incremental, time travel, column pruning, filters, log formats and entry points.

Expected results come from the brute-force reference model (tests/support/reference.py) or from filtering/selecting
the plain snapshot read, never from stitchlake's own merge code.
"""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

import stitchlake
from stitchlake.api import Table
from stitchlake.errors import NotFoundError, StitchError, UsageError
from stitchlake.layout.bucket import bucket_of
from stitchlake.timeline.clock import to_datetime
from stitchlake.timeline.instant import Action
from tests.support.histories import KEY, MODEL, History, apply, random_plan
from tests.support.reads import sort, untimed
from tests.support.tables import (
    ALL_COLUMNS,
    MODELS,
    SHORT_BEATS,
    THREE_STREAMS,
    as_rows,
    batch,
    config,
    new_table,
    stream_doc,
    table_doc,
    until_expired,
)

# ------------------------------------------------------------------------------------------------ history


@pytest.fixture(scope="module")
def history_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, History]:
    """One table with a random-ish history, shared by the read-only tests below."""
    table = new_table(tmp_path_factory.mktemp("history"))
    return table, apply(table, random_plan(7))


# ---------------------------------------------------------------------------------------------- incremental


def test_incremental_ops_and_row_values_on_a_hand_made_history(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    orders = MODEL["orders"]
    t0 = table.write("orders", batch(orders, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    t1 = table.write("orders", batch(orders, [{"k": 2, "amount": 2, "status": "b", "ots": 1}]))
    t2 = table.write(
        "orders",
        batch(
            orders,
            [
                {"k": 1, "amount": 5, "status": "a", "ots": 2},  # update
                {"k": 2, "ots": 3, "deleted": True},  # delete
                {"k": 3, "amount": 3, "status": "c", "ots": 1},  # insert
            ],
        ),
    )
    t3 = table.write("orders", batch(orders, [{"k": 3, "amount": 3, "status": "c", "ots": 1}]))  # no change
    empty = {"paid": None, "note": None, "pts": None, "carrier": "none", "ship_no": None}
    result = table.read(since=t1.completed, until=t3.completed)
    assert result.column_names == [*ALL_COLUMNS, "_op", "_commit_time", "_streams"]
    result = result.drop_columns(["_commit_time", "_streams"])
    assert sorted(result.to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "p": "odd", "amount": 5, "status": "a", "ots": 2, **empty, "_op": "U"},
        {"k": 2, "p": "even", **dict.fromkeys(ALL_COLUMNS[2:]), "_op": "D"},
        {"k": 3, "p": "odd", "amount": 3, "status": "c", "ots": 1, **empty, "_op": "I"},
    ]
    assert table.read(since=t2.completed, until=t3.completed).num_rows == 0
    assert table.read(since=t3.completed).num_rows == 0
    assert [r["k"] for r in table.read(since=t0.instant, until=t0.completed).to_pylist()] == [1]


def test_an_until_a_commit_may_still_complete_before_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers take no lock: a consumer reading changes to its own clock's `until` and starting its next read there
    skipped, for good, a commit that completed at or before that `until` after the read listed the timeline."""
    from stitchlake.reading import snapshot
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.clock import from_millis, now_millis
    from stitchlake.timeline.metadata import DeltaCommitPlan
    from stitchlake.writing.writer import write as write_batch

    table = new_table(tmp_path)
    orders = MODEL["orders"]
    t0 = table.write("orders", batch(orders, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    slow = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    until = from_millis(now_millis() + 60_000)
    with pytest.raises(StitchError, match=f"deltacommit {slow.time} is pending") as pending:
        table.read(since=t0.completed, until=until)
    assert pending.value.exit_code == 4
    write_batch(table, "orders", batch(orders, [{"k": 2, "amount": 2, "status": "b", "ots": 1}]), txn=slow)
    late = table.timeline().latest_completed()
    assert late is not None and late.completed is not None and late.completed <= until  # what was skipped before
    with pytest.raises(StitchError, match="after the latest completion") as unsettled:
        table.read(since=t0.completed, until=until)
    assert unsettled.value.exit_code == 4  # it settles by itself: run again later
    # Reads to the latest completion, or to any earlier time, are final; so is a later time once it is settled.
    assert [r["k"] for r in table.read(since=t0.completed).to_pylist()] == [2]
    assert table.read(since=t0.completed, until=late.completed).num_rows == 1
    later = now_millis() + 600_000  # ten minutes on: settled
    monkeypatch.setattr(snapshot, "now_millis", lambda: later)
    assert [r["k"] for r in table.read(since=t0.completed, until=until).to_pylist()] == [2]
    monkeypatch.undo()
    with pytest.raises(UsageError, match="is in the future"):
        table.read(since=t0.completed, until=from_millis(now_millis() + 3_600_000))


def test_incremental_read_refuses_a_range_that_history_was_rewritten_in(tmp_path: Path) -> None:
    """A restore or a rollback of a completed commit takes rows back without a change row for them: a change feed
    across it would be silently wrong, so it is refused; after it, reads work again."""
    table = new_table(tmp_path)
    orders = MODEL["orders"]
    t0 = table.write("orders", batch(orders, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    t1 = table.write("orders", batch(orders, [{"k": 2, "amount": 2, "status": "b", "ots": 1}]))
    table.rollback(t1.instant)
    undo = table.timeline().latest_completed()
    assert undo is not None and undo.action == Action.ROLLBACK
    with pytest.raises(UsageError, match=f"rollback {undo.requested} of a completed commit"):
        table.read(since=t0.completed)
    assert table.read(since=undo.completed).num_rows == 0
    assert [r["k"] for r in table.read(until=t0.completed, since=t0.instant).to_pylist()] == [1]
    table.savepoint("first", t0.instant)
    t2 = table.write("orders", batch(orders, [{"k": 3, "amount": 3, "status": "c", "ots": 1}]))
    table.restore("first", force=True)
    restore = table.timeline().latest_completed()
    assert restore is not None and restore.action == Action.RESTORE
    with pytest.raises(UsageError, match=f"restore {restore.requested}"):
        table.read(since=t2.completed)
    assert table.read(since=restore.completed).num_rows == 0


def test_incremental_read_prunes_columns(history_table: tuple[Table, History]) -> None:
    table, history = history_table
    since, until = history.times[2][1], history.times[-1][1]
    full = table.read(since=since, until=until)
    assert full.num_rows > 0
    pruned = table.read(since=since, until=until, columns=["k", "p", "amount"])
    assert pruned.column_names == ["k", "p", "amount", "_op", "_commit_time", "_streams"]
    assert sort(pruned).equals(sort(full.select(["k", "p", "amount", "_op", "_commit_time", "_streams"])))


@pytest.mark.parametrize(
    ("where", "mask"),
    [
        ({"p": "even"}, pc.field("p") == "even"),
        ({"k": 3}, pc.field("k") == 3),
        ("k=3", pc.field("k") == 3),
        ({"k": [2, 5]}, pc.field("k").isin([2, 5])),
        ({"k": 3, "p": "odd"}, (pc.field("k") == 3) & (pc.field("p") == "odd")),
    ],
)
def test_incremental_read_with_a_key_or_partition_filter(
    history_table: tuple[Table, History], where: Any, mask: Any
) -> None:
    """Key and partition columns are present on every change row, D included: the filter applies to all."""
    table, history = history_table
    for (_, since), (_, until) in [(history.times[2], history.times[-1]), (history.times[0], history.times[-1])]:
        full = table.read(since=since, until=until)
        filtered = table.read(since=since, until=until, filter=where)
        assert sort(filtered).equals(sort(full.filter(mask))), f"incremental read with filter {where!r}"


def test_incremental_read_key_filter_on_a_hand_made_history(tmp_path: Path) -> None:
    """Keys 1, 3, 5, 7 share partition odd and bucket 1 of 2: a change of one must not show under another."""
    assert set(bucket_of([pa.array([1, 3, 5, 7], pa.int64())], 2).tolist()) == {1}
    table = new_table(tmp_path)
    orders = MODEL["orders"]
    first = table.write("orders", batch(orders, [{"k": k, "amount": k, "ots": 1} for k in (1, 3, 5, 7)]))
    table.write("orders", batch(orders, [{"k": 1, "ots": 2, "deleted": True}, {"k": 5, "amount": 50, "ots": 2}]))
    assert table.read(since=first.completed, filter={"k": 3}).num_rows == 0
    assert table.read(since=first.completed, filter={"k": 7}).num_rows == 0
    assert table.read(since=first.completed, filter={"k": 5}).select(["k", "amount", "_op"]).to_pylist() == [
        {"k": 5, "amount": 50, "_op": "U"}
    ]
    assert table.read(since=first.completed, filter={"k": 1}).select(["k", "p", "amount", "_op"]).to_pylist() == [
        {"k": 1, "p": "odd", "amount": None, "_op": "D"}
    ]


# ----------------------------------------------------------------------------------------------- time travel


def test_time_travel_to_each_completion_time_equals_the_reference(history_table: tuple[Table, History]) -> None:
    table, history = history_table
    assert as_rows(table.read()) == history.expected()
    for number, completed in history.times:
        assert as_rows(table.read(as_of=completed)) == history.expected(number), f"as of commit {number}"


def test_time_travel_accepts_iso_timestamps(history_table: tuple[Table, History]) -> None:
    table, history = history_table
    for number, completed in history.times[1:]:
        moment = to_datetime(completed)
        expected = history.expected(number)
        forms = [
            moment.isoformat(),  # +00:00
            moment.isoformat().replace("+00:00", "Z"),
            moment.replace(tzinfo=None).isoformat(),  # naive means UTC
            moment.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
            moment.astimezone(dt.timezone(dt.timedelta(hours=-5, minutes=-30))).isoformat(),
        ]
        for text in forms:
            assert as_rows(table.read(as_of=text)) == expected, f"as_of={text!r} (commit {number})"
    # Incremental bounds take ISO timestamps too.
    (_, since), (_, until) = history.times[2], history.times[6]
    by_time = sort(table.read(since=since, until=until))
    iso = {t: to_datetime(t).isoformat().replace("+00:00", "Z") for t in (since, until)}
    assert sort(table.read(since=iso[since], until=iso[until])).equals(by_time)
    # An ISO time a millisecond before a commit completed does not see it.
    number, completed = history.times[1]
    just_before = (to_datetime(completed) - dt.timedelta(milliseconds=1)).isoformat()
    assert as_rows(table.read(as_of=just_before)) == history.expected(number - 1)


# --------------------------------------------------------------------------------------------- formats


# ----------------------------------------------------------------------------------------- columns, filters


@pytest.mark.parametrize(
    "columns",
    [
        ["k", "p", "amount", "paid"],
        ["paid", "k"],
        ["carrier"],
        ["k"],
        ["note", "status", "ship_no", "p", "k"],
    ],
)
def test_columns_prune_to_exactly_those_columns(history_table: tuple[Table, History], columns: list[str]) -> None:
    table, history = history_table
    full = table.read()
    pruned = table.read(columns=columns)
    assert pruned.column_names == columns
    assert pruned.schema == full.select(columns).schema
    if "k" in columns and "p" in columns:
        assert sort(pruned).equals(sort(full.select(columns)))
    else:
        key = [c for c in columns if c in KEY]
        order = [(name, "ascending") for name in (key or columns)]
        assert pruned.sort_by(order).to_pylist() == full.select(columns).sort_by(order).to_pylist()
    # Time travel prunes the same way.
    number, completed = history.times[4]
    assert table.read(as_of=completed, columns=columns).num_rows == len(history.expected(number))


@pytest.mark.parametrize(
    ("where", "mask"),
    [
        ({"p": "even"}, pc.field("p") == "even"),
        ({"p": ["even", "odd"]}, pc.field("p").isin(["even", "odd"])),
        ({"k": 3}, pc.field("k") == 3),
        ({"k": 4}, pc.field("k") == 4),
        ({"k": [1, 2, 8]}, pc.field("k").isin([1, 2, 8])),
        ("k=3", pc.field("k") == 3),
        ("k=2,k=3", pc.field("k").isin([2, 3])),
        ({"status": "a"}, pc.field("status") == "a"),
        ("status=a", pc.field("status") == "a"),
        ({"carrier": "none"}, pc.field("carrier") == "none"),
        ({"p": "odd", "status": ["a", "b"]}, (pc.field("p") == "odd") & pc.field("status").isin(["a", "b"])),
        ({"k": 3, "p": "odd"}, (pc.field("k") == 3) & (pc.field("p") == "odd")),
        ({"k": 3, "p": "even"}, (pc.field("k") == 3) & (pc.field("p") == "even")),
        (pc.field("paid") > 10, pc.field("paid") > 10),
    ],
)
def test_filter_equals_filtering_the_full_read(history_table: tuple[Table, History], where: Any, mask: Any) -> None:
    table, history = history_table
    full = table.read()
    expected = full.filter(mask)
    assert sort(table.read(filter=where)).equals(sort(expected)), f"filter {where!r}"
    # With pruned columns that leave out the filtered column, the same rows come back.
    assert sort(table.read(columns=["k", "p"], filter=where)).equals(sort(expected.select(["k", "p"])))
    # And as of an earlier time.
    _, completed = history.times[5]
    past = table.read(as_of=completed)
    assert sort(table.read(as_of=completed, filter=where)).equals(sort(past.filter(mask)))


def test_some_filters_find_rows(history_table: tuple[Table, History]) -> None:
    """Guard against vacuous filter tests: the shared history holds rows the filters above select."""
    table, _ = history_table
    full = table.read()
    assert full.filter(pc.field("p") == "even").num_rows > 0
    assert full.filter(pc.field("p") == "odd").num_rows > 0
    assert full.filter(pc.field("status") == "a").num_rows > 0
    assert full.filter(pc.field("k").isin([3, 4, 1, 2, 8])).num_rows > 0


# ------------------------------------------------------------------------------------------- entry points


def test_reading_a_table_that_does_not_exist_is_not_found(tmp_path: Path) -> None:
    missing = Table(config(tmp_path))
    with pytest.raises(NotFoundError) as caught:
        missing.read()
    assert caught.value.exit_code == 2
    with pytest.raises(NotFoundError) as caught:
        stitchlake.read(tmp_path / "nothing here")
    assert caught.value.exit_code == 2
    with pytest.raises(NotFoundError):
        stitchlake.open(str(tmp_path / "nothing here"))
    document = copy.deepcopy(THREE_STREAMS)
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(NotFoundError):
        stitchlake.read(str(tmp_path / "wide.yaml"))


def test_unknown_columns_in_columns_or_filter_are_usage_errors(history_table: tuple[Table, History]) -> None:
    table, _ = history_table
    for kwargs in ({"columns": ["k", "nope"]}, {"filter": {"nope": 1}}, {"filter": "nope=1"}, {"filter": "k"}):
        with pytest.raises(UsageError) as caught:
            table.read(**kwargs)
        assert caught.value.exit_code == 2
        assert "nope" in str(caught.value) or "k" in str(caught.value)
    with pytest.raises(UsageError):
        table.read(filter={"k": "three"})  # not a long


# ------------------------------------------------------------------------------------- partitions, types


#: Partitioned by a string and a date, for partition values that are not plain folder names.
SPECIAL_TABLE: dict[str, Any] = {
    "table": {
        "name": "special",
        "path": "table",
        "key": {"k": "long"},
        "partition_by": {"p": "string", "day": "date"},
        "buckets": 2,
    },
    "streams": {"s": {"columns": {"v": "string"}}},
    "concurrency": THREE_STREAMS["concurrency"],
}
SPECIAL = ["a/b", "x y", "ü", "..", ".", "%00", "k=v", "a,b"]


def test_partition_values_with_special_characters_read_back_and_filter(tmp_path: Path) -> None:
    table = new_table(tmp_path, SPECIAL_TABLE)
    day1, day2 = dt.date(2026, 11, 21), dt.date(1969, 12, 31)
    keys = list(range(len(SPECIAL) * 2))
    data = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "p": [SPECIAL[i % len(SPECIAL)] for i in keys],
            "day": pa.array([day1 if i < len(SPECIAL) else day2 for i in keys], pa.date32()),
            "v": [f"v{i}" for i in keys],
        }
    )
    table.write("s", data)
    root = Path(table.path)
    for data_file in root.rglob("*.log.parquet"):
        assert root in data_file.parents and ".." not in data_file.relative_to(root).parts
        assert len(data_file.relative_to(root).parts) == 3, data_file  # p=.../day=.../file
    full = table.read()
    assert sort_by_k(full).equals(sort_by_k(data))
    for value in SPECIAL:
        expected = sort_by_k(data.filter(pc.field("p") == value))
        assert expected.num_rows == 2
        assert sort_by_k(table.read(filter={"p": value})).equals(expected), value
    assert sort_by_k(table.read(filter={"day": day2})).equals(sort_by_k(data.filter(pc.field("day") == day2)))
    assert sort_by_k(table.read(filter={"day": "1969-12-31"})).equals(sort_by_k(data.filter(pc.field("day") == day2)))
    assert sort_by_k(table.read(filter={"day": "1969-12-31", "p": "a/b"})).to_pylist() == [
        {"k": 8, "p": "a/b", "day": day2, "v": "v8"}
    ]
    assert sort_by_k(table.read(filter={"k": 9, "p": "x y", "day": day2})).to_pylist() == [
        {"k": 9, "p": "x y", "day": day2, "v": "v9"}
    ]


def sort_by_k(result: pa.Table) -> pa.Table:
    return result.sort_by([("k", "ascending")])


EVERY_TYPE = {
    "i": "int",
    "l": "long",
    "f": "float",
    "d": "double",
    "b": "boolean",
    "day": "date",
    "t": "timestamp",
    "s": "string",
    "m": "decimal(12,3)",
    "raw": "binary",
}
ALL_TYPES: dict[str, Any] = table_doc(
    "types",
    {
        "o": stream_doc(EVERY_TYPE, "t"),
        "g": stream_doc(
            {"gi": "int", "gd": "date", "gt": "timestamp", "gm": "decimal(5,2)", "gs": "string"}, ["gd", "gi"], "ignore"
        ),
    },
    buckets=2,
    concurrency=THREE_STREAMS["concurrency"],
)


def _typed_batches() -> list[tuple[str, pa.Table]]:
    import decimal

    t0 = dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    t1 = dt.datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=dt.UTC)
    o_types = {
        "k": pa.int64(),
        "i": pa.int32(),
        "l": pa.int64(),
        "f": pa.float32(),
        "d": pa.float64(),
        "b": pa.bool_(),
        "day": pa.date32(),
        "t": pa.timestamp("us", tz="UTC"),
        "s": pa.string(),
        "m": pa.decimal128(12, 3),
        "raw": pa.binary(),
        "op": pa.string(),
    }
    o_rows: list[list[Any]] = [
        [1, -(2**31), 2**63 - 1, 0.1, -1e300, True, dt.date(1969, 12, 31), t0, "ü", decimal.Decimal("-1.5"), b"\0"],
        [2, None, None, None, None, None, None, t1, None, None, None],
        [3, 7, -(2**63), -2.5, 1e-300, False, dt.date(2026, 11, 21), t1, "", decimal.Decimal("999999999.999"), b""],
    ]
    g_types = {
        "k": pa.int64(),
        "gi": pa.int32(),
        "gd": pa.date32(),
        "gt": pa.timestamp("us", tz="UTC"),
        "gm": pa.decimal128(5, 2),
        "gs": pa.string(),
        "op": pa.string(),
    }
    day = dt.date(2026, 1, 1)
    g_rows = [
        [1, 1, day, t0, decimal.Decimal("1.25"), "first"],
        [1, 2, day, None, None, "second"],
        [2, 1, dt.date(1960, 1, 1), t1, decimal.Decimal("-999.99"), None],
    ]

    def table(types: dict[str, pa.DataType], rows: list[list[Any]], deleted: list[bool]) -> pa.Table:
        names = [n for n in types if n != "op"]
        data = {n: pa.array([r[i] for r in rows], types[n]) for i, n in enumerate(names)}
        data["op"] = pa.array(["D" if d else "I" for d in deleted], pa.string())
        return pa.table(data)

    later = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    return [
        ("o", table(o_types, o_rows, [False, False, False])),
        ("g", table(g_types, g_rows, [False, False, False])),
        ("o", table(o_types, [[3, 1, 1, 1.0, 1.0, True, day, later, "x", None, None]], [True])),
        ("g", table(g_types, [[1, 3, day, None, None, None]], [False])),
    ]


def test_parquet_and_avro_logs_hold_every_column_type_alike(tmp_path: Path) -> None:
    results = {}
    for fmt in ("parquet", "avro"):
        table = new_table(tmp_path / fmt, ALL_TYPES, log_format=fmt)
        times = []
        for stream, data in _typed_batches():
            times.append(table.write(stream, data).completed)
        reads = [sort_by_k(table.read())] + [sort_by_k(table.read(as_of=t)) for t in times]
        reads.append(sort_by_k(untimed(table.read(since=times[0]))))
        table.compact()
        reads.append(sort_by_k(table.read()))
        results[fmt] = reads
    for parquet, avro in zip(results["parquet"], results["avro"], strict=True):
        assert parquet.equals(avro)
    final = results["parquet"][0].to_pylist()
    assert [r["k"] for r in final] == [1, 2]  # key 3's only group was deleted
    assert final[0]["l"] == 2**63 - 1 and final[0]["i"] == -(2**31)
    assert (final[0]["gi"], final[0]["gs"], final[0]["gt"]) == (3, "second", final[0]["t"])
    assert results["parquet"][-1].equals(results["parquet"][0])  # compaction changed nothing


def test_a_spark_read_output_folder_is_refused_unless_new_or_an_earlier_spark_read_output(tmp_path: Path) -> None:
    """`stitch read --engine spark --out` never loses what is not its own (another Spark job's folder with its
    `_SUCCESS` included), and a re-run swaps its output whole."""
    from stitchlake.reading.output_folder import (
        OUTPUT_MARKER,
        check_out_folder,
        check_out_schema,
        check_parts_written,
        leftovers,
        mark,
        replace_folder,
    )

    check_out_folder(tmp_path / "new.parquet")  # new: fine
    with pytest.raises(UsageError, match="does not exist"):
        check_out_folder(tmp_path / "missing" / "new.parquet")
    (tmp_path / "file.parquet").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        check_out_folder(tmp_path / "file.parquet")
    theirs = tmp_path / "theirs.parquet"
    theirs.mkdir()
    (theirs / "_SUCCESS").touch()  # another Spark job's output
    with pytest.raises(UsageError, match="not the output of an earlier"):
        check_out_folder(theirs)

    target = tmp_path / "out.parquet"
    for run in ("first", "second"):
        written = tmp_path / f".out.parquet.{run}.tmp"
        written.mkdir()
        (written / f"part-{run}").write_text(run)
        check_out_folder(target)
        mark(written, "/tables/t", 3)
        replace_folder(written, target)
        assert sorted(p.name for p in target.iterdir()) == [OUTPUT_MARKER, f"part-{run}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.parquet", "out.parquet", "theirs.parquet"]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / OUTPUT_MARKER).touch()
    (elsewhere / "part-kept").write_text("kept")
    linked = tmp_path / "linked.parquet"
    linked.symlink_to(elsewhere)  # `--out` a link to an earlier output: the link is replaced, its target left alone
    check_out_folder(linked)
    written = tmp_path / ".linked.parquet.new.tmp"
    written.mkdir()
    replace_folder(written, linked)
    assert linked.is_dir() and not linked.is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == [OUTPUT_MARKER, "part-kept"]

    # Executors that wrote to their own disks leave the driver's folder with `_SUCCESS` only: never reported written
    lone = tmp_path / ".lone.parquet.x.tmp"
    lone.mkdir()
    (lone / "_SUCCESS").touch()
    check_parts_written(lone, tmp_path / "lone.parquet", 0)  # nothing to write: fine
    with pytest.raises(StitchError, match="wrote 1,234 rows but the folder holds no part file"):
        check_parts_written(lone, tmp_path / "lone.parquet", 1234)
    check_parts_written(target, target, 1234)
    lone.joinpath("_SUCCESS").unlink()
    lone.rmdir()

    (tmp_path / ".out.parquet.abcd1234.tmp").mkdir()  # a killed job's half-written folder: reported, not deleted
    assert [p.name for p in leftovers(target)] == [".out.parquet.abcd1234.tmp"]
    schema = pa.schema([("k", pa.int64()), ("tags", pa.list_(pa.string())), ("blob", pa.binary())])
    check_out_schema(schema, "parquet", target)
    with pytest.raises(UsageError, match=r"CSV cannot hold nested or binary values \(tags, blob\)"):
        check_out_schema(schema, "csv", tmp_path / "out.csv")


def test_the_one_shot_read_takes_before_images_and_retries_are_never_negative(tmp_path: Path) -> None:
    """`stitchlake.read` takes every read choice `Table.read` does (design.md §7); a negative retry count is a
    usage error, not a job that never runs."""
    import stitchlake
    from stitchlake.errors import UsageError
    from stitchlake.jobs.launch import with_retries
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    orders = MODELS[0]
    first = table.write(orders.name, batch(orders, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    table.write(orders.name, batch(orders, [{"k": 1, "amount": 2, "status": "b", "ots": 2}]))
    ops = stitchlake.read(table, since=first.completed, before_images=True, columns=["k", "amount", "_op"])
    assert ops.sort_by([("_op", "ascending")]).to_pylist() == [
        {"k": 1, "amount": 2, "_op": "+U"},
        {"k": 1, "amount": 1, "_op": "-U"},
    ]
    with pytest.raises(UsageError, match="retries must be 0 or more"):
        with_retries(-1, lambda: None)
    with pytest.raises(UsageError, match=r"a change read .* merges the logs"):
        table.read(mode="read_optimized", since=first.completed)


def test_a_streamed_read_across_a_rescale_and_clean_returns_every_key_or_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed read (`Table.scan`: `stitch sql`, DuckDB views) plans its file groups once; a clean under it makes
    it plan the groups it has not read again. After a rescale those groups no longer hold the keys: the pass lost
    27 of 40 keys without a word. A partition it has not begun is planned again whole; one it has begun is
    refused (exit 3: read again)."""
    from stitchlake.errors import ConflictError
    from tests.support.tables import MODELS, batch, new_table

    orders = MODELS[0]
    table = new_table(tmp_path / "untouched", buckets=2)
    table.write("orders", batch(orders, [{"k": k, "amount": k, "ots": 1} for k in range(40)]))
    scan = table.scan()
    table.rescale(4)
    assert table.clean(policy="keep_latest_commits", retain=1).result.deleted
    assert sorted(scan.read_all().column("k").to_pylist()) == list(range(40))

    from stitchlake.reading import scan as scan_module

    monkeypatch.setattr(scan_module, "READ_AHEAD_BYTES", 1)  # one slice read at a time: none read ahead of the pass
    table = new_table(tmp_path / "begun", buckets=2)
    table.write("orders", batch(orders, [{"k": k, "amount": k, "ots": 1} for k in range(40)]))
    passing = table.scan().batches()
    first = next(passing)
    assert first.num_rows
    table.rescale(4)
    assert table.clean(policy="keep_latest_commits", retain=1).result.deleted
    with pytest.raises(ConflictError, match="rescaled while this read ran"):
        list(passing)


def test_a_streamed_read_a_clean_interrupts_keeps_its_state_or_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass of "now" that a clean interrupts plans its unread file groups again. It planned them as of the new now:
    a commit in between showed in the groups read after it and not in those read before (one commit of four keys
    read as two old and two new, by DuckDB, `stitch sql`, `Table.scan`). A compaction that keeps the rows may stand
    in for the state the pass began with; a later state is refused (exit 3: read again)."""

    from stitchlake.errors import ConflictError
    from stitchlake.reading import scan as scan_module
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.metadata import DeltaCommitPlan

    monkeypatch.setattr(scan_module, "READ_AHEAD_BYTES", 1)  # one slice read at a time, as on a table of big slices
    orders = MODEL["orders"]
    fast = SHORT_BEATS

    def old_state(where: str, keys: range = range(8), mode: str = "snapshot") -> tuple[Table, Any, pa.RecordBatch]:
        table = new_table(tmp_path / where, fast, buckets=2)
        table.write("orders", batch(orders, [{"k": k, "amount": 1, "status": "old", "ots": 1} for k in keys]))
        if mode == "read_optimized":  # a base of the old rows, and logs of newer ones it does not read
            table.compact()
            table.write("orders", batch(orders, [{"k": k, "amount": 2, "status": "log", "ots": 2} for k in keys]))
        passing = table.scan(mode, columns=["k", "status"]).batches()
        return table, passing, next(passing)

    def clean() -> None:
        assert table.clean(policy="keep_latest_file_versions", retain=1).result.deleted

    def rest_of(passing: Any, first: pa.RecordBatch) -> list[dict[str, Any]]:
        return sorted(pa.Table.from_batches([first, *passing]).to_pylist(), key=lambda r: r["k"])

    table, passing, first = old_state("compacted")
    table.compact()
    clean()
    assert rest_of(passing, first) == [{"k": k, "status": "old"} for k in range(8)]

    # A write that died, rolled back by the clean itself, changed no row of the state.
    table, passing, first = old_state("failed write")
    dead = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    assert dead.heartbeat is not None
    dead.heartbeat.stop(delete=True)
    dead.heartbeat = None
    table.compact()
    until_expired(table, dead.time)
    assert table.clean(policy="keep_latest_file_versions", retain=1).result.rolled_back
    assert rest_of(passing, first) == [{"k": k, "status": "old"} for k in range(8)]

    # A commit into the file group already read leaves the other one's compaction the state's.
    table, passing, first = old_state("other group", keys=range(0, 16, 2))
    seen = first.column("k").to_pylist()
    table.write("orders", batch(orders, [{"k": seen[0], "amount": 2, "status": "new", "ots": 2}]))
    table.compact()
    clean()
    assert rest_of(passing, first) == [{"k": k, "status": "old"} for k in range(0, 16, 2)]

    # A rollback of the state's commit that died before completing (it deleted the commit's files first).
    table, passing, first = old_state("undoing")
    complete = Transaction.complete

    def killed_rollback(txn: Transaction, *args: Any, **kwargs: Any) -> Any:
        if txn.instant.action == Action.ROLLBACK:
            raise KeyboardInterrupt("the rollback was killed before it completed")
        return complete(txn, *args, **kwargs)

    monkeypatch.setattr(Transaction, "complete", killed_rollback)
    with pytest.raises(KeyboardInterrupt):
        table.rollback(stream="orders")
    monkeypatch.setattr(Transaction, "complete", complete)
    with pytest.raises(ConflictError, match="is undoing commits"):
        list(passing)

    # A time past the latest completion reads the state of that completion, and so keeps it.
    table = new_table(tmp_path / "future", fast, buckets=2)
    table.write("orders", batch(orders, [{"k": k, "amount": 1, "status": "old", "ots": 1} for k in range(8)]))
    passing = table.scan(columns=["k", "status"], as_of="2099-01-01T00:00:00Z").batches()
    first = next(passing)
    table.write("orders", batch(orders, [{"k": k, "amount": 2, "status": "new", "ots": 2} for k in range(8)]))
    table.compact()
    clean()
    with pytest.raises(ConflictError, match="the table changed while this read ran"):
        list(passing)

    # A read-optimized pass reads bases only: a compaction's new base holds logs its state's did not.
    table, passing, first = old_state("read optimized", mode="read_optimized")
    assert {r["status"] for r in first.to_pylist()} == {"old"}
    table.compact()
    clean()
    with pytest.raises(ConflictError, match="the table changed while this read ran"):
        list(passing)

    table, passing, first = old_state("changed")
    table.write("orders", batch(orders, [{"k": k, "amount": 2, "status": "new", "ots": 2} for k in range(8)]))
    table.compact()
    clean()
    assert {r["status"] for r in pa.Table.from_batches([first]).to_pylist()} == {"old"}
    with pytest.raises(ConflictError, match="the table changed while this read ran"):
        list(passing)


def test_a_read_of_no_column_and_a_filter_on_none_are_refused(tmp_path: Path) -> None:
    """`columns=[]` returned 0 rows (a count of them read 0); `{column: None}` matched nulls in a text or whole
    number column and nothing in a float, key or partition column."""
    table = new_table(tmp_path)
    table.write("orders", batch(MODELS[0], [{"k": 1, "amount": None, "status": None, "ots": 1}]))
    with pytest.raises(UsageError, match="columns: none named"):
        table.read(columns=[])
    for column in ("status", "amount", "k"):
        with pytest.raises(UsageError, match=rf"{column}=None: a filter compares values"):
            table.read(filter={column: None})


def test_the_id_of_an_archived_commit_reads_as_of_its_completion(tmp_path: Path) -> None:
    """An instant id means the moment it completed; for an archived one it was read as its requested time, so the
    id of the newest archived commit (completed at the horizon) was refused as older than the archived timeline."""
    table = new_table(tmp_path)
    written = [
        table.write("orders", batch(MODELS[0], [{"k": k, "amount": k, "status": "a", "ots": 1}])) for k in range(4)
    ]
    assert table.archive(keep=1).result.archived >= 1
    newest_archived = next(w for w in reversed(written) if table.timeline().get(w.instant) is None)
    by_id = table.read(as_of=newest_archived.instant)
    assert by_id.num_rows == table.read(as_of=newest_archived.completed).num_rows > 0
