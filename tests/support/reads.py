"""Reads made comparable: sorted by key, without commit times, an incremental read as key -> change (and the change
two reference states imply), a Spark frame as Arrow."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tests.support.histories import KEY


def sort(result: pa.Table) -> pa.Table:
    return result.sort_by([(name, "ascending") for name in KEY])


def untimed(result: pa.Table) -> pa.Table:
    """A change read without its commit times (two tables written apart have different ones)."""
    return result.drop_columns(["_commit_time"])


def changes(result: pa.Table) -> dict[tuple[Any, ...], tuple[str, dict[str, Any]]]:
    """Key -> (op, row without _op) of an incremental read; a key must appear at most once."""
    out = {}
    for row in result.to_pylist():
        op = row.pop("_op")
        row.pop("_commit_time"), row.pop("_streams")  # checked in tests/{unit,integration}/test_change_feed.py
        key = (row["k"], row["p"])
        assert key not in out, f"key {key} appears twice in an incremental read"
        out[key] = (op, row)
    return out


def expected_changes(
    before: dict[tuple[Any, ...], dict[str, Any]],
    after: dict[tuple[Any, ...], dict[str, Any]],
    columns: list[str],
) -> dict[tuple[Any, ...], tuple[str, dict[str, Any]]]:
    """The diff of two reference states: I (new), U (changed), D (gone: key columns only)."""
    out = {}
    for key in set(before) | set(after):
        if key in after and key not in before:
            out[key] = ("I", after[key])
        elif key in after and after[key] != before[key]:
            out[key] = ("U", after[key])
        elif key not in after:
            out[key] = ("D", {name: (value if name in KEY else None) for name, value in before[key].items()})
    return {key: (op, {c: row[c] for c in columns}) for key, (op, row) in out.items()}


def spark_rows(frame: Any) -> pa.Table:
    """A Spark DataFrame as Arrow, with Spark's zone-less timestamps put back in UTC for comparison."""
    table = frame.toArrow()
    columns = {}
    for field in table.schema:
        column = table.column(field.name)
        if pa.types.is_timestamp(field.type):
            column = column.cast(pa.timestamp("us", tz="UTC"))
        columns[field.name] = column
    return pa.table(columns)


def sorted_rows(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda row: row["k"])


def canonical_rows(rows: pa.Table) -> list[dict[str, Any]]:
    """Rows in a canonical order (a streamed read's order is the slices', a whole read's may differ)."""
    return sorted(rows.to_pylist(), key=repr)
