"""Schema changes for the schema-evolution tests of both tiers and the JVM conformance tests: the table they start
from (`BASE`), its alters (each an edit of the config document), generated histories of writes, compactions and
alters with their reference rows (`histories`, `run_history`), and a nested Avro landing file's schema."""

from __future__ import annotations

import copy
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

import stitchlake
from stitchlake.api import Table
from stitchlake.types import arrow_type
from tests.support.reference import Event, StreamModel, expected_rows
from tests.support.tables import CONCURRENCY, new_table_file, write_table_yaml

BASE: dict[str, Any] = {
    "table": {"name": "evolving", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "a": {
            "columns": {"v": "int", "s": "string", "ts": "string"},
            "ordering": "ts",  # text ordering: ranked within each merge
            "deletes": {"column": "op", "values": ["D"]},
        },
        "b": {
            "columns": {"w": "long", "d": "decimal(10,2)"},
            "ordering": "d",  # decimal ordering
            "nulls": "ignore",
            "deletes": {"column": "op", "values": ["D"]},
        },
        "n": {"columns": {"tags": "array<string>", "info": "struct<x:int,y:string>"}},  # nested, commit-time order
    },
    "concurrency": CONCURRENCY,
}


def add_extra(doc: dict[str, Any]) -> None:
    doc["streams"]["a"]["columns"]["extra"] = {"type": "string", "default": "dflt"}


def widen_v(doc: dict[str, Any]) -> None:
    doc["streams"]["a"]["columns"]["v"] = "long"


def add_stream_c(doc: dict[str, Any]) -> None:
    doc["streams"]["c"] = {"columns": {"c1": "double"}, "deletes": {"column": "op", "values": ["D"]}}


def drop_w(doc: dict[str, Any]) -> None:
    del doc["streams"]["b"]["columns"]["w"]


def drop_n(doc: dict[str, Any]) -> None:
    del doc["streams"]["n"]


def add_z(doc: dict[str, Any]) -> None:
    doc["streams"]["b"]["columns"]["z"] = "int"


def new_default(doc: dict[str, Any]) -> None:
    doc["streams"]["a"]["columns"]["extra"]["default"] = "d2"


def widen_d(doc: dict[str, Any]) -> None:
    """Stream b's ordering column past 18 digits: older files hold it as a long, newer ones as bytes."""
    doc["streams"]["b"]["columns"]["d"] = "decimal(20,2)"


def add_g(doc: dict[str, Any]) -> None:
    doc["streams"]["b"]["columns"]["g"] = "float"


def widen_g(doc: dict[str, Any]) -> None:
    doc["streams"]["b"]["columns"]["g"] = "double"


#: Compatible alters; a history takes them in any order, an alter only after the one it needs (`NEEDS`).
ALTERS = [add_extra, widen_v, add_stream_c, drop_w, drop_n, add_z, new_default, widen_d, add_g, widen_g]


NEEDS = {new_default: add_extra, widen_g: add_g}


def models(document: dict[str, Any]) -> list[StreamModel]:
    out = []
    for name, spec in document["streams"].items():
        columns = {c: (v if isinstance(v, dict) else {"type": v}) for c, v in spec["columns"].items()}
        ordering = spec.get("ordering")
        out.append(
            StreamModel(
                name,
                tuple(columns),
                (ordering,) if isinstance(ordering, str) else tuple(ordering or ()),
                spec.get("nulls", "overwrite"),
                {c: v["default"] for c, v in columns.items() if "default" in v},
            )
        )
    return out


def column_types(document: dict[str, Any], stream: str) -> dict[str, str]:
    spec = document["streams"][stream]["columns"]
    return {c: (v["type"] if isinstance(v, dict) else v) for c, v in spec.items()}


VALUES = {
    "v": st.one_of(st.none(), st.integers(-3, 3)),
    "s": st.one_of(st.none(), st.sampled_from(["p", "q"])),
    "ts": st.sampled_from(["2026-01", "2026-02", "2026-10", "b", "a"]),
    "extra": st.one_of(st.none(), st.sampled_from(["e1", "e2"])),
    "w": st.one_of(st.none(), st.integers(0, 9)),
    "d": st.sampled_from([decimal.Decimal("1.00"), decimal.Decimal("-2.50"), decimal.Decimal("10.01")]),
    "z": st.one_of(st.none(), st.integers(0, 5)),
    "tags": st.one_of(st.none(), st.lists(st.sampled_from(["x", "y"]), max_size=2)),
    "info": st.one_of(st.none(), st.fixed_dictionaries({"x": st.integers(0, 3), "y": st.sampled_from(["u", "v"])})),
    "c1": st.one_of(st.none(), st.floats(-1, 1, allow_nan=False)),
    # exact as a float: a value written before the widening reads back as the same double
    "g": st.one_of(st.none(), st.sampled_from([0.5, -1.25, 3.0, 0.0, -0.0, float("inf")])),
}


