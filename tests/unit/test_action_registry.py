"""The action registry (`timeline.actions.ACTIONS`) is the one place that says what an action means: the tables
services keep beside it (recovery's finishers) must follow it, and its flags must agree with the records they
describe. Plus the bad-row helper every writer calls (`badrows.Rejected.apply_policy`), on real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.config import BadRows
from stitchlake.errors import InputRejected
from stitchlake.paths import quarantine_folder
from stitchlake.services.recovery import FINISHERS
from stitchlake.storage import LocalStorage
from stitchlake.timeline.actions import (
    ACTIONS,
    HOLDS_FILE_GROUPS,
    REWRITES,
    UNDOES_HISTORY,
    WRITES_DATA,
    Recovery,
    actions_where,
)
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import Commit, DeltaCommit, RewritePlan, UndoPlan
from stitchlake.writing.badrows import Rejected
from stitchlake.writing.batch import REASON, ROW, SOURCE


def test_every_action_has_an_entry() -> None:
    assert set(ACTIONS) == set(Action)


def test_recovery_finishes_exactly_the_actions_the_registry_says() -> None:
    finished = set(actions_where(lambda kind: kind.recovery is Recovery.FINISH))
    assert set(FINISHERS) == finished
    assert finished == {action for action, kind in ACTIONS.items() if kind.finished_not_undone}


def test_an_action_rerun_after_a_crash_is_a_rewrite_with_a_plan_to_run_again() -> None:
    for action in actions_where(lambda kind: kind.recovery is Recovery.RERUN):
        assert action in REWRITES, action
        assert issubclass(ACTIONS[action].plan, RewritePlan), action


def test_an_undo_is_finished_after_a_crash_never_undone() -> None:
    assert UNDOES_HISTORY, "no action undoes history"
    for action in UNDOES_HISTORY:
        assert issubclass(ACTIONS[action].plan, UndoPlan), action
        assert ACTIONS[action].recovery is Recovery.FINISH, action


def test_writes_data_means_its_commit_adds_files() -> None:
    """`writes_data` (what clean's retention counts and the file-system view reads) agrees with the commit record."""
    for action, kind in ACTIONS.items():
        assert kind.writes_data == (kind.commit.added_files is not Commit.added_files), action
    assert set(REWRITES) <= set(WRITES_DATA)


def test_a_rewrite_that_holds_file_groups_has_a_plan_of_file_groups() -> None:
    assert HOLDS_FILE_GROUPS
    assert set(HOLDS_FILE_GROUPS) <= set(REWRITES)
    for action in HOLDS_FILE_GROUPS:
        assert issubclass(ACTIONS[action].plan, RewritePlan), action


def test_only_a_rollback_begins_while_history_is_being_undone() -> None:
    unrefused = [action for action, kind in ACTIONS.items() if kind.refused_while_undoing is None]
    assert unrefused == [Action.ROLLBACK]


# ------------------------------------------------------------------------------------------- bad rows


def _bad(source: str, rows: int) -> pa.Table:
    return pa.table(
        {
            "fare": [f"x{i}" for i in range(rows)],
            SOURCE: [source] * rows,
            ROW: list(range(rows)),
            REASON: ["unparsable value in fare"] * rows,
        }
    )


def test_quarantine_sets_one_writers_bad_rows_aside_as_one_file(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    marked: list[str] = []
    bad = Rejected()
    bad.apply_policy(
        BadRows.QUARANTINE, [_bad("a.csv", 2), None, _bad("b.csv", 3)], storage, "1", "local", marked.append
    )
    assert bad.count == 5 and [row[SOURCE] for row in bad.sample] == ["a.csv", "a.csv", "b.csv"]
    assert bad.files == marked == [f"{quarantine_folder('1')}/rows-local.parquet"]
    assert pq.read_table(tmp_path / bad.files[0]).column(SOURCE).to_pylist() == ["a.csv"] * 2 + ["b.csv"] * 3


def test_fail_refuses_before_anything_is_written_or_leaves_it_to_the_driver(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    marked: list[str] = []
    with pytest.raises(InputRejected, match="2 bad rows"):
        Rejected().apply_policy(BadRows.FAIL, [_bad("a.csv", 2)], storage, "1", "local", marked.append)
    task = Rejected()
    task.apply_policy(BadRows.FAIL, [_bad("a.csv", 2)], storage, "1", "spark-0", marked.append, enforce=False)
    assert task.count == 2 and not task.files and not marked
    assert not (tmp_path / quarantine_folder("1")).exists()
    with pytest.raises(InputRejected, match="2 bad rows"):
        task.enforce(BadRows.FAIL)
    clean = Rejected()
    clean.apply_policy(BadRows.FAIL, [None], storage, "1", "local", marked.append)
    assert not clean and not marked


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
    from stitchlake.api import open as open_table
    from tests.support.spark_fixtures import write_config

    config = write_config(tmp_path / "q", tmp_path / "landing", bad_rows="quarantine")
    table = open_table(str(config))
    table.init()
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

    strict = write_config(tmp_path / "f", tmp_path / "landing", bad_rows="fail")
    refusing = open_table(str(strict))
    refusing.init()
    with pytest.raises(Exception, match="1 bad row"):
        frame.write.format("stitchlake").option("stream", "payments").option("config", str(strict)).mode(
            "append"
        ).save()
    assert refusing.timeline().completed() == [] and refusing.timeline().pending() == []
    assert refusing.read().num_rows == 0
