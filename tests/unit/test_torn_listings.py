"""A listing of the timeline is no atomic cut: an object store lists page by page, a directory is read in several
calls. A listing can pass an instant's keys while it is pending (or before it exists) and then find a later
instant completed, though the earlier one completed first: a state the table never had. Readers take no lock, so
they plan by a listing checked to be a cut (`Timeline.load_cut`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stitchlake.paths import TIMELINE_DIR
from stitchlake.storage.base import Storage
from stitchlake.table.handle import TableHandle
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.metadata import DeltaCommitPlan
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import Action
from stitchlake.writing.writer import write as write_batch
from tests.support.tables import MODELS, batch, new_table

ORDERS, PAYMENTS = MODELS[0], MODELS[1]


def _tear(
    monkeypatch: pytest.MonkeyPatch,
    storage: Storage,
    hidden: set[str],
    after: tuple[Any, str] = (TableHandle, "require"),
) -> list[int]:
    """The first listing of the timeline once the read did `after` (by default: checked the table, which lists it
    too) misses `hidden`, files that landed behind the listing's position while it went on; any later listing
    starts after they landed, and sees them."""
    listed = type(storage).list_names
    owner, name = after
    step = getattr(owner, name)
    armed: list[bool] = []
    torn: list[int] = []

    def arming(*args: Any, **kwargs: Any) -> Any:
        done = step(*args, **kwargs)
        armed.append(True)
        return done

    def tearing(self: Storage, folder: str) -> list[str]:
        names = listed(self, folder)
        if folder == TIMELINE_DIR and armed and not torn:
            torn.append(1)
            return [n for n in names if n not in hidden]
        return names

    monkeypatch.setattr(owner, name, arming)
    monkeypatch.setattr(type(storage), "list_names", tearing)
    return torn


def _two_commits(tmp_path: Path) -> tuple[Any, str, Transaction, set[str], set[str]]:
    """A table with a first commit, then A (orders) and B (payments) completed in that order; the names of A's
    completed file, and of all A's files."""
    table = new_table(tmp_path)
    since = str(table.write(ORDERS.name, batch(ORDERS, [{"k": 9, "amount": 9, "status": "z", "ots": 1}])).completed)
    first = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
    second = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=PAYMENTS.name))
    write_batch(table, ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]), txn=first)
    write_batch(table, PAYMENTS.name, batch(PAYMENTS, [{"k": 2, "paid": 2, "note": "b", "pts": 1}]), txn=second)
    names = table.storage.list_names(TIMELINE_DIR)
    all_of_a = {n for n in names if n.startswith(first.time)}
    completed_a = {n for n in all_of_a if n.startswith(f"{first.time}_")}
    return table, since, first, completed_a, all_of_a


@pytest.mark.parametrize("seen_of_a", ["pending", "nothing"])
def test_reads_plan_by_a_cut_of_the_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen_of_a: str) -> None:
    """Before, a snapshot read at "now" showed B's row without A's (no check at all), and a change read checked only
    the deltacommits and erases it saw pending: an instant it did not see at all, or an alter or undo, was missed,
    and a reader taking B's completion as its next start skipped A for good."""
    table, since, first, completed_a, all_of_a = _two_commits(tmp_path)
    hidden = completed_a if seen_of_a == "pending" else all_of_a
    torn = _tear(monkeypatch, table.storage, hidden)
    assert sorted(table.read(columns=["k"]).column("k").to_pylist()) == [1, 2, 9]
    assert torn == [1], "the first listing was torn, and a second one told"
    _tear(monkeypatch, table.storage, hidden)
    changed = table.read(since=since, columns=["k", "_op"])
    assert sorted(changed.column("k").to_pylist()) == [1, 2]
    _tear(monkeypatch, table.storage, hidden)
    assert Timeline.load_cut(table.storage).get(first.time).is_completed  # type: ignore[union-attr]


def test_the_spark_planner_plans_by_a_cut_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM reader's plan document: its slices at "now" came from a listing of their own, unchecked."""
    from stitchlake.spark import planner

    table, since, _first, completed_a, all_of_a = _two_commits(tmp_path)
    for hidden in (completed_a, all_of_a):
        torn = _tear(monkeypatch, table.storage, hidden, after=(planner, "ReadRequest"))
        document = planner.plan({"path": table.path}, None, [], {})
        assert torn == [1]
        logs = sorted(log["path"] for entry in document["slices"] for log in entry["logs"])
        assert len(logs) == 3, "the first write's log, A's and B's"
        monkeypatch.undo()
    torn = _tear(monkeypatch, table.storage, all_of_a, after=(planner, "ReadRequest"))
    changed = planner.plan({"path": table.path, "since": since}, None, [], {})
    assert torn == [1] and len(changed["change_slices"]) == 2, "A's group and B's"
