"""Ingest on Spark: read landing files, validate them on the executors, write through the data source.

Parquet, JSON and CSV are read natively by Spark (JSON primitives and CSV cells as text, so `batch.prepare`
decides what parses, exactly as in-process); Avro is read with fastavro on the executors. Each landing file
stays in one Spark partition (no splits), so a row's position in the batch is (file ordinal, row order).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.batch import REASON, SOURCE, Batch, prepare, required_columns
from stitchlake.config import StreamSpec, TableConfig
from stitchlake.errors import InputRejected
from stitchlake.ingest import IngestResult, begin, nothing_to_do, pending_files
from stitchlake.io.schemas import log_schema
from stitchlake.io.sources import ROW_BITS, ROW_MASK, SourceFile, read_source
from stitchlake.layout.bucket import bucket_of
from stitchlake.spark.datasource import BUCKET, DELETED, POS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stitchlake.table import Table

FILE = "_sl_file"
ROWID = "_sl_rowid"
RAW = "_sl_raw"
QUARANTINE_DIR = ".stitch/quarantine"


def prepared_schema(config: TableConfig, stream: StreamSpec) -> pa.Schema:
    """Rows after validation: table columns, then position, delete flag, bucket, and why a row is bad."""
    table_fields = [f for f in log_schema(config, stream) if not f.name.startswith("_sl__")]
    extra = [
        pa.field(POS, pa.int64()),
        pa.field(DELETED, pa.bool_()),
        pa.field(BUCKET, pa.int32()),
        pa.field(REASON, pa.string()),
        pa.field(SOURCE, pa.string()),
        pa.field(RAW, pa.string()),
    ]
    return pa.schema(table_fields + extra)


def emit(config: TableConfig, stream: StreamSpec, batch: Batch, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A prepared batch as rows of `prepared_schema`: good rows with their bucket, bad rows with their reason."""
    good = batch.rows
    if good.num_rows:
        buckets = bucket_of([good.column(n) for n in config.table.key_names], config.table.buckets)
        columns = {name: good.column(name) for name in good.column_names}
        columns |= {
            POS: pa.array(batch.pos, pa.int64()),
            DELETED: pa.array(batch.deleted, pa.bool_()),
            BUCKET: pa.array(buckets.astype(np.int32), pa.int32()),
        }
        yield from pa.table(columns).cast(_nullable(schema, columns)).to_batches()
    if batch.bad is not None and batch.bad.num_rows:
        bad = batch.bad
        raw = [json.dumps({k: v for k, v in row.items() if not k.startswith("_")}) for row in bad.to_pylist()]
        length = bad.num_rows
        columns = {f.name: pa.nulls(length, f.type) for f in schema}
        columns[REASON] = bad.column(REASON)
        columns[SOURCE] = bad.column(SOURCE)
        columns[RAW] = pa.array(raw, pa.string())
        yield from pa.table(columns, schema=schema).to_batches()


def _nullable(schema: pa.Schema, present: dict[str, Any]) -> pa.Schema:
    return pa.schema([f for f in schema if f.name in present])


