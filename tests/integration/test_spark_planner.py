"""The planner process of the JVM reader (docs/spark-reader.md): the same slices `stitch read` merges, the schema
the Python data source reports, and each file's schema-version differences, over a real pipe.

No JVM here: the process is what the JVM starts (`python -m stitchlake.spark.planner`), driven by the test.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from stitchlake.api import Table
from stitchlake.io.schemas import table_schema
from stitchlake.reading.filters import prune
from stitchlake.reading.snapshot import plan_slices
from stitchlake.spark import planner
from tests.support.tables import MODELS, THREE_STREAMS, batch, evolved_table, new_table

ORDERS, PAYMENTS, SHIPMENTS = MODELS


def ask(*requests: dict[str, Any]) -> list[dict[str, Any]]:
    """Each request's response from one real planner process (its input closed at the end, as the JVM's is)."""
    text = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        [sys.executable, "-m", "stitchlake.spark.planner"], input=text, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def filled(root: Path) -> Any:
    table = new_table(root, buckets=2)
    table.write("orders", batch(ORDERS, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(8)]))
    table.write("payments", batch(PAYMENTS, [{"k": k, "paid": k, "note": "n", "pts": 1} for k in range(0, 8, 2)]))
    table.compact()
    table.write("shipments", batch(SHIPMENTS, [{"k": k, "carrier": "x", "ship_no": k} for k in range(3)]))
    return table


def test_a_plan_lists_the_slices_stitch_read_merges_packed_once_each(tmp_path: Path) -> None:
    table = filled(tmp_path)
    schema_reply, plan_reply, ro_reply = ask(
        {"id": 1, "op": "schema", "options": {"path": table.path}},
        {"id": 2, "op": "plan", "options": {"path": table.path}, "columns": ["amount", "k"]},
        {"id": 3, "op": "plan", "options": {"path": table.path, "mode": "read_optimized"}},
    )
    assert [r["id"] for r in (schema_reply, plan_reply, ro_reply)] == [1, 2, 3]
    document = plan_reply["result"]
    assert document["format"] == planner.FORMAT and document["delegate"] is None
    assert document["columns"] == ["k", "amount"], "the read's columns, in table order"
    expected = plan_slices(table.config, table.view(), None, prune(table.config, None))
    got = {(s["partition"], s["file_group"]): s for s in document["slices"]}
    assert set(got) == {s.group for s in expected}
    for fslice in expected:
        entry = got[fslice.group]
        assert fslice.base is not None, "every group was compacted"
        assert entry["base"]["path"] == str(Path(table.path) / fslice.base.path)
        assert entry["base"]["checksum"] == fslice.base.checksum and entry["base"]["rows"] == fslice.base.rows
        assert [log["path"] for log in entry["logs"]] == [str(Path(table.path) / f.path) for f in fslice.logs]
        assert all(log["commit"] == int(f.completed) for log, f in zip(entry["logs"], fslice.logs, strict=True))
        assert all(log["absent"] == {} and log["types"] == {} for log in entry["logs"])
    packed = sorted(i for part in document["partitions"] for i in part)
    assert packed == list(range(len(document["slices"])))
    assert all(not s["logs"] for s in ro_reply["result"]["slices"]), "read-optimized reads name base files only"
    streams = {s["name"]: s for s in document["merge"]["streams"]}
    assert streams["payments"]["nulls"] == "ignore" and streams["orders"]["ordering"] == [
        {"type": "long", "ranked": False}
    ]
    assert {c["name"]: c["default"] for c in streams["shipments"]["columns"]} == {"carrier": "none", "ship_no": None}
    assert schema_reply["result"]["schema"]["fields"][0] == {
        "name": "k",
        "type": "long",
        "nullable": True,
        "metadata": {},
    }


def test_partition_and_key_filters_prune_and_errors_come_back_as_responses(tmp_path: Path) -> None:
    table = filled(tmp_path)
    replies = ask(
        {
            "id": 1,
            "op": "plan",
            "options": {"path": table.path},
            "filters": [{"op": "eq", "column": "p", "value": "even"}],
        },
        {
            "id": 2,
            "op": "plan",
            "options": {"path": table.path},
            "filters": [{"op": "gt", "column": "amount", "value": 3}],
        },
        {"id": 3, "op": "plan", "options": {"path": table.path, "as_of": "not a time"}},
        {"id": 4, "op": "frobnicate"},
    )
    assert {s["partition"] for s in replies[0]["result"]["slices"]} == {"p=even"}
    assert replies[0]["result"]["filters_used"] == [0]
    assert replies[1]["result"]["filters_used"] == [] and {s["partition"] for s in replies[1]["result"]["slices"]} == {
        "p=even",
        "p=odd",
    }
    assert replies[2]["ok"] is False and replies[2]["error"]["exit_code"] == 2
    assert replies[3]["ok"] is False and "unknown request" in replies[3]["error"]["message"]


def test_files_of_older_schema_versions_say_what_they_lack_and_store_narrower(tmp_path: Path) -> None:
    def before(table: Table) -> None:
        table.write("a", pa.table({"k": [1, 2], "v": pa.array([1, 2], pa.int32()), "s": ["x", "y"]}))
        table.write("gone", pa.table({"k": [1], "g": [5]}))

    table = evolved_table(tmp_path, before)
    reply = ask({"id": 1, "op": "plan", "options": {"path": table.path}})[0]["result"]
    (entry,) = reply["slices"]
    (log,) = entry["logs"]  # the dropped stream's log is left out
    assert log["stream"] == "a" and log["types"] == {"v": "int"}
    assert log["absent"] == {"when": (dt.date(2026, 11, 21) - dt.date(1970, 1, 1)).days}
    streams = reply["merge"]["streams"]
    assert [s["name"] for s in streams] == ["a"]


def test_the_schema_is_the_one_the_python_data_source_reports(tmp_path: Path) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["orders"]["columns"].update(
        {
            "price": "decimal(10,2)",
            "at": "timestamp",
            "day": "date",
            "tags": "array<string>",
            "attrs": "map<string,int>",
            "info": "struct<x:int,y:string>",
            "raw": "binary",
            "ratio": "float",
            "ok": "boolean",
        }
    )
    table = new_table(tmp_path, document)
    got = ask({"id": 1, "op": "schema", "options": {"path": table.path}})[0]["result"]["schema"]
    assert got == from_arrow_schema(table_schema(table.config)).jsonValue()


def test_the_first_request_imports_nothing_the_preload_did_not(tmp_path: Path) -> None:
    """The planner imports what answering needs when it starts (with the session, `PlannerClient.prestart`), not in
    the session's first read: a module added to `schema` or `plan` but not to `PRELOADED` fails this."""
    table = filled(tmp_path)
    script = (
        "import json, sys\n"
        "from stitchlake.spark import planner\n"
        "planner.preload()\n"
        "before = set(sys.modules)\n"
        f"options = {{'path': {str(table.path)!r}}}\n"
        "for request in ({'op': 'schema', 'options': options}, {'op': 'plan', 'options': options, 'columns': ['k']}):\n"
        "    assert planner.handle(request)['ok'], request\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith('stitchlake'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], "imported by the first request instead of by preload()"
