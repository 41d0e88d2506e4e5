"""Values as JSON (issue 34, points 5, 6 and 8): what `--json` writes, what a JSON landing file's lines may hold,
and the one text grammar of `--where` and CSV landing files.

Every test runs the real `stitch` console script on a table of its own: a JSON stream and a CSV stream holding a
column of every simple kind, so a value of the wrong JSON type, a double that is NaN or infinite, a decimal that
does not fit, and a text boolean can each be written where a user would write it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from test_bad_input import stitch

import stitchlake
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit

CONFIG: dict[str, Any] = {
    "table": {"name": "values", "path": "table", "key": {"k": "long"}, "buckets": 1},
    "streams": {
        "readings": {
            "columns": {
                "s": "string",
                "b": "boolean",
                "n": "long",
                "v": "double",
                "d": "decimal(8,5)",
                "tags": "array<string>",
            },
            "deletes": {"column": "op", "values": ["D"]},
            "source": {"format": "json", "path": "landing/readings"},
        },
        "texts": {
            "columns": {"flag": "boolean", "count": "long"},
            "source": {"format": "csv", "path": "landing/texts"},
        },
        "doubles": {
            "columns": {"amount": "decimal(8,5)"},
            "source": {"format": "parquet", "path": "landing/doubles"},
        },
    },
}
INGEST_READINGS = ("ingest", "-c", "table.yaml", "-s", "readings", "--engine", "local", "--json")
GOOD = {"s": "a", "b": True, "n": 1, "v": 1.5, "d": "1.5", "tags": ["x"]}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for stream in ("readings", "texts", "doubles"):
        (tmp_path / "landing" / stream).mkdir(parents=True)
    (tmp_path / "table.yaml").write_text(yaml.safe_dump(CONFIG))
    quarantine = {**CONFIG, "bad_rows": "quarantine"}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(quarantine))
    done = stitch("init", "-c", "table.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
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
