"""Rescaling a table's buckets (issue 27.1): `stitch rescale` rewrites every file group of a partition (or of the
table) into N buckets as one instant, and writers of the old layout are fenced (exit 4, nothing published).

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_rescale.py).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stitchlake.errors import BusyError
from stitchlake.layout.names import BASE, parse_name
from stitchlake.merge.stitch import KEY_ORDERED
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


def _key_ordered(table_root: Path) -> dict[Path, bool]:
    """Per Parquet data file: whether its footer says its rows are in key order, one per key."""
    out: dict[Path, bool] = {}
    for path in table_root.rglob("*.parquet"):
        if parse_name(path.name) is not None:
            metadata = pq.read_metadata(path).metadata or {}
            out[path] = all(metadata.get(k) == v for k, v in KEY_ORDERED.items())
    return out


def test_logs_and_compacted_bases_say_they_are_in_key_order_and_a_rescales_bases_do_not(tmp_path: Path) -> None:
    """The JVM reader merges a slice window by window only where every file says its rows are in key order, one per
    key (`stitch.KEY_ORDERED`). Logs and a compaction's bases are so; a rescale's new base is one sorted run per old
    slice it takes rows from, so it must not say so (read whole, it reads the same)."""
    table = new_table(tmp_path, buckets=2)
    history = apply(table, plan_steps(6, 5), History())
    table.compact()
    root = Path(table.storage.describe())
    before = _key_ordered(root)
    assert before and all(before.values()), before
    assert table.rescale(3).done is not None
    written = {path: marked for path, marked in _key_ordered(root).items() if path not in before}
    assert written and all(parse_name(p.name).kind == BASE for p in written), written  # type: ignore[union-attr]
    assert not any(written.values()), written
    keys = [pq.read_table(path, columns=["k"]).column("k").to_pylist() for path in written]
    assert any(k != sorted(k) for k in keys), "every new base is in key order: the case is not exercised"
    assert as_rows(table.read()) == history.expected()
