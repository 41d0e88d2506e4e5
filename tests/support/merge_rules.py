"""The merge rules of design.md §2 as scenarios with hand-written expected rows (no reference model), for the unit
tests (tests/unit/test_merge_rules.py runs each) and the JVM conformance tests (which merge each read of each again).

A scenario runs three times (`rule_cases`): without compaction; with a compaction after every step; and with a
compaction scheduled after every step but run only after the next one, so writes land while a plan is pending.
Scheduling or running a compaction must leave `read()` unchanged, and right after a full compaction (no logs follow)
the read-optimized view must equal the snapshot.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.api import Table
from stitchlake.errors import InputRejected
from stitchlake.services.rewrites import compaction
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan
from stitchlake.types import arrow_type
from stitchlake.writing.writer import write as write_batch
from tests.support.tables import CONCURRENCY, new_table, stream_doc

UTC = dt.UTC
#: a: ordered by ts, overwrite; b: ordered by bts, nulls ignore; c: commit-time ordering, with defaults.
DOC: dict[str, Any] = {
    "table": {"name": "rules", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "a": stream_doc({"x": "long", "y": "string", "ts": "long"}, "ts"),
        "b": stream_doc({"u": "long", "v": "string", "bts": "long"}, "bts", "ignore"),
        "c": stream_doc({"w": {"type": "string", "default": "none"}, "n": {"type": "long", "default": 0}}),
    },
    "concurrency": CONCURRENCY,
}

#: What a key reads as where no stream wrote (or every group is tombstoned): nulls, and c's defaults.
EMPTY: dict[str, Any] = {"x": None, "y": None, "ts": None, "u": None, "v": None, "bts": None, "w": "none", "n": 0}

#: never; a full compaction after every step; or a compaction *scheduled* after every step and run only after
#: the next step, so every write lands while a plan is pending (design.md §5 file slicing).
COMPACTION = ["never", "after_each_step", "pending_plan"]


def row(k: int, **values: Any) -> dict[str, Any]:
    """A hand-written expected row of DOC's table: EMPTY overridden by `values`."""
    return {"k": k, **EMPTY, **values}


def batch_for(table: Table, stream: str, rows: list[dict[str, Any]]) -> pa.Table:
    """An input batch typed like the table; `op: "D"` in a row marks a delete."""
    config = table.config
    spec = config.streams[stream]
    columns = [*config.common_columns, *spec.columns]
    data = {c.name: pa.array([r.get(c.name) for r in rows], arrow_type(c.type)) for c in columns}
    if spec.deletes is not None:
        data[spec.deletes.column] = pa.array([r.get("op", "I") for r in rows], pa.string())
    return pa.table(data)


def sorted_rows(result: pa.Table, key: tuple[str, ...] = ("k",)) -> list[dict[str, Any]]:
    return sorted(result.to_pylist(), key=lambda r: tuple(r[name] for name in key))


class Scenario:
    """Applies steps to a table, compacting after each one when asked, and checks reads."""

    def __init__(self, table: Table, when: str, key: tuple[str, ...] = ("k",)) -> None:
        self.table = table
        self.when = when
        self.key = key
        self.plan: str | None = None

    def rows(self) -> list[dict[str, Any]]:
        return sorted_rows(self.table.read(), self.key)

    def _run_pending(self) -> None:
        if self.plan is not None:
            before = self.rows()
            compaction.run(self.table, self.plan)
            self.plan = None
            assert self.rows() == before, "running a compaction plan changed what a read returns"

    def _after_step(self) -> None:
        if self.when == "after_each_step":
            before = self.rows()
            self.table.compact()
            assert self.rows() == before, "compaction changed what a read returns"
            optimized = sorted_rows(self.table.read(mode="read_optimized"), self.key)
            assert optimized == before, "read-optimized right after compaction differs from the snapshot"
        elif self.when == "pending_plan":
            self._run_pending()
            before = self.rows()
            self.plan = compaction.schedule(self.table)
            assert self.rows() == before, "scheduling a compaction changed what a read returns"

    def write(self, stream: str, rows: list[dict[str, Any]]) -> Any:
        result = self.table.write(stream, batch_for(self.table, stream, rows))
        self._after_step()
        return result

    def erase(self, keys: list[int]) -> Any:
        self._run_pending()  # an erase conflicts with a pending compaction of its file groups (design.md §6)
        result = self.table.erase(pa.table({"k": pa.array(keys, pa.int64())})).result
        self._after_step()
        return result

    def expect(self, rows: list[dict[str, Any]]) -> None:
        assert self.rows() == rows


# --------------------------------------------------------------------------------------------- ordering


