"""Conformance (issue 35, docs/spark-reader.md): the JVM merge returns the rows the Python merge returns, cell by cell.

The JVM side is `io.stitchlake.spark.merge.SliceMerger`, driven by its harness `MergeMain` (one JVM for the whole
module: plan documents in, merged rows out, one JSON line each). Every read is compared as a sorted list of rows in
a canonical form both sides produce (floats by their bits, so -0.0 is not 0.0; NaN as "NaN"; decimals as plain text;
binary as base64; dates and timestamps as numbers; maps as [key, value] pairs; structs as lists).

Cases: every scenario of tests/unit/test_merge_rules.py (each of its reads, with `Table.read` wrapped), a table of every
value and ordering type, and hypothesis-generated tables (deletes in every stream, nulls: ignore, ties, commit-time
ordering, alters, compactions, erases, rescales, time travel). `CONFORMANCE_EXAMPLES` sets how many generated tables
(`make conformance`: 10000).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import inspect
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Unpack

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stitchlake.api import Table
from stitchlake.reading.options import ReadKeywords
from stitchlake.spark import planner
from tests.integration import test_merge_property as prop
from tests.integration import test_schema_evolution as evolution
from tests.unit import test_merge_rules as rules

#: Every test here starts a JVM (Spark or the merge harness).
pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
JAR = Path(os.environ.get("STITCHLAKE_JAR", ROOT / ".venv" / "jars" / "stitchlake-spark.jar"))
#: Generated tables in all. A table with its writes and its ~10 reads (each merged by Python and by the JVM) costs
#: about 0.4 s here, most of it Python's writes and reads: 200 keep the module near 2 minutes of `make test`;
#: `make conformance` runs 2,000.
EXAMPLES = int(os.environ.get("CONFORMANCE_EXAMPLES", "200"))
EPOCH_DAY = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


class Harness:
    """One `MergeMain` JVM: a plan document in, the merged rows out."""

    def __init__(self) -> None:
        classpath = f"{JAR}{os.pathsep}{_spark_jars() / '*'}"
        self.process = subprocess.Popen(
            ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", classpath, "io.stitchlake.spark.merge.MergeMain"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.requests = 0

    def rows(self, plan: dict[str, Any]) -> list[Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"plan": plan}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the merge harness exited ({self.process.poll()})"
        answer = json.loads(line)
        assert answer["ok"], f"the JVM merge failed: {answer['error']}\n{answer['trace']}"
        self.requests += 1
        rows: list[Any] = answer["rows"]
        return rows

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    # `make setup` builds the jar and needs java: a missing one is a broken setup, never a reason to skip.
    if not JAR.is_file():
        pytest.fail(f"no stitchlake Spark reader jar at {JAR} (make jvm builds it)", pytrace=False)
    with zipfile.ZipFile(JAR) as jar:
        if "io/stitchlake/spark/merge/MergeMain.class" not in jar.namelist():
            pytest.fail(f"{JAR} was built without the merge (make jvm rebuilds it)", pytrace=False)
    if shutil.which("java") is None:
        pytest.fail("no java on PATH", pytrace=False)
    started = Harness()
    try:
        yield started
    finally:
        started.close()


# ------------------------------------------------------------------------------------------------ the plan


def build_plan(
    table: Table, mode: str = "snapshot", as_of: str | None = None, columns: Sequence[str] | None = None
) -> dict[str, Any]:
    """The `stitchlake.plan/1` document of a snapshot or time-travel read, from the planner process's own code
    (`stitchlake.spark.planner.plan`): the JVM merges exactly what the JVM reader would be handed."""
    options = {"path": str(table.storage.describe()), "mode": mode}
    if as_of is not None:
        options["as_of"] = as_of
    return planner.plan(options, columns, [], {})


# ------------------------------------------------------------------------------------------------ canonical rows


def _canon(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_floating(kind):
        if math.isnan(value):
            return "NaN"
        if pa.types.is_float32(kind):
            return struct.unpack("<i", struct.pack("<f", value))[0]
        return struct.unpack("<q", struct.pack("<d", value))[0]
    if pa.types.is_timestamp(kind):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if pa.types.is_date(kind):
        return (value - EPOCH_DAY).days
    if pa.types.is_decimal(kind):
        return format(value, "f")
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return base64.b64encode(value).decode()
    if pa.types.is_map(kind):
        return [[_canon(k, kind.key_type), _canon(v, kind.item_type)] for k, v in value]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_canon(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return [_canon(value[kind.field(i).name], kind.field(i).type) for i in range(kind.num_fields)]
    return value


def canonical(result: pa.Table) -> list[str]:
    """A read's rows as sorted canonical JSON lines."""
    types = [field.type for field in result.schema]
    return sorted(
        json.dumps([_canon(v, t) for v, t in zip(row.values(), types, strict=True)]) for row in result.to_pylist()
    )


