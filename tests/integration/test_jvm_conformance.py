"""Conformance (issue 35, docs/spark-reader.md): the JVM merge returns the rows the Python merge returns, cell by cell.

The JVM side is `io.stitchlake.spark.merge.SliceMerger` (and `ChangeFeed` for incremental reads), driven by its
harness `MergeMain` (one JVM for the whole module: plan documents in, merged rows out, one JSON line each). Every
read is compared as a sorted list of rows in a canonical form both sides produce (floats by their bits, so -0.0 is
not 0.0; NaN as "NaN"; decimals as plain text; binary as base64; dates and timestamps as numbers; maps as [key,
value] pairs; structs as lists).

Cases: every scenario of tests/support/merge_rules.py (each of its reads, with `Table.read` wrapped), a table of every
value and ordering type, text orderings beyond ASCII (code point order, as the Python merge ranks text), and
hypothesis-generated tables (deletes in every stream, nulls: ignore, ties, commit-time ordering, alters, compactions,
erases, rescales to 1-4 buckets, time travel across them, an incremental read of every second one); columns widened
by alters are in test_jvm_conformance_alters.py. `CONFORMANCE_EXAMPLES` sets how many generated tables (`make
conformance`: 2,000).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stitchlake.api import Table
from stitchlake.merge import stitch
from tests.support import merge_rules as rules
from tests.support.histories import column_version_history, contest_compacted, shown_payments
from tests.support.merge_harness import (
    EPOCH_DAY,
    LOG_FORMATS,
    STEPS_EXAMPLES,
    Harness,
    compared,
    in_scratch,
)
from tests.support.merge_steps import run_steps, steps
from tests.support.tables import CONCURRENCY, created_in_format, new_table, stream_doc

#: Every test here starts a JVM (Spark or the merge harness).
pytestmark = pytest.mark.spark


# ------------------------------------------------------------------------------------------------ the plan


# ------------------------------------------------------------------------------------------------ canonical rows


# ------------------------------------------------------------------------------------------------ merge-rule cases


@pytest.mark.parametrize(("scenario", "arguments"), rules.rule_cases())
def test_every_read_of_the_merge_rule_scenarios_matches(
    harness: Harness, tmp_path: Path, scenario: Callable[..., None], arguments: dict[str, Any]
) -> None:
    """Each read a scenario of merge_rules makes (snapshot, read-optimized) is also merged by the JVM."""
    with compared(harness) as checked:
        scenario(tmp_path, **arguments)
    assert checked or scenario.__name__.startswith("bad_row"), "the scenario made no read to compare"


# ------------------------------------------------------------------------------------------------ generated tables


#: The order of a generated table's file rows: by key and marked so, as files are written, or reversed and unmarked, as
#: a stand-in for files written before key order (the JVM merges a slice of the first window by window when its output
#: is flat, and reads the others whole, where its key index hashes them).
FILE_ORDERS = st.sampled_from(["key", "reversed"])
#: The table format a generated table is created in: 2 leaves a column's version null where it is its row's, 1
#: writes it wherever a value is (config/stored.py); the JVM reads both.
TABLE_FORMATS = st.sampled_from([1, 2])


@contextlib.contextmanager
def files_in(order: str) -> Iterator[None]:
    """Data files written in `order` (see FILE_ORDERS) while the block runs."""
    if order == "key":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stitch, "key_order", lambda config, rows: pa.array(range(rows.num_rows - 1, -1, -1), pa.int64()))
        patch.setattr(stitch, "marked_key_ordered", lambda rows: rows)
        yield


@settings(max_examples=STEPS_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
@given(plan=steps(), log_format=LOG_FORMATS, file_order=FILE_ORDERS, table_format=TABLE_FORMATS)
def test_generated_tables_with_deletes_erases_ties_and_time_travel_match(
    harness: Harness, plan: list[tuple[str, Any]], log_format: str, file_order: str, table_format: int
) -> None:
    """Random writes to an ordered, a nulls: ignore and a commit-time stream (deletes in each, ties), compactions
    and key erases, Parquet or Avro logs, files in key order or not, tables of either format; every read (each
    compaction's before and after, every as-of time) compared."""
    with files_in(file_order), created_in_format(table_format):
        in_scratch(harness, lambda root: run_steps(root, plan, log_format))


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
@pytest.mark.parametrize("table_format", [1, 2])
def test_a_columns_own_version_and_its_rows_read_alike_in_either_format(
    harness: Harness, tmp_path: Path, table_format: int, log_format: str
) -> None:
    """A value whose version is older than its row's (written in format 2 only where it differs) loses to a late
    event newer than it and beats one older: the JVM takes the column's version, not the row's, in logs and, after
    compaction, in the base file."""
    with compared(harness) as checked:
        table, _ = column_version_history(tmp_path, table_format, log_format=log_format)
        assert shown_payments(table) == [(1, 15, "new"), (2, 20, "only")]
        want = contest_compacted(table)
        assert shown_payments(table) == want
    assert len(checked) == 2


def test_a_row_the_python_merge_lacks_fails_the_comparison_also_when_deferred(harness: Harness, tmp_path: Path) -> None:
    """The comparison can fail: a read whose Python rows lost one (patched under the wrapper) differs from the
    JVM's, and the deferred check says so when its block ends; the answers after it stay in step."""
    table = new_table(tmp_path, TYPED)
    s = rules.Scenario(table, "never", key=("k", "p"))
    s.write("x", [{"k": 1, "p": "a", "bin": b"\x01", "f": 1.0}, {"k": 2, "p": "a", "bin": b"\x02", "f": 2.0}])
    original = Table.read
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Table, "read", lambda self, mode="snapshot", **kw: original(self, mode, **kw).slice(1))
        with pytest.raises(AssertionError, match="JVM merge differs from Python"), compared(harness, deferred=True):
            table.read()
            table.read(mode="read_optimized")
    with compared(harness) as checked:  # in step: the next read's answer is its own
        table.read()
    assert checked == ["snapshot"]


