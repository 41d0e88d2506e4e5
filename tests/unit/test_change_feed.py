"""Change feeds worth their name (issue 13 point 5): commit times, the streams that carried a key, before-images.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_change_feed.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from tests.integration.test_change_feed import (
    FEED,
    history,  # noqa: F401 (fixtures)
)


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
