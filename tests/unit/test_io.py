"""Data files (design.md §3): every column type round-trips through Parquet and Avro files on disk, and a file
that cannot be read whole is a CorruptFileError naming it — never partial rows."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from stitchlake.config import ColumnSpec, parse_config
from stitchlake.errors import CorruptFileError, StitchError
from stitchlake.io.datafiles import read_table_file, write_table_file
from stitchlake.io.schemas import base_schema, log_schema, table_schema
from stitchlake.storage import LocalStorage
from stitchlake.types import arrow_type

FORMATS = [
    ("parquet", "p=1/00001_20261121000000100_tok.log.parquet"),
    ("avro", "p=1/00001_20261121000000100_tok.log.avro"),
]
ROWS = 97

#: config type name -> Arrow type, through the library's own mapping (checked against the expectation here)
TYPES = {
    "int": pa.int32(),
    "long": pa.int64(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "decimal(10,2)": pa.decimal128(10, 2),
    "decimal(38,9)": pa.decimal128(38, 9),
    "binary": pa.binary(),
}


def _column_name(type_name: str) -> str:
    return "c_" + type_name.replace("(", "_").replace(",", "_").replace(")", "")


def _value(type_name: str, i: int, rng: random.Random) -> object:
    """A row's value: nulls every few rows, and the extremes of each type early on."""
    if i % 5 == 3:
        return None
    if type_name == "int":
        return [-(2**31), 2**31 - 1, 0][i] if i < 3 else rng.randrange(-(2**31), 2**31)
    if type_name == "long":
        return [-(2**63), 2**63 - 1, 0][i] if i < 3 else rng.randrange(-(2**63), 2**63)
    if type_name == "double":
        return [-1.7976931348623157e308, 5e-324, -0.0][i] if i < 3 else rng.uniform(-1e12, 1e12)
    if type_name == "float":
        return [1.5, -2.25, 0.0][i] if i < 3 else float(rng.randrange(-(2**20), 2**20)) / 8
    if type_name == "boolean":
        return i % 2 == 0
    if type_name == "string":
        return (
            ["", "münchen 日本語 🙂", "a\x00b"][i] if i < 3 else "".join(rng.choice("xyzé🙂 ") for _ in range(i % 13))
        )
    if type_name == "date":
        if i < 3:
            return [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31)][i]
        return dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-30000, 30000))
    if type_name == "timestamp":
        if i < 3:
            return [
                dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
                dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=dt.UTC),
                dt.datetime(1900, 1, 1, tzinfo=dt.UTC),
            ][i]
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rng.randrange(-(2**52), 2**52))
    if type_name == "decimal(10,2)":
        if i < 3:
            return [decimal.Decimal("99999999.99"), decimal.Decimal("-99999999.99"), decimal.Decimal("0.00")][i]
        return decimal.Decimal(rng.randrange(-(10**10) + 1, 10**10)).scaleb(-2)
    if type_name == "decimal(38,9)":
        if i < 3:
            return [decimal.Decimal("9" * 29 + "." + "9" * 9), decimal.Decimal("-" + "9" * 29 + "." + "9" * 9),
                    decimal.Decimal("0.000000001")][i]  # fmt: skip
        return decimal.Decimal(rng.randrange(-(10**38) + 1, 10**38)).scaleb(-9)
    if type_name == "binary":
        return [b"", bytes(range(256)), b"\x00"][i] if i < 3 else rng.randbytes(i % 17)
    raise AssertionError(type_name)


def _all_types_table(rows: int = ROWS) -> pa.Table:
    rng = random.Random(1121)
    schema = pa.schema([pa.field(_column_name(name), arrow_type(name)) for name in TYPES])
    columns = {
        _column_name(name): pa.array([_value(name, i, rng) for i in range(rows)], arrow_type(name)) for name in TYPES
    }
    return pa.table(columns, schema=schema)


def test_type_mapping() -> None:
    for name, kind in TYPES.items():
        assert arrow_type(name) == kind


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(str(tmp_path / "table"))


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_every_type_round_trips(storage: LocalStorage, file_format: str, path: str) -> None:
    table = _all_types_table()
    assert all(table.column(i).null_count > 0 for i in range(table.num_columns))
    written = write_table_file(storage, path, table, file_format)
    assert written.size == storage.size(path) > 0
    back = read_table_file(storage, path, table.schema, expected_rows=ROWS, checksum=written.checksum)
    assert back.schema == table.schema
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    assert back.equals(table)


