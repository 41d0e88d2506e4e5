"""Change feeds worth their name (issue 13 point 5): commit times, the streams that carried a key, before-images.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_change_feed.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from tests.support.small_histories import FEED
from tests.support.tables import MODELS, batch, new_table


def by_key(rows: pa.Table) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        out.setdefault(row["k"], []).append(row)
    return out


def values(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in FEED}


def test_each_change_carries_its_last_commit_time_and_the_streams_that_carried_the_key(
    history: tuple[Table, dict[str, str]],
) -> None:
    table, t = history
    changes = by_key(table.read(since=t["t0"], until=t["t2"]))
    assert {k: [(r["_op"], r["_commit_time"], r["_streams"]) for r in rows] for k, rows in changes.items()} == {
        1: [("U", t["t2"], "orders,payments")],
        2: [("U", t["t2"], "orders,payments")],  # the payment changed it; the late order carried it too
        3: [("D", t["t2"], "orders")],
    }
    erased = by_key(table.read(since=t["t2"], until=t["t3"]))
    assert {k: [(r["_op"], r["_commit_time"], r["_streams"]) for r in rows] for k, rows in erased.items()} == {
        2: [("D", t["t3"], "erase")]
    }
    first = by_key(table.read(until=t["t0"]))
    assert {r[0]["_commit_time"] for r in first.values()} == {t["t0"]}


def test_a_commit_time_filter_takes_an_iso_timestamp_as_the_instant_time_it_names(
    history: tuple[Table, dict[str, str]],
) -> None:
    """`_commit_time` holds instant times; an ISO value compared as written would sort before all of them and keep
    every row."""
    from stitchlake.timeline.clock import to_datetime

    table, t = history
    done = t["t2"]
    iso = to_datetime(done).isoformat(timespec="milliseconds")  # 2026-...T...+00:00
    naive = iso.removesuffix("+00:00")
    cases: list[tuple[Any, int]] = [
        ([f"_commit_time>{naive}"], 0),
        ({"_commit_time": iso}, 3),
        ([f"_commit_time={naive}Z"], 3),
    ]
    for where, expected in cases:
        got = table.read(since=t["t0"], until=t["t2"], filter=where)
        assert got.num_rows == expected, where
    assert table.read(since=t["t0"], until=t["t2"], filter=[f"_commit_time>={done}"]).num_rows == 3
    with pytest.raises(UsageError, match="_commit_time: 'yesterday' is neither"):
        table.read(since=t["t0"], filter=["_commit_time>yesterday"])


def test_before_images_pair_each_update_with_the_row_as_of_since(history: tuple[Table, dict[str, str]]) -> None:
    table, t = history
    before = {r["k"]: r for r in table.read(as_of=t["t0"]).to_pylist()}
    after = {r["k"]: r for r in table.read(as_of=t["t2"]).to_pylist()}
    feed = table.read(since=t["t0"], until=t["t2"], before_images=True)
    rows = sorted(feed.to_pylist(), key=lambda r: r["k"])  # stable: a -U row stays before its +U row
    assert [(r["k"], r["_op"]) for r in rows] == [(1, "-U"), (1, "+U"), (2, "-U"), (2, "+U"), (3, "D")]
    for row in rows:
        expected = {"-U": before, "+U": after, "D": before}[row["_op"]][row["k"]]
        assert values(row) == expected, row  # a delete keeps the values it had
    assert rows[0]["amount"] == 10 and rows[1]["amount"] == 11
    # Without before-images a delete shows only its key, and an update one row.
    plain = sorted(table.read(since=t["t0"], until=t["t2"]).to_pylist(), key=lambda r: r["k"])
    assert [(r["k"], r["_op"], r["amount"]) for r in plain] == [(1, "U", 11), (2, "U", 20), (3, "D", None)]
    # A value filter keeps or drops an update's two rows together, by its new values.
    matched = table.read(since=t["t0"], until=t["t2"], before_images=True, filter="amount=11")
    assert sorted((r["k"], r["_op"]) for r in matched.to_pylist()) == [(1, "+U"), (1, "-U"), (3, "D")]
    with pytest.raises(UsageError, match="before_images is for change reads"):
        table.read(before_images=True)


def test_an_expression_filter_judges_a_delete_by_its_key_and_an_update_as_a_pair(
    history: tuple[Table, dict[str, str]],
) -> None:
    """An expression kept every `D` row (`k == 2` returned the delete of k=3) and judged a `-U` row by its old
    values (a lone `-U`, or a `+U` without it). Now as the text filters: a delete is judged with its values
    unknown, an update's two rows by its new values."""
    table, t = history

    def feed(where: Any, **options: Any) -> list[tuple[int, str]]:
        rows = table.read(since=t["t0"], until=t["t2"], filter=where, **options).to_pylist()
        return sorted((r["k"], r["_op"]) for r in rows)

    assert feed(pc.field("k") == 3) == [(3, "D")]
    assert feed(pc.field("k") == 1) == [(1, "U")]
    assert feed(pc.field("k").isin([1, 3])) == [(1, "U"), (3, "D")]
    assert feed(pc.field("k") == 1, before_images=True) == [(1, "+U"), (1, "-U")]
    assert feed(pc.field("amount") == 11, before_images=True) == feed("amount=11", before_images=True)
    assert feed(pc.field("amount") == 10, before_images=True) == [(3, "D")]  # 10 is k=1's old value: no lone -U
    # A delete is judged with its values null: a condition on them keeps it unless the rest is false.
    assert feed((pc.field("_op") == "D") & (pc.field("amount") > 5)) == [(3, "D")]
    assert feed((pc.field("_op") != "D") & (pc.field("amount") > 5)) == [(1, "U"), (2, "U")]
    assert feed((pc.field("k") == 2) & (pc.field("amount") > 5)) == feed("k=2,amount>5") == [(2, "U")]
    # ...and a function that answers for a null decides: a delete's values are null.
    assert feed(pc.field("amount").isin([11])) == [(1, "U")]
    assert feed(pc.field("amount").is_null()) == [(3, "D")]
    # A condition on the change columns alone picks rows, as the text filter `_op=-U` does.
    assert feed(pc.field("_op") == "-U", before_images=True) == feed("_op=-U", before_images=True)
    assert feed(pc.field("_op") == "-U", before_images=True) == [(1, "-U"), (2, "-U")]


