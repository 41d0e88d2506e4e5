"""The bad-input catalogue, landing files (issues 12 and 16): files as users deliver them, and as they break.

The same real `stitch` runs, template and checks as `test_bad_input.py`. Refused files exit 5 naming the file (and
the column), say what to do, and change nothing; files as users have them (compressed, odd names, fields left
out, nanoseconds) are ingested; under `bad_rows: quarantine` an unreadable file or a bad row is set aside with
its reason and the run goes on, and what was set aside is never retried.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.bad_input import (
    INGEST_ORDERS,
    Case,
    check_refused,
    config_variant,
    orders,
    refused_file,
    stitch,
    with_config,
    write_parquet,
)
from tests.support.snapshots import snapshot

INGEST_SHIPMENTS = ("ingest", "-c", "table.yaml", "-s", "shipments", "--engine", "local")
CLICK_SCHEMA = {
    "type": "record",
    "name": "click",
    "fields": [{"name": "k", "type": "long"}, {"name": "p", "type": "string"}, {"name": "page", "type": "string"}],
}
#: A fixed sync marker, so damage can be put at the same place of every file.
SYNC = b"stitchlake-sync!"
NOT_UTF8 = "café".encode("latin-1")


# --------------------------------------------------------------------------------------------- builders


def readings(keys: list[int], **overrides: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {
        "k": pa.array(keys, pa.int64()),
        "p": ["odd"] * len(keys),
        "value": [1.5] * len(keys),
        "rts": [1.0] * len(keys),
        "at": pa.array([1_700_000_000_000_000] * len(keys), pa.timestamp("us", tz="UTC")),
    }
    columns.update(overrides)
    return columns


def avro_bytes(records: list[Any], schema: Any = CLICK_SCHEMA, **options: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, records, sync_marker=SYNC, **options)
    return buffer.getvalue()


def clicks(keys: range) -> list[dict[str, Any]]:
    return [{"k": k, "p": "odd", "page": f"/page/{k}"} for k in keys]


def parquet_bytes(columns: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def truncated_parquet() -> bytes:
    whole = parquet_bytes(orders(list(range(5, 50))))
    return whole[: len(whole) // 2]


def truncated_gzip() -> bytes:
    whole = gzip.compress(b"k,p,paid\n" + b"".join(b"%d,odd,%d.5\n" % (k, k) for k in range(5, 2005)))
    return whole[: len(whole) // 2]


def avro_cut_mid_block() -> bytes:
    """An Avro file whose copy stopped in the middle of its second block (the first is whole)."""
    whole = avro_bytes(clicks(range(5, 2005)), sync_interval=4000)
    return whole[: len(whole) * 2 // 3]


def avro_with_a_damaged_deflate_block() -> bytes:
    """Sizes and sync markers intact, but the compressed block's bytes overwritten: it no longer inflates."""
    header = len(avro_bytes([], codec="deflate"))
    data = bytearray(avro_bytes(clicks(range(5, 505)), codec="deflate"))
    data[header + 10 : header + 18] = b"\xff" * 8
    return bytes(data)


def not_utf8_parquet() -> bytes:
    """Parquet whose writer put Latin-1 bytes in a string column (Parquet readers take them as they are)."""
    status = pa.array([NOT_UTF8], pa.binary()).view(pa.string())
    return parquet_bytes(orders([5], status=status))


def zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as compressed:
        compressed.write(data)
    return bytes(sink.getvalue().to_pybytes())


