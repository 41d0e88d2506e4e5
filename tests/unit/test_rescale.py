"""Rescaling a table's buckets (issue 27.1): `stitch rescale` rewrites every file group of a partition (or of the
table) into N buckets as one instant, and writers of the old layout are fenced (exit 4, nothing published).

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_rescale.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitchlake.errors import BusyError
from tests.support.histories import History, apply, plan_steps
from tests.support.tables import (
    as_rows,
    new_table,
)


def test_rescale_waits_for_a_pending_compaction_of_its_partitions(tmp_path: Path) -> None:
    table = new_table(tmp_path, buckets=2)
    history = apply(table, plan_steps(6, 5), History())
    from stitchlake.services.rewrites import compaction

    scheduled = compaction.schedule(table)
    assert scheduled is not None
    with pytest.raises(BusyError, match=f"compaction {scheduled} is pending"):
        table.rescale(3)
    compaction.run(table, scheduled)
    assert table.rescale(3).done is not None
    assert as_rows(table.read()) == history.expected()
