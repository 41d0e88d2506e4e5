"""The action registry (`timeline.actions.ACTIONS`) is the one place that says what an action means: the tables
services keep beside it (recovery's finishers) must follow it, and its flags must agree with the records they
describe. Plus the bad-row helper every writer calls (`badrows.Rejected.apply_policy`), on real files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.config import BadRows
from stitchlake.errors import InputRejected
from stitchlake.paths import quarantine_folder
from stitchlake.services.undo.recovery import FINISHERS
from stitchlake.storage import LocalStorage
from stitchlake.timeline.actions import (
    ACTIONS,
    HOLDS_FILE_GROUPS,
    REWRITES,
    UNDOES_HISTORY,
    WRITES_DATA,
    actions_where,
)
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import Commit, RewritePlan, UndoPlan
from stitchlake.vocabulary import Recovery
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
