"""Property test (design.md §2): random events, random batch order, random compactions and erases.

Whatever the order batches arrive in and wherever compaction cuts, `read()` must equal the brute-force
reference model — and time travel must equal the model over the instants completed by then.
"""

from __future__ import annotations

import decimal
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.merge_steps import run_steps, steps
from tests.support.reference import Event, StreamModel, expected_rows
from tests.support.tables import CONCURRENCY, MODELS, as_rows, batch, new_table, partition_of


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps())
def test_read_equals_reference_model(log_format: str, plan: list[tuple[str, Any]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="stitch-prop-"))
    try:
        run_steps(root, plan, log_format)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps(), data=st.data())
def test_result_does_not_depend_on_batch_order(plan: list[tuple[str, Any]], data: Any) -> None:
    """The same events in another batch order, with compactions elsewhere, read the same.

    Ordering values are made unique first: with ties, "later arrival wins" makes order matter by design.
    Commit-time ordered streams are left out for the same reason.
    """
    writes = [arg for kind, arg in plan if kind == "write" and arg[0] != "shipments"]
    if not writes:
        return
    total = sum(len(rows) for _, rows in writes)
    unique = iter(data.draw(st.permutations(range(total))))
    writes = [
        (stream, [{**row, "ots" if stream == "orders" else "pts": next(unique)} for row in rows])
        for stream, rows in writes
    ]
    shuffled = data.draw(st.permutations(writes))
    cuts = data.draw(st.lists(st.booleans(), min_size=len(writes), max_size=len(writes)))
    models = {m.name: m for m in MODELS}
    results = []
    for order, compact_after in ((writes, [False] * len(writes)), (shuffled, cuts)):
        root = Path(tempfile.mkdtemp(prefix="stitch-order-"))
        try:
            table = new_table(root)
            for (stream, rows), compact in zip(order, compact_after, strict=True):
                table.write(stream, batch(models[stream], rows))
                if compact:
                    table.compact()
            results.append(as_rows(table.read()))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    assert results[0] == results[1]
    events = [
        Event(
            stream,
            (row["k"], partition_of(row["k"])),
            {c: row.get(c) for c in models[stream].columns},
            row["deleted"],
            number,
            pos,
        )
        for number, (stream, rows) in enumerate(writes)
        for pos, row in enumerate(rows)
    ]
    assert results[0] == expected_rows(MODELS, events, [], ("k", "p"))


# ------------------------------------------------------------------------ ordering by text, decimal and int

MIXED: dict[str, Any] = {
    "table": {"name": "mixed", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "m": {
            # Ranked types first: they decide unless equal, then the next column does (left to right).
            "columns": {"region": "string", "price": "decimal(6,2)", "seq": "int", "label": "string"},
            "ordering": ["region", "price", "seq"],
            "nulls": "ignore",
            "deletes": {"column": "op", "values": ["D"]},
        },
    },
    "concurrency": CONCURRENCY,
}
MIXED_MODEL = StreamModel("m", ("region", "price", "seq", "label"), ("region", "price", "seq"), "ignore")


@st.composite
def mixed_events(draw: Any) -> dict[str, Any]:
    return {
        "k": draw(st.integers(0, 4)),
        "region": draw(st.sampled_from(["", "a", "ab", "b", "ä", "z"])),
        "price": draw(st.sampled_from([decimal.Decimal(v) for v in ("-1.50", "0.00", "0.01", "9999.99")])),
        "seq": draw(st.integers(-2, 2)),
        "label": draw(st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))),
        "deleted": draw(st.integers(0, 5)) == 0,
    }


def _mixed_batch(table: Any, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r["k"] for r in rows], pa.int64()),
            "region": pa.array([r["region"] for r in rows], pa.string()),
            "price": pa.array([r["price"] for r in rows], pa.decimal128(6, 2)),
            "seq": pa.array([r["seq"] for r in rows], pa.int32()),
            "label": pa.array([r["label"] for r in rows], pa.string()),
            "op": pa.array(["D" if r["deleted"] else "I" for r in rows]),
        }
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(mixed_events(), min_size=1, max_size=5), min_size=1, max_size=5),
    data=st.data(),
)
def test_mixed_type_orderings_merge_like_the_model_in_any_batch_order(
    batches: list[list[dict[str, Any]]], data: Any
) -> None:
    """Text and decimal orderings are ranked within each merge, never encoded globally: whatever the batch order
    and the compaction points (which merge different subsets), the result is the model's, a CRDT's."""
    seen: set[tuple[Any, ...]] = set()  # versions made unique per key: with ties, arrival order decides by design
    unique = []
    for rows in batches:
        kept = []
        for row in rows:
            version = (row["k"], row["region"], row["price"], row["seq"])
            if version not in seen:
                seen.add(version)
                kept.append(row)
        if kept:
            unique.append(kept)
    events = [
        Event("m", (row["k"],), {c: row[c] for c in MIXED_MODEL.columns}, row["deleted"], number, pos)
        for number, rows in enumerate(unique)
        for pos, row in enumerate(rows)
    ]
    expected = expected_rows([MIXED_MODEL], events)
    shuffled = data.draw(st.permutations(unique))
    cuts = data.draw(st.lists(st.booleans(), min_size=len(unique), max_size=len(unique)))
    for order, compact_after in ((unique, [False] * len(unique)), (shuffled, cuts)):
        root = Path(tempfile.mkdtemp(prefix="stitch-mixed-"))
        try:
            table = new_table(root, MIXED)
            for rows, compact in zip(order, compact_after, strict=True):
                table.write("m", _mixed_batch(table, rows))
                if compact:
                    table.compact()
            assert {(r["k"],): r for r in table.read().to_pylist()} == expected
        finally:
            shutil.rmtree(root, ignore_errors=True)
