"""The write client (design.md §2, §3, §6): crashes leave no visible trace, input is validated and cast, log files are
named, listed and routed as specified, and a batch is precombined to one row per key per file group.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_write.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import python
from tests.support.processes import CRASHING_WRITER
from tests.support.tables import ORDERS, THREE_STREAMS, as_rows, batch, new_table, orders_rows, write_table_yaml


def test_a_hard_crash_leaves_a_pending_instant_whose_files_reads_ignore(tmp_path: Path) -> None:
    table = new_table(tmp_path, buckets=4)
    root = Path(table.path)
    config = write_table_yaml(tmp_path, {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "buckets": 4}})
    table.write("orders", batch(ORDERS, orders_rows(range(0, 20, 3))))
    before = as_rows(table.read())
    first = table.timeline().latest_completed()
    assert first is not None

    script = tmp_path / "crash.py"
    script.write_text(CRASHING_WRITER)
    done = python(script, config)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr  # its hard crash, not a refusal

    timeline = table.timeline()
    pending = timeline.pending()
    assert len(pending) == 1 and pending[0].action == "deltacommit"
    instant = pending[0].requested
    leftovers = sorted(str(p.relative_to(root)) for p in root.rglob(f"*_{instant}_*.log.parquet"))
    assert len(leftovers) == 2, leftovers
    assert all((root / ".stitch" / "markers" / instant / f"{p}.marker").exists() for p in leftovers)
    assert not [f for f in table.view().live_files() if f.instant == instant]

    assert as_rows(table.read()) == before
    assert as_rows(table.read(as_of=first.completed)) == before
    assert table.read(since=first.completed).num_rows == 0
    assert as_rows(table.read(mode="read_optimized")) == {}
    # Other writers and compaction go on around the crashed instant without picking its files up.
    table.write("orders", batch(ORDERS, [{"k": 1, "amount": 1, "status": "later", "ots": 5}]))
    later = {"k": 1, "p": "odd", "amount": 1, "status": "later", "ots": 5}
    expected = {
        **before,
        (1, "odd"): {**later, "paid": None, "note": None, "pts": None, "carrier": "none", "ship_no": None},
    }
    assert as_rows(table.read()) == expected
    table.compact()
    assert as_rows(table.read()) == expected
    assert as_rows(table.read(mode="read_optimized")) == expected
    assert all(row["status"] != "crashed" for row in table.read().to_pylist())
