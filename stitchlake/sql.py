"""SQL over a stitched table with DuckDB.

A stitched table is only right once merged: DuckDB reading its Parquet files directly would see every log row and
the internal `_sl__*` columns. So the table is read here exactly as `stitchlake.read` reads it (snapshot, as-of,
changes, read-optimized, filters pushed into the merge), and the merged Arrow table is handed to DuckDB, which
scans Arrow memory in place: no copy into Python objects, no temporary files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stitchlake.errors import UsageError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from stitchlake.table import Table

#: The short name every table also has in `stitch sql`, whatever its own name.
SHORT_NAME = "t"


def to_duckdb(
    table: Table,
    connection: duckdb.DuckDBPyConnection | None = None,
    name: str | None = None,
    *,
    mode: str = "snapshot",
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    before_images: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Register the table, read as `stitchlake.read` reads it, as view `name` (default: the table's name) in a
    DuckDB connection (a new in-memory one if none is given), and return the connection.

    What is registered is the merged Arrow table, which DuckDB scans in place; it is read once, now: a view made
    before a commit does not see that commit (register again to refresh)."""
    import duckdb

    from stitchlake.reader import read

    rows = read(table, mode, as_of, since, until, columns, filter, before_images)
    connection = connection if connection is not None else duckdb.connect()
    connection.register(name or table.config.table.name, rows)
    return connection


def query(
    table: Table,
    sql: str,
    *,
    mode: str = "snapshot",
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    filter: Any = None,
    before_images: bool = False,
) -> pa.Table:
    """Run `sql` over the table (visible as its own name and as `t`) and return the result as Arrow.

    A query DuckDB refuses (syntax, unknown column, type error) is a UsageError (exit 2) with DuckDB's message."""
    import duckdb

    if not sql.strip():
        raise UsageError("give a SQL query, e.g. stitch sql -c table.yaml 'SELECT count(*) FROM t'")
    _refuse_non_queries(sql)
    # No file system for the query: `stitch sql` reads the table, it never writes, attaches or reads other files
    # (a COPY inside EXPLAIN ANALYZE would otherwise still write one).
    isolated = duckdb.connect(config={"enable_external_access": False})
    connection = to_duckdb(
        table,
        isolated,
        SHORT_NAME,
        mode=mode,
        as_of=as_of,
        since=since,
        until=until,
        filter=filter,
        before_images=before_images,
    )
    try:
        connection.execute("SET TimeZone = 'UTC'")  # timestamps come back as the table's own `UTC`, not `Etc/UTC`
        if table.config.table.name != SHORT_NAME:
            connection.execute(f'CREATE VIEW "{_identifier(table.config.table.name)}" AS SELECT * FROM {SHORT_NAME}')
        result = connection.sql(sql)
        if result is None:  # a statement without rows
            raise UsageError("SQL: the statement returns no rows; stitch sql runs queries (SELECT, WITH ...)")
        # The rows as one Arrow table, never through Python objects (DuckDB 1.x: `arrow()`; 1.4+: `to_arrow_table()`).
        return result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.arrow()
    except duckdb.Error as exc:
        raise UsageError(f"SQL: {exc}") from None
    finally:
        connection.close()


def _refuse_non_queries(sql: str) -> None:
    """One query (SELECT, WITH, FROM, VALUES, DESCRIBE, SUMMARIZE, PIVOT, EXPLAIN): a CREATE, COPY, ATTACH or
    second statement would run against a throwaway connection and show nothing, or only the last statement's rows."""
    import duckdb

    try:
        with duckdb.connect() as parser:
            statements = parser.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"SQL: {exc}") from None
    if len(statements) != 1:
        raise UsageError(f"SQL: give one query, not {len(statements)} statements")
    kind = statements[0].type
    # PIVOT and UNPIVOT are one query DuckDB reports as MULTI (it runs them in steps).
    if kind not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.MULTI):
        raise UsageError(f"SQL: stitch sql runs queries (SELECT, WITH ...), not {kind.name} statements")


def _identifier(name: str) -> str:
    return name.replace('"', '""')
