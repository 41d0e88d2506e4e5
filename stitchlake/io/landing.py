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
import io
import json
import posixpath
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from stitchlake.config import SourceSpec
from stitchlake.errors import InputRejected, LandingVanished, UsageError
from stitchlake.io.json_records import Judged, judge_json, record_lines, skip_space
from stitchlake.storage import storage_for
from stitchlake.storage.registry import absolute, is_uri, local_place
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
        if not listed and paths and is_landing_name(root.rstrip("/").rsplit("/", 1)[-1], source.format):
            raise UsageError(f"landing file {storage.describe()} does not exist (moved or deleted before its ingest)")
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
    """A landing file's name relative to the stream's source folder (its full location, as written, when outside
    it: what checkpoints hold). Inside the folder a `file://` URI is compared as the path it holds: a file named
    once by a path and once by a URI must be one name, or it is ingested twice."""
    full = absolute(f"{folder.rstrip('/')}/{path}")
    # As it always was (a path resolved, a URI as written: the names checkpoints hold); and where one side is a
    # `file://` URI and the other is not, both as paths on this machine, links not followed as a URI's never were.
    pairs = [(full, absolute(base))]
    if is_uri(base) != is_uri(folder):
        pairs.append((local_place(f"{folder.rstrip('/')}/{path}"), local_place(base)))
    for candidate, root in pairs:
        prefix = root.rstrip("/") + "/"
        if candidate.startswith(prefix):
            return candidate[len(prefix) :]
    return full


def describe(file: LandingFile, options: Mapping[str, str] | None = None) -> str:
    """A landing file's full location, for messages."""
    return storage_for(file.root, options).describe(file.path)


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
        # Outside the parse's `try`: a storage error (a timeout, a 503) is no bad input, and must fail the ingest
        # (to run again) rather than set a good file aside as unreadable and count it consumed.
        raw, version = storage.read_versioned(file.path)
    except FileNotFoundError:
        raise LandingVanished(
            f"{where}: landing file vanished between the listing and the read (moved or deleted meanwhile); nothing "
            "was ingested: run again",
            file=where,
        ) from None
    refuse_redelivered(file, version, where)
    try:
        data = decompressed(raw, file.path, where)
        if types and landing_format.judge is not None:
            judged = landing_format.judge(data, types, where)
            table = judged.table
            if judged.lines is None:  # only a file with bad rows asks: read it again then, not held till then
                rows, path = table.num_rows, file.path

                def again() -> np.ndarray:
                    return record_lines(decompressed(storage.read_bytes(path), path, where), where, rows)

                judged = dataclasses.replace(judged, lines=again)
        else:
            table = landing_format.read(source, file.path, data, columns, where)
    except InputRejected:
        raise
    except (pa.ArrowInvalid, OSError, ValueError, EOFError) as exc:  # the bytes' fault: gzip's errors are OSErrors
        raise InputRejected(f"{where}: cannot read {source.format} file ({_one_line(exc)})", file=where) from None
    _require_valid(table, columns, where)
    absent = landing_format.absent(data, table, track, where) if track and landing_format.absent else {}
    return LandingRows(table, absent, judged)


def refuse_redelivered(file: LandingFile, version: str, where: str) -> None:
    """A file whose bytes are not the version listed (re-delivered, or rewritten, between the listing and the
    read): the commit records the listed version as consumed, so its rows must be that version's. Nothing is
    taken; the next run lists the file again."""
    if version != file.version:
        raise LandingVanished(
            f"{where}: landing file changed between the listing and the read (version {file.version}, read "
            f"{version}); nothing was ingested: run again",
            file=where,
        )


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
    quote = options.get("quote", '"')
    parse = pacsv.ParseOptions(
        delimiter=delimiter,
        quote_char=quote,
        escape_char=escape if escape else False,
        # A quoted value may hold a line break (RFC 4180). Without this, pyarrow cuts a large file into blocks at
        # line breaks and a record split across two blocks is lost or garbled; it costs the parse its threads, so
        # only a file that quotes anything pays it.
        newlines_in_values=bool(quote) and quote.encode() in data,
    )
    nulls = options["null_values"].split(",") if "null_values" in options else ["", "NULL", "null"]
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()),
        strings_can_be_null=True,
        null_values=nulls,
    )
    table = pacsv.read_csv(pa.BufferReader(data), parse_options=parse, convert_options=convert)
    if parse.newlines_in_values and _holds_line_breaks(table):  # else no value ran on past its line
        opened = _unclosed_quote(data, quote.encode(), delimiter.encode(), escape.encode() if escape else None)
        if opened is not None:
            raise InputRejected(
                f"{where}: the quoted value opened on line {opened} is never closed: the rest of the file would be "
                'read as that one value (a quote inside a quoted value is written twice: "")',
                file=where,
            )
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


def _holds_line_breaks(table: pa.Table) -> bool:
    """Whether some value ran past its line: text, or bytes (a column the stream does not declare is typed by
    pyarrow's guess, binary where it holds bytes that are no UTF-8)."""
    import pyarrow.compute as pc

    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return any(
        pc.any(pc.or_(pc.match_substring(column, "\n"), pc.match_substring(column, "\r"))).as_py()
        for column in table.columns
        if any(kind(column.type) for kind in kinds)
    )


def _unclosed_quote(data: bytes, quote: bytes, delimiter: bytes, escape: bytes | None) -> int | None:
    """The line on which a quoted value opens that the file never closes, or None. pyarrow reads such a value to
    the end of the file and says nothing: every record after it was lost in one cell. Visits the quotes and
    escapes only, as pyarrow reads them: a quote opens a value at the start of a field (after a delimiter or a line
    break that is no escaped one, or at the start of the file past a byte-order mark); inside one, a doubled quote
    is text; an escape makes the next character text, inside a value or not."""
    special = re.compile(b"[" + re.escape(quote) + (re.escape(escape) if escape else b"") + b"]")
    starts = (delimiter[0], ord("\n"), ord("\r"))
    first = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    inside, opened_at, escaped, at = False, 0, -1, first
    while (found := special.search(data, at)) is not None:
        at = found.start()
        if escape is not None and data[at : at + 1] == escape:
            escaped, at = at + 1, at + 2
            continue
        if not inside:
            if at == first or (data[at - 1] in starts and at - 1 != escaped):
                inside, opened_at = True, at
        elif data[at + 1 : at + 2] == quote:
            at += 1  # a doubled quote: text
        else:
            inside = False
        at += 1
    return data.count(b"\n", 0, opened_at) + 1 if inside else None


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
    at = skip_space(text, 0)
    while at < len(text):
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise InputRejected(f"{where}: not valid JSON at character {exc.pos} ({exc.msg})", file=where) from None
        for name in names:
            present[name].append(isinstance(record, dict) and name in record)
        at = skip_space(text, at)
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
def _json_column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values], pa.string()
        )


#: Every landing format by its `format:` name (Kafka streams read a topic, not files, and have no entry).
FORMATS: dict[str, LandingFormat] = {
    SourceFormat.PARQUET: LandingFormat((".parquet", ".parq"), _read_parquet),
    SourceFormat.JSON: LandingFormat((".json", ".jsonl", ".ndjson"), _read_json, absent=_json_absent, judge=judge_json),
    SourceFormat.CSV: LandingFormat((".csv", ".tsv"), _read_csv),
    SourceFormat.AVRO: LandingFormat((".avro",), _read_avro),
}
