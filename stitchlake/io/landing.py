"""Landing files a stream ingests: discovery, identity (exactly once, and changes noticed), and reading.

Both engines read landing files with this module, through `Storage` (local disk or an object store), so they
accept and reject exactly the same files and rows: Spark tasks call `read_landing` on the executors. Text formats
keep their values as text so `batch.prepare` decides, row by row, what parses.

A landing file's identity is its name relative to the stream's source folder; its `version` (size and
modification time on disk, the ETag on object stores) tells a re-delivery with new content from the file that
was ingested. Hidden files and folders (`.name`, `_name`) are never landing files: writers put a file there
under a hidden name and rename it when it is whole.
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from stitchlake.config import SourceSpec
from stitchlake.errors import InputRejected, UsageError
from stitchlake.storage import storage_for
from stitchlake.storage.registry import scheme_of
from stitchlake.timeline.metadata import LandingRecord

EXTENSIONS = {
    "parquet": (".parquet", ".parq"),
    "json": (".json", ".jsonl", ".ndjson"),
    "csv": (".csv", ".tsv"),
    "avro": (".avro",),
}
#: Compressed text files, by suffix (Parquet and Avro compress inside the file).
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
COMPRESSIBLE = ("json", "csv")
#: Position of a row within a batch = file ordinal << ROW_BITS | row within the file.
ROW_BITS = 33
ROW_MASK = (1 << ROW_BITS) - 1


@dataclass(frozen=True)
class LandingFile:
    """A landing file: where it is (`root` + `path`), its identity (`name`) and what it holds now (`version`)."""

    root: str
    path: str
    name: str
    size: int
    version: str

    def record(self) -> LandingRecord:
        return LandingRecord(self.name, self.size, self.version)


def positions(ordinal: int, rows: int) -> np.ndarray:
    """Row positions of a file's rows in a batch: a later file, and a later row, is the later arrival."""
    return (np.int64(ordinal) << ROW_BITS) | np.arange(rows, dtype=np.int64)


def compression_of(name: str) -> str | None:
    suffix = posixpath.splitext(name.lower())[1]
    return COMPRESSIONS.get(suffix)


def is_landing_name(name: str, file_format: str) -> bool:
    """Whether a file name has the stream's format (and, for text formats, maybe a compression suffix)."""
    lower = name.lower()
    if file_format in COMPRESSIBLE and compression_of(lower):
        lower = posixpath.splitext(lower)[0]
    return lower.endswith(EXTENSIONS[file_format])


def _visible(path: str) -> bool:
    return not any(part.startswith((".", "_")) for part in path.split("/"))


def split_location(location: str) -> tuple[str, str]:
    """A file location as (folder, file name), for a local path or a URI."""
    text = str(location).rstrip("/")
    folder, _, name = text.rpartition("/")
    if not scheme_of(text):
        resolved = Path(text)
        return str(resolved.parent), resolved.name
    return folder, name


def discover(
    source: SourceSpec, paths: list[str] | None = None, options: Mapping[str, str] | None = None
) -> list[LandingFile]:
    """Landing files of a stream, sorted by name (= arrival order). `paths` overrides the configured folder."""
    base = source.path.rstrip("/")
    found: list[LandingFile] = []
    for root in paths or [base]:
        storage = storage_for(root, options)
        if _is_file(root, options):
            folder, name = split_location(root)
            if not is_landing_name(name, source.format):
                # A file named explicitly must not be skipped in silence (the run would say "nothing to ingest").
                raise UsageError(
                    f"source file {root} is not a {source.format} file: the stream reads {source.format} "
                    f"({', '.join(EXTENSIONS[source.format])}"
                    + (", optionally .gz/.bz2/.zst)" if source.format in COMPRESSIBLE else ")")
                )
            info = storage_for(folder, options).stat(name)
            found.append(LandingFile(folder, name, _identity(base, folder, name), info.size, info.version))
            continue
        listed = list(storage.list_files())
        if not listed and not storage.exists(""):
            raise UsageError(f"source path {storage.describe()} does not exist")
        for info in listed:
            if _visible(info.path) and is_landing_name(info.path.rsplit("/", 1)[-1], source.format):
                found.append(LandingFile(root, info.path, _identity(base, root, info.path), info.size, info.version))
    unique = {f.name: f for f in found}
    return [unique[name] for name in sorted(unique)]


