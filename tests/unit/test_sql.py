"""SQL from the CLI and Python (issue 13 point 3): `stitch sql` and `Table.to_duckdb` see the merged table.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_sql.py).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import duckdb
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from tests.support.reads import sorted_rows


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


def test_a_query_stopped_by_sigterm_ends_as_a_stop_not_a_failure(stitched: tuple[Table, dict[str, str]]) -> None:
    """DuckDB stops a query when the signal handler raises, and raises its own RuntimeError: `stitch sql` stopped
    by a scheduler must still exit 143, not 1 (an alert)."""
    import signal
    import threading

    from stitchlake.errors import Terminated

    table, _ = stitched
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: (_ for _ in ()).throw(Terminated()))
    main = threading.main_thread().ident
    assert main is not None

    def kill_while_a_result_batch_is_pulled() -> None:
        """The stop lands while the main thread waits for DuckDB to run the aggregate (the whole query, before its
        first batch): run in the main thread, DuckDB held it in C code and the handler ran only when the query had
        finished (minutes)."""
        while True:
            frame = sys._current_frames().get(main)
            names = set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if names & {"_execute", "_guarded"}:
                break
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=kill_while_a_result_batch_is_pulled, daemon=True)
    try:
        killer.start()
        with pytest.raises(Terminated):
            table.sql("SELECT sum(hash(i)) FROM range(30000000000) r(i), t LIMIT 1")
    finally:
        killer.join()
        signal.signal(signal.SIGTERM, previous)
