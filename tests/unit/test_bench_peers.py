"""`make bench-peers` (issue 25): the harness runs all five systems end to end at a small size, so it cannot rot.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_bench_peers.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from scripts import bench_peers, bench_workload
from scripts.peer_job import FRESH_READ, process_tree


def test_wrong_cells_counts_changed_cells_and_every_cell_of_missing_extra_and_repeated_rows() -> None:
    truth = bench_workload.generate(300, seed=3).truth
    width = truth.num_columns
    assert bench_peers.wrong_cells(truth, truth) == {"total": 0}
    reversed_rows = truth.take(pa.array(list(reversed(range(truth.num_rows)))))
    assert bench_peers.wrong_cells(reversed_rows, truth)["total"] == 0  # row order does not matter

    amounts = truth.column("amount").to_pylist()
    amounts[5] = (amounts[5] or 0.0) + 1.0
    amounts[7] = None if amounts[7] is not None else 1.0  # a null where a value belongs, or the other way round
    index = truth.schema.get_field_index("amount")
    changed = truth.set_column(index, "amount", pa.array(amounts, pa.float64()))
    assert bench_peers.wrong_cells(changed, truth) == {"amount": 2, "total": 2}

    missing = truth.slice(1)
    assert bench_peers.wrong_cells(missing, truth) == {"rows": width, "total": width}
    extra_row = truth.slice(0, 1).set_column(0, "order_id", pa.array([1], pa.int64()))
    assert bench_peers.wrong_cells(pa.concat_tables([truth, extra_row]), truth)["total"] == width
    repeated = pa.concat_tables([truth, truth.slice(3, 2)])
    assert bench_peers.wrong_cells(repeated, truth)["total"] == 2 * width
    assert bench_peers.wrong_cells(truth.slice(0, 0), truth)["total"] == truth.num_rows * width


def test_the_memory_of_a_job_leaves_out_the_new_sessions_reader_it_started() -> None:
    """The job's peak is its own tree's; the reader it starts (`--fresh-read`) reports its own peak."""
    reader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", FRESH_READ])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--something-else"])
    try:
        # A child shows its own command line only once it has exec'd (until then, this process's): wait for that.
        for child, marker in ((reader, FRESH_READ), (other, "--something-else")):
            cmdline = Path(f"/proc/{child.pid}/cmdline")
            deadline = time.monotonic() + 120
            while marker.encode() not in cmdline.read_bytes():
                assert time.monotonic() < deadline, f"child {child.pid} ({marker}) did not start"
                time.sleep(0.01)
        every = process_tree(os.getpid())
        kept = process_tree(os.getpid(), leave_out=FRESH_READ)
        assert reader.pid in every and other.pid in every
        assert reader.pid not in kept and other.pid in kept and os.getpid() in kept
    finally:
        for child in (reader, other):
            child.kill()
            child.wait()