def late_event_is_ignored(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 10, "y": "new", "ts": 5}])
    s.write("a", [{"k": 1, "x": 20, "y": "late", "ts": 3}])
    s.expect([row(1, x=10, y="new", ts=5)])
    # Within one batch too: the later row is older by its ordering value, so it loses.
    s.write("a", [{"k": 2, "x": 1, "y": "newer", "ts": 9}, {"k": 2, "x": 2, "y": "older", "ts": 8}])
    s.expect([row(1, x=10, y="new", ts=5), row(2, x=1, y="newer", ts=9)])
    # An ignore-mode stream ignores late events as well, column by column.
    s.write("b", [{"k": 1, "u": 1, "v": "new", "bts": 5}])
    s.write("b", [{"k": 1, "u": 2, "v": "late", "bts": 4}])
    s.expect([row(1, x=10, y="new", ts=5, u=1, v="new", bts=5), row(2, x=1, y="newer", ts=9)])


def equal_ordering_value_later_commit_wins(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "first", "ts": 5}])
    s.write("a", [{"k": 1, "x": 2, "y": "second", "ts": 5}])
    s.expect([row(1, x=2, y="second", ts=5)])
    s.write("a", [{"k": 1, "x": 3, "y": "third", "ts": 5}])
    s.expect([row(1, x=3, y="third", ts=5)])


def equal_ordering_value_later_row_of_a_batch_wins(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 0, "y": "earlier commit", "ts": 5}])
    s.write(
        "a",
        [
            {"k": 1, "x": 1, "y": "row 0", "ts": 5},
            {"k": 2, "x": 7, "y": "other key", "ts": 5},
            {"k": 1, "x": 2, "y": "row 2", "ts": 5},
            {"k": 1, "x": 3, "y": "older row 3", "ts": 4},
        ],
    )
    s.expect([row(1, x=2, y="row 2", ts=5), row(2, x=7, y="other key", ts=5)])
    # A later row with smaller values but the same ordering value still wins (position, not value).
    s.write("a", [{"k": 3, "x": 9, "y": "z", "ts": 1}, {"k": 3, "x": 1, "y": "a", "ts": 1}])
    s.expect([row(1, x=2, y="row 2", ts=5), row(2, x=7, y="other key", ts=5), row(3, x=1, y="a", ts=1)])


def equal_ordering_value_goes_to_the_later_completion_not_the_later_request(tmp_path: Path) -> None:
    """Two writers overlap: the one that *completes* later is the later arrival (design.md §2, §4)."""
    table = new_table(tmp_path, DOC)
    early = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="a"))
    late = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="a"))
    assert early.time < late.time
    write_batch(table, "a", batch_for(table, "a", [{"k": 1, "x": 2, "y": "requested later", "ts": 5}]), txn=late)
    write_batch(table, "a", batch_for(table, "a", [{"k": 1, "x": 1, "y": "completed later", "ts": 5}]), txn=early)
    write_batch(table, "c", batch_for(table, "c", [{"k": 1, "w": "only", "n": 1}]))
    assert sorted_rows(table.read()) == [row(1, x=1, y="completed later", ts=5, w="only", n=1)]
    table.compact()
    assert sorted_rows(table.read()) == [row(1, x=1, y="completed later", ts=5, w="only", n=1)]


def commit_time_ordering_later_commit_wins(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("c", [{"k": 1, "w": "first", "n": 100}])
    s.write("c", [{"k": 1, "w": "second", "n": 1}])
    s.expect([row(1, w="second", n=1)])
    # Within one batch, the later row is the later arrival.
    s.write("c", [{"k": 1, "w": "third", "n": 3}, {"k": 1, "w": "fourth", "n": 2}])
    s.expect([row(1, w="fourth", n=2)])
    # A delete is a newer event too; the next commit brings the group back.
    s.write("c", [{"k": 1, "op": "D"}])
    s.expect([])
    s.write("c", [{"k": 1, "w": "fifth", "n": 5}])
    s.expect([row(1, w="fifth", n=5)])


def commit_time_ordering_follows_completion_order(tmp_path: Path) -> None:
    table = new_table(tmp_path, DOC)
    early = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="c"))
    late = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="c"))
    write_batch(table, "c", batch_for(table, "c", [{"k": 1, "w": "requested later", "n": 2}]), txn=late)
    write_batch(table, "c", batch_for(table, "c", [{"k": 1, "w": "completed later", "n": 1}]), txn=early)
    assert sorted_rows(table.read()) == [row(1, w="completed later", n=1)]
    table.compact()
    assert sorted_rows(table.read()) == [row(1, w="completed later", n=1)]


