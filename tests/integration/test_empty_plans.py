"""A pending instant's file truncated to 0 bytes is damage, not an empty plan (issue 34.4).

Every instant file is written whole and atomically, so an empty one can only be damage: read as "nothing planned"
it once let `stitch rollback --failed` report a crashed restore finished (its rows neither state) and let an
empty rescale plan complete "0 partitions into 0 buckets" and stop fencing writers. Each is now refused with an
error naming the file, and the table is left as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitchlake.api import Table
from stitchlake.errors import CorruptFileError
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import RescalePlan, RestorePlan
from tests.support.processes import run_stitch
from tests.support.tables import MODELS, THREE_STREAMS, batch, new_table, write_table_yaml

ORDERS = MODELS[0]


def filled(tmp_path: Path) -> Table:
    table = new_table(tmp_path, buckets=1)
    write_table_yaml(tmp_path, {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "buckets": 1}})
    table.write("orders", batch(ORDERS, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(6)]))
    return table


def left_pending(table: Table, action: Action, plan: RestorePlan | RescalePlan) -> Path:
    """A real pending instant of `action` whose writer is gone, its requested file truncated to 0 bytes."""
    txn = Transaction.begin(table, action, plan, heartbeat=False)  # a writer that is gone: no beat claims it
    path = Path(table.path) / ".stitch" / "timeline" / f"{txn.time}.{action}.requested"
    assert path.stat().st_size > 0
    path.write_bytes(b"")
    return path


def test_an_empty_restore_plan_is_refused_not_finished(tmp_path: Path) -> None:
    table = filled(tmp_path)
    table.savepoint("before")
    table.write("orders", batch(ORDERS, [{"k": k, "amount": 100 + k, "status": "b", "ots": 2} for k in range(6)]))
    assert not table.timeline().pending()
    path = left_pending(table, Action.RESTORE, RestorePlan())

    with pytest.raises(CorruptFileError, match="pending instant file is empty"):
        table.timeline().plan(table.timeline().pending()[0])
    done = run_stitch("rollback", "-c", str(tmp_path / "table.yaml"), "--failed", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(path.name) in done.stdout + done.stderr and "empty" in done.stdout + done.stderr
    assert "finished" not in done.stdout
    assert path.exists() and path.stat().st_size == 0, "the damaged file is left for the operator"
    assert table.timeline().pending(), "the restore is still pending"


def test_an_empty_rescale_plan_is_refused_and_writers_stay_fenced(tmp_path: Path) -> None:
    table = filled(tmp_path)
    path = left_pending(table, Action.RESCALE, RescalePlan(buckets=4))

    resumed = run_stitch("rescale", "-c", str(tmp_path / "table.yaml"), "--resume", "--json")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert path.name in resumed.stdout + resumed.stderr and "0 partition" not in resumed.stdout
    with pytest.raises(CorruptFileError, match="pending instant file is empty"):
        table.write("orders", batch(ORDERS, [{"k": 1, "amount": 5, "status": "c", "ots": 3}]))
    assert table.timeline().pending()[0].requested in path.name
