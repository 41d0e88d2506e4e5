"""Reading and writing the table's own data files (base and log), with errors that name the file.

A file that cannot be read completely raises CorruptFileError; it never yields partial rows. Files are written
straight to their final name: they only become visible when a completed instant names them. Every file's digest is
returned when it is written, recorded by the commit that names it, and checked on every read
(`stitchlake.checksums`): Parquet's page checksums leave its footer and page headers bare, and Avro has none.
"""

from __future__ import annotations

import io
import posixpath
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stitchlake.checksums import digest, verify
from stitchlake.errors import CorruptFileError, DataFileMissing
from stitchlake.io.avro import read_avro, write_avro
from stitchlake.layout.names import LOG, parse_name
from stitchlake.merge import summary
from stitchlake.storage import Storage

#: Base files are long-lived and read after compaction: zstd keeps them small.
PARQUET_COMPRESSION = "zstd"
#: Log files are written on the ingest path and re-read by every snapshot read until compacted: lz4 decodes
#: about twice as fast as zstd for ~30% more bytes (docs/benchmarks.md).
LOG_COMPRESSION = "lz4"


@dataclass(frozen=True)
class Written:
    """A file as written: its size, and the digest its readers check it against."""

    size: int
    checksum: str


def write_table_file(storage: Storage, path: str, table: pa.Table, file_format: str = "parquet") -> Written:
    """Write a data file (format and compression from its name) in one write."""
    if file_format == "avro":
        buffer = io.BytesIO()
        write_avro(table, buffer)
        data = buffer.getvalue()
        storage.write_bytes(path, data)
        return Written(len(data), digest(data))
    name = parse_name(posixpath.basename(path))
    log = name is not None and name.kind == LOG
    return write_parquet(
        storage,
        path,
        table,
        compression=LOG_COMPRESSION if log else PARQUET_COMPRESSION,
        compression_level=None if log else 1,
        write_statistics=statistics_columns(table.schema),
        **parquet_encodings(table.schema, delta_positions=log),
    )


def statistics_columns(schema: pa.Schema) -> list[str]:
    """Columns whose row-group statistics (min, max, nulls) are written: the table's own flat columns, so readers
    that push filters down (Spark, Trino, DuckDB) skip row groups by key, partition or value ranges, and each
    stream's delete flag, so a reader of a log-free slice sees that every row shows every stream without reading
    the flags (the JVM reader's `DataFileReader.allFalse`). The other `_sl__` columns get none: nobody filters on
    versions, and they are most of a file's columns."""
    return [
        f.name
        for f in schema
        if (not summary.is_meta(f.name) or summary.is_delete_flag(f.name)) and not pa.types.is_nested(f.type)
    ]


def write_parquet(storage: Storage, path: str, table: pa.Table, **options: Any) -> Written:
    """Write any Parquet file of the table (data, quarantine, erase keys) through storage.

    Page checksums always, so a file read without its recorded digest still refuses most damage.
    """
    data = _parquet_bytes(table, **options)
    storage.write_bytes(path, data.to_pybytes())
    return Written(data.size, digest(memoryview(data)))


def write_parquet_atomic(storage: Storage, path: str, table: pa.Table) -> Written:
    """`write_parquet` for a path two attempts of one Spark task may write at once (a speculative one): one whole
    file wins, never a mix of both."""
    data = _parquet_bytes(table)
    storage.write_atomic(path, data.to_pybytes())
    return Written(data.size, digest(memoryview(data)))


def _parquet_bytes(table: pa.Table, **options: Any) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True, **options)
    return sink.getvalue()


def read_parquet(
    storage: Storage, path: str, columns: list[str] | None = None, checksum: str | None = None
) -> pa.Table:
    """Read a whole Parquet file of the table through storage, verifying its digest (when one was recorded) and
    page checksums."""
    if checksum:
        data = verified_bytes(storage, path, checksum)
        return pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True).read(columns=columns)
    with storage.open_input(path) as handle:
        return pq.ParquetFile(handle, page_checksum_verification=True).read(columns=columns)


def verified_bytes(storage: Storage, path: str, checksum: str) -> bytes:
    """A file's bytes, refused (CorruptFileError) unless they have the digest its commit recorded."""
    data = storage.read_bytes(path)
    verify(data, checksum, storage.describe(path))
    return data


def parquet_encodings(schema: pa.Schema, delta_positions: bool = False) -> dict[str, object]:
    """Dictionary-encode only text: trying it on ids, times and amounts costs time and saves nothing.

    `delta_positions`: a log's in-batch positions (`..._pos` meta columns) are a batch's row numbers (in the
    file's key order, a permutation of them), so delta encoding packs them into about log2(batch rows) bits a row
    instead of 64.
    """
    text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    options: dict[str, object] = {"use_dictionary": text}
    if delta_positions:
        positions = [f.name for f in schema if summary.is_position(f.name) and pa.types.is_int64(f.type)]
        if positions:
            options["column_encoding"] = dict.fromkeys(positions, "DELTA_BINARY_PACKED")
    return options


def read_table_file(
    storage: Storage,
    path: str,
    schema: pa.Schema,
    columns: list[str] | None = None,
    expected_rows: int | None = None,
    checksum: str | None = None,
) -> pa.Table:
    """Read a base or log file (format from its name), cast to `schema`, checking it is whole: its digest when
    its commit recorded one (files written before digests have none), and the rows its commit counted.

    Errors name the file's full location: the person reading them has a cron log, not the table path.
    """
    where = storage.describe(path)
    try:
        if path.endswith(".avro"):
            data = verified_bytes(storage, path, checksum) if checksum else storage.read_bytes(path)
            table = read_avro(io.BytesIO(data), schema, columns)
        else:
            table = read_parquet(storage, path, columns, checksum)
    except FileNotFoundError:
        raise DataFileMissing(f"{where}: data file is missing (named by a completed instant)", file=where) from None
    except CorruptFileError:
        raise
    except Exception as exc:
        raise CorruptFileError(f"{where}: cannot read data file ({type(exc).__name__}: {exc})", file=where) from None
    if expected_rows is not None and table.num_rows != expected_rows:
        raise CorruptFileError(
            f"{where}: holds {table.num_rows} rows but its commit recorded {expected_rows}", file=where
        )
    wanted = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    present = set(table.column_names)  # a fresh list on every call: asked once, not per column
    missing = [f.name for f in wanted if f.name not in present]
    if missing:
        raise CorruptFileError(f"{where}: missing columns {', '.join(missing)}", file=where)
    table = table.select(wanted.names)
    if table.schema != wanted:
        try:
            table = table.cast(wanted)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise CorruptFileError(f"{where}: columns do not match the table schema ({exc})", file=where) from None
    return table