def a_write_overlapping_a_compaction_is_merged_on_top_of_its_base(tmp_path: Path) -> None:
    """Writes begun before a compaction was planned, completing before or after it ran (design.md §5)."""
    table = new_table(tmp_path, DOC)
    table.write("a", batch_for(table, "a", [{"k": 1, "x": 1, "y": "base", "ts": 1}, {"k": 2, "x": 2, "ts": 1}]))
    slow = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="a"))
    slower = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="c"))
    plan = compaction.schedule(table)
    assert plan is not None
    write_batch(table, "a", batch_for(table, "a", [{"k": 1, "x": 10, "y": "during plan", "ts": 5}]), txn=slow)
    assert sorted_rows(table.read()) == [row(1, x=10, y="during plan", ts=5), row(2, x=2, ts=1)]
    compaction.run(table, plan)
    assert sorted_rows(table.read()) == [row(1, x=10, y="during plan", ts=5), row(2, x=2, ts=1)]
    write_batch(table, "c", batch_for(table, "c", [{"k": 2, "w": "after run", "n": 2}]), txn=slower)
    table.write("a", batch_for(table, "a", [{"k": 1, "x": 3, "y": "late", "ts": 3}]))
    expected = [row(1, x=10, y="during plan", ts=5), row(2, x=2, ts=1, w="after run", n=2)]
    assert sorted_rows(table.read()) == expected
    # Read-optimized sees only the base: the data compacted at the plan's time.
    assert sorted_rows(table.read(mode="read_optimized")) == [row(1, x=1, y="base", ts=1), row(2, x=2, ts=1)]
    table.compact()
    assert sorted_rows(table.read()) == expected
    assert sorted_rows(table.read(mode="read_optimized")) == expected


MULTI: dict[str, Any] = {
    "table": {"name": "multi", "path": "table", "key": {"k": "long"}, "buckets": 1},
    "streams": {
        "s": {"columns": {"major": "long", "minor": "long", "label": "string"}, "ordering": ["major", "minor"]},
    },
    "concurrency": CONCURRENCY,
}


def multi_column_ordering_compares_left_to_right(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, MULTI), when)

    def expect(major: int, minor: int, label: str) -> None:
        s.expect([{"k": 1, "major": major, "minor": minor, "label": label}])

    s.write("s", [{"k": 1, "major": 1, "minor": 9, "label": "1.9"}])
    s.write("s", [{"k": 1, "major": 2, "minor": 0, "label": "2.0"}])
    expect(2, 0, "2.0")  # the left column decides, however large the right one was
    s.write("s", [{"k": 1, "major": 1, "minor": 99, "label": "1.99"}])
    expect(2, 0, "2.0")
    s.write("s", [{"k": 1, "major": 2, "minor": 1, "label": "2.1"}])
    expect(2, 1, "2.1")  # equal left column: the right one decides
    s.write("s", [{"k": 1, "major": 2, "minor": 0, "label": "2.0 again"}])
    expect(2, 1, "2.1")
    s.write("s", [{"k": 1, "major": 2, "minor": 1, "label": "2.1 again"}])
    expect(2, 1, "2.1 again")  # both equal: the later arrival
    s.write("s", [{"k": 1, "major": -5, "minor": 1000, "label": "-5"}])
    expect(2, 1, "2.1 again")


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


#: Per ordering type: events per key in arrival order (one commit each), and the label that must win per key.
ORDERING_CASES: dict[str, tuple[list[tuple[int, Any, str]], dict[int, str]]] = {
    "int": (
        [(1, 5, "5"), (1, -3, "-3"), (1, 7, "7"), (1, 6, "6"), (2, -10, "-10"), (2, -2, "-2"), (2, -7, "-7")],
        {1: "7", 2: "-2"},
    ),
    "long": (
        [(1, 2**40, "2^40"), (1, -(2**40), "-2^40"), (1, 2**40 + 1, "2^40+1"), (1, 5, "5"), (2, -(2**62), "-2^62")],
        {1: "2^40+1", 2: "-2^62"},
    ),
    "double": (
        [
            (1, -0.5, "-0.5"),
            (1, -2.0, "-2.0"),
            (1, -0.25, "-0.25"),
            (1, -1.0, "-1.0"),
            (2, 1.5, "1.5"),
            (2, -1e300, "-1e300"),
            (2, 1e-300, "1e-300"),
            (2, 0.5, "0.5"),
            (3, -1e-300, "-1e-300"),
            (3, -3.5, "-3.5"),
            (4, 2.0, "2.0"),
            (4, 2.0000000000000004, "2.0+ulp"),
            (4, 1.9999999999999998, "2.0-ulp"),
        ],
        {1: "-0.25", 2: "1.5", 3: "-1e-300", 4: "2.0+ulp"},
    ),
    "float": (
        [
            (1, -0.5, "-0.5"),
            (1, -2.0, "-2.0"),
            (1, -0.25, "-0.25"),
            (2, 0.75, "0.75"),
            (2, -8.0, "-8"),
            (2, 0.5, "0.5"),
        ],
        {1: "-0.25", 2: "0.75"},
    ),
    "date": (
        [
            (1, dt.date(2026, 1, 2), "jan2"),
            (1, dt.date(2025, 12, 31), "dec31"),
            (1, dt.date(2026, 1, 3), "jan3"),
            (1, dt.date(1969, 12, 31), "1969"),
            (2, dt.date(1969, 12, 31), "1969-12-31"),
            (2, dt.date(1960, 1, 1), "1960"),
        ],
        {1: "jan3", 2: "1969-12-31"},
    ),
    "timestamp": (
        [
            (1, _ts("2026-11-21T10:00:00.000002"), "us2"),
            (1, _ts("2026-11-21T10:00:00.000001"), "us1"),
            (1, _ts("2026-11-21T09:59:59.999999"), "before"),
            (2, _ts("1969-12-31T23:59:59.999999"), "pre-epoch"),
            (2, _ts("1960-06-01T00:00:00"), "1960"),
            (2, _ts("1970-01-01T00:00:00"), "epoch"),
        ],
        {1: "us2", 2: "epoch"},
    ),
    "boolean": (
        [(1, True, "true"), (1, False, "false"), (2, False, "f1"), (2, False, "f2"), (3, False, "f"), (3, True, "t")],
        {1: "true", 2: "f2", 3: "t"},
    ),
}