def test_equalities_on_a_change_column_combine_as_in(history: tuple[Table, dict[str, str]]) -> None:
    """`--where _op=U --where _op=D` was read as _op=U AND _op=D: no rows."""
    table, t = history
    rows = table.read(since=t["t0"], until=t["t2"], filter=["_op=U", "_op=D"]).to_pylist()
    assert sorted((r["k"], r["_op"]) for r in rows) == [(1, "U"), (2, "U"), (3, "D")]


def test_a_change_read_reaching_into_cleaned_history_is_refused_and_names_the_first_time_that_reads(
    tmp_path: Path,
) -> None:
    """Found by `make partitions` (seed 4, round 0): after `stitch clean` removed old commits' logs, a change read
    from the start failed as a *missing file* (exit 1, "put the file back from a backup"), telling the operator the
    table was damaged. It is the same refusal as time travel's (exit 2), naming the first `since` that can be read."""
    table = new_table(tmp_path, buckets=1)
    orders = MODELS[0]

    def write(keys: range, ots: int) -> str:
        done = table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": ots} for k in keys]))
        assert done.completed is not None
        return done.completed

    write(range(4), 1)
    table.compact()
    write(range(2, 6), 2)
    compacted = table.compact().done
    assert compacted is not None and compacted.completed is not None
    assert table.clean(retain=1).result.deleted, "both commits' logs are outside the retention now"
    third = write(range(5, 7), 3)
    for since in ("20000101000000000", None):
        with pytest.raises(UsageError) as refused:
            table.read(since=since, until=third)
        message = str(refused.value)
        assert "can no longer be read" in message and "outside the retention" in message, message
        # Not the second commit's time: its state (the first base and its logs) is cleaned too.
        assert "the files of 2 commit(s)" in message, message
        assert f"Read changes since {compacted.completed} or later" in message, message
    later = by_key(table.read(since=compacted.completed))
    assert sorted(later) == [5, 6] and {rows[0]["_commit_time"] for rows in later.values()} == {third}