def check(
    harness: Harness,
    table: Table,
    expected: pa.Table,
    mode: str = "snapshot",
    as_of: str | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """The JVM merge of this read returns `expected` (the Python merge's rows), cell by cell."""
    plan = build_plan(table, mode, as_of, columns)
    got = sorted(json.dumps(row) for row in harness.rows(plan))
    want = canonical(expected)
    assert got == want, (
        f"JVM merge differs from Python ({mode}, as_of={as_of}, columns={columns}):\n"
        + "\n".join(f"  jvm only: {row}" for row in sorted(set(got) - set(want)))
        + "\n"
        + "\n".join(f"  python only: {row}" for row in sorted(set(want) - set(got)))
    )


# ------------------------------------------------------------------------------------------------ merge-rule cases


def _rule_cases() -> list[Any]:
    cases = []
    for name, function in inspect.getmembers(rules, inspect.isfunction):
        if not name.startswith("test_"):
            continue
        params = list(inspect.signature(function).parameters)
        if params == ["tmp_path"]:
            cases.append(pytest.param(function, {}, id=name))
        elif params == ["tmp_path", "when"]:
            cases += [pytest.param(function, {"when": w}, id=f"{name}[{w}]") for w in rules.COMPACTION]
        elif params == ["tmp_path", "kind", "when"]:
            cases += [
                pytest.param(function, {"kind": k, "when": w}, id=f"{name}[{k}-{w}]")
                for k in rules.ORDERING_CASES
                for w in ("never", "after_each_step")
            ]
    return cases


@contextlib.contextmanager
def compared(harness: Harness) -> Iterator[list[str]]:
    """Every snapshot, time-travel and read-optimized `Table.read` in the block is merged by the JVM too and must
    give the same rows. Files are not fsynced (scratch tables): the generated tables are many."""
    original = Table.read
    checked: list[str] = []

    def read(self: Table, mode: str = "snapshot", **options: Unpack[ReadKeywords]) -> pa.Table:
        result = original(self, mode, **options)
        if options.get("since") is None and options.get("until") is None and options.get("filter") is None:
            check(harness, self, result, mode, options.get("as_of"), options.get("columns"))
            checked.append(mode)
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Table, "read", read)
        patch.setattr(os, "fsync", lambda fd: None)
        yield checked


@pytest.mark.parametrize(("scenario", "arguments"), _rule_cases())
def test_every_read_of_the_merge_rule_scenarios_matches(
    harness: Harness, tmp_path: Path, scenario: Callable[..., None], arguments: dict[str, Any]
) -> None:
    """Each read a scenario of test_merge_rules makes (snapshot, read-optimized) is also merged by the JVM."""
    with compared(harness) as checked:
        scenario(tmp_path, **arguments)
    assert checked or scenario.__name__.startswith("test_bad_row"), "the scenario made no read to compare"


# ------------------------------------------------------------------------------------------------ generated tables

