"""pytest plugin for the CLI tests of both tiers: a THREE_STREAMS config file, its created table, and that table
with a write of each stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stitchlake.api import Table
from tests.support.tables import ORDERS, PAYMENTS, SHIPMENTS, batch, new_table_file, write_table_yaml


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """THREE_STREAMS (tests/support/tables.py) as a YAML file; the table lives in `tmp_path/table`."""
    return write_table_yaml(tmp_path)


@pytest.fixture
def table(config_file: Path) -> Table:
    """The table of `config_file`, created from it."""
    created, _ = new_table_file(config_file.parent, name=config_file.name)
    return created


@pytest.fixture
def written(table: Table) -> tuple[Table, list[Any]]:
    """Three deltacommits, one per stream, over keys 1..4 (partitions `odd` and `even`)."""
    results = [
        table.write(
            "orders",
            batch(ORDERS, [{"k": k, "amount": 10 * k, "status": "new", "ots": 1} for k in (1, 2, 3, 4)]),
        ),
        table.write(
            "payments",
            batch(PAYMENTS, [{"k": 1, "paid": 10, "note": "card", "pts": 1}, {"k": 2, "paid": 20, "pts": 1}]),
        ),
        table.write("shipments", batch(SHIPMENTS, [{"k": 3, "carrier": "dhl", "ship_no": 7}])),
    ]
    return table, results
