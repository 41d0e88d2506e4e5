"""The write client (design.md §2, §3, §6): crashes leave no visible trace, input is validated and cast, log files are
named, listed and routed as specified, and a batch is precombined to one row per key per file group.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_write.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.support.cli import python
from tests.support.tables import THREE_STREAMS, as_rows, batch, new_table, write_table_yaml
from tests.unit.test_write import ORDERS, orders_rows

CRASHING_WRITER = textwrap.dedent(
    """
    import os
    import sys

    import pyarrow as pa

    import stitchlake
    import stitchlake.writing.writer as write_module

    table = stitchlake.open(sys.argv[1])
    real = write_module.write_table_file
    count = [0]

    def write_then_die(*args, **kwargs):
        size = real(*args, **kwargs)
        count[0] += 1
        if count[0] == 2:
            os._exit(1)  # a hard crash: no exception handler, no abort, no heartbeat cleanup
        return size

    write_module.write_table_file = write_then_die
    write_module.WRITE_THREADS = 1
    keys = list(range(20))
    data = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "p": ["even" if k % 2 == 0 else "odd" for k in keys],
            "amount": pa.array([999] * 20, pa.int64()),
            "status": ["crashed"] * 20,
            "ots": pa.array([99] * 20, pa.int64()),
        }
    )
    table.write("orders", data)
    sys.exit(3)  # not reached
    """
)


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
