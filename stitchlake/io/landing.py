"""Landing files a stream ingests: discovery, identity (exactly once, and changes noticed), and reading.

Both engines read landing files with this module, through `Storage` (local disk or an object store), so they
accept and reject exactly the same files and rows: Spark tasks call `read_landing` on the executors. Text formats
keep their values as text so `batch.prepare` decides, row by row, what parses.

A landing file's identity is its name relative to the stream's source folder; its `version` (size and
modification time on disk, the ETag on object stores) tells a re-delivery with new content from the file that
was ingested. Hidden files and folders (`.name`, `_name`) are never landing files: writers put a file there
under a hidden name and rename it when it is whole.

Any landing file may be compressed as a whole (`.csv.gz`, `.jsonl.gz`, `.csv.bz2`, `.json.zst`, even
`.parquet.gz`). A file compressed in a way stitch cannot read (`.csv.xz`) is still a landing file: it is refused
by name when read (or quarantined), never skipped in silence.
"""

from __future__ import annotations

import dataclasses
import decimal
import io
import json
import posixpath
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from stitchlake.config import SourceSpec
from stitchlake.errors import InputRejected, UsageError
from stitchlake.storage import storage_for
from stitchlake.storage.registry import absolute, is_uri
from stitchlake.timeline.metadata import LandingRecord
from stitchlake.vocabulary import SourceFormat


@dataclass(frozen=True)
class LandingFormat:
    """What stitch knows about one landing file format: the names it has and how one file is read.

    `read(source, name, data, columns, where)` turns a whole (decompressed) file into a table; adding a format is
    one entry in `FORMATS` plus its name in `config.SourceFormat` (docs/architecture.md walks through it)."""

    extensions: tuple[str, ...]
    read: Callable[[SourceSpec, str, bytes, list[str], str], pa.Table]
    #: For formats whose records each name their own fields (JSON lines): `absent(data, table, names, where)`
    #: says, per column of `names`, which rows' records lack the field (only where some do and some do not), so
    #: a missing field is told from a written null. Formats that name their columns once per file have none.
    absent: Callable[[bytes, pa.Table, list[str], str], dict[str, np.ndarray]] | None = None
    #: For formats whose values carry their own types (JSON lines): `judge(data, types, where)` reads the columns
    #: of `types` judging each record's values against them, so a wrong value is a bad row, never the file's
    #: fault nor text in silence. Formats whose columns have one type per file have none (`prepare` casts).
    judge: Callable[[bytes, Mapping[str, pa.DataType | None], str], Judged] | None = None


def _format_of(source: SourceSpec) -> LandingFormat:
    """The stream's landing format; a format without a reader is an error, never a fallback to another reader."""
    found = FORMATS.get(str(source.format))
    if found is None:
        raise UsageError(
            f"format {source.format!s} has no landing files to read (landing formats: {', '.join(sorted(FORMATS))})"
        )
    return found


#: Whole-file compressions by suffix, decompressed before the file is read (any format).
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
#: Compressions stitch cannot read: files with these suffixes are refused by name, not skipped.
UNSUPPORTED_COMPRESSIONS = {
    ".xz": "xz",
    ".lzma": "lzma",
    ".lz4": "lz4",
    ".zip": "zip",
    ".7z": "7z",
    ".br": "brotli",
    ".snappy": "snappy",
    ".z": "compress",
}
#: What a delivery system can use instead, for messages.
READABLE_COMPRESSIONS = "gzip (.gz), bzip2 (.bz2) or zstd (.zst)"
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
    """The whole-file compression a landing file's name says (readable or not), or None."""
    suffix = posixpath.splitext(name.lower())[1]
    return COMPRESSIONS.get(suffix) or UNSUPPORTED_COMPRESSIONS.get(suffix)


def is_landing_name(name: str, file_format: str) -> bool:
    """Whether a file name has the stream's format, maybe followed by a compression suffix."""
    lower = name.lower()
    if compression_of(lower):
        lower = posixpath.splitext(lower)[0]
    found = FORMATS.get(file_format)
    return found is not None and lower.endswith(found.extensions)


def _visible(path: str) -> bool:
    return not any(part.startswith((".", "_")) for part in path.split("/"))


def split_location(location: str) -> tuple[str, str]:
    """A file location as (folder, file name), for a local path or a URI."""
    text = str(location).rstrip("/")
    if is_uri(text):
        folder, _, name = text.rpartition("/")
        return folder, name
    path = Path(text)
    return str(path.parent), path.name