@pytest.mark.parametrize("type_name", list(TYPES))
@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_each_type_round_trips_alone(storage: LocalStorage, file_format: str, path: str, type_name: str) -> None:
    """One column per file, so a failure names the type that is broken."""
    rng = random.Random(5)
    kind = arrow_type(type_name)
    table = pa.table({"v": pa.array([_value(type_name, i, rng) for i in range(20)], kind)})
    write_table_file(storage, path, table, file_format)
    back = read_table_file(storage, path, table.schema, expected_rows=20)
    assert back.column("v").to_pylist() == table.column("v").to_pylist()


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_column_subset_and_empty_file(storage: LocalStorage, file_format: str, path: str) -> None:
    table = _all_types_table(10).select(["c_long", "c_string", "c_double"])
    write_table_file(storage, path, table, file_format)
    back = read_table_file(storage, path, table.schema, columns=["c_string", "c_long"], expected_rows=10)
    assert back.column_names == ["c_string", "c_long"]
    assert back.column("c_long").to_pylist() == table.column("c_long").to_pylist()
    empty = table.slice(0, 0)
    write_table_file(storage, path.replace("tok", "empty"), empty, file_format)
    back = read_table_file(storage, path.replace("tok", "empty"), table.schema, expected_rows=0)
    assert back.num_rows == 0 and back.schema == table.schema


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_schemas_from_config_round_trip(storage: LocalStorage, file_format: str, path: str) -> None:
    config = parse_config(
        {
            "table": {"name": "t", "path": "x", "key": {"id": "long"}, "partition_by": {"day": "date"}},
            "streams": {
                "s": {"columns": {"a": "string", "ts": "timestamp", "m": "decimal(10,2)"}, "ordering": "ts"},
                "u": {"columns": {"b": "double"}, "nulls": "ignore"},
            },
        },
        base=Path(storage.root),
    )
    stream = config.streams["s"]
    schema = log_schema(config, stream)
    assert schema.names[:5] == ["id", "day", "a", "ts", "m"]
    assert all(name.startswith("_sl") for name in schema.names[5:])
    assert table_schema(config).names == ["id", "day", "a", "ts", "m", "b"]
    assert set(table_schema(config).names) <= set(base_schema(config).names)
    rows = 6
    data = {}
    for field in schema:
        if pa.types.is_boolean(field.type):
            data[field.name] = pa.array([i % 2 == 0 for i in range(rows)], field.type)
        elif pa.types.is_date32(field.type):
            data[field.name] = pa.array([dt.date(2026, 11, 21)] * rows, field.type)
        elif pa.types.is_timestamp(field.type):
            data[field.name] = pa.array([dt.datetime(2026, 11, 21, i, tzinfo=dt.UTC) for i in range(rows)], field.type)
        elif pa.types.is_decimal(field.type):
            data[field.name] = pa.array([decimal.Decimal(f"{i}.25") for i in range(rows)], field.type)
        elif pa.types.is_string(field.type):
            data[field.name] = pa.array([f"v{i}" if i else None for i in range(rows)], field.type)
        else:
            data[field.name] = pa.array(list(range(rows)), field.type)
    table = pa.table(data, schema=schema)
    write_table_file(storage, path, table, file_format)
    assert read_table_file(storage, path, schema, expected_rows=rows).equals(table)


# ------------------------------------------------------------------------------------- damaged files