def test_a_change_read_from_a_cleaned_state_is_refused_as_a_change_feed_naming_the_first_time_that_reads(
    tmp_path: Path,
) -> None:
    """No commit in the range lost a file, but the state the feed compares with (as of `since`) did: the refusal
    was time travel's ("reading as of ... needs ..."), which names no `since` to read from. Now the change feed's,
    for clean and for a purge alike."""
    table = new_table(tmp_path, buckets=1)
    orders = MODELS[0]

    def write(keys: range, ots: int) -> str:
        done = table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": ots} for k in keys]))
        assert done.completed is not None
        return done.completed

    write(range(4), 1)
    second = write(range(2, 6), 2)
    compacted = table.compact().done
    assert compacted is not None and compacted.completed is not None
    assert table.clean(retain=1).result.deleted, "the logs the state as of the second commit is read from"
    third = write(range(5, 7), 3)
    with pytest.raises(UsageError) as refused:
        table.read(since=second, until=third)
    message = str(refused.value)
    assert message.startswith(f"changes since {second} can no longer be read: the files of the state as of"), message
    assert "outside the retention" in message and f"Read changes since {compacted.completed} or later" in message
    assert by_key(table.read(since=compacted.completed, until=third)).keys() == {5, 6}

    erased = table.erase(pa.table({"k": pa.array([6], pa.int64())}), purge=True).result
    with pytest.raises(UsageError) as refused:
        table.read(since=third)
    message = str(refused.value)
    assert f"erase {erased.instant} with --purge" in message and "the state as of" in message, message
    assert "clean.retain" not in message, message


def test_a_key_written_again_with_the_same_nan_and_nested_nan_is_unchanged(tmp_path: Path) -> None:
    """NaN equals NaN in the diff (Spark's equality, and the JVM reader's): a key a commit carried with the same
    NaN again, flat or inside a struct, has no change row; a NaN that became a number is an update."""
    document = {
        "table": {"name": "nan", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {"s": {"columns": {"x": "double", "pt": "struct<a:double,b:string>"}}},
    }
    table = new_table(tmp_path, document)
    point = pa.struct([("a", pa.float64()), ("b", pa.string())])

    def write(x: list[float], pts: list[dict[str, Any]]) -> str:
        rows = pa.table({"k": pa.array([1, 2], pa.int64()), "x": pa.array(x), "pt": pa.array(pts, point)})
        completed = table.write("s", rows).completed
        assert completed is not None
        return completed

    nan = float("nan")
    first = write([nan, nan], [{"a": nan, "b": "p"}, {"a": 1.0, "b": "q"}])
    write([nan, 2.0], [{"a": nan, "b": "p"}, {"a": 1.0, "b": "q"}])
    changes = table.read(since=first).to_pylist()
    assert [(r["k"], r["_op"]) for r in changes] == [(2, "U")]


def test_a_change_feed_across_an_erase_with_purge_is_refused_naming_the_purge_not_the_retention(
    tmp_path: Path,
) -> None:
    """A purge removes the files of the commits before it, so changes since a time before it cannot be read. The
    refusal said "outside the retention" and advised clean.retain or a savepoint, neither of which helps after a
    purge: it names the erase and what to do instead."""
    table = new_table(tmp_path)
    orders = MODELS[0]
    first = table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(4)]))
    table.write(orders.name, batch(orders, [{"k": 1, "amount": 10, "status": "b", "ots": 2}]))
    erased = table.erase(pa.table({"k": pa.array([2], pa.int64())}), purge=True).result
    with pytest.raises(UsageError) as refused:
        table.read(since=first.completed)
    message = str(refused.value)
    assert f"erase {erased.instant} with --purge" in message and "cannot run across it" in message, message
    assert "outside the retention" not in message and "clean.retain" not in message, message