def jsonl(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def quarantine_config(ws: Path) -> None:
    config_variant("q.yaml", lambda d: d.update(bad_rows="quarantine"))(ws)


def read_rows(ws: Path, config: str = "table.yaml", where: str = "k>=5") -> dict[int, dict[str, Any]]:
    done = stitch("read", "-c", config, "--where", where, "--json", cwd=ws)
    assert done.returncode == 0, done.stderr
    return {row["k"]: row for row in json.loads(done.stdout)["records"]}


def last_commit(ws: Path, config: str = "q.yaml") -> DeltaCommit:
    timeline = stitchlake.open(ws / config).timeline()
    commit = timeline.commit(timeline.completed([Action.DELTACOMMIT])[-1])
    assert isinstance(commit, DeltaCommit)
    return commit


# ------------------------------------------------------------------------------------ refused, exit 5

LANDING = [
    # ---- bad rows (issue 16): named by file, row, column and reason; `bad_rows: fail` writes nothing
    refused_file(
        "nan-ordering-value",
        "landing/readings/0001.parquet",
        lambda p: write_parquet(p, readings([5, 6], rts=[1.0, float("nan")])),
        (
            "1 bad row (NaN ordering value rts: 1 row)",
            "{ws}/landing/readings/0001.parquet row 1 (NaN ordering value rts)",
        ),
        fields={"file": "{ws}/landing/readings/0001.parquet", "column": "rts"},
    ),
    refused_file(
        "partition-value-longer-than-a-folder-name",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, orders([5, 6], p=["x" * 300, "odd"])),
        ("{ws}/landing/orders/0002.parquet row 0 (partition value too long p)", "bad_rows: quarantine"),
        hidden=("OSError", "File name too long"),
    ),
    refused_file(
        "json-key-missing-from-every-line",
        "landing/shipments/0001.json",
        jsonl({"p": "odd", "carrier": "a"}, {"p": "odd", "carrier": "b"}),
        ("2 bad rows (null key k: 2 rows)", "{ws}/landing/shipments/0001.json line 1 (null key k)"),
    ),
    # ---- files that cannot be read whole: named, with what to do, never half-ingested
    refused_file(
        "truncated-parquet",
        "landing/orders/0002.parquet",
        truncated_parquet(),
        ("{ws}/landing/orders/0002.parquet: cannot read parquet file", "fix or replace the file", "quarantine"),
    ),
    refused_file(
        "avro-cut-mid-block",
        "landing/clicks/0001.avro",
        avro_cut_mid_block(),
        ("{ws}/landing/clicks/0001.avro: cannot read avro file", "fix or replace the file"),
        fields={"file": "{ws}/landing/clicks/0001.avro"},
    ),
    refused_file(
        "avro-garbage-bytes",  # was "unexpected KeyError: 'avro.schema'"
        "landing/clicks/0001.avro",
        b"\x00\xff" * 40,
        ("{ws}/landing/clicks/0001.avro: cannot read avro file (KeyError", "fix or replace the file"),
    ),
    refused_file(
        "avro-damaged-deflate-block",  # was "unexpected error: Error -3 while decompressing data"
        "landing/clicks/0001.avro",
        avro_with_a_damaged_deflate_block(),
        ("{ws}/landing/clicks/0001.avro: cannot read avro file (error: Error -3 while decompressing data",),
    ),
    refused_file(
        "avro-of-plain-values",  # was "unexpected TypeError: string indices must be integers"
        "landing/clicks/0001.avro",
        avro_bytes([1, 2, 3], schema="long"),
        ("{ws}/landing/clicks/0001.avro: the Avro file holds values of type long, not records",),
    ),
    refused_file(
        "gzip-name-on-a-plain-file",
        "landing/payments/0001.csv.gz",
        b"k,p,paid\n5,odd,1.5\n",
        ("{ws}/landing/payments/0001.csv.gz: cannot decompress it as gzip", "fix or replace the file"),
    ),
    refused_file(
        "truncated-gzip",
        "landing/payments/0001.csv.gz",
        truncated_gzip(),
        ("{ws}/landing/payments/0001.csv.gz: cannot decompress it as gzip",),
    ),
    refused_file(
        "compression-stitch-cannot-read",  # was skipped in silence: "nothing to ingest"
        "landing/payments/0001.csv.xz",
        lzma.compress(b"k,p,paid\n5,odd,1.5\n"),
        ("{ws}/landing/payments/0001.csv.xz: compressed with xz, which stitch cannot read", "gzip (.gz)"),
    ),
    refused_file(
        "json-not-utf8",  # was ingested, and every later read failed with "unexpected UnicodeDecodeError"
        "landing/shipments/0001.json",
        b'{"k": 5, "p": "odd", "carrier": "' + NOT_UTF8 + b'"}\n',
        ("{ws}/landing/shipments/0001.json: column carrier does not hold valid string values", "as UTF-8"),
    ),
    refused_file(
        "parquet-not-utf8",  # the same, from a Parquet writer
        "landing/orders/0002.parquet",
        not_utf8_parquet(),
        ("{ws}/landing/orders/0002.parquet: column status does not hold valid string values",),
    ),
    refused_file(
        "csv-not-utf8",
        "landing/payments/0001.csv",
        b"k,p,paid\n5," + NOT_UTF8 + b",1.5\n",
        ("{ws}/landing/payments/0001.csv: cannot read csv file", "invalid UTF8", "fix or replace the file"),
    ),
    refused_file(
        "empty-csv-file",
        "landing/payments/0001.csv",
        b"",
        ("{ws}/landing/payments/0001.csv: cannot read csv file (Empty CSV file)",),
    ),
    refused_file(
        "csv-row-with-a-field-missing",
        "landing/payments/0001.csv",
        b"k,p,paid\n5,odd,1.5\n6,even\n",
        ("{ws}/landing/payments/0001.csv: cannot read csv file", "Expected 3 columns, got 2"),
    ),
    refused_file(
        "json-line-not-an-object",
        "landing/shipments/0001.json",
        b'{"k": 5, "p": "odd", "carrier": "a"}\n[5, "odd", "b"]\n',
        ("{ws}/landing/shipments/0001.json: line 2 is not a JSON object", "fix or replace the file"),
    ),
    # ---- columns
    refused_file(
        "csv-missing-column",
        "landing/payments/0001.csv",
        b"k,p\n5,odd\n",
        ("{ws}/landing/payments/0001.csv: missing column paid needed by stream payments", "fix or replace the file"),
        fields={"file": "{ws}/landing/payments/0001.csv", "column": "paid"},
    ),
    refused_file(
        "csv-column-named-twice",  # was "unexpected KeyError: Field "paid" exists 2 times in schema"
        "landing/payments/0001.csv",
        b"k,p,paid,paid\n5,odd,1.5,2.5\n",
        ("{ws}/landing/payments/0001.csv: column paid appears 2 times", "each column must be named once"),
    ),
    refused_file(
        "csv-separated-by-semicolons",
        "landing/payments/0001.csv",
        b"k;p;paid\n5;odd;1.5\n",
        ("{ws}/landing/payments/0001.csv: the header 'k;p;paid' reads as one column", "delimiter to ';'"),
    ),
    refused_file(
        "json-boolean-key",  # was ingested as key 1, then refused the whole file; a bad row of its line (issue 34.6)
        "landing/shipments/0001.json",
        jsonl({"k": True, "p": "odd", "carrier": "a"}),
        ("1 bad row (wrong JSON type in k: 1 row)", "{ws}/landing/shipments/0001.json line 1 (wrong JSON type"),
    ),
]


