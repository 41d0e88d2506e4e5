"""`make bench` (issue 6): the script runs end to end at a tiny size, and its ground-truth check can fail.

Speed is never asserted here (figures come from `make bench` on a quiet machine); these tests prove that the
benchmark measures a correct table and would report a wrong one.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from scripts import bench_report, bench_workload

ROOT = Path(__file__).resolve().parents[2]


def test_the_ground_truth_check_reports_wrong_cells_missing_rows_and_columns() -> None:
    loaded = bench_workload.generate(300, seed=3)
    truth = loaded.truth
    assert bench_workload.differences(truth, truth) == []
    shuffled = truth.take(pa.array(list(reversed(range(truth.num_rows)))))
    assert bench_workload.differences(shuffled, truth) == []  # row order does not matter

    amounts = truth.column("amount").to_pylist()
    amounts[5] = (amounts[5] or 0.0) + 1.0
    wrong = truth.set_column(truth.schema.get_field_index("amount"), "amount", pa.array(amounts, pa.float64()))
    problems = bench_workload.differences(wrong, truth)
    assert len(problems) == 1 and problems[0].startswith("column amount: 1 cells differ"), problems

    statuses = truth.column("pay_status").to_pylist()
    index = next(i for i, value in enumerate(statuses) if value is not None)
    statuses[index] = None  # a value lost to null is a difference too
    lost = truth.set_column(truth.schema.get_field_index("pay_status"), "pay_status", pa.array(statuses))
    assert bench_workload.differences(lost, truth) != []

    assert bench_workload.differences(truth.slice(1), truth) == [
        f"{truth.num_rows - 1} rows, expected {truth.num_rows}"
    ]
    assert "columns missing: carrier" in bench_workload.differences(truth.drop_columns(["carrier"]), truth)[0]


@pytest.mark.parametrize("value", [1.0, 3.0])
def test_target_verdicts(value: float) -> None:
    assert bench_report.verdict("ingest_parquet_s", value) == ("<= 2: met" if value <= 2 else "<= 2: **not met**")