def _simple_table(rows: int = 500) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pa.array([f"name-{i}" * (i % 7) for i in range(rows)], pa.string()),
            "x": pa.array([i / 3 for i in range(rows)], pa.float64()),
        }
    )


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_truncated_file_is_corrupt_and_named(storage: LocalStorage, file_format: str, path: str) -> None:
    table = _simple_table()
    write_table_file(storage, path, table, file_format)
    data = storage.read_bytes(path)
    storage.write_atomic(path, data[: len(data) // 2])
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, table.schema)
    assert path in str(info.value)
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, table.schema, expected_rows=table.num_rows)
    assert path in str(info.value)


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_every_truncation_is_detected_with_the_recorded_row_count(
    storage: LocalStorage, file_format: str, path: str
) -> None:
    """Whatever the cut (inside the header, a block, the footer, or on a block boundary), no partial rows."""
    table = _simple_table(1500)
    write_table_file(storage, path, table, file_format)
    data = storage.read_bytes(path)
    cuts = {*range(0, len(data), max(1, len(data) // 100)), *range(len(data) - 40, len(data))}
    if file_format == "avro":  # exactly on block boundaries: a valid, shorter Avro file
        with open(storage.describe(path), "rb") as handle:
            offsets = [block.offset for block in fastavro.block_reader(handle)]
        assert len(offsets) > 2
        cuts |= set(offsets)
    for cut in cuts:
        storage.write_atomic(path, data[:cut])
        with pytest.raises(CorruptFileError) as info:
            read_table_file(storage, path, table.schema, expected_rows=table.num_rows)
        assert path in str(info.value), cut


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_garbage_file_is_corrupt_and_named(storage: LocalStorage, file_format: str, path: str, seed: int) -> None:
    table = _simple_table(10)
    storage.makedirs("p=1")
    storage.write_atomic(path, random.Random(seed).randbytes(4096))
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, table.schema)
    assert path in str(info.value)


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_empty_file_is_corrupt_and_named(storage: LocalStorage, file_format: str, path: str) -> None:
    storage.makedirs("p=1")
    storage.write_atomic(path, b"")
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, _simple_table(1).schema, expected_rows=1)
    assert path in str(info.value)


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_row_count_mismatch(storage: LocalStorage, file_format: str, path: str) -> None:
    table = _simple_table(50)
    write_table_file(storage, path, table, file_format)
    assert read_table_file(storage, path, table.schema, expected_rows=50).num_rows == 50
    for recorded in (49, 51, 0):
        with pytest.raises(CorruptFileError) as info:
            read_table_file(storage, path, table.schema, expected_rows=recorded)
        message = str(info.value)
        assert path in message and "50" in message and str(recorded) in message


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_missing_file_is_a_clear_error(storage: LocalStorage, file_format: str, path: str) -> None:
    with pytest.raises(StitchError) as info:
        read_table_file(storage, path, _simple_table(1).schema)
    message = str(info.value)
    assert path in message and "missing" in message


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_missing_column_is_named(storage: LocalStorage, file_format: str, path: str) -> None:
    table = _simple_table(5)
    write_table_file(storage, path, table.drop_columns(["x"]), file_format)
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, table.schema)
    assert path in str(info.value) and "x" in str(info.value)


@pytest.mark.parametrize(("file_format", "path"), FORMATS, ids=[f for f, _ in FORMATS])
def test_missing_requested_column_is_named(storage: LocalStorage, file_format: str, path: str) -> None:
    """Readers always pass a column list: a column the file lacks must not silently read as nulls."""
    table = _simple_table(5)
    write_table_file(storage, path, table.drop_columns(["x"]), file_format)
    with pytest.raises(CorruptFileError) as info:
        read_table_file(storage, path, table.schema, columns=["id", "x"], expected_rows=5)
    assert path in str(info.value) and "x" in str(info.value)


def test_csv_options_quote_escape_and_null_values_are_used(tmp_path: Path) -> None:
    """Every CSV option the config accepts changes how the file reads (none is parsed and then ignored)."""
    from stitchlake.config import SourceSpec
    from stitchlake.io.landing import discover, read_landing

    folder = tmp_path / "landing"
    folder.mkdir()
    (folder / "a.csv").write_text("k|note|other\n1|'a|b'|NA\n2|x\\|y|-\n", encoding="utf-8")
    source = SourceSpec.model_validate(
        {
            "format": "csv",
            "path": str(folder),
            "options": {"delimiter": "|", "quote": "'", "escape": "\\", "null_values": "NA,-"},
        }
    )
    [file] = discover(source)
    rows = read_landing(source, file, ["k", "note", "other"]).to_pylist()
    assert rows == [{"k": "1", "note": "a|b", "other": None}, {"k": "2", "note": "x|y", "other": None}]