@pytest.mark.parametrize("case", LANDING, ids=[case.id for case in LANDING])
def test_bad_landing_file_is_refused_clearly_and_changes_nothing(case: Case, workspace: Path) -> None:
    check_refused(case, workspace)


# --------------------------------------------------------------------------- as users have them: ingested


@pytest.mark.parametrize(
    ("name", "content", "stream", "expected"),
    [
        ("payments/0001.csv.gz", gzip.compress(b"k,p,paid\n5,odd,1.5\n"), "payments", {"paid": 1.5}),
        ("payments/0001.csv.bz2", bz2.compress(b"k,p,paid\n5,odd,1.5\n"), "payments", {"paid": 1.5}),
        ("payments/0001.tsv", b"k\tp\tpaid\n5\todd\t1.5\n", "payments", {"paid": 1.5}),
        ("payments/0001.csv", "\ufeffk,p,paid\r\n5,odd,1.5\r\n".encode(), "payments", {"paid": 1.5}),
        ("shipments/0001.jsonl.gz", gzip.compress(jsonl({"k": 5, "p": "odd", "carrier": "dhl"})), "shipments", {}),
        ("shipments/0001.json.zst", zstd(jsonl({"k": 5, "p": "odd", "carrier": "dhl"})), "shipments", {}),
        ("orders/0002.parquet.gz", gzip.compress(parquet_bytes(orders([5]))), "orders", {"amount": 10}),
        ("orders/day[x]/0002.parquet", parquet_bytes(orders([5])), "orders", {"amount": 10}),
        (os.fsdecode(b"orders/caf\xff.parquet"), parquet_bytes(orders([5])), "orders", {"amount": 10}),
        (
            "readings/0001.parquet",  # nanoseconds: kept to the microsecond, as Spark does, not a bad row
            parquet_bytes(readings([5], at=pa.array([1_700_000_000_123_456_789], pa.timestamp("ns", tz="UTC")))),
            "readings",
            {"at": "2023-11-14T22:13:20.123456+00:00"},
        ),
        ("clicks/0001.avro", avro_bytes(clicks(range(5, 6)), codec="deflate"), "clicks", {"page": "/page/5"}),
    ],
    ids=[
        "csv.gz",
        "csv.bz2",
        "tsv",
        "csv-with-byte-order-mark-and-crlf",
        "jsonl.gz",
        "json.zst",
        "parquet.gz",
        "brackets-in-the-path",
        "non-utf8-byte-in-the-name",
        "nanosecond-timestamps",
        "avro-deflate",
    ],
)
def test_landing_files_as_users_have_them_are_ingested_once(
    workspace: Path, name: str, content: bytes, stream: str, expected: dict[str, Any]
) -> None:
    path = workspace / "landing" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    args = ("ingest", "-c", "table.yaml", "-s", stream, "--engine", "local")
    done = stitch(*args, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert f"ingested 1 file(s), 1 rows into stream {stream}" in done.stdout
    row = read_rows(workspace)[5]
    assert {column: row[column] for column in expected} == expected
    if stream == "shipments":
        assert row["carrier"] == "dhl"
    again = stitch(*args, cwd=workspace)
    assert (again.returncode, again.stdout) == (0, f"nothing to ingest for stream {stream}\n"), again.stderr


def test_hidden_and_temporary_files_are_not_landing_files(workspace: Path) -> None:
    """Writers put files under hidden names and rename them when whole: those are not ingested half-written."""
    folder = workspace / "landing/orders"
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".0002.parquet.inprogress").write_bytes(parquet_bytes(orders([5]))[:100])
    (folder / ".0003.parquet").write_bytes(parquet_bytes(orders([6])))
    write_parquet(folder / "_temporary/0/0004.parquet", orders([7]))
    before = snapshot(workspace)
    done = stitch(*INGEST_ORDERS, cwd=workspace)
    assert (done.returncode, done.stdout) == (0, "nothing to ingest for stream orders\n"), done.stderr
    assert snapshot(workspace) == before