def discover(
    source: SourceSpec, paths: list[str] | None = None, options: Mapping[str, str] | None = None
) -> list[LandingFile]:
    """Landing files of a stream, sorted by name (= arrival order). `paths` overrides the configured folder."""
    assert source.path is not None, "a file source has a path (validated)"
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
                    f"({', '.join(_format_of(source).extensions)}, optionally .gz/.bz2/.zst)"
                )
            info = storage_for(folder, options).stat(name)
            found.append(LandingFile(folder, name, _identity(base, folder, name), info.size, info.version))
            continue
        listed = list(storage.list_files())
        if not listed and not storage.exists(""):
            raise UsageError(
                f"source path {storage.describe()} does not exist: create the folder, or fix the stream's "
                "source.path in the config (or --source)"
            )
        for info in listed:
            if _visible(info.path) and is_landing_name(info.path.rsplit("/", 1)[-1], source.format):
                found.append(LandingFile(root, info.path, _identity(base, root, info.path), info.size, info.version))
    unique = {f.name: f for f in found}
    return [unique[name] for name in sorted(unique)]


def _is_file(root: str, options: Mapping[str, str] | None) -> bool:
    local = storage_for(root, options).local_path()
    if local is not None:  # a folder on this machine is not a file, though it has a size and a version
        return Path(local).is_file()
    folder, name = split_location(root)
    try:
        storage_for(folder, options).stat(name)
    except (FileNotFoundError, OSError):
        return False
    return True


def _identity(base: str, folder: str, path: str) -> str:
    """A landing file's name relative to the stream's source folder (its full location when outside it)."""
    full, base = absolute(f"{folder.rstrip('/')}/{path}"), absolute(base)
    prefix = base.rstrip("/") + "/"
    return full[len(prefix) :] if full.startswith(prefix) else full


def describe(file: LandingFile, options: Mapping[str, str] | None = None) -> str:
    """A landing file's full location, for messages."""
    return storage_for(file.root, options).describe(file.path)


@dataclass(frozen=True)
class Judged:
    """A file's records as rows, judged one by one: a value of the wrong JSON type is null in `table`, with the
    row's reason in `reasons` (None where the row is fine) and the value as JSON text in `shown`, so the bad row
    quarantined shows what was written. `lines` gives each row's line in the file (computed when asked: only a
    file with bad rows needs it)."""

    table: pa.Table
    reasons: np.ndarray | None = None
    shown: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)
    lines: Callable[[], np.ndarray] | None = None


@dataclass(frozen=True)
class LandingRows:
    """A landing file's rows, and for each column asked about, which rows' records lack the field (a JSON line
    without it), where some records have it and some do not; for JSON lines, the judgement of each record
    (`Judged`: reasons, shown values, line numbers)."""

    table: pa.Table
    absent: dict[str, np.ndarray]
    judged: Judged | None = None


def read_landing(
    source: SourceSpec, file: LandingFile, columns: list[str], options: Mapping[str, str] | None = None
) -> pa.Table:
    """Read one landing file. Text formats keep the wanted columns as text.

    JSON is read row by row: a field missing from a line reads null (each line is one event, not a schema); one
    missing from every line is left out, and the caller fills it (`events.from_landing`). Other formats name
    their columns once per file: a missing one is refused later with the file's name (`batch.prepare`), unless
    `stitch alter` added it after the stream existed. A file that cannot be read whole is refused naming it
    (InputRejected), so the bad-row policy decides: never a half-read file, never an unexplained error.
    """
    return read_landing_rows(source, file, columns, options).table


