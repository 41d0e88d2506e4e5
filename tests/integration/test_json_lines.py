"""Values as JSON (issue 34, points 5, 6 and 8): what `--json` writes, what a JSON landing file's lines may hold,
and the one text grammar of `--where` and CSV landing files.

Every test runs the real `stitch` console script on a table of its own: a JSON stream and a CSV stream holding a
column of every simple kind, so a value of the wrong JSON type, a double that is NaN or infinite, a decimal that
does not fit, and a text boolean can each be written where a user would write it.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.bad_input import stitch
from tests.support.snapshots import snapshot
from tests.support.tables import new_table_file, stream_doc, table_doc, write_table_yaml

READINGS = {"s": "string", "b": "boolean", "n": "long", "v": "double", "d": "decimal(8,5)", "tags": "array<string>"}
CONFIG: dict[str, Any] = table_doc(
    "values",
    {
        "readings": {**stream_doc(READINGS), "source": {"format": "json", "path": "landing/readings"}},
        "texts": {
            **stream_doc({"flag": "boolean", "count": "long"}, deletes=False),
            "source": {"format": "csv", "path": "landing/texts"},
        },
        "doubles": {
            **stream_doc({"amount": "decimal(8,5)"}, deletes=False),
            "source": {"format": "parquet", "path": "landing/doubles"},
        },
    },
)
INGEST_READINGS = ("ingest", "-c", "table.yaml", "-s", "readings", "--engine", "local", "--json")
GOOD = {"s": "a", "b": True, "n": 1, "v": 1.5, "d": "1.5", "tags": ["x"]}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for stream in ("readings", "texts", "doubles"):
        (tmp_path / "landing" / stream).mkdir(parents=True)
    new_table_file(tmp_path, CONFIG, through_cli=True)
    write_table_yaml(tmp_path, {**CONFIG, "bad_rows": "quarantine"}, "q.yaml")
    return tmp_path


def doubles(values: list[float | None]) -> pa.Table:
    """A readings batch for keys 1, 2, ... holding `values` in the double column (the rest null)."""
    keys = pa.array(range(1, len(values) + 1), pa.int64())
    nulls = {name: pa.nulls(len(values)) for name in ("s", "b", "n", "d", "tags")}
    return pa.table({"k": keys, "v": pa.array(values, pa.float64()), **nulls})


def jsonl(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def read_json(ws: Path, *args: str, config: str = "table.yaml") -> dict[str, Any]:
    done = stitch(*args, "-c", config, "--json", cwd=ws)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    result: dict[str, Any] = json.loads(lines[0])
    return result


def rows(ws: Path, config: str = "table.yaml", *where: str) -> dict[int, dict[str, Any]]:
    found = read_json(ws, "read", "--limit", "0", *(arg for w in where for arg in ("--where", w)), config=config)
    return {row["k"]: row for row in found["records"]}


def last_commit(ws: Path, config: str = "q.yaml") -> DeltaCommit:
    timeline = stitchlake.open(ws / config).timeline()
    commit = timeline.commit(timeline.completed([Action.DELTACOMMIT])[-1])
    assert isinstance(commit, DeltaCommit)
    return commit


def quarantined(ws: Path) -> list[dict[str, Any]]:
    (rows_file,) = last_commit(ws).quarantine_files
    found: list[dict[str, Any]] = pq.read_table(ws / "table" / rows_file).to_pylist()
    return sorted(found, key=lambda row: row["_row"])


# ------------------------------------------------------------------------------- point 5: NaN is not null


def test_json_output_tells_nan_and_the_infinities_from_null(workspace: Path) -> None:
    """`read --json`, `sql --json` and `--out x.jsonl` write NaN, inf and -inf as "NaN", "Infinity" and
    "-Infinity" (they were all null, as a real null is); read back from a JSON landing file, they are the
    same doubles again."""
    table = stitchlake.open(workspace / "table.yaml")
    values = [float("nan"), float("inf"), float("-inf"), None, 2.5]
    table.write("readings", doubles(values))
    expected = {1: "NaN", 2: "Infinity", 3: "-Infinity", 4: None, 5: 2.5}
    assert {k: row["v"] for k, row in rows(workspace).items()} == expected
    queried = read_json(workspace, "sql", "SELECT k, v FROM t ORDER BY k")
    assert [(row["k"], row["v"]) for row in queried["records"]] == list(expected.items())
    out = workspace / "landing/readings/0001.jsonl"
    done = stitch("read", "-c", "table.yaml", "--columns", "k,v", "--out", str(out), cwd=workspace)
    assert done.returncode == 0, done.stderr
    written = {row["k"]: row["v"] for row in map(json.loads, out.read_text().splitlines())}
    assert written == expected
    # the file `--out` wrote is a landing file stitch reads back: the same doubles, not nulls
    table.write("readings", doubles([0.0] * 5))
    done = stitch(*INGEST_READINGS, cwd=workspace)
    assert done.returncode == 0, done.stderr
    back = {row["k"]: row["v"] for row in table.read(columns=["k", "v"]).to_pylist()}
    assert math.isnan(back.pop(1)) and back == {2: math.inf, 3: -math.inf, 4: None, 5: 2.5}


# ---------------------------------------------------------------- point 6: JSON lines judged line by line


def test_a_wrong_json_type_is_a_bad_row_named_by_its_line_and_the_file_is_not_refused(workspace: Path) -> None:
    """One good line and one whose string column holds ["a"]: under `fail` exit 5 naming the file and line 2
    (nothing written); under `quarantine` the good line is committed and the bad one set aside with its line
    (the whole file was refused, and under quarantine the good line went with it)."""
    landing = workspace / "landing/readings/0001.json"
    landing.write_bytes(jsonl({"k": 1, **GOOD}, {"k": 2, **GOOD, "s": ["a"]}))
    before = snapshot(workspace, ignore=(".stitch/locks/", ".stitch/heartbeats/"))
    done = stitch(*INGEST_READINGS, cwd=workspace)
    assert done.returncode == 5, done.stderr
    failure = json.loads(done.stdout)
    assert f"{landing} line 2 (wrong JSON type '[\"a\"]' in s)" in failure["error"], failure
    assert (failure["file"], failure["column"]) == (str(landing), "s")
    assert snapshot(workspace, ignore=(".stitch/locks/", ".stitch/heartbeats/")) == before
    done = stitch(*INGEST_READINGS[:2], "q.yaml", *INGEST_READINGS[3:], cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["rows"], json.loads(done.stdout)["bad_rows"]) == (1, 1)
    assert sorted(rows(workspace, "q.yaml")) == [1]
    assert not last_commit(workspace).quarantined_files  # the file was not set aside whole
    (bad,) = quarantined(workspace)
    assert (bad["k"], bad["s"], bad["_reason"], bad["_row"], bad["_line"]) == (
        "2",
        '["a"]',
        "wrong JSON type in s",
        1,
        2,
    )


def test_every_column_takes_its_own_json_type_whatever_the_first_line_held(workspace: Path) -> None:
    """The first line decided before: a string first made a later ["a"], {"x": 1} or 5 text, stored in silence.
    Now each value is judged against its column: a string column takes strings, a boolean true or false ("yes" is
    a string), a long a whole number, a double a number or "NaN"/"Infinity"/"-Infinity", a decimal a number or
    a string (exactly), an array<string> an array of strings. Blank lines and a byte-order mark change nothing
    but the line numbers."""
    records = [
        {"k": 1, **GOOD},
        {"k": 2, **GOOD, "s": ["a"]},
        {"k": 3, **GOOD, "s": {"x": 1}},
        {"k": 4, **GOOD, "s": 5},
        {"k": 5, **GOOD, "b": "yes"},
        {"k": 6, **GOOD, "b": 1},
        {"k": 7, **GOOD, "n": "7"},
        {"k": 8, **GOOD, "n": 8.5},
        {"k": 9, **GOOD, "v": "1.5"},
        {"k": 10, **GOOD, "v": "NaN", "d": 2.25, "n": 10.0},
        {"k": 11, **GOOD, "v": "-Infinity", "d": "123.45678", "s": None, "tags": None},
        {"k": 12, **GOOD, "d": True},
        {"k": 13, **GOOD, "tags": "x"},
        {"k": 14, **GOOD, "tags": [1]},
        {"k": 15, **GOOD, "n": 2**63},
    ]
    text = "\ufeff" + "\n\n".join(json.dumps(record) for record in records) + "\n"
    (workspace / "landing/readings/0001.json").write_text(text, encoding="utf-8")
    done = stitch(*INGEST_READINGS[:2], "q.yaml", *INGEST_READINGS[3:], cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["rows"], json.loads(done.stdout)["bad_rows"]) == (3, 12)
    good = rows(workspace, "q.yaml")
    assert sorted(good) == [1, 10, 11]
    assert (good[10]["v"], good[10]["d"], good[10]["n"]) == ("NaN", "2.25000", 10)
    assert (good[11]["v"], good[11]["d"], good[11]["s"], good[11]["tags"]) == ("-Infinity", "123.45678", None, None)
    found = {int(row["k"]): (row["_reason"], row["_line"]) for row in quarantined(workspace)}
    reasons = {
        2: "wrong JSON type in s",
        3: "wrong JSON type in s",
        4: "wrong JSON type in s",
        5: "wrong JSON type in b",
        6: "wrong JSON type in b",
        7: "wrong JSON type in n",
        8: "unparsable value in n",
        9: "wrong JSON type in v",
        12: "wrong JSON type in d",
        13: "wrong JSON type in tags",
        14: "unparsable value in tags",
        15: "unparsable value in n",
    }
    assert found == {k: (reason, 2 * k - 1) for k, reason in reasons.items()}
    shown = {int(row["k"]): row for row in quarantined(workspace)}
    assert (shown[3]["s"], shown[4]["s"], shown[5]["b"], shown[15]["n"]) == ('{"x": 1}', "5", '"yes"', str(2**63))


def test_a_json_file_of_good_lines_reads_the_same_as_before(workspace: Path) -> None:
    """The common case (every value of its column's JSON type) takes pyarrow's one read; fields the table does not
    have are ignored, a missing field reads null, a delete marker may be any scalar."""
    landing = workspace / "landing/readings/0001.json"
    landing.write_bytes(
        jsonl(
            {"k": 1, **GOOD, "extra": [1, "mixed"]},
            {"k": 2, "s": "b", "d": 7, "extra": "text"},
            {"k": 3, **GOOD, "op": "D"},
        )
    )
    done = stitch(*INGEST_READINGS, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["rows"], json.loads(done.stdout)["bad_rows"]) == (3, 0)
    found = rows(workspace)
    assert sorted(found) == [1, 2]
    assert {name: found[1][name] for name in GOOD} == {**GOOD, "d": "1.50000"}
    assert (found[2]["s"], found[2]["b"], found[2]["d"]) == ("b", None, "7.00000")


# ------------------------------------------------------------------ point 8: one grammar for text values


def test_csv_text_is_read_in_one_grammar(workspace: Path) -> None:
    """A CSV "0x10" was 16 (Arrow's cast) and "+7" was refused; whole numbers are ASCII digits with a sign, and
    booleans the words `--where` takes too (`config.values`)."""
    texts = workspace / "landing/texts/0001.csv"
    texts.write_text("k,flag,count\n10,yes,+7\n11,No,0x10\n12,T,12\n13,maybe,13\n")
    done = stitch("ingest", "-c", "q.yaml", "-s", "texts", "--engine", "local", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["rows"], json.loads(done.stdout)["bad_rows"]) == (2, 2)
    found = {int(row["k"]): row["_reason"] for row in quarantined(workspace)}
    assert found == {11: "unparsable value in count", 13: "unparsable value in flag"}
    assert {k: (row["flag"], row["count"]) for k, row in rows(workspace, "q.yaml").items()} == {
        10: (True, 7),
        12: (True, 12),
    }


def test_where_takes_text_in_the_grammar_csv_files_are_read_with(workspace: Path) -> None:
    """`--where k=1_0` matched key 10 and other scripts' digits parsed (Python's int()); `flag=yes` was refused
    although a CSV file's "yes" is true. Now both read text in one grammar."""
    (workspace / "landing/texts/0001.csv").write_text("k,flag,count\n10,yes,7\n11,false,16\n12,T,12\n")
    done = stitch("ingest", "-c", "table.yaml", "-s", "texts", "--engine", "local", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert sorted(rows(workspace, "table.yaml", "k=+10")) == [10]
    assert sorted(rows(workspace, "table.yaml", "flag=yes")) == [10, 12]
    assert sorted(rows(workspace, "table.yaml", "flag=TRUE")) == [10, 12]
    assert sorted(rows(workspace, "table.yaml", "flag=n")) == [11]
    for where in ("k=1_0", "k=\u0661\u0660", "k=0x10", "flag=maybe", "count>=1_2", "k=\uff11\uff10"):
        done = stitch("read", "-c", "table.yaml", "--where", where, cwd=workspace)
        assert done.returncode == 2, (where, done.stdout)
        assert "is not a valid" in done.stderr, done.stderr


def test_a_double_into_a_decimal_is_rounded_half_to_even_and_one_too_large_is_a_bad_row(workspace: Path) -> None:
    """configs/README.md says how: to the scale, half to even on the double's exact binary value (0.015625 and
    0.046875 are exact ties); a value that does not fit the precision, before or after rounding, is a bad row."""
    landing = workspace / "landing/doubles/0001.parquet"
    values = [0.015625, 0.046875, 1.234565, -0.015625, 1234.5, 999.999996, 123.45678]
    pq.write_table(pa.table({"k": pa.array(range(1, 8), pa.int64()), "amount": pa.array(values)}), landing)
    done = stitch("ingest", "-c", "q.yaml", "-s", "doubles", "--engine", "local", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["rows"], json.loads(done.stdout)["bad_rows"]) == (5, 2)
    stored = {k: row["amount"] for k, row in rows(workspace, "q.yaml").items()}
    assert stored == {1: "0.01562", 2: "0.04688", 3: "1.23456", 4: "-0.01562", 7: "123.45678"}
    found = {int(row["k"]): row["_reason"] for row in quarantined(workspace)}
    assert found == {5: "unparsable value in amount", 6: "unparsable value in amount"}
    assert Decimal(stored[3]) == Decimal("1.23456")