def ordering_on_each_orderable_type(tmp_path: Path, kind: str, when: str) -> None:
    document = {
        "table": {"name": "typed", "path": "table", "key": {"k": "long"}, "buckets": 2},
        "streams": {"s": {"columns": {"o": kind, "label": "string"}, "ordering": "o"}},
        "concurrency": CONCURRENCY,
    }
    s = Scenario(new_table(tmp_path, document), when)
    events, winners = ORDERING_CASES[kind]
    values = {label: value for _, value, label in events}
    for key, value, label in events:
        s.write("s", [{"k": key, "o": value, "label": label}])
    s.expect([{"k": key, "o": values[label], "label": label} for key, label in sorted(winners.items())])
    # The same events in one batch give the same winners (except ties, which go to the later row either way).
    one = new_table(tmp_path / "one", document)
    one.write("s", batch_for(one, "s", [{"k": key, "o": value, "label": label} for key, value, label in events]))
    assert sorted_rows(one.read()) == s.rows()


# --------------------------------------------------------------------------------------------- columns


def a_write_never_touches_another_streams_columns(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "a1", "ts": 1}])
    s.write("b", [{"k": 1, "u": 2, "v": "b1", "bts": 1}])
    s.write("c", [{"k": 1, "w": "c1", "n": 3}])
    s.expect([row(1, x=1, y="a1", ts=1, u=2, v="b1", bts=1, w="c1", n=3)])
    s.write("a", [{"k": 1, "x": None, "y": "a2", "ts": 2}])
    s.expect([row(1, x=None, y="a2", ts=2, u=2, v="b1", bts=1, w="c1", n=3)])
    # An input that also carries another stream's column names: those columns are not the writer's to set.
    intruder = batch_for(s.table, "c", [{"k": 1, "w": "c2", "n": 4}]).append_column("x", pa.array([99], pa.int64()))
    intruder = intruder.append_column("u", pa.array([99], pa.int64())).append_column("ts", pa.array([99], pa.int64()))
    s.table.write("c", intruder)
    s._after_step()
    s.expect([row(1, x=None, y="a2", ts=2, u=2, v="b1", bts=1, w="c2", n=4)])
    # A delete of one stream's group leaves the others' columns as they were.
    s.write("b", [{"k": 1, "bts": 5, "op": "D"}])
    s.expect([row(1, x=None, y="a2", ts=2, w="c2", n=4)])


DEFAULTS: dict[str, Any] = {
    "table": {"name": "defaults", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "a": {"columns": {"x": "long", "ts": "long"}, "ordering": "ts"},
        "d": {
            "columns": {
                "s": {"type": "string", "default": "EUR"},
                "l": {"type": "long", "default": -7},
                "f": {"type": "double", "default": 2.5},
                "b": {"type": "boolean", "default": True},
                "day": {"type": "date", "default": "2026-11-21"},
                "at": {"type": "timestamp", "default": "2026-11-21T10:00:00"},
                "plain": "string",
            },
        },
    },
    "concurrency": CONCURRENCY,
}


def columns_of_a_stream_that_never_wrote_a_key_read_as_default_or_null(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DEFAULTS), when)
    s.write("a", [{"k": 1, "x": 10, "ts": 1}])
    defaults = {
        "s": "EUR",
        "l": -7,
        "f": 2.5,
        "b": True,
        "day": dt.date(2026, 11, 21),
        "at": dt.datetime(2026, 11, 21, 10, 0, tzinfo=UTC),
        "plain": None,
    }
    s.expect([{"k": 1, "x": 10, "ts": 1, **defaults}])
    # A key only `d` wrote: `a`'s columns are null (they have no default).
    s.write("d", [{"k": 2, "s": "USD", "l": 1, "f": 0.5, "b": False, "day": None, "at": None, "plain": "p"}])
    # A stream that did write a key with nulls reads null, not the default.
    written = {"s": "USD", "l": 1, "f": 0.5, "b": False, "day": None, "at": None, "plain": "p"}
    s.expect([{"k": 1, "x": 10, "ts": 1, **defaults}, {"k": 2, "x": None, "ts": None, **written}])
    result = s.table.read()
    assert result.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert result.schema.field("day").type == pa.date32()
    assert result.schema.field("l").type == pa.int64()


