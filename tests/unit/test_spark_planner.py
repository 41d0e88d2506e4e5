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


def test_a_misspelled_or_foreign_read_option_is_refused_not_read_as_now(tmp_path: Path) -> None:
    """Ignored, `as-of` or `sinc` would read the table as of now without a word; the planner (the JVM reader's) and
    the Python source share the check (`ReadRequest`). Keys Spark or a catalog adds (`owner`) pass."""
    from stitchlake.errors import UsageError
    from stitchlake.spark.read_request import ReadRequest
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    first = str(
        table.write(MODELS[0].name, batch(MODELS[0], [{"k": 1, "amount": 1, "status": "a", "ots": 1}])).completed
    )
    last = str(
        table.write(MODELS[0].name, batch(MODELS[0], [{"k": 2, "amount": 2, "status": "b", "ots": 1}])).completed
    )
    path = table.path
    assert ReadRequest({"path": path, "as_of": first, "owner": "etl"}).as_of == first
    refused = {
        "as-of": "did you mean 'as_of'",
        "asOf": "did you mean 'as_of'",
        "sinc": "did you mean 'since'",
        "before_image": "did you mean 'before_images'",
        "timestampAsOf": "another table format's; stitchlake's is as_of",
        "readChangeFeed": "another table format's; stitchlake's is since and until",
    }
    for key, words in refused.items():
        with pytest.raises(UsageError, match=words):
            ReadRequest({"path": path, key: first})
        answer = planner.handle({"id": 1, "op": "schema", "options": {"path": path, key: first}})
        assert not answer["ok"] and answer["error"]["exit_code"] == 2 and words in answer["error"]["message"]
    with pytest.raises(UsageError, match="must be true or false, got 'on'"):
        ReadRequest({"path": path, "since": first, "before_images": "on"})
    with pytest.raises(UsageError, match=r"a change read .* merges the logs"):
        ReadRequest({"path": path, "since": first, "mode": "read_optimized"})
    with pytest.raises(UsageError, match="is after until"):
        ReadRequest({"path": path, "since": last, "until": first})


def test_filters_that_leave_a_column_no_value_plan_nothing_and_an_empty_filter_list_is_refused(tmp_path: Path) -> None:
    """`p IN ('odd', 'x') AND p IN ('even', 'y')` leaves p no value: the JVM reader's plan pruned nothing (Spark still
    checked the rows, so only time was lost), and `stitchlake.read(filter={"p": []})` took the empty list for no
    condition and returned every row."""
    from stitchlake.errors import UsageError
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    orders = MODELS[0]
    table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(1, 9)]))
    contradicting = [{"column": "p", "op": "in", "values": v} for v in (["odd", "x"], ["even", "y"])]
    for options in ({"path": table.path}, {"path": table.path, "since": "20000101000000000"}):
        document = planner.plan(options, None, contradicting, {})
        assert document["filters_used"] == [0, 1]
        assert document.get("slices", []) == [] and document.get("change_slices", []) == [], options
        assert document["partitions"] == []
    empty: list[dict[str, Any]] = [{"p": []}, {"k": ()}, {"amount": set()}]
    for where in empty:
        with pytest.raises(UsageError, match="an empty list of values matches no row"):
            table.read(filter=where)
    with pytest.raises(UsageError, match="an empty list of values matches no row"):
        table.read(since="20000101000000000", filter={"_op": []})