def test_the_jvm_bucket_hash_gives_the_pinned_vectors_and_the_python_hash_of_random_keys(harness: Harness) -> None:
    """An incremental read's task hashes carried keys again when a rescale changed the bucket count since their
    commit: its hash must be the table's (tests/unit/test_layout.py pins it), on one column and on composite keys."""
    from stitchlake.layout.bucket import stable_hash
    from tests.support.bucket_vectors import PINNED

    def value(cell: Any) -> Any:  # a date as the days since 1970 it is hashed as
        return (cell - EPOCH_DAY).days if isinstance(cell, dt.date) else cell

    pinned = [[value(c[0].as_py()) for c in columns] for columns, _ in PINNED]
    assert harness.hashes(pinned) == [expected for _, expected in PINNED]
    rng = random.Random(35)
    text = "ab日🙂\x00 "
    keys = [[rng.randint(-(2**63), 2**63 - 1), "".join(rng.choices(text, k=rng.randint(0, 9)))] for _ in range(200)]
    python = stable_hash([pa.array([k[0] for k in keys], pa.int64()), pa.array([k[1] for k in keys], pa.string())])
    assert harness.hashes(keys) == [int(h) for h in python]


#: Keys other than one long: a composite string and date key in a partitioned table, and an int key.
KEYED: dict[str, dict[str, Any]] = {
    "composite": {
        "table": {
            "name": "keyed",
            "path": "table",
            "key": {"s": "string", "d": "date"},
            "partition_by": {"p": "string"},
            "buckets": 3,
        },
        "streams": {
            "a": {"columns": {"x": "long", "f": "double"}, "deletes": {"column": "op", "values": ["D"]}},
            "b": {"columns": {"y": "string", "arr": "array<double>"}},
        },
    },
    "int": {
        "table": {"name": "keyed", "path": "table", "key": {"s": "int"}, "buckets": 3},
        "streams": {
            "a": {"columns": {"x": "long", "f": "double"}, "deletes": {"column": "op", "values": ["D"]}},
            "b": {"columns": {"y": "string", "arr": "array<double>"}},
        },
    },
}