def test_a_json_field_missing_from_every_line_loads_nulls(workspace: Path) -> None:
    (workspace / "landing/shipments/0001.json").write_bytes(jsonl({"k": 5, "p": "odd"}, {"k": 6, "p": "even"}))
    done = stitch(*INGEST_SHIPMENTS, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert "ingested 1 file(s), 2 rows into stream shipments" in done.stdout
    rows = read_rows(workspace)
    assert {k: rows[k]["carrier"] for k in rows} == {5: None, 6: None}


def test_a_changed_landing_file_is_ingested_again_when_asked(workspace: Path) -> None:
    """The refusal (exit 5) is in the catalogue; `--reingest-changed` takes the new content, once."""
    write_parquet(workspace / "landing/orders/0001.parquet", orders([1, 2, 3, 4, 5], amount=[20] * 5))
    done = stitch(*INGEST_ORDERS, "--reingest-changed", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["source_files"], result["rows"], result["reingested"]) == (1, 5, 1)
    rows = read_rows(workspace, where="k>=1")
    assert sorted(rows) == [1, 2, 3, 4, 5] and {row["amount"] for row in rows.values()} == {20}
    again = stitch(*INGEST_ORDERS, cwd=workspace)
    assert (again.returncode, again.stdout) == (0, "nothing to ingest for stream orders\n"), again.stderr


# --------------------------------------------------------------------- bad_rows: quarantine sets them aside


@pytest.mark.parametrize(
    ("stream", "bad_name", "bad", "good_name", "good"),
    [
        ("orders", "0002.parquet", truncated_parquet(), "0003.parquet", parquet_bytes(orders([5]))),
        ("orders", "0002.parquet", b"garbage, not parquet\x00\xff", "0003.parquet", parquet_bytes(orders([5]))),
        ("clicks", "0001.avro", avro_cut_mid_block(), "0002.avro", avro_bytes(clicks(range(5, 6)))),
    ],
    ids=["truncated-parquet", "garbage-bytes", "avro-cut-mid-block"],
)
def test_an_unreadable_landing_file_is_quarantined_whole_and_never_retried(
    workspace: Path, stream: str, bad_name: str, bad: bytes, good_name: str, good: bytes
) -> None:
    quarantine_config(workspace)
    (workspace / "landing" / stream / bad_name).write_bytes(bad)
    (workspace / "landing" / stream / good_name).write_bytes(good)
    args = ("ingest", "-c", "q.yaml", "-s", stream, "--engine", "local")
    done = stitch(*args, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert f"ingested 2 file(s), 1 rows into stream {stream}, 1 unreadable file(s) quarantined" in done.stdout
    commit = last_commit(workspace)
    assert [record.name for record in commit.sources] == [bad_name, good_name]  # both consumed
    (set_aside,) = commit.quarantined_files
    assert set_aside.name == bad_name
    assert set_aside.reason.startswith(f"{workspace}/landing/{stream}/{bad_name}: cannot read")
    assert set_aside.copy is not None
    assert (workspace / "table" / set_aside.copy).read_bytes() == bad  # the evidence, kept whole
    assert 5 in read_rows(workspace, "q.yaml")
    again = stitch(*args, cwd=workspace)
    assert (again.returncode, again.stdout) == (0, f"nothing to ingest for stream {stream}\n"), again.stderr


@pytest.mark.parametrize(
    ("stream", "write", "reason"),
    [
        ("readings", lambda p: write_parquet(p, readings([5, 6], rts=[1.0, float("nan")])), "NaN ordering value rts"),
        ("orders", lambda p: write_parquet(p, orders([5, 6], p=["odd", "x" * 300])), "partition value too long p"),
    ],
    ids=["nan-ordering-value", "partition-value-longer-than-a-folder-name"],
)
def test_a_bad_row_is_set_aside_under_quarantine(
    workspace: Path, stream: str, write: Callable[[Path], None], reason: str
) -> None:
    quarantine_config(workspace)
    write(workspace / "landing" / stream / "0002.parquet")
    done = stitch("ingest", "-c", "q.yaml", "-s", stream, "--engine", "local", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["rows"], result["bad_rows"]) == (1, 1)
    commit = last_commit(workspace)
    (rows_file,) = commit.quarantine_files
    (row,) = pq.read_table(workspace / "table" / rows_file).to_pylist()
    assert (row["k"], row["_reason"]) == ("6", reason)
    assert sorted(read_rows(workspace, "q.yaml")) == [5]


# ----------------------------------------------------------------------------------------- both engines


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_odd_names_and_missing_fields_ingest_identically_on_both_engines(workspace: Path, engine: str) -> None:
    """`[x]` in a folder name, a byte that is not UTF-8 in a file name, a field missing from every line (nulls)
    and a key missing from every line (bad rows, set aside): the same rows and reasons on either engine."""
    quarantine_config(workspace)
    folder = workspace / "landing/shipments"
    (folder / "day[x]").mkdir()
    (folder / "day[x]/0001.json").write_bytes(jsonl({"k": 5, "p": "odd", "carrier": "a"}))
    (folder / os.fsdecode(b"caf\xff.json")).write_bytes(jsonl({"k": 6, "p": "even", "carrier": "b"}))
    (folder / "0003.json").write_bytes(jsonl({"k": 7, "p": "odd"}, {"k": 8, "p": "even"}))
    (folder / "0004.json").write_bytes(jsonl({"p": "odd", "carrier": "c"}, {"p": "even", "carrier": "d"}))
    args = ("ingest", "-c", "q.yaml", "-s", "shipments", "--engine", engine)
    done = stitch(*args, "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["engine"], result["source_files"], result["rows"], result["bad_rows"]) == (engine, 4, 4, 2)
    rows = read_rows(workspace, "q.yaml")
    assert {k: rows[k]["carrier"] for k in rows} == {5: "a", 6: "b", 7: None, 8: None}
    commit = last_commit(workspace)
    assert sorted(record.name for record in commit.sources) == sorted(
        ["0003.json", "0004.json", os.fsdecode(b"caf\xff.json"), "day[x]/0001.json"]
    )
    reasons = [
        row["_reason"]
        for file in commit.quarantine_files
        for row in pq.read_table(workspace / "table" / file).to_pylist()
    ]
    assert reasons == ["null key k", "null key k"]
    again = stitch(*with_config(INGEST_SHIPMENTS, "q.yaml"), cwd=workspace)
    assert (again.returncode, again.stdout) == (0, "nothing to ingest for stream shipments\n"), again.stderr
