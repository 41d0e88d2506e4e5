"""`stitch read --engine spark` in a spark-submit job's driver: the table read through `format("stitchlake")`, so
the JVM reader merges file slices inside Spark's tasks (the Python data source when the jar is absent or the JVM
reader hands the read over: the result says which).

Without `--out` the driver counts the rows and leaves a sample in an Arrow IPC file the launcher reads back (values
keep their types on the way). With `--out` Spark's own writer writes every row, in parallel, into a folder of part
files: first into a hidden sibling folder, which then takes the folder's place, so a failed job leaves the last
good output and never half of one; the row count comes from an observed metric of the same pass.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stitchlake.errors import DataFileMissing, HistoryMoved, UsageError
from stitchlake.jobs.results import SparkReadResult
from stitchlake.reading.output_folder import (
    check_out_folder,
    check_parts_written,
    mark,
    part_files,
    replace_folder,
    temporary_sibling,
)
from stitchlake.spark.errors import recovered

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stitchlake.jobs.requests import SparkReadRequest
    from stitchlake.table.handle import TableHandle

Progress = Callable[[str], None]
#: How Spark's physical plan marks the scan of a Python data source.
PYTHON_SCAN = "(Python)"
#: Parquet timestamps as stitchlake writes its own (INT64 microseconds, UTC) rather than Spark's legacy INT96,
#: unless the config's `spark.conf` says otherwise.
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
#: Text formats written as `stitch read --out` writes them: timestamps to the microsecond with their offset, JSON
#: lines with null fields kept, CSV with a header and quotes doubled (RFC 4180).
ISO_TIMESTAMP = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
WRITER_OPTIONS = {
    "csv": {"header": "true", "escape": '"', "timestampFormat": ISO_TIMESTAMP},
    "json": {"ignoreNullFields": "false", "timestampFormat": ISO_TIMESTAMP},
}


def run_read(spark: SparkSession, table: TableHandle, request: SparkReadRequest, progress: Progress) -> SparkReadResult:
    """The read, planned once more when a planned file went meanwhile (a clean, restore or rollback between the
    job's plans and its tasks; the local read does the same): with "now" pinned anew, so the rows are one state of
    the table. A file still missing then is damage, or an `--as-of` state cleaned since, and that error stands."""
    try:
        return _read_once(spark, table, request, progress)
    except Exception as exc:
        if not isinstance(recovered(exc), DataFileMissing | HistoryMoved):
            raise
        progress("the table changed after the read was planned (a file it planned is gone): planning it again")
        return _read_once(spark, table, request, progress)


def _read_once(
    spark: SparkSession, table: TableHandle, request: SparkReadRequest, progress: Progress
) -> SparkReadResult:
    frame = read_frame(spark, table, request)
    reader = reader_of(frame)
    if request.out is None:
        return _sample(frame, request, reader, progress)
    if TIMESTAMP_CONF not in table.config.spark.conf:
        spark.conf.set(TIMESTAMP_CONF, "TIMESTAMP_MICROS")
    return _write(frame, table, request.out, request.out_format or "parquet", reader, progress)


def read_frame(spark: SparkSession, table: TableHandle, request: SparkReadRequest) -> DataFrame:
    """The read as a DataFrame: the data source's options, then the `--where` conditions (on the merged rows, with
    the local read's meaning: `spark.where`) and the columns, as `stitch read` returns them.

    "Now" is pinned to the latest completed instant first: the job plans the read more than once (the count, the
    sample), and every plan must see the same state whatever commits meanwhile."""
    from stitchlake.reading.changes import CHANGE_COLUMNS
    from stitchlake.spark.read_request import ReadRequest
    from stitchlake.spark.where import filtered

    options = {"path": table.path, "mode": str(request.mode)}
    if table.config.source_file:
        options["config"] = str(Path(table.config.source_file).resolve())
    for name in ("as_of", "since", "until"):
        value = getattr(request, name)
        if value is not None:
            options[name] = str(value)
    changes = request.since is not None or request.until is not None
    latest = table.timeline().latest_completed()
    if latest is not None and latest.completed:
        options.setdefault("until" if changes else "as_of", latest.completed)
    if request.before_images:
        options["before_images"] = "true"
    frame = spark.read.format("stitchlake").options(**options).load()
    # The conditions are typed by the columns of the read's time, as the local read types them: after an alter
    # widened a float, `f = 0.1` on an older state compares floats, not the float widened to a double.
    read_config = ReadRequest(options).table.config
    frame = filtered(frame, read_config, request.where, changes, request.before_images)
    if not request.columns:
        return frame
    columns = list(request.columns)
    if changes and not set(columns) & set(CHANGE_COLUMNS):  # `stitch read --columns`: the change columns too
        columns += CHANGE_COLUMNS
    return frame.select(*columns)


def reader_of(frame: DataFrame) -> str:
    """Which reader merges `frame`'s rows: `python` when its scan is a Python data source's (the jar is absent, or
    the JVM reader handed the read over, e.g. a table on S3 without `s3a`), else `jvm`. Planning it now also warms
    the planner for the job's own read."""
    plan = str(frame._jdf.queryExecution().executedPlan().toString())
    return "python" if PYTHON_SCAN in plan else "jvm"


def _sample(frame: DataFrame, request: SparkReadRequest, reader: str, progress: Progress) -> SparkReadResult:
    """The count and the first `limit` rows (all of them: one pass); the sample goes to the request's file."""
    import pyarrow as pa

    if request.sample is None:
        raise UsageError("a Spark read without --out needs a sample file (SparkReadRequest.sample)")
    if request.limit == 0:
        progress("reading every row")
        rows = frame.toArrow()
        total = rows.num_rows
    else:
        progress("counting rows")
        total = frame.count()
        progress(f"{total:,} row(s); taking the first {request.limit:,}")
        rows = frame.limit(request.limit).toArrow()
    with pa.OSFile(request.sample, "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    return SparkReadResult(total, list(frame.columns), reader, shown=rows.num_rows)


def _write(
    frame: DataFrame, table: TableHandle, out: str, out_format: str, reader: str, progress: Progress
) -> SparkReadResult:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    target = Path(out)
    check_out_folder(target)
    temp = temporary_sibling(target, "tmp")
    counted = Observation("written")
    writer = frame.observe(counted, F.count(F.lit(1)).alias("rows")).write.format(out_format)
    for key, value in WRITER_OPTIONS.get(out_format, {}).items():
        writer = writer.option(key, value)
    progress(f"writing {out_format} part files into {target}")
    try:
        writer.save(temp.as_uri())  # a local path, whatever the session's default file system
        rows = int(counted.get["rows"])
        check_parts_written(temp, target, rows)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    mark(temp, table.path, rows)
    replace_folder(temp, target)
    parts = part_files(target)
    return SparkReadResult(
        rows,
        list(frame.columns),
        reader,
        out=str(target),
        format=out_format,
        files=len(parts),
        bytes=sum(p.stat().st_size for p in parts),
    )