@pytest.mark.parametrize("kind", sorted(KEYED))
def test_incremental_reads_of_other_keys_across_partial_rescales_and_erases_match(
    harness: Harness, tmp_path: Path, kind: str
) -> None:
    """The task's own key handling (`CandidateKeys` for any key, `BucketHash.bucket` on rows) on keys other than
    one long: every range of a history with rescales of one partition and of the whole table, erases and a
    compaction in it, with and without before-images, compared with the Python change feed."""
    document = KEYED[kind]
    table = new_table(tmp_path, document)
    composite = kind == "composite"
    rng = random.Random(36)

    def key(n: int) -> dict[str, Any]:
        if composite:
            return {"s": f"k{n % 7}é", "d": EPOCH_DAY + dt.timedelta(days=n // 7 - 3), "p": "ab"[n % 2]}
        return {"s": n - 10}

    def rows(stream: str, keys: range) -> pa.Table:
        out = []
        for n in keys:
            row: dict[str, Any] = key(n)
            if stream == "a":
                row |= {"x": rng.randrange(5), "f": rng.choice([float("nan"), -0.0, 0.0, 1.5])}
                row["op"] = "D" if rng.random() < 0.1 else "I"
            else:
                row |= {"y": rng.choice(["u", "v", None]), "arr": rng.choice([[1.0, float("nan")], [], None])}
            out.append(row)
        return rules.batch_for(table, stream, out)

    def erase(keys: list[int]) -> None:
        found = [key(n) for n in keys]
        if composite:
            table.erase(pa.table({"s": [f["s"] for f in found], "d": pa.array([f["d"] for f in found], pa.date32())}))
        else:
            table.erase(pa.table({"s": pa.array([f["s"] for f in found], pa.int32())}))

    with compared(harness) as checked:
        table.write("a", rows("a", range(0, 40)))
        table.write("b", rows("b", range(10, 50)))
        table.rescale(2, partitions=["p=a"] if composite else None)
        table.write("a", rows("a", range(20, 60)))
        erase([3, 21, 22])
        table.compact()
        table.rescale(5)
        table.write("b", rows("b", range(0, 30)))
        table.write("a", rows("a", range(25, 35)))
        times = [t for i in table.timeline().completed() if (t := i.completed) is not None]
        ops: set[str] = set()
        for since in [None, *times[:-1]]:
            for until in [t for t in times if since is None or t > since][:3]:
                ops |= set(table.read(since=since, until=until).column("_op").to_pylist())
                ops |= set(table.read(since=since, until=until, before_images=True).column("_op").to_pylist())
    assert len(checked) >= 40 and ops == {"I", "U", "D", "-U", "+U"}


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
    "concurrency": CONCURRENCY,
}


@pytest.mark.parametrize("file_order", ["key", "reversed"])
def test_a_slice_of_more_logs_than_the_key_index_scans_matches(
    harness: Harness, tmp_path: Path, file_order: str
) -> None:
    """Past 32 runs a slice's key index merges its sorted runs through a heap (`KeyIndex.SCANNED_RUNS`): 45
    commits of three streams (deletes, `nulls: ignore`, ties, keys in some commits only) into one file group, read
    as of several instants, each compared; and the same history in files of no key order (the hash path)."""
    chance = random.Random(35)
    with files_in(file_order), compared(harness) as checked:
        s = rules.Scenario(new_table(tmp_path, {**rules.DOC, "table": {**rules.DOC["table"], "buckets": 1}}), "never")
        for commit in range(45):
            stream = "abc"[commit % 3]
            keys = chance.sample(range(-40, 400), chance.randint(1, 60))
            rows = []
            for k in keys:
                version = chance.randint(0, 30)
                op = "D" if chance.random() < 0.1 else "I"
                value = None if chance.random() < 0.2 else chance.randint(-5, 5)
                if stream == "a":
                    rows.append({"k": k, "x": value, "y": f"y{version}", "ts": version, "op": op})
                elif stream == "b":
                    rows.append({"k": k, "u": value, "v": None, "bts": version, "op": op})
                else:
                    rows.append({"k": k, "w": f"w{commit}", "n": value, "op": op})
            s.write(stream, rows)
        logs = list(Path(s.table.path).rglob("*.log.parquet"))
        assert len(logs) == 45, "one log per commit in the one file group"
        times = [i.completed for i in s.table.timeline().completed()]
        s.table.read(as_of=times[20])
        s.table.read(as_of=times[40])
        s.table.read()
    assert len(checked) == 3


def test_a_composite_key_whose_integer_column_repeats_across_files_matches(harness: Harness, tmp_path: Path) -> None:
    """Each file's integer first key column rises, so the key index starts merging runs, then meets one value with
    two different second columns in two files and starts again by hashing every column: nothing of the first try
    may leak into the ids."""
    document = {
        "table": {"name": "pairs", "path": "table", "key": {"k": "long", "j": "string"}, "buckets": 1},
        "streams": {"a": {"columns": {"x": "long"}}, "b": {"columns": {"y": "string"}}},
    }
    with compared(harness) as checked:
        table = new_table(tmp_path, document)
        table.write("a", pa.table({"k": [1, 2, 5], "j": ["p", "p", "p"], "x": [10, 20, 50]}))
        table.write("b", pa.table({"k": [1, 3, 5], "j": ["q", "q", "p"], "y": ["u", "v", "w"]}))
        table.write("a", pa.table({"k": [1, 4], "j": ["q", "r"], "x": [11, 40]}))
        rows = table.read()
    assert len(checked) == 1
    assert rows.num_rows == 6


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
def test_every_value_type_and_ranked_ordering_matches(harness: Harness, tmp_path: Path, log_format: str) -> None:
    """NaN, infinities, -0.0 and 0.0, maps, arrays, structs, timestamps, dates, binary and decimal orderings, in
    Parquet and in Avro logs."""
    ts = dt.datetime(2026, 11, 21, 10, 0, 0, 1, tzinfo=dt.UTC)
    with compared(harness) as checked:
        s = rules.Scenario(new_table(tmp_path, TYPED, log_format=log_format), "never", key=("k", "p"))
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
        # Incremental reads: every type diffed; a NaN and a map written again unchanged have no change row.
        nan_again = {"k": 8, "p": "a", "dec": decimal.Decimal("1.000"), "g": float("nan"), "st": {"a": 1, "b": "n"}}
        s.write("y", [nan_again])
        s.write("x", [{"k": 6, "p": "b", "bin": b"\x10", "f": 2.5, "m": [("z", 5), ("y", None), ("x", 7)]}])
        s.write("y", [nan_again])
        times = [i.completed for i in s.table.timeline().completed()]
        again = s.table.read(since=times[-3])
        assert again.num_rows == 0, again.to_pylist()
        s.table.read(since=times[0])
        s.table.read(since=times[1], before_images=True)
        s.table.read(until=times[2])
    assert len(checked) >= 8


#: Text ordering values, each group the versions of three keys (one commit each in the group's order, in reverse,
#: and all in one batch). The Python merge ranks text by its UTF-8 bytes (Arrow's sort: code point order), so each
#: group's winner is its `max()`; the JVM must agree where other orders would not: UTF-16 code units (Java's
#: `String.compareTo`) put U+E000-U+FFFF above every character past U+FFFF (a surrogate pair), signed bytes put ASCII
#: above the rest, and no order may normalise ("é" and "e" with a combining accent are two values) or fold case.
TEXT_ORDERINGS: list[list[str]] = [
    ["z", "é"],
    ["é", "Ω", "ÿ"],
    ["日本", "日", "本"],
    ["\uffff", "\U0001f600"],
    ["\ue000", "\U00010000", "\ufffd"],
    ["\U0001f600", "\U0001f600\x00", "\U0001f600a", "\U0001f601"],
    ["a", "B", "", "\x00"],
    ["é", "e\u0301"],
    ["\x7f", "\u0080", "~"],
    ["\uff41", "a", "\U000e0001", "\U0010ffff"],  # fullwidth a; a tag; the last code point
]

TEXT: dict[str, Any] = {
    "table": {"name": "text", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "o": stream_doc({"s": "string", "label": "string"}, "s"),
        "n": stream_doc({"t": "string", "v": "string", "w": "long"}, "t", "ignore"),
    },
    "concurrency": CONCURRENCY,
}


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
@pytest.mark.parametrize("when", ["never", "after_each_step"])
def test_text_orderings_beyond_ascii_pick_the_python_winner(
    harness: Harness, tmp_path: Path, when: str, log_format: str
) -> None:
    """Streams ordered by text (overwrite with deletes, and `nulls: ignore`, whose column versions hold the text
    too) whose values are accented, Greek, CJK, emoji and the characters where UTF-8 byte order and UTF-16 code
    unit order disagree, one version per commit and all in one batch, in logs and base files: the JVM keeps the
    winner the Python merge keeps, the greatest in code point order."""
    keys: dict[int, list[str]] = {}
    for number, group in enumerate(TEXT_ORDERINGS):
        keys[3 * number], keys[3 * number + 1] = group, group[::-1]
        keys[3 * number + 2] = group[1:] + group[:1]  # one batch: rows in this order
    with compared(harness) as checked:
        s = rules.Scenario(new_table(tmp_path, TEXT, log_format=log_format), when)
        for commit in range(max(map(len, TEXT_ORDERINGS))):
            o, n = [], []
            for k, versions in keys.items():
                if k % 3 == 2 or commit >= len(versions):
                    continue
                text = versions[commit]
                o.append({"k": k, "s": text, "label": f"{k}:{commit}"})
                n.append({"k": k, "t": text, "v": None if commit % 2 else text, "w": None if commit % 2 else commit})
            s.write("o", o)
            s.write("n", n)
            s.rows()
        batch = [(k, text) for k, versions in keys.items() if k % 3 == 2 for text in versions]
        s.write("o", [{"k": k, "s": text, "label": text} for k, text in batch])
        s.write("n", [{"k": k, "t": text, "v": text, "w": None} for k, text in batch])
        # A delete at each key's least version loses to its greatest.
        s.write("o", [{"k": k, "s": min(versions), "op": "D"} for k, versions in keys.items()])
        s.write("n", [{"k": k, "t": min(versions), "op": "D"} for k, versions in keys.items()])
        rows = {r["k"]: r for r in s.rows()}
        s.table.read(columns=["k", "s", "t"])
    assert len(checked) >= 6
    assert {k: (r["s"], r["t"]) for k, r in rows.items()} == {k: (max(v), max(v)) for k, v in keys.items()}
    assert rows[9]["s"] == "\U0001f600" and rows[12]["t"] == "\U00010000"  # UTF-16 order would pick U+FFFF, U+FFFD