def read_landing_rows(
    source: SourceSpec,
    file: LandingFile,
    columns: list[str],
    options: Mapping[str, str] | None = None,
    track: list[str] | None = None,
    types: Mapping[str, pa.DataType | None] | None = None,
) -> LandingRows:
    """`read_landing`, also saying which records lack a field of `track` that other records of the file have:
    a column `stitch alter` added with a default is the default there and null where a record says null.

    `types` (the table type of each column of `columns`; None: any value, kept as text, as for a delete marker)
    lets a format whose values carry their own types judge each record (JSON lines: `judge_json`)."""
    landing_format = _format_of(source)
    storage = storage_for(file.root, options)
    where = storage.describe(file.path)
    judged = None
    try:
        data = decompressed(storage.read_bytes(file.path), file.path, where)
        if types and landing_format.judge is not None:
            judged = landing_format.judge(data, types, where)
            table = judged.table
            if judged.lines is None:  # only a file with bad rows asks: read it again then, not held till then
                rows, path = table.num_rows, file.path

                def again() -> np.ndarray:
                    return _record_lines(decompressed(storage.read_bytes(path), path, where), where, rows)

                judged = dataclasses.replace(judged, lines=again)
        else:
            table = landing_format.read(source, file.path, data, columns, where)
    except InputRejected:
        raise
    except FileNotFoundError:
        raise InputRejected(f"{where}: landing file vanished before it was read", file=where) from None
    except (pa.ArrowInvalid, OSError, ValueError, EOFError) as exc:
        raise InputRejected(f"{where}: cannot read {source.format} file ({_one_line(exc)})", file=where) from None
    _require_valid(table, columns, where)
    absent = landing_format.absent(data, table, track, where) if track and landing_format.absent else {}
    return LandingRows(table, absent, judged)


def _one_line(error: BaseException) -> str:
    """A reader's error as one line (pyarrow's span several), so a cron log and a Spark driver keep all of it."""
    return " ".join(str(error).split()) or type(error).__name__


def decompressed(data: bytes, name: str, where: str) -> bytes:
    """A landing file's bytes, decompressed whole when its name says it is compressed."""
    suffix = posixpath.splitext(name.lower())[1]
    if suffix in UNSUPPORTED_COMPRESSIONS:
        raise InputRejected(
            f"{where}: compressed with {UNSUPPORTED_COMPRESSIONS[suffix]}, which stitch cannot read; deliver it "
            f"uncompressed or compressed with {READABLE_COMPRESSIONS}",
            file=where,
        )
    codec = COMPRESSIONS.get(suffix)
    if codec is None:
        return data
    try:
        return bytes(pa.CompressedInputStream(pa.BufferReader(data), codec).read())
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputRejected(f"{where}: cannot decompress it as {codec} ({_one_line(exc)})", file=where) from None


def _require_valid(table: pa.Table, columns: list[str], where: str) -> None:
    """Refuse a file whose wanted columns do not hold what their types say: readers of some formats (JSON, Parquet)
    take text that is not UTF-8 as it is, and it would make every later read of the table fail."""
    for index, field in enumerate(table.schema):
        if columns and field.name not in columns:
            continue
        try:
            table.column(index).validate(full=True)
        except pa.ArrowInvalid as exc:
            raise InputRejected(
                f"{where}: column {field.name} does not hold valid {field.type} values ({_one_line(exc)}); "
                "text must be UTF-8: write the file as UTF-8",
                file=where,
                column=field.name,
            ) from None


#: What a damaged Avro file makes the decoder raise, besides ValueError and EOFError: a header without a schema
#: (KeyError), a schema or block the decoder trips over (SchemaParseException, TypeError, IndexError), a
#: compressed block that does not inflate (zlib.error).
_AVRO_DAMAGE: tuple[type[Exception], ...] = (KeyError, TypeError, IndexError, zlib.error)


def _read_parquet(_source: SourceSpec, _name: str, data: bytes, _columns: list[str], _where: str) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(data))


def _read_avro(_source: SourceSpec, _name: str, data: bytes, _columns: list[str], where: str) -> pa.Table:
    """An Avro container file of records; any decoding failure is the file's damage, named as such."""
    import fastavro
    from fastavro.schema import SchemaParseException

    from stitchlake.io.avro import read_avro

    damage: tuple[type[Exception], ...] = (*_AVRO_DAMAGE, SchemaParseException)
    try:
        schema = fastavro.reader(io.BytesIO(data)).writer_schema
        if not isinstance(schema, dict) or schema.get("type") != "record":
            kind = schema.get("type") if isinstance(schema, dict) else schema
            raise InputRejected(
                f"{where}: the Avro file holds values of type {kind}, not records; a stream reads records whose "
                "fields are its columns",
                file=where,
            )
        return read_avro(io.BytesIO(data))
    except damage as exc:
        raise InputRejected(
            f"{where}: cannot read avro file ({type(exc).__name__}: {_one_line(exc)})", file=where
        ) from None