# ------------------------------------------------------------------------------------------------ nulls


def nulls_overwrite_replaces_the_whole_group(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "one", "ts": 1}])
    s.write("a", [{"k": 1, "x": None, "y": "two", "ts": 2}])
    s.expect([row(1, x=None, y="two", ts=2)])
    s.write("a", [{"k": 1, "x": 3, "y": None, "ts": 3}])
    s.expect([row(1, x=3, y=None, ts=3)])


def nulls_ignore_keeps_per_column_the_latest_non_null_value(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("b", [{"k": 1, "u": 1, "v": "one", "bts": 1}])
    s.write("b", [{"k": 1, "u": None, "v": "two", "bts": 2}])
    s.expect([row(1, u=1, v="two", bts=2)])
    s.write("b", [{"k": 1, "u": None, "v": None, "bts": 3}])
    s.expect([row(1, u=1, v="two", bts=3)])
    # A late event does not overwrite a newer non-null value...
    s.write("b", [{"k": 1, "u": 7, "v": "late", "bts": 0}])
    s.expect([row(1, u=1, v="two", bts=3)])
    # ...and within one batch the highest version per column wins, whatever the row order.
    s.write(
        "b",
        [
            {"k": 2, "u": None, "v": "newest", "bts": 9},
            {"k": 2, "u": 5, "v": None, "bts": 4},
            {"k": 2, "u": 6, "v": "old", "bts": 2},
        ],
    )
    s.expect([row(1, u=1, v="two", bts=3), row(2, u=5, v="newest", bts=9)])


def nulls_ignore_late_event_fills_a_column_nothing_newer_set(tmp_path: Path, when: str) -> None:
    """Rule: "the value of the highest-version event whose value is not null" — even if that event is late."""
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("b", [{"k": 1, "u": 1, "v": None, "bts": 5}])
    s.write("b", [{"k": 1, "u": 2, "v": "late", "bts": 3}])
    s.expect([row(1, u=1, v="late", bts=5)])


def nulls_ignore_only_events_newer_than_the_tombstone_contribute(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("b", [{"k": 1, "u": 1, "v": "before", "bts": 1}])
    s.write("b", [{"k": 1, "bts": 5, "op": "D"}])
    s.expect([])
    s.write("b", [{"k": 1, "u": None, "v": "after", "bts": 7}])
    s.expect([row(1, u=None, v="after", bts=7)])  # u=1 came from before the tombstone
    s.write("b", [{"k": 1, "u": 3, "v": "older than tomb", "bts": 4}])
    s.expect([row(1, u=None, v="after", bts=7)])
    s.write("b", [{"k": 1, "u": 6, "v": None, "bts": 6}])
    s.expect([row(1, u=6, v="after", bts=7)])  # newer than the tombstone, older than the winner: fills u
    s.write("b", [{"k": 1, "u": 8, "v": "equal to tomb, later commit", "bts": 5}])
    s.expect([row(1, u=6, v="after", bts=7)])  # newer than the tombstone but older than u's and v's sources
    # The same story inside a single batch, for another key.
    s.write(
        "b",
        [
            {"k": 2, "u": 1, "v": "before", "bts": 1},
            {"k": 2, "bts": 5, "op": "D"},
            {"k": 2, "u": None, "v": "after", "bts": 7},
            {"k": 2, "u": 3, "v": "older than tomb", "bts": 4},
        ],
    )
    s.expect([row(1, u=6, v="after", bts=7), row(2, u=None, v="after", bts=7)])


def nulls_ignore_a_late_delete_still_hides_values_older_than_it(tmp_path: Path, when: str) -> None:
    """The tombstone is not the winner here (a newer event is), yet only events newer than it contribute."""
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("b", [{"k": 1, "u": 1, "v": "old", "bts": 1}])
    s.write("b", [{"k": 1, "u": None, "v": "new", "bts": 10}])
    s.expect([row(1, u=1, v="new", bts=10)])
    s.write("b", [{"k": 1, "bts": 5, "op": "D"}])
    s.expect([row(1, u=None, v="new", bts=10)])
    # An event with the tombstone's ordering value but committed later is newer than the tombstone.
    s.write("b", [{"k": 1, "u": 7, "v": "tie", "bts": 5}])
    s.expect([row(1, u=7, v="new", bts=10)])
    # An older delete than the tombstone changes nothing.
    s.write("b", [{"k": 1, "bts": 4, "op": "D"}])
    s.expect([row(1, u=7, v="new", bts=10)])


COMPOSITE: dict[str, Any] = {
    "table": {
        "name": "composite",
        "path": "table",
        "key": {"region": "string", "day": "date", "id": "int"},
        "buckets": 3,
    },
    "streams": {
        "a": {"columns": {"x": "long", "ts": "long"}, "ordering": "ts"},
        "c": {"columns": {"w": "string"}},
    },
    "concurrency": CONCURRENCY,
}


def a_composite_key_merges_on_all_its_columns(tmp_path: Path, when: str) -> None:
    key = ("region", "day", "id")
    s = Scenario(new_table(tmp_path, COMPOSITE), when, key=key)
    d1, d2 = dt.date(2026, 11, 21), dt.date(2026, 11, 22)
    s.write(
        "a",
        [
            {"region": "eu", "day": d1, "id": 1, "x": 1, "ts": 1},
            {"region": "us", "day": d1, "id": 1, "x": 2, "ts": 1},
            {"region": "eu", "day": d2, "id": 1, "x": 3, "ts": 1},
            {"region": "eu", "day": d1, "id": 2, "x": 4, "ts": 1},
        ],
    )
    s.write("a", [{"region": "eu", "day": d1, "id": 1, "x": 10, "ts": 2}])
    s.write("c", [{"region": "us", "day": d1, "id": 1, "w": "us-1"}, {"region": "us", "day": d2, "id": 1, "w": "new"}])
    s.expect(
        [
            {"region": "eu", "day": d1, "id": 1, "x": 10, "ts": 2, "w": None},
            {"region": "eu", "day": d1, "id": 2, "x": 4, "ts": 1, "w": None},
            {"region": "eu", "day": d2, "id": 1, "x": 3, "ts": 1, "w": None},
            {"region": "us", "day": d1, "id": 1, "x": 2, "ts": 1, "w": "us-1"},
            {"region": "us", "day": d2, "id": 1, "x": None, "ts": None, "w": "new"},
        ]
    )


# ----------------------------------------------------------------------------------------------- deletes


def stream_delete_then_older_event_stays_deleted_then_newer_event_comes_back(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "alive", "ts": 2}, {"k": 2, "x": 2, "y": "other", "ts": 2}])
    s.write("a", [{"k": 1, "ts": 5, "op": "D"}])
    s.expect([row(2, x=2, y="other", ts=2)])
    s.write("a", [{"k": 1, "x": 4, "y": "older", "ts": 4}])
    s.expect([row(2, x=2, y="other", ts=2)])
    s.write("a", [{"k": 1, "x": 5, "y": "equal", "ts": 5}])
    s.expect([row(1, x=5, y="equal", ts=5), row(2, x=2, y="other", ts=2)])  # equal ordering: later arrival
    s.write("a", [{"k": 1, "ts": 6, "op": "D"}])
    s.write("a", [{"k": 1, "x": 7, "y": "newer", "ts": 7}])
    s.expect([row(1, x=7, y="newer", ts=7), row(2, x=2, y="other", ts=2)])
    # A delete event's own values never count.
    s.write("a", [{"k": 2, "x": 99, "y": "in the delete", "ts": 9, "op": "D"}, {"k": 2, "x": 8, "y": "late", "ts": 8}])
    s.expect([row(1, x=7, y="newer", ts=7)])


