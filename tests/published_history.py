"""A table whose history holds much that a correct reader must not show, for the publishing tests: late events, an
update, a stream delete, an erase, a column default and an alter, then a compaction."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pyarrow as pa
from tables import MODELS, THREE_STREAMS, batch, config, new_table

from stitchlake.api import Table
from stitchlake.services.alter import alter

MODEL = {m.name: m for m in MODELS}


def placed(document: dict[str, Any], place: dict[str, Any] | None) -> dict[str, Any]:
    """`document` with the top-level sections of `place` laid over it (e.g. another table path and a storage:)."""
    for section, values in (place or {}).items():
        document[section] = {**document.get(section, {}), **values}
    return document


def altered_document(place: dict[str, Any] | None = None, **publish: Any) -> dict[str, Any]:
    """THREE_STREAMS with a column added to orders (with a default) by `stitch alter`."""
    document = placed(copy.deepcopy(THREE_STREAMS), place)
    document["streams"]["orders"]["columns"]["coupon"] = {"type": "string", "default": "none"}
    if publish:
        document["publish"] = publish
    return document


def history(root: Path, place: dict[str, Any] | None = None, **publish: Any) -> Table:
    """A table whose raw files hold much that a correct reader must not show."""
    table = new_table(root, placed(copy.deepcopy(THREE_STREAMS), place))
    orders, payments, shipments = MODEL["orders"], MODEL["payments"], MODEL["shipments"]
    table.write("orders", batch(orders, [{"k": k, "amount": k * 10, "status": "new", "ots": 5} for k in range(1, 8)]))
    table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "ok", "pts": 1} for k in (1, 2, 3)]))
    table.write("shipments", batch(shipments, [{"k": 1, "carrier": "dhl", "ship_no": 11}]))  # others: default
    table.write(
        "orders",
        batch(
            orders,
            [
                {"k": 1, "amount": 999, "status": "late", "ots": 1},  # late: loses
                {"k": 2, "amount": 25, "status": "paid", "ots": 9},  # update
                {"k": 6, "ots": 9, "deleted": True},  # only orders had key 6: gone
            ],
        ),
    )
    table.erase(pa.table({"k": pa.array([5], pa.int64()), "p": pa.array(["odd"])}))
    altered = Table(config(root, altered_document(place, **publish)))
    alter(altered)
    rows = batch(orders, [{"k": 7, "amount": 70, "status": "coupon", "ots": 9}])
    altered.write("orders", rows.append_column("coupon", pa.array(["XMAS"])))
    assert altered.compact() is not None
    return altered


def rows_of(data: Any) -> list[dict[str, Any]]:
    table = data if isinstance(data, pa.Table) else data.to_arrow()
    return sorted(table.to_pylist(), key=lambda row: row["k"])


def expected_rows(table: Table, source: str) -> list[dict[str, Any]]:
    return rows_of(table.read(mode="read_optimized", as_of=source))