def test_a_large_csv_file_with_line_breaks_in_quoted_values_reads_every_record_whole(tmp_path: Path) -> None:
    """RFC 4180 lets a quoted value hold a line break. pyarrow reads a large file in blocks cut at line breaks; a
    record split across two of them was lost or garbled (its second line read as a record of its own)."""
    from stitchlake.config import SourceSpec
    from stitchlake.io.landing import discover, read_landing

    folder = tmp_path / "landing"
    folder.mkdir()
    records = 60_000  # over pyarrow's 1 MiB block several times
    (folder / "a.csv").write_text(
        "k,note\n" + "".join(f'{i},"line a {i}\nline b,{i}"\n' for i in range(records)), encoding="utf-8"
    )
    source = SourceSpec.model_validate({"format": "csv", "path": str(folder)})
    [file] = discover(source)
    rows = read_landing(source, file, ["k", "note"])
    assert rows.num_rows == records
    assert rows.column("k").to_pylist() == [str(i) for i in range(records)]
    assert rows.column("note").to_pylist() == [f"line a {i}\nline b,{i}" for i in range(records)]


@pytest.mark.parametrize(
    ("text", "options", "opened"),
    [
        ('id,x\n5,"10"" monitor\n6,ok\n7,fine\n', {}, 2),  # the last column's quote never closed
        ("id,x\n1,'a\\'\n2,b\n", {"quote": "'", "escape": "\\"}, 2),  # its closing quote escaped
        ('id,x\n1,"a\\\\"\n2,"b\n3,c\n', {"escape": "\\"}, 3),  # an escaped escape, then one never closed
        ('id,x,extra\n1,a,"q\udcff\n2,b,r\n', {}, 2),  # in a column the stream does not read, bytes no UTF-8
    ],
    ids=["doubled", "escaped", "escaped escape", "undeclared binary column"],
)
def test_a_csv_quote_never_closed_refuses_the_file_instead_of_reading_the_rest_as_one_value(
    tmp_path: Path, text: str, options: dict[str, str], opened: int
) -> None:
    """pyarrow reads a quoted value left open to the end of the file: the records after it became one cell of
    one row, the ingest exited 0 and the file counted as consumed. Refused (exit 5) with the line it opens on;
    quotes that close (doubled, escaped, or inside an unquoted value) read as before."""
    from stitchlake.config import SourceSpec
    from stitchlake.errors import InputRejected
    from stitchlake.io.landing import discover, read_landing

    folder = tmp_path / "landing"
    folder.mkdir()
    (folder / "a.csv").write_bytes(text.encode("utf-8", "surrogateescape"))
    source = SourceSpec.model_validate({"format": "csv", "path": str(folder), "options": options})
    [file] = discover(source)
    with pytest.raises(InputRejected, match=f"the quoted value opened on line {opened} is never closed"):
        read_landing(source, file, ["id", "x"])
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "a.csv").write_text(
        '\ufeffid,x\n5,"10"" monitor"\n6,10" screen\n7,"two\nlines"\n8,"a\\\\"\n', encoding="utf-8"
    )
    source = SourceSpec.model_validate({"format": "csv", "path": str(closed), "options": {"escape": "\\"}})
    [file] = discover(source)
    rows = read_landing(source, file, ["id", "x"])
    assert rows.column("x").to_pylist() == ['10" monitor', '10" screen', "two\nlines", "a\\"]


def test_a_landing_file_has_one_name_whether_named_by_a_path_or_a_file_uri(tmp_path: Path) -> None:
    """The name is what ingest records as consumed: a file named by `file://` once (the config's source.path or
    --source) and by a plain path once got two names, and was ingested twice."""
    from stitchlake.config import SourceSpec
    from stitchlake.io.landing import discover

    folder = tmp_path / "landing"
    (folder / "day1").mkdir(parents=True)
    (folder / "day1" / "a.csv").write_text("k\n1\n", encoding="utf-8")
    names = set()
    for base in (str(folder), folder.as_uri()):
        source = SourceSpec.model_validate({"format": "csv", "path": base})
        for given in (None, [str(folder / "day1" / "a.csv")], [(folder / "day1" / "a.csv").as_uri()]):
            names |= {f.name for f in discover(source, given)}
    assert names == {"day1/a.csv"}


