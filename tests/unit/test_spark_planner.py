"""The planner process of the JVM reader (docs/spark-reader.md): the same slices `stitch read` merges, the schema the
Python data source reports, and each file's schema-version differences, over a real pipe.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_spark_planner.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from pathlib import Path
from typing import Any

import pytest

from stitchlake.spark import planner


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        (dt.date(1970, 1, 2), "date", 1),
        (dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC), "timestamp", 1_000_000),
        (decimal.Decimal("1.50"), "decimal(4,2)", "1.50"),
        (b"\x00\xff", "binary", "AP8="),
        ({"x": 1, "y": [dt.date(1970, 1, 1)]}, "struct<x:int,y:array<date>>", {"x": 1, "y": [0]}),
        (None, "long", None),
    ],
)
def test_literals_are_in_sparks_internal_form(value: Any, kind: str, expected: Any) -> None:
    assert planner.literal(value, kind) == expected


def test_a_plan_too_large_for_a_line_goes_to_a_private_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner, "INLINE_PLAN_BYTES", 10)
    out = io.StringIO()
    planner.write_response({"id": 5, "ok": True, "result": {"slices": list(range(100))}}, out)
    reply = json.loads(out.getvalue())
    path = Path(reply["result"]["plan_file"])
    try:
        assert json.loads(path.read_text()) == {"slices": list(range(100))}
        assert path.stat().st_mode & 0o077 == 0
    finally:
        path.unlink()