def _complete(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pad good-row batches with the (null) bad-row columns so every batch has the declared schema."""
    for item in batches:
        if item.schema.names == schema.names:
            yield item
            continue
        length = item.num_rows
        arrays = [item.column(f.name) if f.name in item.schema.names else pa.nulls(length, f.type) for f in schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _normalise(uri: str) -> str:
    if "://" not in uri and not uri.startswith("file:"):
        return uri  # a plain path: '#' and '?' in it are part of a name, not a URL fragment or query
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def prepare_native(
    config: TableConfig, stream: StreamSpec, ordinals: dict[str, int]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function for natively read files: validate rows with their (file ordinal, row) position."""
    schema = prepared_schema(config, stream)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for item in batches:
            data = pa.Table.from_batches([item])
            files = data.column(FILE)
            rowids = data.column(ROWID).to_numpy()
            data = data.drop_columns([FILE, ROWID])
            for name in pc.unique(files).to_pylist():
                mask = pc.equal(files, name).to_numpy(zero_copy_only=False)
                path = _normalise(name)
                ordinal = ordinals[path]
                positions = (np.int64(ordinal) << ROW_BITS) | (rowids[mask] & ROW_MASK)
                part = data.filter(pa.array(mask)) if not mask.all() else data
                prepared = prepare(config, stream, part, source=path, pos=positions)
                yield from _complete(schema, emit(config, stream, prepared, schema))

    return run


def prepare_avro(
    config: TableConfig, stream: StreamSpec, columns: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function over (ordinal, path, size) rows: read each Avro file with fastavro, then validate."""
    schema = prepared_schema(config, stream)
    assert stream.source is not None
    source = stream.source

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for item in batches:
            for row in item.to_pylist():
                file = SourceFile(row["path"], row["path"], row["size"])
                data = read_source(source, file, columns)
                positions = (np.int64(row["ordinal"]) << ROW_BITS) | np.arange(data.num_rows, dtype=np.int64)
                prepared = prepare(config, stream, data, source=file.path, pos=positions)
                yield from _complete(schema, emit(config, stream, prepared, schema))

    return run


def check_columns(stream: StreamSpec, files: list[SourceFile], columns: list[str]) -> None:
    """Refuse files that lack a column the stream needs, naming the file (driver side, footers/headers only)."""
    assert stream.source is not None
    fmt = stream.source.format
    for file in files:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                names = pq.read_schema(file.path).names
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputRejected(f"{file.path}: cannot read parquet file ({exc})") from None
        elif fmt == "csv":
            with open(file.path, encoding="utf-8", newline="") as handle:
                header = next(csv.reader(handle, delimiter=stream.source.options.get("delimiter", ",")), [])
            names = [h.strip() for h in header]
        elif fmt == "avro":
            import fastavro

            try:
                with open(file.path, "rb") as handle:
                    names = [f["name"] for f in fastavro.reader(handle).writer_schema["fields"]]
            except (ValueError, EOFError, OSError) as exc:
                raise InputRejected(f"{file.path}: cannot read avro file ({exc})") from None
        else:
            continue  # JSON: an absent field is a null value, judged row by row
        missing = [c for c in columns if c not in names]
        if missing:
            raise InputRejected(
                f"{file.path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                f"needed by stream {stream.name} (found: {', '.join(names) or 'none'})"
            )


def read_sources(spark: SparkSession, table: Table, stream: StreamSpec, files: list[SourceFile]) -> DataFrame:
    """The prepared rows of the files (see `prepared_schema`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    assert stream.source is not None
    config = table.config
    columns = [c.name for c in required_columns(config, stream)]
    wanted = columns + ([stream.deletes.column] if stream.deletes else [])
    schema = prepared_schema(config, stream)
    spark_schema = from_arrow_schema(schema)
    parallelism = spark.sparkContext.defaultParallelism
    fmt = stream.source.format
    if fmt == "avro":
        listing = [(i, f.path, f.size) for i, f in enumerate(files)]
        paths = spark.createDataFrame(listing, "ordinal long, path string, size long")
        paths = paths.repartition(max(1, min(len(files), parallelism)), "ordinal")
        return paths.mapInArrow(prepare_avro(config, stream, wanted), spark_schema)

    # One partition per file at most: positions inside a file must follow the file's row order.
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(f.size for f in files) + (1 << 20)))
    reader = spark.read
    if fmt == "json":
        reader = reader.option("primitivesAsString", "true")
    elif fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "false")
        for key, value in stream.source.options.items():
            reader = reader.option(key, value)
    frame = reader.format(fmt).load([f.path for f in files])
    present = set(frame.columns)
    for name in wanted:
        if name not in present:
            frame = frame.withColumn(name, F.lit(None).cast("string"))
    frame = frame.select(
        *[F.col(f"`{n}`") for n in wanted],
        F.col("_metadata.file_path").alias(FILE),
        F.monotonically_increasing_id().alias(ROWID),
    )
    ordinals = {str(_normalise(f.path)): i for i, f in enumerate(files)}
    return frame.mapInArrow(prepare_native(config, stream, ordinals), spark_schema)


