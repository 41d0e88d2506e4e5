"""SQL over a stitched table with DuckDB.

A stitched table is only right once merged: DuckDB reading its Parquet files directly would see every log row and
the internal `_sl__*` columns. So the table is read here exactly as `stitchlake.read` reads it (snapshot, as-of,
changes, read-optimized, filters pushed into the merge), as a stream: DuckDB pulls merged record batches one file
slice at a time through the Arrow C stream interface (`reader.Scan`), so a query's memory is DuckDB's own plus a
few slices, never the whole merged table. A query reads only the columns it names (found from DuckDB's own parse
of it), plus the key; no copy into Python objects, no temporary files.

A caller may offer more relations (`tables`: name -> a function building an Arrow table): the metadata tables
`t$files`, `t$timeline`, ... (`stitchlake.services.inspect.metadata_tables`). Only those whose name the query's text
mentions are built and registered, so a query of the table alone reads no more metadata than before.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.errors import StitchError, Terminated, UsageError, stopped_by_signal
from stitchlake.reading.options import ReadOptions

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from stitchlake.reading.scan import Scan
    from stitchlake.table.handle import TableHandle

#: The short name every table also has in `stitch sql`, whatever its own name.
SHORT_NAME = "t"
#: Rows per record batch of a streamed query result.
RESULT_BATCH_ROWS = 64 * 1024


def to_duckdb(
    table: TableHandle,
    connection: duckdb.DuckDBPyConnection | None = None,
    name: str | None = None,
    options: ReadOptions = ReadOptions(),
) -> duckdb.DuckDBPyConnection:
    """Register the table, read as `stitchlake.read` reads it, as view `name` (default: the table's name) in a
    DuckDB connection (a new in-memory one if none is given), and return the connection.

    The read is planned now (the files of the state as of now, or of `as_of`/`until`) and streamed through DuckDB
    one file slice at a time each time a query scans the view: memory stays bounded by the largest file slices,
    and a view made before a commit does not see that commit (register again to refresh). A query after `stitch
    clean` removed a file of that state plans those file groups again: from a compaction of the same rows, or, if
    the table has changed since, it is refused (exit 3: register again), never answered from two states."""
    import duckdb

    from stitchlake.reading.reader import scan

    rows = scan(table, options)
    connection = connection if connection is not None else duckdb.connect()
    connection.register(name or table.config.table.name, rows)
    return connection


def query(
    table: TableHandle,
    sql: str,
    options: ReadOptions = ReadOptions(),
    *,
    tables: Mapping[str, Callable[[], pa.Table]] | None = None,
) -> pa.Table:
    """Run `sql` over the table (visible as its own name and as `t`) and return the result as Arrow.

    The table is streamed through DuckDB; the result is whole in memory (`results` streams it).
    A query DuckDB refuses (syntax, unknown column, type error) is a UsageError (exit 2) with DuckDB's message."""
    with results(table, sql, options, tables=tables) as reader:
        return reader.read_all()


@contextmanager
def results(
    table: TableHandle,
    sql: str,
    options: ReadOptions = ReadOptions(),
    *,
    batch_rows: int = RESULT_BATCH_ROWS,
    tables: Mapping[str, Callable[[], pa.Table]] | None = None,
) -> Iterator[pa.RecordBatchReader]:
    """Run `sql` over the table and stream its result: a RecordBatchReader, valid inside the `with` block.

    Both ends stream: the table into DuckDB slice by slice, the result out of it batch by batch, so `stitch sql
    --out` of a large result holds neither whole. Errors of the read (a cleaned or damaged file) keep their own
    type and exit code; errors of the query are UsageError (exit 2)."""
    import duckdb
    import pyarrow as pa

    from stitchlake.reading.reader import scan

    if not sql.strip():
        raise UsageError("give a SQL query, e.g. stitch sql -c table.yaml 'SELECT count(*) FROM t'")
    _refuse_non_queries(sql)
    extra = {name: build() for name, build in (tables or {}).items() if _mentions(sql, name)}
    wanted = referenced_columns(sql, table, set(extra))
    source = scan(table, options.with_columns(wanted))
    try:
        try:
            connection, result = _execute(table, sql, source, batch_rows, extra)
        except duckdb.BinderException:
            if wanted is None:
                raise
            # A column the parse did not show us (a construct `referenced_columns` does not know): read them all.
            source = scan(table, options.with_columns(None))
            connection, result = _execute(table, sql, source, batch_rows, extra)
    except duckdb.BinderException as exc:
        raise UsageError(f"SQL: {exc}") from None
    try:
        yield pa.RecordBatchReader.from_batches(result.schema, _guarded(result, source, connection))
    finally:
        connection.close()


def _mentions(sql: str, name: str) -> bool:
    """Whether the query's text names relation `name` (generously: inside a string too; case-insensitive)."""
    import re

    return re.search(rf"(?<![\w$]){re.escape(name.lower())}(?![\w$])", sql.lower()) is not None


def _execute(
    table: TableHandle, sql: str, source: Scan, batch_rows: int, extra: Mapping[str, pa.Table] | None = None
) -> tuple[duckdb.DuckDBPyConnection, pa.RecordBatchReader]:
    """Run the query over `source` in an isolated connection; its result as a stream (errors raised as ours)."""
    import duckdb

    # No file system for the query: `stitch sql` reads the table, it never writes, attaches or reads other files
    # (a COPY inside EXPLAIN ANALYZE would otherwise still write one).
    connection = duckdb.connect(config={"enable_external_access": False})

    def run() -> pa.RecordBatchReader:
        connection.register(SHORT_NAME, source)
        for name, rows in (extra or {}).items():
            connection.register(name, rows)
        connection.execute("SET TimeZone = 'UTC'")  # timestamps come back as the table's own `UTC`, not `Etc/UTC`
        if table.config.table.name != SHORT_NAME:
            connection.execute(f'CREATE VIEW "{_identifier(table.config.table.name)}" AS SELECT * FROM {SHORT_NAME}')
        relation = connection.sql(sql)
        if relation is None:  # a statement without rows
            raise UsageError("SQL: the statement returns no rows; stitch sql runs queries (SELECT, WITH ...)")
        # A relation's reader streams (a cursor's result would be materialised whole first); making it runs the
        # query up to its first batch (for an aggregate, all of it).
        return relation.to_arrow_reader(batch_rows)

    try:
        return connection, _interruptible(run, connection)
    except duckdb.BinderException:
        connection.close()
        raise
    except BaseException as exc:
        connection.close()
        raise _read_error(source, exc) from None


def _guarded(
    result: pa.RecordBatchReader, source: Scan, connection: duckdb.DuckDBPyConnection
) -> Iterator[pa.RecordBatch]:
    """The result's batches; an error while DuckDB pulled the table is raised as the read's own error."""
    while True:
        try:
            batch = _interruptible(result.read_next_batch, connection)
        except StopIteration:
            return
        except BaseException as exc:
            raise _read_error(source, exc) from None
        yield batch


#: How often the main thread, waiting for DuckDB, looks up (and runs the signal handlers that came).
WAIT_S = 0.1

T = TypeVar("T")


def _interruptible(call: Callable[[], T], connection: duckdb.DuckDBPyConnection) -> T:
    """`call()` (running the query, pulling a result batch) in a helper thread. Run in this one, DuckDB and
    pyarrow hold it in C code until the query reaches a batch (for an aggregate, until it is done) and a SIGTERM's
    handler ran only then, minutes later. Waiting here, the handler runs at once; its exception interrupts DuckDB
    and goes on up."""
    import threading

    import duckdb

    got: dict[str, Any] = {}
    # An Event, not `Thread.join`: a join interrupted by the handler's exception marks the thread stopped while it
    # still runs (Python 3.11), and the interrupt below would not wait for it.
    done = threading.Event()

    def run() -> None:
        try:
            got["value"] = call()
        except BaseException as exc:  # handed to the waiting thread
            got["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="stitch-sql-query", daemon=True).start()
    try:
        while not done.wait(WAIT_S):
            pass
    except BaseException:
        while not done.is_set():  # DuckDB stops at its next check; what the call made meanwhile is dropped
            with contextlib.suppress(duckdb.Error):  # refused while the call is inside ours (pulling the table)
                connection.interrupt()
            done.wait(WAIT_S)
        raise
    if "error" in got:
        raise got["error"]
    return got["value"]


def _read_error(source: Scan, exc: BaseException) -> BaseException:
    """DuckDB passes on only the text of an error raised while it pulled the table: give back the read's own
    error (a cleaned or damaged file, exit 1 or 4), and make DuckDB's own errors a UsageError (exit 2)."""
    import duckdb

    if isinstance(source.error, StitchError | KeyboardInterrupt | MemoryError):
        return source.error
    if isinstance(exc, StitchError | KeyboardInterrupt | Terminated):
        return exc
    if isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted"):
        return stopped_by_signal()  # DuckDB stopped on our signal handler's exception, and kept it
    if isinstance(exc, duckdb.Error):
        return UsageError(f"SQL: {exc}")
    return exc


def referenced_columns(sql: str, table: TableHandle, others: set[str] | None = None) -> list[str] | None:
    """The table's columns a query may use, from DuckDB's parse of it (`json_serialize_sql`), so only those are
    read and merged; None (every column) when it cannot tell: a statement it does not serialize, `*`, `COLUMNS`,
    positional references, NATURAL joins, or the table's rows used whole (`SELECT t FROM t`).

    Deliberately generous: every identifier that names a column counts, whatever it refers to. The key columns
    are always read (a row needs them; `count(*)` reads nothing else). A column missed all the same would make
    DuckDB refuse to bind the query, never answer differently, and `results` then reads every column.
    `others` are the query's other relations (metadata tables): a `*` of theirs needs none of the table's columns."""
    import duckdb

    names = [c.name for c in table.config.all_columns()]
    by_lower = {name.lower(): name for name in names}
    try:
        with duckdb.connect() as parser:
            found = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    except duckdb.Error:
        return None
    tree = json.loads(found[0]) if found else {"error": True}
    if tree.get("error"):
        return None
    relations = {SHORT_NAME, table.config.table.name.lower()}
    nodes = list(_nodes(tree))
    other_names = {name.lower() for name in others or ()}
    for node in nodes:  # the other relations' aliases first, whatever order the walk meets them in
        if node.get("type") == "BASE_TABLE" and node.get("alias"):
            aliased = str(node["alias"]).lower()
            if str(node.get("table_name") or "").lower() in other_names:
                other_names.add(aliased)
            else:
                relations.add(aliased)
    used: set[str] = set()
    refs: list[list[str]] = []
    for node in nodes:
        kind = node.get("class")
        if kind == "STAR" and str(node.get("relation_name") or "").lower() in other_names:
            pass  # `f.*` of a metadata table `f`: none of the table's columns
        elif kind in ("STAR", "POSITIONAL_REFERENCE") or node.get("ref_type") == "NATURAL":
            return None
        if kind == "COLUMN_REF":
            refs.append([str(part) for part in node.get("column_names") or []])
        for part in node.get("using_columns") or []:
            used.add(str(part).lower())
    for parts in refs:
        lowered = [part.lower() for part in parts]
        if len(lowered) == 1 and lowered[0] not in by_lower and lowered[0] in relations:
            return None  # a table's rows as one value
        used.update(lowered)
    keys = set(table.config.table.key_names)
    return [name for name in names if name in keys or name.lower() in used]


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every object of a parse tree (`json_serialize_sql`)."""
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            stack.extend(node.values())


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
