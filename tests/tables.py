"""Test tables: real configs on real disk, and conversions between Arrow and the reference model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pyarrow as pa
from reference import StreamModel

from stitchlake.api import Table
from stitchlake.config import TableConfig, parse_config
from stitchlake.timeline.instant import Instant

THREE_STREAMS: dict[str, Any] = {
    "table": {
        "name": "wide",
        "path": "table",
        "key": {"k": "long"},
        "partition_by": {"p": "string"},
        "buckets": 2,
    },
    "streams": {
        "orders": {
            "columns": {"amount": "long", "status": "string", "ots": "long"},
            "ordering": "ots",
            "deletes": {"column": "op", "values": ["D"]},
        },
        "payments": {
            "columns": {"paid": "long", "note": "string", "pts": "long"},
            "ordering": "pts",
            "nulls": "ignore",
            "deletes": {"column": "op", "values": ["D"]},
        },
        "shipments": {
            "columns": {"carrier": {"type": "string", "default": "none"}, "ship_no": "long"},
            "deletes": {"column": "op", "values": ["D"]},
        },
    },
    "concurrency": {"heartbeat": {"interval_s": 1, "expire_s": 5}, "lock": {"wait_s": 20, "expire_s": 10}},
}

MODELS = [
    StreamModel("orders", ("amount", "status", "ots"), ("ots",)),
    StreamModel("payments", ("paid", "note", "pts"), ("pts",), "ignore"),
    StreamModel("shipments", ("carrier", "ship_no"), (), "overwrite", {"carrier": "none"}),
]


def config(root: Path, document: dict[str, Any] | None = None, **table: Any) -> TableConfig:
    data = copy.deepcopy(document or THREE_STREAMS)
    data["table"].update(table)
    return parse_config(data, file="test.yaml", base=root)


def new_table(root: Path, document: dict[str, Any] | None = None, **table: Any) -> Table:
    created = Table(config(root, document, **table))
    created.init()
    return created


def partition_of(key: int) -> str:
    return "even" if key % 2 == 0 else "odd"


def batch(stream: StreamModel, rows: list[dict[str, Any]]) -> pa.Table:
    """An input batch for `stream`: k, p, the stream's columns and the op column."""
    types = {"k": pa.int64(), "p": pa.string(), "op": pa.string()}
    data: dict[str, list[Any]] = {"k": [], "p": [], "op": []}
    for column in stream.columns:
        data[column] = []
    for row in rows:
        data["k"].append(row["k"])
        data["p"].append(partition_of(row["k"]))
        data["op"].append("D" if row.get("deleted") else "I")
        for column in stream.columns:
            data[column].append(row.get(column))
    fields = {
        name: types.get(name, pa.string() if name in ("status", "note", "carrier") else pa.int64()) for name in data
    }
    return pa.table({name: pa.array(values, fields[name]) for name, values in data.items()})


def as_rows(table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Key (k, p) -> row dict of a read result."""
    out = {}
    for row in table.to_pylist():
        row.pop("_op", None)
        out[(row["k"], row["p"])] = row
    return out


def instant_at(table: Any, requested: str) -> Instant:
    """The instant of `table` requested at `requested`, which the test knows exists."""
    found: Instant | None = table.timeline().get(requested)
    assert found is not None, f"no instant {requested} on the timeline"
    return found
