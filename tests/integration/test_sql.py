"""SQL from the CLI and Python (issue 13 point 3): `stitch sql` and `Table.to_duckdb` see the merged table.

The table has late events, a delete and an update, so reading its raw files would give other answers: the tests
compare what DuckDB returns with `stitch read` / `Table.read` cell by cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from tests.support.spark_fixtures import run_stitch
from tests.support.tables import MODELS, batch, new_table

MODEL = {m.name: m for m in MODELS}


@pytest.fixture(scope="module")
def stitched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, str]]:
    table = new_table(tmp_path_factory.mktemp("sql"))
    orders, payments = MODEL["orders"], MODEL["payments"]
    first = table.write(
        "orders",
        batch(orders, [{"k": k, "amount": k * 10, "status": "a", "ots": 5} for k in range(1, 7)]),
    )
    table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "n", "pts": 1} for k in (1, 2, 3)]))
    late = table.write(
        "orders",
        batch(
            orders,
            [
                {"k": 1, "amount": 999, "status": "late", "ots": 1},  # late: loses to ots 5
                {"k": 2, "amount": 25, "status": "b", "ots": 9},  # update
                {"k": 4, "ots": 9, "deleted": True},  # delete: key 4 has no other stream, so it is gone
            ],
        ),
    )
    return table, {"first": str(first.completed), "late": str(late.completed)}


def sorted_rows(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda row: row["k"])


def test_sql_sees_the_merged_table_not_its_files(stitched: tuple[Table, dict[str, str]]) -> None:
    table, _ = stitched
    everything = table.sql("SELECT * FROM t")
    assert sorted_rows(everything) == sorted_rows(table.read())
    assert not [c for c in everything.column_names if c.startswith("_sl__")]
    by_name = table.sql(f"SELECT k, amount FROM {table.config.table.name} WHERE k <= 3 ORDER BY k")
    assert by_name.to_pylist() == [{"k": 1, "amount": 10}, {"k": 2, "amount": 25}, {"k": 3, "amount": 30}]  # late lost
    counted = table.sql("SELECT count(*) AS n, sum(paid) AS paid FROM t WHERE k <> 4").to_pylist()
    assert counted == [{"n": 5, "paid": 6}] and table.sql("SELECT * FROM t WHERE k = 4").num_rows == 0


def test_sql_reads_as_of_and_changes(stitched: tuple[Table, dict[str, str]]) -> None:
    table, times = stitched
    before = table.sql("SELECT k, amount, status FROM t ORDER BY k", as_of=times["first"])
    assert before.to_pylist() == sorted_rows(table.read(as_of=times["first"], columns=["k", "amount", "status"]))
    assert before.num_rows == 6
    changes = table.sql("SELECT k, _op FROM t ORDER BY k", since=times["first"])
    expected = table.read(since=times["first"]).select(["k", "_op"])
    assert changes.to_pylist() == sorted_rows(expected)
    assert {row["_op"] for row in changes.to_pylist()} >= {"U", "D"}
    only_odd = table.sql("SELECT DISTINCT p FROM t", filter={"p": "odd"})
    assert only_odd.to_pylist() == [{"p": "odd"}]


def test_to_duckdb_registers_the_table_in_a_users_connection(stitched: tuple[Table, dict[str, str]]) -> None:
    table, _ = stitched
    connection = duckdb.connect()
    connection.execute("CREATE TABLE customers AS SELECT 2 AS k, 'Ada' AS name")
    assert table.to_duckdb(connection, "wide") is connection
    joined = connection.execute("SELECT w.k, c.name, w.amount FROM wide w JOIN customers c USING (k)").fetchall()
    assert joined == [(2, "Ada", 25)]
    # Registered as Arrow: DuckDB lists it as a view over the scan, not a table copied into its storage.
    kinds = dict(connection.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert kinds["wide"] == "VIEW" and kinds["customers"] == "BASE TABLE"


def test_a_bad_query_is_a_usage_error_naming_duckdbs_complaint(stitched: tuple[Table, dict[str, str]]) -> None:
    table, _ = stitched
    with pytest.raises(UsageError, match=r"SQL: .*no_such_column"):
        table.sql("SELECT no_such_column FROM t")
    with pytest.raises(UsageError, match="give a SQL query"):
        table.sql("  ")
    # One query: a statement that changes or attaches something, or a second statement, is refused up front.
    with pytest.raises(UsageError, match=r"runs queries .*not CREATE"):
        table.sql("CREATE TABLE z AS SELECT 1")
    with pytest.raises(UsageError, match=r"runs queries .*not COPY"):
        table.sql("COPY (SELECT * FROM t) TO '/tmp/stitch-sql-copy.csv'")
    with pytest.raises(UsageError, match="one query, not 2 statements"):
        table.sql("SELECT 1; SELECT 2")
    assert table.sql("WITH n AS (SELECT count(*) AS c FROM t) SELECT c FROM n").num_rows == 1
    assert table.sql("DESCRIBE t").num_rows == len(table.read().column_names)
    assert table.sql("PIVOT (SELECT status FROM t) ON status USING count(*)").num_rows == 1
    written = Path("/tmp") / f"stitch-sql-explain-{os.getpid()}.csv"
    with pytest.raises(UsageError, match="file system operations are disabled"):
        table.sql(f"EXPLAIN ANALYZE COPY (SELECT * FROM t) TO '{written}'")
    assert not written.exists()


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
