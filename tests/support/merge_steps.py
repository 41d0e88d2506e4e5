"""Generated merge histories (hypothesis): writes with deletes to the three streams, compactions and erases
(`steps`), and a table made by running one and checking it against the reference model (`run_steps`), for the
merge property tests and the JVM tests that merge the same tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from stitchlake.api import Table
from tests.support.histories import apply
from tests.support.reference import expected_rows
from tests.support.tables import MODELS, as_rows, new_table

KEYS = st.integers(min_value=0, max_value=7)


SMALL = st.one_of(st.none(), st.integers(min_value=0, max_value=3))


TEXT = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


@st.composite
def event_rows(draw: Any, stream: str) -> dict[str, Any]:
    row: dict[str, Any] = {"k": draw(KEYS), "deleted": draw(st.integers(0, 6)) == 0}
    if stream == "orders":
        row |= {"amount": draw(SMALL), "status": draw(TEXT), "ots": draw(st.integers(0, 4))}
    elif stream == "payments":
        row |= {"paid": draw(SMALL), "note": draw(TEXT), "pts": draw(st.integers(0, 4))}
    else:
        row |= {"carrier": draw(TEXT), "ship_no": draw(SMALL)}
    return row


@st.composite
def steps(draw: Any) -> list[tuple[str, Any]]:
    """A sequence of writes (stream, rows), compactions, erases and rescales (to a bucket count)."""
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(2, 7))):
        stream = draw(st.sampled_from(["orders", "payments", "shipments"]))
        out.append(("write", (stream, draw(st.lists(event_rows(stream), min_size=1, max_size=6)))))
        roll = draw(st.integers(0, 9))
        if roll < 2:
            out.append(("compact", None))
        elif roll == 2:
            out.append(("erase", sorted(draw(st.sets(KEYS, min_size=1, max_size=3)))))
        elif roll == 3:
            out.append(("rescale", draw(st.integers(1, 4))))
    return out


def run_steps(root: Path, plan: list[tuple[str, Any]], log_format: str) -> Table:
    """Runs the steps, checking every read against the reference model; the table, for more reads."""
    table = new_table(root, log_format=log_format)
    history = apply(table, plan, rewrites_checked=True)

    def expected(until: int | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
        return expected_rows(MODELS, history.events, history.erases, ("k", "p"), until)

    first = table.read()
    assert as_rows(first) == expected()
    assert table.read().equals(first), "two reads of the same snapshot differ"
    for number, completed in history.times:
        assert as_rows(table.read(as_of=completed)) == expected(number)
    return table
