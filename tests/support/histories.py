"""A table's history in reference-model terms (tests/support/reference.py): the steps done to a real table and
what each one leaves, for tests that compare reads (snapshots, time travel, changes) with the model."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stitchlake.api import Table
from stitchlake.timeline.clock import from_millis, to_millis
from tests.support.reference import Erase, Event, expected_rows
from tests.support.tables import (
    MODELS,
    THREE_STREAMS,
    as_rows,
    batch,
    created_in_format,
    new_table_file,
    partition_of,
)

KEY = ("k", "p")
MODEL = {m.name: m for m in MODELS}


@dataclass
class History:
    """What was done to a table, in reference-model terms, and when each step completed."""

    events: list[Event] = field(default_factory=list)
    erases: list[Erase] = field(default_factory=list)
    #: (commit number, completion time); number 0 is a time before the first commit.
    times: list[tuple[int, str]] = field(default_factory=list)

    def expected(self, upto: int | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
        return expected_rows(MODELS, self.events, self.erases, KEY, upto)


def apply(
    table: Table, steps: list[tuple[str, Any]], history: History | None = None, rewrites_checked: bool = False
) -> History:
    """Do `steps` ("write" (stream, rows), "compact", "rescale" buckets, "erase" keys) to `table`, recording them in
    `history` (a new one by default; commit numbers go on from its last). `rewrites_checked`: a compaction or rescale
    must leave what a read returns as it was."""
    history = history if history is not None else History()
    commit = history.times[-1][0] if history.times else 0
    for kind, arg in steps:
        if kind == "write":
            stream, rows = arg
            commit += 1
            result = table.write(stream, batch(MODEL[stream], rows))
            if not history.times:
                # A time before commit 1 completed: 1 ms before it was requested (its id means its completion).
                history.times.append((0, from_millis(to_millis(result.instant) - 1)))
            for pos, row in enumerate(rows):
                values = {c: row.get(c) for c in MODEL[stream].columns}
                key = (row["k"], partition_of(row["k"]))
                history.events.append(Event(stream, key, values, row["deleted"], commit, pos))
            assert result.completed is not None
            history.times.append((commit, result.completed))
        elif kind in ("compact", "rescale"):
            before = as_rows(table.read()) if rewrites_checked else None
            table.compact() if kind == "compact" else table.rescale(arg)
            assert before is None or as_rows(table.read()) == before, f"{kind} changed what a read returns"
        else:
            commit += 1
            erased = table.erase(pa.table({"k": pa.array(arg, pa.int64())})).result
            history.erases.append(Erase(frozenset((k, partition_of(k)) for k in arg), commit))
            assert erased.completed is not None
            history.times.append((commit, erased.completed))
    return history


def random_rows(
    rng: random.Random, stream: str, count: int, keys: int, notes: Sequence[str | None] = ("x", None)
) -> list[dict[str, Any]]:
    """`count` rows of `stream` over keys 0..`keys`-1, for `apply`: deletes, nulls (which `nulls: ignore` skips on
    payments) and orderings from a small range, so events arrive late and tie. The row maker of every random history
    (`plan_steps`, test_read's `random_plan`): the same draws from `rng` in the same order, so a seed gives the same
    rows wherever it is used."""
    rows = []
    for _ in range(count):
        row: dict[str, Any] = {"k": rng.randrange(keys), "deleted": rng.random() < 0.15}
        if stream == "orders":
            row |= {
                "amount": rng.choice([None, 1, 2, 3]),
                "status": rng.choice(["a", "b", None]),
                "ots": rng.randint(0, 5),
            }
        elif stream == "payments":
            row |= {"paid": rng.choice([None, 10, 20]), "note": rng.choice(notes), "pts": rng.randint(0, 5)}
        else:
            row |= {"carrier": rng.choice(["dhl", "ups", None]), "ship_no": rng.choice([None, 7, 8])}
        rows.append(row)
    return rows


def plan_steps(seed: int, steps: int, keys: int = 80) -> list[tuple[str, Any]]:
    """Writes of all three streams over `keys` keys (`random_rows`); a compaction and an erase along the way."""
    rng = random.Random(seed)
    out: list[tuple[str, Any]] = []
    for step in range(steps):
        stream = rng.choice(["orders", "payments", "shipments"])
        out.append(("write", (stream, random_rows(rng, stream, rng.randint(8, 30), keys))))
        if step == steps // 2:
            out.append(("compact", None))
        if step == steps - 2:
            out.append(("erase", sorted(rng.sample(range(keys), 3))))
    return out


#: A `nulls: ignore` column's version columns in a file (design.md §3).
PAID_POS = "_sl__payments__c__paid__pos"
NOTE_POS = "_sl__payments__c__note__pos"


def _payments(rows: list[dict[str, Any]]) -> pa.Table:
    columns = ("k", "p", "paid", "note", "pts")
    types = (pa.int64(), pa.string(), pa.int64(), pa.string(), pa.int64())
    return pa.table({c: pa.array([r.get(c) for r in rows], t) for c, t in zip(columns, types, strict=True)})


def column_version_history(folder: Path, version: int, **table: Any) -> tuple[Table, list[dict[str, Any]]]:
    """A table of format `version` (THREE_STREAMS, one bucket, `table` settings) where key 1's paid comes from an
    older event than its row (pts 1 against 2) and its note from the row's own, and key 2 has one event; then a
    late paid at pts 1 (a later commit) must beat the first and one at pts 0 must not, which is only so if a reader
    takes paid's own version, not the row's. Returns the table and the first log's version positions (Parquet)."""
    document = copy.deepcopy(THREE_STREAMS)
    document["table"] |= {"buckets": 1, **table}
    with created_in_format(version):
        created, _ = new_table_file(folder, document)
    first = [
        {"k": 1, "p": "a", "paid": 10, "note": "old", "pts": 1},
        {"k": 1, "p": "a", "paid": None, "note": "new", "pts": 2},
        {"k": 2, "p": "a", "paid": 20, "note": "only", "pts": 5},
    ]
    created.write("payments", _payments(first))
    logs = [pq.read_table(path) for path in sorted(Path(created.path).rglob("*.log.parquet"))]
    late = [{"k": 1, "p": "a", "paid": 15, "pts": 1}, {"k": 2, "p": "a", "paid": 0, "pts": 0}]
    created.write("payments", _payments(late))
    return created, [row for log in logs for row in log.select(["k", PAID_POS, NOTE_POS]).to_pylist()]


def contest_compacted(table: Table) -> list[tuple[Any, ...]]:
    """Compact `column_version_history`'s table, then contest its base file's column versions with a log: key 1's
    paid (its version a later commit than its row's) loses to a later commit at the same pts, its note (the row's
    own version, left null in format 2) beats an older event; key 2's paid (the row's own) beats an older one. What
    the table then shows, as `shown_payments` gives it."""
    table.compact()
    table.write(
        "payments",
        _payments(
            [
                {"k": 1, "p": "a", "paid": 12, "note": "older", "pts": 1},
                {"k": 2, "p": "a", "paid": 7, "pts": 3},
            ]
        ),
    )
    return [(1, 12, "new"), (2, 20, "only")]


def shown_payments(table: Table) -> list[tuple[Any, ...]]:
    """(k, paid, note) of every row, by key."""
    rows = table.read(columns=["k", "paid", "note"]).sort_by("k").to_pylist()
    return [(r["k"], r["paid"], r["note"]) for r in rows]


def random_plan(seed: int, steps: int = 9) -> list[tuple[str, Any]]:
    """Random-ish writes of all three streams over keys 0..9 (`random_rows`), a few compactions, an erase."""
    rng = random.Random(seed)
    plan: list[tuple[str, Any]] = []
    for step in range(steps):
        stream = rng.choice(["orders", "payments", "shipments"])
        plan.append(("write", (stream, random_rows(rng, stream, rng.randint(1, 7), 10, ["x", "y", None]))))
        if step in (3, 6):
            plan.append(("compact", None))
        if step == 5:
            plan.append(("erase", sorted(rng.sample(range(10), 2))))
    return plan


def events(model: Any, keys: range, seed: int) -> list[dict[str, Any]]:
    """Events of one stream for `keys`: values, nulls and a few deletes."""
    chance = random.Random(seed)
    out: list[dict[str, Any]] = []
    for k in keys:
        row: dict[str, Any] = {"k": k, "deleted": chance.random() < 0.1}
        for column in model.columns:
            if column in ("status", "note", "carrier"):
                row[column] = chance.choice(["a", "bb", None, "ccc"])
            else:
                row[column] = chance.randrange(1000)
        out.append(row)
    return out