def row_is_gone_when_every_group_is_tombstoned_and_comes_back_on_a_later_write(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "a", "ts": 1}])
    s.write("b", [{"k": 1, "u": 2, "v": "b", "bts": 1}])
    s.write("c", [{"k": 1, "w": "c", "n": 3}])
    s.write("a", [{"k": 1, "ts": 2, "op": "D"}])
    s.expect([row(1, u=2, v="b", bts=1, w="c", n=3)])
    s.write("c", [{"k": 1, "op": "D"}])
    s.expect([row(1, u=2, v="b", bts=1)])
    s.write("b", [{"k": 1, "bts": 2, "op": "D"}])
    s.expect([])
    # Older events of the tombstoned streams do not bring it back.
    s.write("a", [{"k": 1, "x": 9, "y": "old", "ts": 1}])
    s.write("b", [{"k": 1, "u": 9, "v": "old", "bts": 0}])
    s.expect([])
    # A delete of a key that was never written is nothing.
    s.write("c", [{"k": 5, "op": "D"}])
    s.expect([])
    # Any stream writing later brings the row back, with only that stream's group.
    s.write("c", [{"k": 1, "w": "back", "n": 4}])
    s.expect([row(1, w="back", n=4)])


# ---------------------------------------------------------------------------------------------- bad rows


