"""SQL from the CLI and Python (issue 13 point 3): `stitch sql` and `Table.to_duckdb` see the merged table.

The table has late events, a delete and an update, so reading its raw files would give other answers: the tests
compare what DuckDB returns with `stitch read` / `Table.read` cell by cell.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from stitchlake.api import Table
from tests.support.processes import run_stitch
from tests.support.reads import sorted_rows
from tests.support.tables import MODELS, batch, new_table

MODEL = {m.name: m for m in MODELS}


def test_sql_sees_the_merged_table_not_its_files(stitched: tuple[Table, dict[str, str]]) -> None:
    table, _ = stitched
    everything = table.sql("SELECT * FROM t")
    assert sorted_rows(everything) == sorted_rows(table.read())
    assert not [c for c in everything.column_names if c.startswith("_sl__")]
    by_name = table.sql(f"SELECT k, amount FROM {table.config.table.name} WHERE k <= 3 ORDER BY k")
    assert by_name.to_pylist() == [{"k": 1, "amount": 10}, {"k": 2, "amount": 25}, {"k": 3, "amount": 30}]  # late lost
    counted = table.sql("SELECT count(*) AS n, sum(paid) AS paid FROM t WHERE k <> 4").to_pylist()
    assert counted == [{"n": 5, "paid": 6}] and table.sql("SELECT * FROM t WHERE k = 4").num_rows == 0


def test_a_csv_out_of_nested_values_is_refused_naming_the_columns(tmp_path: Path) -> None:
    """CSV has no nested values: a result with a list or struct is refused (exit 2) before a file is made."""
    table = new_table(tmp_path / "t")
    table.write("orders", batch(MODEL["orders"], [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    out = tmp_path / "nested.csv"
    query = "SELECT k, [amount, amount] AS pair, {'s': status} AS info FROM t"
    done = run_stitch("sql", "--table", table.path, query, "--out", str(out), "--json")
    assert done.returncode == 2, done.stdout
    assert "CSV cannot hold nested values (pair, info)" in json.loads(done.stdout)["error"]
    assert not out.exists() and not list(tmp_path.glob(".nested.csv*"))
    assert run_stitch("sql", "--table", table.path, query, "--out", str(tmp_path / "nested.json")).returncode == 0


def test_stitch_sql_from_the_command_line(stitched: tuple[Table, dict[str, str]], tmp_path: Path) -> None:
    table, times = stitched
    done = run_stitch("sql", "--table", table.path, "SELECT k, amount FROM t ORDER BY k", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    expected = sorted_rows(table.read(columns=["k", "amount"]))
    assert found["ok"] and found["rows"] == 5 and found["records"] == expected
    as_of = run_stitch("sql", "--table", table.path, "SELECT count(*) AS n FROM t", "--as-of", times["first"], "--json")
    assert json.loads(as_of.stdout)["records"] == [{"n": 6}]
    out = tmp_path / "result.parquet"
    wrote = run_stitch("sql", "--table", table.path, "SELECT * FROM t", "--out", str(out), "--json")
    assert wrote.returncode == 0 and json.loads(wrote.stdout)["rows"] == 5
    assert sorted_rows(pq.read_table(out)) == sorted_rows(table.read())
    csv = tmp_path / "since.csv"
    assert (
        run_stitch(
            "sql", "--table", table.path, "SELECT k, _op FROM t", "--since", times["first"], "-o", str(csv)
        ).returncode
        == 0
    )
    assert sorted_rows(pacsv.read_csv(csv)) == sorted_rows(table.read(since=times["first"]).select(["k", "_op"]))
    bad = run_stitch("sql", "--table", table.path, "SELEC 1", "--json")
    assert bad.returncode == 2
    failure = json.loads(bad.stdout)
    assert failure["ok"] is False and failure["exit_code"] == 2 and "SQL:" in failure["error"]
    shown = run_stitch("sql", "--table", table.path, "SELECT k, status FROM t ORDER BY k LIMIT 2")
    assert shown.returncode == 0 and "status" in shown.stdout