def test_a_change_feed_reaching_into_the_archived_timeline_is_refused_not_empty(tmp_path: Path) -> None:
    """Changes since a time the archive has passed: the commits in between are archived, and the feed (which
    lists the active timeline's) returned nothing, or only what came after, without a word. Refused, naming the
    horizon to read from."""
    from stitchlake.errors import UsageError
    from tests.support.tables import MODELS, batch, new_table

    orders = MODELS[0]
    table = new_table(tmp_path)
    first = table.write("orders", batch(orders, [{"k": 1, "amount": 1, "ots": 1}])).completed
    table.write("orders", batch(orders, [{"k": 2, "amount": 2, "ots": 1}, {"k": 3, "amount": 3, "ots": 1}]))
    table.write("orders", batch(orders, [{"k": 4, "amount": 4, "ots": 1}]))
    assert sorted(table.read(since=first).column("k").to_pylist()) == [2, 3, 4]
    table.compact()
    horizon = table.archive(keep=1).result.horizon
    latest = table.timeline().latest_completed()
    assert latest is not None
    for since, until in ((first, None), (None, latest.completed)):
        with pytest.raises(UsageError, match=f"archived .*Read changes since {horizon} or later"):
            table.read(since=since, until=until)
    assert table.read(since=horizon).num_rows == 0


def test_a_change_feed_across_an_alter_that_drops_a_stream_or_changes_a_default_is_refused(tmp_path: Path) -> None:
    """Both ends of a change read are merged with the streams and defaults of its end, and an alter carries no key:
    across a changed default, keys the stream never wrote changed value with no `U` row (and a `-U` showed the new
    default); across a dropped stream, keys only it wrote vanished with no `D` row. Refused, naming the alter; an
    alter that only adds a column is no such change, and reading from after the alter, or from the first commit,
    reports the keys as they are."""
    import copy

    import yaml

    from stitchlake.api import open as open_table
    from stitchlake.services.upkeep.alter import alter
    from tests.support.tables import THREE_STREAMS, new_table_file

    orders, _payments, shipments = MODELS
    document = copy.deepcopy(THREE_STREAMS)
    table, config = new_table_file(tmp_path, document)

    def altered(change: Any) -> Table:
        change(document)
        config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        alter(open_table(config))
        return open_table(config)

    table.write(
        "orders",
        batch(orders, [{"k": 1, "p": "a", "amount": 10, "ots": 1}, {"k": 2, "p": "a", "amount": 20, "ots": 1}]),
    )
    table.write("shipments", batch(shipments, [{"k": 3, "p": "a", "carrier": "dhl"}]))
    start = table.timeline().latest_completed()
    assert start is not None and start.completed is not None
    table = altered(lambda d: d["streams"]["orders"]["columns"].update({"region": "string"}))
    table.write("orders", batch(orders, [{"k": 1, "p": "a", "amount": 11, "ots": 2}]))
    assert {r["k"]: r["_op"] for r in table.read(since=start.completed).to_pylist()} == {1: "U"}  # an added column

    table = altered(
        lambda d: d["streams"]["shipments"]["columns"].update({"carrier": {"type": "string", "default": "ups"}})
    )
    after_default = table.timeline().latest_completed()
    assert after_default is not None
    table.write("orders", batch(orders, [{"k": 1, "p": "a", "amount": 12, "ots": 3}]))
    for before_images in (False, True):
        with pytest.raises(UsageError, match=r"streams\.shipments\.columns\.carrier\.default: keys that stream never"):
            table.read(since=start.completed, before_images=before_images)
    assert [r["k"] for r in table.read(since=after_default.completed).to_pylist()] == [1]

    table = altered(lambda d: d["streams"].pop("shipments"))
    with pytest.raises(UsageError, match="drops stream 'shipments': the keys only it wrote would vanish"):
        table.read(since=after_default.completed)
    assert sorted(r["k"] for r in table.read().to_pylist()) == [1, 2]
    latest = table.timeline().latest_completed()
    assert latest is not None
    from_first = table.read(until=latest.completed).to_pylist()
    assert sorted((r["k"], r["_op"]) for r in from_first) == [(1, "I"), (2, "I")]
    assert table.read(since="20000101000000000").to_pylist() == from_first  # from before any data: the empty table
    # Of two such alters in the range the latest is named: reading after it is what helps.
    dropped = table.timeline().latest_completed(["alter"])
    assert dropped is not None and dropped.completed is not None
    with pytest.raises(UsageError, match=f"the alter completed at {dropped.completed}"):
        table.read(since=start.completed)