def test_every_landing_format_has_a_reader_and_a_stream_without_one_is_refused(tmp_path: Path) -> None:
    """A format name reaches a reader of its own or an error: never another format's reader by default."""
    from stitchlake.config import SourceFormat, SourceSpec
    from stitchlake.errors import UsageError
    from stitchlake.io.landing import FORMATS, LandingFile, is_landing_name, read_landing

    assert set(FORMATS) == {f.value for f in SourceFormat} - {"kafka"}
    (tmp_path / "a.avro").write_bytes(b"not read")
    kafka = SourceSpec.model_validate({"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:9"})
    assert not is_landing_name("a.avro", "kafka")
    with pytest.raises(UsageError, match="format kafka has no landing files"):
        read_landing(kafka, LandingFile(str(tmp_path), "a.avro", "a.avro", 8, "8-1"), ["k"])


def test_data_files_carry_row_group_statistics_of_the_tables_own_flat_columns(tmp_path: Path) -> None:
    """Readers that push filters down (the JVM reader, Trino, DuckDB) skip row groups by these; the `_sl__` columns
    carry none (nobody filters on versions)."""
    import pyarrow.parquet as pq

    storage = LocalStorage(str(tmp_path))
    rows = pa.table(
        {
            "k": pa.array([3, 1, 2], pa.int64()),
            "name": ["c", "a", "b"],
            "tags": pa.array([["x"], [], None], pa.list_(pa.string())),
            "_sl__s__pos": pa.array([0, 1, 2], pa.int64()),
        }
    )
    write_table_file(storage, "p/00000_20261122080000000_abcdef0123.parquet", rows)
    group = pq.ParquetFile(tmp_path / "p/00000_20261122080000000_abcdef0123.parquet").metadata.row_group(0)
    stats = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    assert stats["k"].is_stats_set and (stats["k"].statistics.min, stats["k"].statistics.max) == (1, 3)
    assert stats["name"].is_stats_set and stats["name"].statistics.max == "c"
    assert not stats["_sl__s__pos"].is_stats_set and not stats["tags.list.element"].is_stats_set


def test_a_json_line_whose_nested_number_would_lose_digits_is_a_bad_row_not_cut() -> None:
    """A JSON lines file pyarrow's reader refuses is judged record by record, and its nested columns were built
    straight as their type: pyarrow took 1.5 in an array<int> as 1, silently. A nested value is cast safely now:
    a number that would lose digits is a bad row, and text parses as a nested date or timestamp."""
    import pyarrow as pa

    from stitchlake.io.json_records import judge_json

    types = {
        "k": pa.int64(),
        "n": pa.list_(pa.int32()),
        "m": pa.map_(pa.string(), pa.int64()),
        "s": pa.struct([("d", pa.date32()), ("amt", pa.decimal128(10, 2))]),
    }
    lines = [
        '{"k": 1, "n": [1, 2], "m": {"a": 1}, "s": {"d": "2024-01-02", "amt": 1.5}}',
        '{"k": 2, "n": [1.5], "m": {"a": 1}}',
        '{"k": 3, "m": {"a": 2.5}}',
        '{"k": 4, "n": ["x"]}',
    ]
    lines += [
        '{"k": 5, "m": {}, "s": {"amt": 1.234}}',  # an empty map is fine; a digit past the scale is not
        '{"k": 6, "n": [true]}',  # true is no int (as at the top level)
        '{"k": 7, "s": {"amt": 2, "extra": [1, "a"]}}',  # a field the struct does not declare is not looked at
        '{"k": 8, "m": {}}',
    ]
    judged = judge_json("\n".join(lines).encode(), types, "f.json")
    assert judged.reasons is not None
    assert [r is None for r in judged.reasons] == [True, False, False, False, False, False, True, True]
    first = judged.table.slice(0, 1).to_pylist()[0]
    assert first["n"] == [1, 2] and first["m"] == [("a", 1)]
    assert str(first["s"]["d"]) == "2024-01-02" and str(first["s"]["amt"]) == "1.50"
    assert judged.table.column("n").to_pylist()[1:4] == [None, None, None]
    assert judged.table.column("m").to_pylist()[7] == [] and str(judged.table.column("s")[6]["amt"]) == "2.00"


def test_nested_columns_of_a_big_file_with_one_bad_value_are_built_by_halves() -> None:
    """One misfit among many rows sent the whole column through a row-by-row build (minutes for a big landing file;
    `make bench` measures, not this test): the rows are split in halves until the bad one is found, and every
    other row keeps its value."""
    import pyarrow as pa

    from stitchlake.io.json_records import typed_column

    kind = pa.struct([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.float64()))])
    values: list[object] = [{"a": i, "m": {"x": 1.5}} for i in range(20_000)]
    values[12_345] = {"a": "no number"}
    column, unfit = typed_column(values, kind)
    assert unfit == [12_345] and column.null_count == 1
    around = column.to_pylist()[12_344:12_347]
    assert around == [{"a": 12_344, "m": [("x", 1.5)]}, None, {"a": 12_346, "m": [("x", 1.5)]}]