def bad_rows_quarantine_writes_good_rows_and_sets_bad_ones_aside_with_a_reason(tmp_path: Path) -> None:
    table = new_table(tmp_path, {**DOC, "bad_rows": "quarantine"})
    rows: list[dict[str, Any]] = [
        {"k": 1, "x": 1, "y": "good", "ts": 1},
        {"k": None, "x": 2, "y": "no key", "ts": 2},
        {"k": 3, "x": 3, "y": "no ordering", "ts": None},
        {"k": 4, "x": 4, "y": "good too", "ts": 4},
    ]
    result = table.write("a", batch_for(table, "a", rows))
    assert result.bad_rows == 2
    assert result.rows == 2
    assert sorted_rows(table.read()) == [row(1, x=1, y="good", ts=1), row(4, x=4, y="good too", ts=4)]
    assert result.quarantine is not None
    assert result.quarantine.startswith(f".stitch/quarantine/{result.instant}/")
    files = list((Path(table.path) / ".stitch" / "quarantine" / result.instant).iterdir())
    assert [str(f.relative_to(table.path)) for f in files] == [result.quarantine]
    rejected = pq.read_table(files[0]).to_pylist()
    assert [(r["k"], r["y"], r["ts"], r["_reason"]) for r in rejected] == [
        (None, "no key", "2", "null key k"),
        ("3", "no ordering", None, "null ordering value ts"),
    ]
    # The completed instant records it.
    timeline = table.timeline()
    instant = timeline.get(result.instant)
    assert instant is not None and instant.is_completed
    meta = timeline.commit(instant)
    assert isinstance(meta, DeltaCommit) and meta.bad_rows == 2
    assert meta.quarantine_files == (result.quarantine,)
    # A batch of bad rows only commits nothing visible but still quarantines them.
    only_bad = table.write("a", batch_for(table, "a", [{"k": 5, "x": 5, "y": "bad", "ts": None}]))
    assert only_bad.bad_rows == 1 and only_bad.rows == 0 and only_bad.files == []
    assert sorted_rows(table.read()) == [row(1, x=1, y="good", ts=1), row(4, x=4, y="good too", ts=4)]
    assert only_bad.quarantine is not None
    assert pq.read_table(Path(table.path) / only_bad.quarantine).column("_reason").to_pylist() == [
        "null ordering value ts"
    ]


# ------------------------------------------------------------------------------------------------- erase


def key_erase_removes_every_group_and_later_events_bring_back_only_their_group(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, DOC), when)
    s.write("a", [{"k": 1, "x": 1, "y": "a", "ts": 10}, {"k": 2, "x": 2, "y": "keep", "ts": 10}])
    s.write("b", [{"k": 1, "u": 5, "v": "b", "bts": 10}])
    s.write("c", [{"k": 1, "w": "c", "n": 1}])
    s.write("a", [{"k": 3, "ts": 10, "op": "D"}])  # a tombstone-only key
    result = s.erase([1, 3, 42])
    assert result.erased_keys == 1
    s.expect([row(2, x=2, y="keep", ts=10)])
    # An event committed after the erase comes back, even with an older ordering value than the erased ones.
    s.write("a", [{"k": 1, "x": 9, "y": "after erase", "ts": 3}])
    s.expect([row(1, x=9, y="after erase", ts=3), row(2, x=2, y="keep", ts=10)])
    # The erased non-null values of an ignore-mode stream do not come back either.
    s.write("b", [{"k": 1, "u": None, "v": "after", "bts": 1}])
    s.expect([row(1, x=9, y="after erase", ts=3, u=None, v="after", bts=1), row(2, x=2, y="keep", ts=10)])
    # The erased tombstone of key 3 no longer holds back an older event.
    s.write("a", [{"k": 3, "x": 3, "y": "after erase", "ts": 1}])
    s.expect(
        [
            row(1, x=9, y="after erase", ts=3, u=None, v="after", bts=1),
            row(2, x=2, y="keep", ts=10),
            row(3, x=3, y="after erase", ts=1),
        ]
    )
    s.erase([1, 2, 3])
    s.expect([])
    # A tombstone written after an erase still holds back older events.
    s.write("a", [{"k": 2, "ts": 5, "op": "D"}])
    s.write("a", [{"k": 2, "x": 4, "y": "older than tomb", "ts": 4}])
    s.expect([])
    s.write("c", [{"k": 2, "w": "c again", "n": 2}])
    s.expect([row(2, w="c again", n=2)])


PARTITIONED: dict[str, Any] = {
    **DOC,
    "table": {"name": "rules", "path": "table", "key": {"k": "long"}, "partition_by": {"p": "string"}, "buckets": 2},
}


def key_erase_in_a_partitioned_table_removes_the_key_from_every_partition(tmp_path: Path, when: str) -> None:
    s = Scenario(new_table(tmp_path, PARTITIONED), when, key=("k", "p"))

    def prow(k: int, p: str, **values: Any) -> dict[str, Any]:
        return {"k": k, "p": p, **EMPTY, **values}

    s.write("a", [{"k": 1, "p": "x", "x": 1, "ts": 1}, {"k": 1, "p": "y", "x": 2, "ts": 1}])
    s.write("a", [{"k": 2, "p": "x", "x": 3, "ts": 1}])
    s.expect([prow(1, "x", x=1, ts=1), prow(1, "y", x=2, ts=1), prow(2, "x", x=3, ts=1)])
    s.erase([1])
    s.expect([prow(2, "x", x=3, ts=1)])
    # Given the partition too, the erase stays inside it.
    s.write("c", [{"k": 2, "p": "y", "w": "y", "n": 1}])
    s._run_pending()
    s.table.erase(pa.table({"k": pa.array([2], pa.int64()), "p": ["x"]}))
    s._after_step()
    s.expect([prow(2, "y", w="y", n=1)])