#: Generated tables per test: three streams with deletes and erases (test_merge_property), and alters with text,
#: decimal and nested columns (test_schema_evolution); together EXAMPLES.
STEPS_EXAMPLES = max(1, EXAMPLES * 3 // 5)
HISTORY_EXAMPLES = max(1, EXAMPLES - STEPS_EXAMPLES)


#: Log formats a generated table is written with (the JVM reads Avro logs itself, nested values included).
LOG_FORMATS = st.sampled_from(["parquet", "avro"])


def in_scratch(harness: Harness, history: Callable[[Path], object]) -> None:
    """Run a generated history in a scratch folder (not pytest's: the examples are many), every read compared."""
    root = Path(tempfile.mkdtemp(prefix="stitch-jvm-"))
    try:
        with compared(harness) as checked:
            history(root)
        assert checked
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=STEPS_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
@given(plan=prop.steps(), log_format=LOG_FORMATS)
def test_generated_tables_with_deletes_erases_ties_and_time_travel_match(
    harness: Harness, plan: list[tuple[str, Any]], log_format: str
) -> None:
    """Random writes to an ordered, a nulls: ignore and a commit-time stream (deletes in each, ties), compactions
    and key erases, Parquet or Avro logs; every read (each compaction's before and after, every as-of time)
    compared."""
    in_scratch(harness, lambda root: prop.run_steps(root, plan, log_format))


@settings(max_examples=HISTORY_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=evolution.histories(), log_format=LOG_FORMATS)
def test_generated_tables_across_alters_match(harness: Harness, plan: list[tuple[str, Any]], log_format: str) -> None:
    """Random writes, compactions and alters (an added column with a default, an int widened to long, a stream
    added and one dropped, a dropped column, a changed default), text and decimal orderings, nested columns, Parquet
    or Avro logs; every read under each schema version compared."""
    in_scratch(harness, lambda root: evolution.run_history(root, plan, log_format))


# ------------------------------------------------------------------------------------------------ types and values

TYPED: dict[str, Any] = {
    "table": {"name": "typed", "path": "table", "key": {"k": "long"}, "partition_by": {"p": "string"}, "buckets": 2},
    "streams": {
        "x": {
            "columns": {
                "bin": "binary",
                "f": "double",
                "m": "map<string,long>",
                "t": "timestamp",
                "day": {"type": "date", "default": "2026-01-02"},
                "flag": "boolean",
            },
            "ordering": "bin",
            "deletes": {"column": "op", "values": ["D"]},
        },
        "y": {
            "columns": {"dec": "decimal(8,3)", "g": "float", "arr": "array<long>", "st": "struct<a:long,b:string>"},
            "ordering": "dec",
            "nulls": "ignore",
            "deletes": {"column": "op", "values": ["D"]},
        },
    },
    "concurrency": rules.CONCURRENCY,
}


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
def test_every_value_type_and_ranked_ordering_matches(harness: Harness, tmp_path: Path, log_format: str) -> None:
    """NaN, infinities, -0.0 and 0.0, maps, arrays, structs, timestamps, dates, binary and decimal orderings, in
    Parquet and in Avro logs."""
    ts = dt.datetime(2026, 11, 21, 10, 0, 0, 1, tzinfo=dt.UTC)
    document = {**TYPED, "table": {**TYPED["table"], "log_format": log_format}}
    with compared(harness) as checked:
        s = rules.Scenario(rules.make_table(tmp_path, document), "never", key=("k", "p"))
        x = [
            {"k": 1, "p": "a", "bin": b"\x01", "f": float("nan"), "m": [("u", 1)], "t": ts, "flag": True},
            {"k": 1, "p": "a", "bin": b"\xff", "f": -0.0, "m": [], "t": None, "flag": False},
            {"k": 2, "p": "a", "bin": b"", "f": float("inf"), "m": None, "day": dt.date(1969, 12, 31)},
            {"k": 3, "p": "b", "bin": b"\x80", "f": 0.0, "m": [("v", None), ("w", -2)], "op": "D"},
            {"k": 4, "p": "b", "bin": b"\x7f", "f": float("-inf"), "t": dt.datetime(1960, 1, 1, tzinfo=dt.UTC)},
            {"k": 6, "p": "b", "bin": b"\x10", "f": 2.5, "m": [("z", 5), ("y", None), ("x", 7)]},  # a map that shows
        ]
        s.write("x", x)
        y = [
            {
                "k": 1,
                "p": "a",
                "dec": decimal.Decimal("-1.500"),
                "g": -0.0,
                "arr": [1, None],
                "st": {"a": 1, "b": None},
            },
            {"k": 1, "p": "a", "dec": decimal.Decimal("2.000"), "g": None, "arr": None, "st": {"a": 2, "b": "z"}},
            {"k": 5, "p": "b", "dec": decimal.Decimal("0.001"), "g": float("nan"), "arr": [], "st": None},
            {"k": 7, "p": "a", "dec": decimal.Decimal("9.000"), "arr": [3, None, 4], "st": {"a": 9, "b": "q"}},
        ]
        s.write("y", y)
        s.write("y", [{"k": 1, "p": "a", "dec": decimal.Decimal("1.999"), "g": 3.5, "arr": [7]}])
        s.write("x", [{"k": 2, "p": "a", "bin": b"\x00\x01", "f": 1.0}, {"k": 4, "p": "b", "bin": b"\x7f", "op": "D"}])
        s.rows()
        s.table.compact()
        s.rows()
        s.write("y", [{"k": 5, "p": "b", "dec": decimal.Decimal("0.001"), "op": "D"}])
        s.rows()
        s.table.read(columns=["k", "f", "g"])
    assert len(checked) >= 4
