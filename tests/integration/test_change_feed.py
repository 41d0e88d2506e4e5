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
from tests.support.processes import run_stitch
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