def a_keys_file_that_places_a_key_in_a_partition_it_is_not_in_is_refused_before_anything_is_erased(
    tmp_path: Path, when: str
) -> None:
    s = Scenario(new_table(tmp_path, PARTITIONED), when, key=("k", "p"))

    def prow(k: int, p: str, **values: Any) -> dict[str, Any]:
        return {"k": k, "p": p, **EMPTY, **values}

    def erase(*records: tuple[int, str]) -> Any:
        s._run_pending()
        keys = pa.table({"k": pa.array([k for k, _ in records], pa.int64()), "p": [p for _, p in records]})
        return s.table.erase(keys).result

    s.write("a", [{"k": 1, "p": "x", "x": 1, "ts": 1}, {"k": 2, "p": "x", "x": 2, "ts": 1}])
    s.write("a", [{"k": 2, "p": "y", "x": 3, "ts": 1}, {"k": 3, "p": "y", "x": 4, "ts": 1}])
    s.write("a", [{"k": 3, "p": "x", "x": 5, "ts": 1}, {"k": 3, "p": "y", "op": "D", "ts": 2}])
    everything = [prow(1, "x", x=1, ts=1), prow(2, "x", x=2, ts=1), prow(2, "y", x=3, ts=1), prow(3, "x", x=5, ts=1)]
    s.expect(everything)
    erases_before = len(s.table.timeline().completed([Action.ERASE]))
    # Key 1 is named in partition y and lives in x: erasing the rest and saying "erased 2 of 3" would leave a
    # person in the table; erasing (1, x) unasked could erase another record. Nothing is erased.
    with pytest.raises(InputRejected, match=r"1 key\(s\) are not in the partition .* k=1: given p=y, found in p=x"):
        erase((1, "y"), (2, "x"), (99, "x"))
    s.expect(everything)
    assert len(s.table.timeline().completed([Action.ERASE])) == erases_before
    # A key that is nowhere is no misplaced key (erase requests often name people with no rows), and a key found
    # where the file says is erased there only.
    done = erase((2, "x"), (99, "x"))
    assert (done.requested_keys, done.erased_keys) == (2, 1)
    s.expect([prow(1, "x", x=1, ts=1), prow(2, "y", x=3, ts=1), prow(3, "x", x=5, ts=1)])
    # Running the same keys file again finds (2, x) gone by the earlier erase, not misplaced; and a record a stream
    # deleted is still where the file says.
    assert erase((2, "x"), (3, "y")).erased_keys == 0
    s.expect([prow(1, "x", x=1, ts=1), prow(2, "y", x=3, ts=1), prow(3, "x", x=5, ts=1)])
    # That erase took the tombstone of (3, y) away, so only its keys file remembers it: a re-run is no misplacement.
    assert erase((3, "y")).erased_keys == 0
    # A file that names the key in every partition it may be in names it where it is too.
    done = erase((1, "y"), (1, "x"))
    assert (done.requested_keys, done.erased_keys) == (2, 1)
    s.expect([prow(2, "y", x=3, ts=1), prow(3, "x", x=5, ts=1)])


def rule_cases() -> list[Any]:
    """Every scenario (a function of this module taking `tmp_path` first) with its arguments, as pytest params: a
    `when` scenario under each of COMPACTION, an ordering scenario under each ORDERING_CASES kind without compaction
    and with one after each step (not `pending_plan`: it keeps the suite quick)."""
    cases = []
    for name, function in inspect.getmembers(sys.modules[__name__], inspect.isfunction):
        params = list(inspect.signature(function).parameters)
        if function.__module__ != __name__ or params[:1] != ["tmp_path"]:
            continue  # not a scenario: a scenario is a function of this module that takes `tmp_path` first
        if params == ["tmp_path"]:
            cases.append(pytest.param(function, {}, id=name))
        elif params == ["tmp_path", "when"]:
            cases += [pytest.param(function, {"when": w}, id=f"{name}[{w}]") for w in COMPACTION]
        elif params == ["tmp_path", "kind", "when"]:
            cases += [
                pytest.param(function, {"kind": k, "when": w}, id=f"{name}[{k}-{w}]")
                for k in ORDERING_CASES
                for w in ("never", "after_each_step")
            ]
        else:
            raise AssertionError(f"scenario {name} takes {params}: rule_cases cannot call it")
    return cases