def _read_csv(source: SourceSpec, name: str, data: bytes, columns: list[str], where: str) -> pa.Table:
    import pyarrow.csv as pacsv

    tabs = ".tsv" in name.lower().rsplit("/", 1)[-1]
    options = source.options
    delimiter = options.get("delimiter", "\t" if tabs else ",")
    escape = options.get("escape")
    parse = pacsv.ParseOptions(
        delimiter=delimiter,
        quote_char=options.get("quote", '"'),
        escape_char=escape if escape else False,
    )
    nulls = options["null_values"].split(",") if "null_values" in options else ["", "NULL", "null"]
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()),
        strings_can_be_null=True,
        null_values=nulls,
    )
    table = pacsv.read_csv(pa.BufferReader(data), parse_options=parse, convert_options=convert)
    if table.num_columns == 1 and columns and table.column_names[0] not in columns:
        header = table.column_names[0]
        other = next((d for d in (";", "\t", "|", ",") if d != delimiter and d in header), None)
        if other is not None:
            raise InputRejected(
                f"{where}: the header {header!r} reads as one column: the file is separated by {other!r}, not "
                f"{delimiter!r}; set the stream's source.options.delimiter to {other!r}",
                file=where,
            )
    return table


def _read_json(_source: SourceSpec, _name: str, data: bytes, _columns: list[str], where: str) -> pa.Table:
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
            raise InputRejected(f"{where}: line {number} is not valid JSON ({exc.msg})", file=where) from None
        if not isinstance(record, dict):
            raise InputRejected(f"{where}: line {number} is not a JSON object", file=where)
        records.append(record)
    names = list(dict.fromkeys(name for record in records for name in record))
    return pa.table({name: _json_column([r.get(name) for r in records]) for name in names})


def _json_absent(data: bytes, table: pa.Table, names: list[str], where: str) -> dict[str, np.ndarray]:
    """Which records lack each field of `names` that some records of the file have. Only a column holding nulls
    is checked (a null is a missing field or a written null): the file is parsed again value by value, in the
    reader's order (whitespace-separated objects, as pyarrow reads them)."""
    names = [n for n in names if n in table.column_names and table.column(n).null_count]
    if not names:
        return {}
    text = data.decode("utf-8-sig", "replace")  # a leading byte-order mark is not a record (pyarrow skips it)
    decoder = json.JSONDecoder()
    present: dict[str, list[bool]] = {n: [] for n in names}
    at = _skip_space(text, 0)
    while at < len(text):
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise InputRejected(f"{where}: not valid JSON at character {exc.pos} ({exc.msg})", file=where) from None
        for name in names:
            present[name].append(isinstance(record, dict) and name in record)
        at = _skip_space(text, at)
    out = {}
    for name, found in present.items():
        if len(found) != table.num_rows:  # never seen: the reader and this scan disagree on what a record is
            raise InputRejected(
                f"{where}: {len(found)} JSON values, but the reader found {table.num_rows} records", file=where
            )
        mask = ~np.array(found, dtype=bool)
        if mask.any():
            out[name] = mask
    return out


#: What separates JSON values: whitespace (JSON's own, and the line breaks the line-by-line reader splits on).
_JSON_SPACE = re.compile(r"\s*")


def _skip_space(text: str, at: int) -> int:
    match = _JSON_SPACE.match(text, at)
    return match.end() if match else at


def _json_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values], pa.string()
        )


# --------------------------------------------------------------------------- JSON lines, judged record by record

#: Why a JSON value is a bad row: its JSON type is not one its column takes (a prefix, then the column's name;
#: `writing.batch` counts it among its reasons).
WRONG_JSON_TYPE = "wrong JSON type in "
#: A value of the right JSON type that cannot be the column's value (a whole number past 64 bits).
UNFIT_JSON_VALUE = "unparsable value in "
#: The strings a double column takes for the values JSON has no number for (what `--json` writes).
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_INT64 = (-(2**63), 2**63 - 1)


def _json_kind(kind: pa.DataType | None) -> str:
    """What JSON a column takes, by its table type: the JSON type stitch's own `--json` writes for it (a decimal
    also as a number)."""
    if kind is None:
        return "scalar"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "number"
    if pa.types.is_decimal(kind):
        return "decimal"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return "array"
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return "object"
    return "string"  # text, binary, date, timestamp


