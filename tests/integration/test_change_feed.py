"""Change feeds worth their name (issue 13 point 5): commit times, the streams that carried a key, before-images.

A hand-made history whose answers are known: an update, a late event that loses, a stream delete, a payment, and
an erase, read as changes in Python, through `stitch read` and through Spark.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from tests.support.spark_fixtures import run_stitch
from tests.support.tables import MODELS, batch, new_table

MODEL = {m.name: m for m in MODELS}
FEED = ["_op", "_commit_time", "_streams"]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, str]]:
    table = new_table(tmp_path_factory.mktemp("feed"))
    orders, payments = MODEL["orders"], MODEL["payments"]
    times: dict[str, str] = {}
    start = [{"k": k, "amount": k * 10, "status": "a", "ots": 1} for k in (1, 2, 3)]
    times["t0"] = str(table.write("orders", batch(orders, start)).completed)
    times["t1"] = str(
        table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "n", "pts": 1} for k in (1, 2)])).completed
    )
    changes: list[dict[str, Any]] = [
        {"k": 1, "amount": 11, "status": "b", "ots": 2},  # update
        {"k": 2, "amount": 99, "status": "late", "ots": 0},  # late: loses, the row stays as it was
        {"k": 3, "ots": 5, "deleted": True},  # key 3 lived in orders only: gone
    ]
    times["t2"] = str(table.write("orders", batch(orders, changes)).completed)
    table.erase(pa.table({"k": pa.array([2], pa.int64()), "p": pa.array(["even"])}))
    latest = table.timeline().latest_completed()
    assert latest is not None
    times["t3"] = str(latest.completed)
    return table, times


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


def test_stitch_read_before_images_from_the_command_line(history: tuple[Table, dict[str, str]]) -> None:
    table, t = history
    done = run_stitch(
        "read", "--table", table.path, "--since", t["t0"], "--until", t["t2"], "--before-images", "--json"
    )
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)["records"]
    expected = table.read(since=t["t0"], until=t["t2"], before_images=True).to_pylist()
    assert [(r["k"], r["_op"], r["amount"], r["_streams"]) for r in records] == [
        (r["k"], r["_op"], r["amount"], r["_streams"]) for r in expected
    ]


def test_spark_change_reads_carry_the_same_feed(spark: Any, history: tuple[Table, dict[str, str]]) -> None:
    table, t = history
    for before_images in (False, True):
        frame = (
            spark.read.format("stitchlake")
            .option("since", t["t0"])
            .option("until", t["t3"])
            .option("before_images", str(before_images).lower())
            .load(table.path)
        )
        assert frame.columns[-3:] == FEED
        got = sorted(tuple(r.asDict().values()) for r in frame.collect())
        expected = table.read(since=t["t0"], until=t["t3"], before_images=before_images).to_pylist()
        assert got == sorted(tuple(r.values()) for r in expected), before_images
