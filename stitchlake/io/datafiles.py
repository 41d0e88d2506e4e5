"""Reading and writing the table's own data files (base and log), with errors that name the file.

A file that cannot be read completely raises CorruptFileError; it never yields partial rows. Files are written
straight to their final name: they only become visible when a completed instant names them.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from stitchlake.errors import CorruptFileError
from stitchlake.io.avro import read_avro, write_avro
from stitchlake.storage import Storage

PARQUET_COMPRESSION = "zstd"


def write_table_file(storage: Storage, path: str, table: pa.Table, file_format: str = "parquet") -> int:
    """Write a data file and return its size in bytes."""
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    storage.makedirs(folder)
    if file_format == "avro":
        buffer = io.BytesIO()
        write_avro(table, buffer)
        data = buffer.getvalue()
        with storage.filesystem.open_output_stream(storage.abspath(path)) as out:
            out.write(data)
        return len(data)
    pq.write_table(
        table,
        storage.abspath(path),
        filesystem=storage.filesystem,
        compression=PARQUET_COMPRESSION,
        compression_level=1,
        write_statistics=False,
    )
    return storage.size(path)


def read_table_file(
    storage: Storage,
    path: str,
    schema: pa.Schema,
    columns: list[str] | None = None,
    expected_rows: int | None = None,
) -> pa.Table:
    """Read a base or log file (format from its name), cast to `schema`, checking it is whole.

    Errors name the file's full location: the person reading them has a cron log, not the table path.
    """
    where = storage.abspath(path)
    try:
        if path.endswith(".avro"):
            with storage.filesystem.open_input_file(where) as handle:
                table = read_avro(io.BytesIO(handle.read()), schema, columns)
        else:
            with storage.filesystem.open_input_file(where) as handle:
                table = pq.ParquetFile(handle).read(columns=columns)
    except FileNotFoundError:
        raise CorruptFileError(f"{where}: data file is missing (named by a completed instant)") from None
    except Exception as exc:
        raise CorruptFileError(f"{where}: cannot read data file ({type(exc).__name__}: {exc})") from None
    if expected_rows is not None and table.num_rows != expected_rows:
        raise CorruptFileError(f"{where}: holds {table.num_rows} rows but its commit recorded {expected_rows}")
    wanted = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    missing = [f.name for f in wanted if f.name not in table.column_names]
    if missing:
        raise CorruptFileError(f"{where}: missing columns {', '.join(missing)}")
    table = table.select(wanted.names)
    if table.schema != wanted:
        try:
            table = table.cast(wanted)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise CorruptFileError(f"{where}: columns do not match the table schema ({exc})") from None
    return table
