"""The action registry (`timeline.actions.ACTIONS`) is the one place that says what an action means: the tables
services keep beside it (recovery's finishers) must follow it, and its flags must agree with the records they
describe. Plus the bad-row helper every writer calls (`badrows.Rejected.apply_policy`), on real files.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_action_registry.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from stitchlake.paths import quarantine_folder
from stitchlake.timeline.metadata import DeltaCommit
from stitchlake.writing.batch import REASON


def _payments(spark: Any, tmp_path: Path) -> Any:
    """A DataFrame of payment events: two good rows and one whose timestamp does not parse."""
    folder = tmp_path / "frames"
    folder.mkdir()
    rows = [
        {
            "order_id": 1,
            "order_date": "2026-11-20",
            "pay_status": "paid",
            "paid_amount": 1.5,
            "pay_ts": "2026-11-20T10:00:00Z",
        },
        {"order_id": 2, "order_date": "2026-11-20", "pay_status": "paid", "paid_amount": 2.5, "pay_ts": "yesterday"},
        {
            "order_id": 3,
            "order_date": "2026-11-21",
            "pay_status": "paid",
            "paid_amount": 3.5,
            "pay_ts": "2026-11-21T01:00:00Z",
        },
    ]
    (folder / "rows.json").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return spark.read.json(str(folder))


@pytest.mark.spark
def test_a_spark_data_source_write_applies_the_policy_with_the_same_helper(spark: Any, tmp_path: Path) -> None:
    """`df.write` (a Spark write task, then the driver's commit built by `deltacommit`): quarantine sets the bad row
    aside and records it like every other writer; fail writes nothing."""
    from tests.support.spark_fixtures import demo_table

    config, table = demo_table(tmp_path / "q", tmp_path / "landing", bad_rows="quarantine")
    frame = _payments(spark, tmp_path)
    frame.write.format("stitchlake").option("stream", "payments").option("config", str(config)).mode("append").save()
    [instant] = table.timeline().completed()
    commit = table.timeline().commit(instant)
    assert isinstance(commit, DeltaCommit)
    assert (commit.rows, commit.bad_rows, commit.engine) == (2, 1, "spark")
    assert commit.quarantine == quarantine_folder(instant.requested) and len(commit.quarantine_files) == 1
    [reason] = pq.read_table(table.storage.describe(commit.quarantine_files[0])).column(REASON).to_pylist()
    assert "pay_ts" in reason
    assert sorted(table.read().column("order_id").to_pylist()) == [1, 3]

    strict, refusing = demo_table(tmp_path / "f", tmp_path / "landing", bad_rows="fail")
    with pytest.raises(Exception, match="1 bad row"):
        frame.write.format("stitchlake").option("stream", "payments").option("config", str(strict)).mode(
            "append"
        ).save()
    assert refusing.timeline().completed() == [] and refusing.timeline().pending() == []
    assert refusing.read().num_rows == 0
