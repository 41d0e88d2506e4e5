"""The merge rules of design.md §2: each scenario of tests/support/merge_rules.py, with hand-written expected rows,
and a batch holding a bad row.

Every scenario runs three times: without compaction; with a compaction after every step; and with a compaction
scheduled after every step but run only after the next one, so writes land while a plan is pending. Scheduling
or running a compaction must leave `read()` unchanged, and right after a full compaction (no logs follow) the
read-optimized view must equal the snapshot. Expected rows are spelled out by hand — no reference model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stitchlake.errors import InputRejected
from tests.support.merge_rules import DOC, batch_for, row, rule_cases, sorted_rows
from tests.support.tables import new_table


@pytest.mark.parametrize(("scenario", "arguments"), rule_cases())
def test_merge_rule(tmp_path: Path, scenario: Callable[..., None], arguments: dict[str, Any]) -> None:
    """Each scenario of tests/support/merge_rules.py, under each of its compactions (and ordered types)."""
    scenario(tmp_path, **arguments)


def _files(root: Path) -> set[str]:
    """Every file of a table except the lock provider's bookkeeping."""
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith(".stitch/locks")
    }


@pytest.mark.parametrize(
    ("bad", "column", "reason"),
    [
        ({"k": None, "x": 1, "y": "no key", "ts": 1}, "k", "null key k"),
        ({"k": 3, "x": 1, "y": "no ordering", "ts": None}, "ts", "null ordering value ts"),
    ],
)
def test_bad_row_with_bad_rows_fail_rejects_the_batch_and_writes_nothing(
    tmp_path: Path, bad: dict[str, Any], column: str, reason: str
) -> None:
    table = new_table(tmp_path, DOC)
    table.write("a", batch_for(table, "a", [{"k": 1, "x": 1, "y": "kept", "ts": 1}]))
    before_rows = sorted_rows(table.read())
    before_files = _files(Path(table.path))
    good = {"k": 2, "x": 2, "y": "good", "ts": 2}
    with pytest.raises(InputRejected) as caught:
        table.write("a", batch_for(table, "a", [good, bad, good]))
    assert caught.value.exit_code == 5
    assert reason in str(caught.value)
    assert column in str(caught.value)
    assert sorted_rows(table.read()) == before_rows == [row(1, x=1, y="kept", ts=1)]
    assert _files(Path(table.path)) == before_files, "a rejected batch left files behind"
    assert table.timeline().pending() == []
