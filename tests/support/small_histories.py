"""pytest plugin: small hand-written histories that the change-feed and SQL tests of both tiers only read (module
scope: each module builds its own once)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from stitchlake.api import Table
from tests.support.histories import MODEL
from tests.support.tables import batch, new_table


@pytest.fixture(scope="module")
def stitched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, str]]:
    """Orders and payments, then late orders (an update, a late row, a delete): the table and its times by name."""
    table = new_table(tmp_path_factory.mktemp("sql"))
    orders, payments = MODEL["orders"], MODEL["payments"]
    first = table.write(
        "orders",
        batch(orders, [{"k": k, "amount": k * 10, "status": "a", "ots": 5} for k in range(1, 7)]),
    )
    table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "n", "pts": 1} for k in (1, 2, 3)]))
    late = table.write(
        "orders",
        batch(
            orders,
            [
                {"k": 1, "amount": 999, "status": "late", "ots": 1},  # late: loses to ots 5
                {"k": 2, "amount": 25, "status": "b", "ots": 9},  # update
                {"k": 4, "ots": 9, "deleted": True},  # delete: key 4 has no other stream, so it is gone
            ],
        ),
    )
    return table, {"first": str(first.completed), "late": str(late.completed)}


FEED = ["_op", "_commit_time", "_streams"]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, str]]:
    """Orders, payments, changed orders (an update, a late row, a delete), an erase: the table and its times t0..t3."""
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