@st.composite
def rows_for(draw: Any, stream: str, columns: list[str]) -> list[dict[str, Any]]:
    return [
        {"k": draw(st.integers(0, 5)), "op": "D" if draw(st.integers(0, 7)) == 0 else "I"}
        | {c: draw(VALUES[c]) for c in columns}
        for _ in range(draw(st.integers(1, 4)))
    ]


@st.composite
def histories(draw: Any) -> list[tuple[str, Any]]:
    """Writes to whatever streams exist, compactions, and alters at random points, any of them first."""
    document = copy.deepcopy(BASE)
    out: list[tuple[str, Any]] = []
    done: list[Any] = []
    for _ in range(draw(st.integers(3, 9))):
        roll = draw(st.integers(0, 9))
        ready = [a for a in ALTERS if a not in done and (a not in NEEDS or NEEDS[a] in done)]
        if roll < 3 and ready:
            # one that needed another is drawn 4 times as often once it can be: histories are short
            change = draw(st.sampled_from(ready + [a for a in ready if a in NEEDS] * 3))
            change(document)
            done.append(change)
            out.append(("alter", change.__name__))
        elif roll == 3:
            out.append(("compact", None))
        stream = draw(st.sampled_from(sorted(document["streams"])))
        out.append(("write", (stream, draw(rows_for(stream, list(column_types(document, stream)))))))
    return out


def arrow_rows(document: dict[str, Any], stream: str, rows: list[dict[str, Any]]) -> pa.Table:
    types = column_types(document, stream)
    data = {"k": pa.array([r["k"] for r in rows], pa.int64()), "op": pa.array([r["op"] for r in rows])}
    for column, type_name in types.items():
        data[column] = pa.array([r.get(column) for r in rows], arrow_type(type_name))
    return pa.table(data)


def expected_at(
    document: dict[str, Any], written: list[tuple[Event, set[str]]], upto: int | None, initial: dict[str, Any]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The reference model under `document`'s schema: a column an event predates reads the default the column
    was added with (`initial`; a later change of the default does not reach back), and a group that does not
    exist reads the default in `document`."""
    streams = models(document)
    events = []
    for event, had in written:
        model = next((m for m in streams if m.name == event.stream), None)
        if model is None:
            continue  # a dropped stream
        values = {c: (event.values.get(c) if c in had else initial.get(c)) for c in model.columns}
        events.append(Event(event.stream, event.key, {**values}, event.deleted, event.commit, event.pos))
    return expected_rows(streams, events, upto=upto)


def as_dict(table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(row["k"],): row for row in table.to_pylist()}


def run_history(root: Path, plan: list[tuple[str, Any]], log_format: str) -> Table:
    """Runs the history, checking every read against the reference; the table, for more reads."""
    document = copy.deepcopy(BASE)
    document["table"]["log_format"] = log_format
    table, config = new_table_file(root, document)
    written: list[tuple[Event, set[str]]] = []
    checkpoints: list[tuple[str, int, dict[str, Any]]] = []  # (completion time, commit number, schema then)
    initial: dict[str, Any] = {}  # each column's default when it first appeared
    for model in models(document):
        initial.update({c: model.defaults.get(c) for c in model.columns})
    commit = 0
    for kind, arg in plan:
        if kind == "alter":
            next(a for a in ALTERS if a.__name__ == arg)(document)
            for model in models(document):
                initial.update({c: model.defaults.get(c) for c in model.columns if c not in initial})
            config = write_table_yaml(root, document)
            from stitchlake.services.upkeep.alter import alter

            alter(stitchlake.open(config))
            table = stitchlake.open(config)
        elif kind == "compact":
            table.compact()
        else:
            stream, rows = arg
            result = table.write(stream, arrow_rows(document, stream, rows))
            commit += 1
            had = set(column_types(document, stream))
            for pos, row in enumerate(rows):
                values = {c: row.get(c) for c in had}
                deleted = "deletes" in document["streams"][stream] and row["op"] == "D"
                written.append((Event(stream, (row["k"],), values, deleted, commit, pos), had))
            checkpoints.append((result.completed or "", commit, copy.deepcopy(document)))
    assert as_dict(table.read()) == expected_at(document, written, None, initial)
    for completed, number, then in checkpoints:
        got = table.read(as_of=completed)
        assert got.column_names == ["k", *[c for s in then["streams"].values() for c in s["columns"]]]
        assert as_dict(got) == expected_at(then, written, number, initial), f"as of {completed}"
    table.compact()
    assert as_dict(table.read()) == expected_at(document, written, None, initial)
    return table


#: An Avro landing file of stream n (the nested columns).
NESTED_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "r",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {
            "name": "info",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "info_t",
                    "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "string"}],
                },
            ],
        },
    ],
}