def _rejection(bad: DataFrame, total: int) -> InputRejected:
    from pyspark.sql import functions as F

    counts = {r[REASON]: r["count"] for r in bad.groupBy(REASON).count().collect()}
    summary = ", ".join(f"{reason}: {count}" for reason, count in sorted(counts.items(), key=lambda x: -x[1]))
    first = bad.select(SOURCE, REASON, RAW).orderBy(F.col(SOURCE)).limit(3).collect()
    examples = "; ".join(f"{r[SOURCE]} ({r[REASON]}) {r[RAW]}" for r in first)
    return InputRejected(
        f"{total} bad row{'s' if total != 1 else ''} ({summary}); first: {examples} — nothing was written "
        "(set bad_rows: quarantine to set bad rows aside and keep the rest)"
    )


def ingest_spark(
    spark: SparkSession,
    table: Table,
    stream_name: str,
    paths: list[str] | None = None,
    max_files: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> IngestResult:
    """Ingest the stream's pending landing files as one deltacommit, written by Spark tasks."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.time()
    table.require()
    stream = table.config.stream(stream_name)
    if not pending_files(table, stream_name, paths, max_files):
        return nothing_to_do(stream_name, "spark")
    txn = begin(table, stream_name)
    try:
        files = pending_files(table, stream_name, paths, max_files)
        if not files:
            txn.abort()
            return nothing_to_do(stream_name, "spark")
        check_columns(stream, files, [c.name for c in required_columns(table.config, stream)])
        progress(f"reading {len(files)} landing file(s) of stream {stream_name}")
        prepared = read_sources(spark, table, stream, files).persist(StorageLevel.MEMORY_AND_DISK)
        bad = prepared.filter(F.col(REASON).isNotNull())
        bad_count = bad.count()
        quarantine = None
        if bad_count:
            if table.config.bad_rows == "fail":
                raise _rejection(bad, bad_count)
            quarantine = f"{QUARANTINE_DIR}/{txn.time}/rejected"
            txn.mark(quarantine)
            bad.select(REASON, SOURCE, RAW).coalesce(1).write.parquet(table.storage.abspath(quarantine))
        good = prepared.filter(F.col(REASON).isNull()).drop(REASON, SOURCE, RAW)
        partition_columns = [F.col(n) for n in table.config.table.partition_names]
        good = good.repartition(max(1, spark.sparkContext.defaultParallelism), *partition_columns, F.col(BUCKET))
        progress(f"writing stream {stream_name} as instant {txn.time}")
        metadata = {"sources": [f.to_json() for f in files], "bad_rows": bad_count, "quarantine": quarantine}
        writer = good.write.format("stitchlake").option("stream", stream_name).option("instant", txn.time)
        if table.config.source_file:
            writer = writer.option("config", table.config.source_file)
        writer.option("metadata", json.dumps(metadata)).mode("append").save(table.path)
        prepared.unpersist()
    except BaseException:
        txn.abort()
        raise
    if txn.heartbeat is not None:
        txn.heartbeat.stop(delete=True)
    done = table.timeline().get(txn.time)
    meta = table.timeline().metadata(done) if done is not None and done.is_completed else {}
    added = meta.get("added", [])
    from stitchlake.ingest import inline_compaction
    from stitchlake.spark.services import compact

    return IngestResult(
        extra=inline_compaction(table, lambda t: compact(spark, t)),
        stream=stream_name,
        engine="spark",
        instant=txn.time,
        completed=done.completed if done else None,
        source_files=len(files),
        rows=int(meta.get("rows", 0)),
        bad_rows=bad_count,
        quarantine=quarantine,
        files=len(added),
        bytes=sum(int(f["bytes"]) for f in added),
        seconds=time.time() - started,
        message=f"ingested {len(files)} file(s), {meta.get('rows', 0)} rows into stream {stream_name}",
    )
