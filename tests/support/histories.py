"""A table's history in reference-model terms (tests/support/reference.py): the steps done to a real table and
what each one leaves, for tests that compare reads (snapshots, time travel, changes) with the model."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from stitchlake.api import Table
from stitchlake.timeline.clock import from_millis, to_millis
from tests.support.reference import Erase, Event, expected_rows
from tests.support.tables import MODELS, batch, partition_of

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


def apply(table: Table, steps: list[tuple[str, Any]], history: History | None = None) -> History:
    """Do `steps` ("write" (stream, rows), "compact", "erase" keys) to `table`, recording them in `history` (a new
    one by default; commit numbers go on from its last)."""
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
        elif kind == "compact":
            table.compact()
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