def _is_file(root: str, options: Mapping[str, str] | None) -> bool:
    if not scheme_of(root):
        return Path(root).is_file()
    folder, name = split_location(root)
    try:
        storage_for(folder, options).stat(name)
    except (FileNotFoundError, OSError):
        return False
    return True


def _identity(base: str, folder: str, path: str) -> str:
    """A landing file's name relative to the stream's source folder (its full location when outside it)."""
    full = f"{folder.rstrip('/')}/{path}"
    if not scheme_of(full):
        full = str(Path(full).resolve())
        base = str(Path(base).resolve())
    prefix = base.rstrip("/") + "/"
    return full[len(prefix) :] if full.startswith(prefix) else full


def describe(file: LandingFile, options: Mapping[str, str] | None = None) -> str:
    """A landing file's full location, for messages."""
    return storage_for(file.root, options).describe(file.path)


def read_landing(
    source: SourceSpec, file: LandingFile, columns: list[str], options: Mapping[str, str] | None = None
) -> pa.Table:
    """Read one landing file. Text formats keep the wanted columns as text.

    JSON is read row by row: a field missing from a line, or from every line, is a null value (each line is one
    event, not a schema). Other formats name their columns once per file: a missing one is refused later with
    the file's name (`batch.prepare`).
    """
    storage = storage_for(file.root, options)
    where = storage.describe(file.path)
    try:
        data = storage.read_bytes(file.path)
        codec = compression_of(file.path) if source.format in COMPRESSIBLE else None
        if codec is not None:
            data = pa.CompressedInputStream(pa.BufferReader(data), codec).read()
        if source.format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(pa.BufferReader(data))
        if source.format == "csv":
            return _read_csv(source, file.path, data, columns)
        if source.format == "json":
            table = _read_json(data, where)
            missing = [c for c in columns if c not in table.column_names]
            for name in missing:
                table = table.append_column(name, pa.nulls(table.num_rows, pa.string()))
            return table
        from stitchlake.io.avro import read_avro

        return read_avro(io.BytesIO(data))
    except InputRejected:
        raise
    except FileNotFoundError:
        raise InputRejected(f"{where}: landing file vanished before it was read", file=where) from None
    except (pa.ArrowInvalid, OSError, ValueError, EOFError, UnicodeDecodeError) as exc:
        raise InputRejected(f"{where}: cannot read {source.format} file ({exc})", file=where) from None


def _read_csv(source: SourceSpec, name: str, data: bytes, columns: list[str]) -> pa.Table:
    import pyarrow.csv as pacsv

    tabs = ".tsv" in name.lower().rsplit("/", 1)[-1]
    delimiter = source.options.get("delimiter", "\t" if tabs else ",")
    parse = pacsv.ParseOptions(delimiter=delimiter)
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()),
        strings_can_be_null=True,
        null_values=["", "NULL", "null"],
    )
    return pacsv.read_csv(pa.BufferReader(data), parse_options=parse, convert_options=convert)


def _read_json(data: bytes, where: str) -> pa.Table:
    """Newline-delimited JSON. Columns whose JSON type varies become text, so bad values become bad rows."""
    import pyarrow.json as pajson

    try:
        return pajson.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid:
        pass
    records = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputRejected(f"{where}: line {number} is not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputRejected(f"{where}: line {number} is not a JSON object")
        records.append(record)
    names = list(dict.fromkeys(name for record in records for name in record))
    return pa.table({name: _json_column([r.get(name) for r in records]) for name in names})


def _json_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values], pa.string()
        )