#: The type pyarrow's reader reads each kind as (None: kept as the table type itself).
_READ_AS: dict[str, pa.DataType | None] = {
    "scalar": pa.string(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
    "array": None,
    "object": None,
}


def _fast_type(kind: pa.DataType | None) -> pa.DataType | None:
    """The type pyarrow's JSON reader is told to read a column as: it refuses the file at a value of any other
    JSON type, so a file it reads has no wrong value (None: it cannot read the kind; judge every record)."""
    json_kind = _json_kind(kind)
    if json_kind == "decimal":
        assert isinstance(kind, pa.Decimal128Type | pa.Decimal256Type)
        return pa.decimal128(38, kind.scale)  # exact, as text; `prepare` checks the precision
    if json_kind in ("array", "object"):
        assert kind is not None
        return None if _has_map(kind) else kind
    return _READ_AS[json_kind]


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


def judge_json(data: bytes, types: Mapping[str, pa.DataType | None], where: str) -> Judged:
    """JSON lines judged record by record: each column takes the JSON type its table type has (a string column
    a JSON string, a boolean column true or false, a number column a number, a double also "NaN", "Infinity" and
    "-Infinity", a decimal a number or a string, read exactly), and a value of another JSON type makes its row a
    bad row (WRONG_JSON_TYPE), the file's other rows good.

    The common case costs one pyarrow read: told each column's type, pyarrow refuses a file holding any other
    JSON type, and a file it reads has no wrong value. Only a refused file is parsed record by record."""
    import pyarrow.json as pajson

    read_as = {name: _fast_type(kind) for name, kind in types.items()}
    if all(kind is not None for kind in read_as.values()):
        schema = pa.schema([(name, kind) for name, kind in read_as.items()])
        options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        try:
            table = pajson.read_json(pa.BufferReader(data), parse_options=options)
        except pa.ArrowInvalid:
            pass
        else:
            return Judged(table)  # `read_landing_rows` tells lines when asked, without holding the bytes
    return _judge_records(data, types, where)


def _judge_records(data: bytes, types: Mapping[str, pa.DataType | None], where: str) -> Judged:
    """`judge_json` record by record, for a file pyarrow refused (or one with a map column)."""
    records = _records(data, where)
    lines = np.array(records.lines, dtype=np.int64)
    return dataclasses.replace(judge_records(records.values, types), lines=lambda: lines)


def judge_records(records: Sequence[Mapping[str, Any]], types: Mapping[str, pa.DataType | None]) -> Judged:
    """Decoded JSON objects judged one by one against the columns' table types (`judge_json` says how), for any
    input whose records are JSON objects (numbers with a point best decoded as Decimal, to be read exactly)."""
    kinds = {name: _json_kind(kind) for name, kind in types.items()}
    values: dict[str, list[Any]] = {name: [] for name in types}
    reasons: list[str | None] = []
    shown: dict[str, dict[int, str]] = {}
    for row, record in enumerate(records):
        reason = None
        for name, json_kind in kinds.items():
            given = record.get(name)
            value, problem = _json_value(given, json_kind)
            values[name].append(value)
            if problem is not None:
                shown.setdefault(name, {})[row] = _as_json(given)
                reason = reason or f"{problem}{name}"
        reasons.append(reason)
    columns = {}
    for name, kind in types.items():
        column, unfit = _json_array(values[name], kinds[name], kind)
        columns[name] = column
        for row in unfit:
            shown.setdefault(name, {})[row] = _as_json(records[row].get(name))
            reasons[row] = reasons[row] or f"{UNFIT_JSON_VALUE}{name}"
    flagged = np.array(reasons, dtype=object) if any(r is not None for r in reasons) else None
    return Judged(pa.table(columns) if columns else pa.table({}), flagged, shown)


@dataclass(frozen=True)
class _Records:
    values: list[dict[str, Any]]
    #: The line each record starts on (1 for the first line).
    lines: list[int]


def _records(data: bytes, where: str) -> _Records:
    """A JSON-lines file's objects and their line numbers, in the order pyarrow reads them (whitespace-separated
    values; a leading byte-order mark is not a record). Numbers with a point or an exponent are read exactly
    (Decimal) until a column says what it wants; a value that is not JSON, or not an object, refuses the file."""
    text = data.decode("utf-8-sig")
    decoder = json.JSONDecoder(parse_float=decimal.Decimal)
    values: list[dict[str, Any]] = []
    lines: list[int] = []
    line, seen = 1, 0
    at = _skip_space(text, 0)
    while at < len(text):
        line += text.count("\n", seen, at)
        seen = at
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:  # named by the line the record starts on (a cut record ends later)
            raise InputRejected(f"{where}: line {line} is not valid JSON ({exc.msg})", file=where) from None
        if not isinstance(record, dict):
            raise InputRejected(f"{where}: line {line} is not a JSON object", file=where)
        values.append(record)
        lines.append(line)
        at = _skip_space(text, at)
    return _Records(values, lines)


def _record_lines(data: bytes, where: str, rows: int) -> np.ndarray:
    """The line each of a file's `rows` records starts on (a file pyarrow read: asked only when it has bad rows)."""
    lines = _records(data, where).lines
    if len(lines) != rows:  # never seen: the reader and this scan disagree on what a record is
        raise InputRejected(f"{where}: {len(lines)} JSON values, but the reader found {rows} records", file=where)
    return np.array(lines, dtype=np.int64)


def _json_value(value: Any, json_kind: str) -> tuple[Any, str | None]:
    """A record's value for a column of `json_kind`, as the column reads it, or None and why it is a bad row."""
    if value is None:
        return None, None
    is_number = isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)
    if json_kind == "string":
        return (value, None) if isinstance(value, str) else (None, WRONG_JSON_TYPE)
    if json_kind == "boolean":
        return (value, None) if isinstance(value, bool) else (None, WRONG_JSON_TYPE)
    if json_kind == "integer":
        if not is_number:
            return None, WRONG_JSON_TYPE
        if isinstance(value, float) or (isinstance(value, decimal.Decimal) and value != value.to_integral_value()):
            return None, UNFIT_JSON_VALUE  # 5.5 (or a bare NaN) is a number, but no whole one
        whole = int(value)
        return (whole, None) if _INT64[0] <= whole <= _INT64[1] else (None, UNFIT_JSON_VALUE)
    if json_kind == "number":
        if is_number:
            try:
                return float(value), None
            except OverflowError:  # a whole number past any double
                return None, UNFIT_JSON_VALUE
        return (NON_FINITE[value], None) if isinstance(value, str) and value in NON_FINITE else (None, WRONG_JSON_TYPE)
    if json_kind == "decimal":
        if isinstance(value, str):
            return value, None
        if isinstance(value, decimal.Decimal):
            return format(value, "f"), None  # exact: the number as written
        if is_number and not isinstance(value, float):
            return str(value), None
        return None, UNFIT_JSON_VALUE if is_number else WRONG_JSON_TYPE  # a bare NaN, or not a number
    if json_kind == "array":
        return (_plain(value), None) if isinstance(value, list) else (None, WRONG_JSON_TYPE)
    if json_kind == "object":
        return (_plain(value), None) if isinstance(value, dict) else (None, WRONG_JSON_TYPE)
    # a delete marker: any value, compared as text
    return (value if isinstance(value, str) else _as_json(value)), None