@pytest.mark.parametrize("with_map", [False, True], ids=["read-whole", "record-by-record"])
def test_a_nested_leaf_reads_as_a_top_level_value_of_its_type_does(with_map: bool) -> None:
    """Nested leaves were cast by Arrow alone: a timestamp without a zone, with over six fraction digits, padded or a
    bare date was a bad row nested and fine at the top level, and 1e400 in a double column (top level or nested)
    was stored as infinity. One grammar reads both now (`io.casting`)."""
    import pyarrow as pa

    from stitchlake.io.json_records import judge_json
    from stitchlake.writing.batch import cast_column

    ts = pa.timestamp("us", "UTC")
    types: dict[str, pa.DataType | None] = {
        "t": None,
        "s": pa.struct([("ts", ts), ("f", pa.float64())]),
        "k": pa.map_(pa.int32(), pa.int64()),
    }
    if not with_map:
        del types["k"]
    texts = ["2024-01-02T03:04:05Z", "2024-01-02 03:04:05", "2024-01-02T03:04:05.1234567Z", " 2024-01-02T03:04:05Z "]
    texts += ["2024-01-02", "2024-01-02T04:04:05+01:00"]
    lines = [json.dumps({"t": t, "s": {"ts": t}}) for t in texts]
    lines += ['{"t": "2024-01-02T03:04:05Z", "s": {"f": 1e400}}', '{"t": "2024-01-02T03:04:05Z", "f": 1e400}']
    if with_map:
        lines += ['{"k": {" 7 ": 1}}', '{"k": {"0x10": 1}}']
    judged = judge_json("\n".join(lines).encode(), {**types, "f": pa.float64()}, "f.json")
    top, failed = cast_column(judged.table.column("t").combine_chunks(), ColumnSpec(name="t", type="timestamp"), "f")
    nested = [None if s is None else s["ts"] for s in judged.table.column("s").to_pylist()]
    assert nested[: len(texts)] == top.to_pylist()[: len(texts)] and not failed.any()
    assert nested[2] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)  # cut to the microsecond
    assert judged.reasons is not None
    reasons = list(judged.reasons)
    assert reasons[: len(texts)] == [None] * len(texts)
    assert reasons[len(texts) : len(texts) + 2] == ["unparsable value in s", "unparsable value in f"]  # no inf
    if with_map:  # map keys are judged by the same grammar: padded digits are a number, 0x10 is not
        assert reasons[-2:] == [None, "unparsable value in k"]
        assert judged.table.column("k").to_pylist()[-2] == [(7, 1)]


def test_a_nested_float_past_its_range_and_map_keys_of_one_value_are_bad_rows_on_either_path() -> None:
    """pyarrow's reader took 1e300 into a float leaf as infinity on a clean file (the record-by-record path found it
    out of range); and with map keys read by the grammar, "yes" and "true" of a map<boolean, ...> became one key
    twice. Both are bad rows now, whichever path reads the file."""
    import pyarrow as pa

    from stitchlake.io.json_records import judge_json

    floats = {"s": pa.struct([("x", pa.float32())]), "l": pa.list_(pa.float32())}
    clean = judge_json(
        b'{"s": {"x": 1e300}, "l": [1.5]}\n{"s": {"x": 2.5}, "l": [1e300]}\n{"s": {"x": 0.5}}', floats, "f"
    )
    assert clean.reasons is not None and list(clean.reasons) == ["unparsable value in s", "unparsable value in l", None]
    assert clean.table.column("s").to_pylist()[2] == {"x": 0.5}
    keys = {"m": pa.map_(pa.bool_(), pa.int64())}
    maps = judge_json(b'{"m": {"yes": 1, "true": 2}}\n{"m": {"yes": 1, "no": 2}}', keys, "f")
    assert maps.reasons is not None and list(maps.reasons) == ["unparsable value in m", None]
    assert maps.table.column("m").to_pylist()[1] == [(True, 1), (False, 2)]
