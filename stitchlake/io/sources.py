"""Landing files a stream ingests: discovery, identity (for exactly-once) and in-process reading.

Spark reads Parquet, JSON and CSV natively (see `stitchlake.spark.ingest`); this module reads them in-process
for `--engine local`, and Avro everywhere (fastavro, on the executors when on Spark). Text formats keep their
values as text so `batch.prepare` decides, row by row, what parses — identically on both engines.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stitchlake.config import SourceSpec
from stitchlake.errors import InputRejected, UsageError

EXTENSIONS = {
    "parquet": (".parquet", ".parq"),
    "json": (".json", ".jsonl", ".ndjson"),
    "csv": (".csv",),
    "avro": (".avro",),
}
#: Position of a row within a batch = file ordinal << ROW_BITS | row within the file.
ROW_BITS = 33
ROW_MASK = (1 << ROW_BITS) - 1


@dataclass(frozen=True)
class SourceFile:
    """A landing file. `name` (relative to the source folder) is its identity for exactly-once ingest."""

    path: str
    name: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size}


def _visible(name: str) -> bool:
    return not name.startswith((".", "_"))


def discover(source: SourceSpec, paths: list[str] | None = None) -> list[SourceFile]:
    """Landing files of a stream, sorted by name (= arrival order). `paths` overrides the configured folder."""
    roots = [Path(p) for p in paths] if paths else [Path(source.path)]
    base = Path(source.path)
    found: list[SourceFile] = []
    for root in roots:
        if root.is_file():
            if not root.name.lower().endswith(EXTENSIONS[source.format]):
                # A file named explicitly must not be skipped in silence (the run would say "nothing to ingest").
                raise UsageError(
                    f"source file {root} is not a {source.format} file: the stream reads {source.format} "
                    f"({', '.join(EXTENSIONS[source.format])})"
                )
            candidates = [root]
        elif root.is_dir():
            candidates = sorted(
                Path(folder) / name
                for folder, _dirs, names in os.walk(root)
                for name in names
                if _visible(name) and all(_visible(part) for part in Path(folder).relative_to(root).parts)
            )
        else:
            raise UsageError(f"source path {root} does not exist")
        for candidate in candidates:
            if not candidate.name.lower().endswith(EXTENSIONS[source.format]):
                continue
            absolute = candidate.resolve()
            try:
                name = str(absolute.relative_to(base.resolve()))
            except ValueError:
                name = str(absolute)
            found.append(SourceFile(str(absolute), name, absolute.stat().st_size))
    unique = {f.name: f for f in found}
    return [unique[name] for name in sorted(unique)]


def read_source(source: SourceSpec, file: SourceFile, columns: list[str]) -> pa.Table:
    """Read one landing file in-process. Text formats keep the wanted columns as text."""
    try:
        if source.format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(file.path)
        if source.format == "csv":
            return _read_csv(source, file, columns)
        if source.format == "json":
            return _read_json(file)
        from stitchlake.io.avro import read_avro

        with open(file.path, "rb") as handle:
            return read_avro(handle)
    except InputRejected:
        raise
    except (pa.ArrowInvalid, OSError, ValueError, EOFError) as exc:
        raise InputRejected(f"{file.path}: cannot read {source.format} file ({exc})") from None


def _read_csv(source: SourceSpec, file: SourceFile, columns: list[str]) -> pa.Table:
    import pyarrow.csv as pacsv

    options = source.options
    parse = pacsv.ParseOptions(delimiter=options.get("delimiter", ","))
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()),
        strings_can_be_null=True,
        null_values=["", "NULL", "null"],
    )
    return pacsv.read_csv(file.path, parse_options=parse, convert_options=convert)


def _read_json(file: SourceFile) -> pa.Table:
    """Newline-delimited JSON. Columns whose JSON type varies become text, so bad values become bad rows."""
    import pyarrow.json as pajson

    try:
        return pajson.read_json(file.path)
    except pa.ArrowInvalid:
        pass
    records = []
    with open(file.path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputRejected(f"{file.path}: line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise InputRejected(f"{file.path}: line {number} is not a JSON object")
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