def _plain(value: Any) -> Any:
    """A nested value with the exact numbers `_records` read as floats again (pyarrow builds the column)."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _as_json(value: Any) -> str:
    """A value as the JSON text it was written as (numbers exactly), to show in a bad row."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


#: The column each kind is built as from judged values (None: the table type).
_BUILD_AS: dict[str, pa.DataType | None] = {
    "scalar": pa.string(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "decimal": pa.string(),  # exact text: `prepare` parses it, a digit past the scale is a bad row
    "string": pa.string(),
    "array": None,
    "object": None,
}


def _json_array(values: list[Any], json_kind: str, kind: pa.DataType | None) -> tuple[pa.Array, list[int]]:
    """A judged column, and the rows whose nested value does not fit the column's type (["a"] in array<int>)."""
    build = _BUILD_AS[json_kind] or kind
    try:
        return pa.array(values, build), []
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        pass
    kept: list[Any] = []
    unfit: list[int] = []
    for row, value in enumerate(values):
        try:
            pa.array([value], build)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            unfit.append(row)
            value = None
        kept.append(value)
    return pa.array(kept, build), unfit


#: Every landing format by its `format:` name (Kafka streams read a topic, not files, and have no entry).
FORMATS: dict[str, LandingFormat] = {
    SourceFormat.PARQUET: LandingFormat((".parquet", ".parq"), _read_parquet),
    SourceFormat.JSON: LandingFormat((".json", ".jsonl", ".ndjson"), _read_json, absent=_json_absent, judge=judge_json),
    SourceFormat.CSV: LandingFormat((".csv", ".tsv"), _read_csv),
    SourceFormat.AVRO: LandingFormat((".avro",), _read_avro),
}
