"""Every engine reads the published tables natively (issue 26): Spark's own Delta and Iceberg readers on Spark 4.1,
and Trino's Delta Lake and Iceberg connectors, on local disk and on S3, with a SQLite (JDBC) and a REST catalog.

Each table (tests/support/published_history.py `typed_history`: long, string, decimal, timestamp, date, double and
boolean columns) goes through late events, an update, a stream delete and an erase, is compacted and published; then an
alter adds a column with a default (and republishes), newer updates (setting the new column) and a compaction
publish again, and an erase republishes. Every engine reads the current version, each version on either side of
the alter (time travel) and one partition, and each answer must equal `stitch read --mode read_optimized --as-of`
that publish, cell by cell and in column order. One table in each place ends with an erase with `--purge`: the
engines read the new version, and time travel to the version before it is refused (its log entries and snapshots
are gone, as docs/operations.md says). Spark runs in a process of its own (tests/support/spark_native_reader.py), one
per place; Trino is one server for the session (tests/support/trino_server.py), each check making its own catalogs.
"""

from __future__ import annotations

import datetime
import os
import re
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from scripts import rgw
from stitchlake.io.published import Target, delta_options, iceberg_catalog
from tests.support.iceberg_rest_catalog import RestCatalogServer, rest_catalog
from tests.support.published_history import TypedHistory, typed_history
from tests.support.s3_server import S3Server
from tests.support.spark_native_reader import IcebergCatalog, Request, S3Settings, read_with_spark
from tests.support.trino_server import Trino, quote

#: How Spark refuses time travel to a version a purge cut away (`{version}`: the one asked for): Delta names the
#: versions it has left (the purge's alone), Iceberg the snapshot it cannot find (the table was created anew).
SPARK_REFUSED = {
    "delta": r"Cannot time travel Delta table to version {version}\. Available versions: \[(\d+), \1\]",
    "iceberg": r"Cannot find snapshot with ID {version}\b",
}
#: How Trino refuses the same.
TRINO_REFUSED = {
    "delta": r"Delta Lake snapshot ID does not exists: {version}\b",
    "iceberg": r"Iceberg snapshot ID does not exists: {version}\b",
}


@dataclass(frozen=True)
class Read:
    """One query and what it must answer: `expected` rows, or None when it must be refused (with `fmt`'s
    message)."""

    sql: str
    fmt: str
    expected: list[dict[str, Any]] | None
    version: int | None = None  # the version a time travel asks for

    def refused(self, patterns: dict[str, str]) -> str:
        """The message this read must be refused with, as a pattern."""
        return patterns[self.fmt].format(version=self.version)


def reads(name: str, ref: str, history: TypedHistory, fmt: str, as_of: str) -> dict[str, Read]:
    """The reads of one published table (`ref` as the engine names it; `as_of` its time-travel clause): the
    current version, partition p=odd, and time travel to either side of the alter — or, after a purge, to the
    version before it (refused)."""
    purged = "purged" in history.published
    current = history.expected["purged" if purged else "current"]
    odd = [row for row in current if row["p"] == "odd"]
    assert odd and len(odd) < len(current)
    found = {
        name: Read(f"SELECT * FROM {ref}", fmt, current),
        f"{name}/odd": Read(f"SELECT * FROM {ref} WHERE p = 'odd'", fmt, odd),
    }
    for step in ("current",) if purged else ("before_alter", "altered"):
        version = history.version(step, fmt)
        sql = f"SELECT * FROM {ref} {as_of} {version}"
        found[f"{name}@{step}"] = Read(sql, fmt, None if purged else history.expected[step], version)
    return found


def same_rows(columns: list[str], rows: list[dict[str, Any]], expected: list[dict[str, Any]], what: str) -> None:
    """An engine's answer equals `expected` cell by cell, columns in order: equal Python values of the same kind
    (a Decimal of the same exact value, an aware datetime of the same instant, a date, a float, a bool)."""
    assert columns == list(expected[0]), f"{what}: columns {columns}"
    got = sorted(rows, key=lambda row: row["k"])
    for found, wanted in zip(got, expected, strict=False):
        for column, value in wanted.items():
            cell = found[column]
            assert type(cell) is type(value), f"{what}: k={wanted['k']} {column}: {cell!r} is not a {type(value)}"
            assert cell == value, f"{what}: k={wanted['k']} {column}: {cell!r} != {value!r}"
    assert len(got) == len(expected), f"{what}: {len(got)} rows, expected {len(expected)}"


def jdbc_sqlite(catalog: str) -> str:
    """`stitch publish`'s catalog URI (sqlite:////abs/catalog.db) as the JDBC URL Java readers take."""
    assert catalog.startswith("sqlite:///"), catalog
    return "jdbc:sqlite:" + catalog.removeprefix("sqlite:///")


def s3a(location: str) -> str:
    return "s3a://" + location.removeprefix("s3://")


def sanity(history: TypedHistory) -> None:
    """The history is the one meant: time travel crosses a schema change and an erase."""
    assert "coupon" not in history.expected["before_alter"][0], "published before the alter"
    assert {r["k"]: r["coupon"] for r in history.expected["altered"]}[2] == "none", "the default filled in"
    current = {r["k"]: r for r in history.expected["current"]}
    assert current[7]["coupon"] == "XMAS" and current[2]["amount"] == 2000 and 3 not in current
    assert 3 in {r["k"] for r in history.expected["before_alter"]}
    if "purged" in history.published:
        assert 4 in current and 4 not in {r["k"] for r in history.expected["purged"]}


@dataclass(frozen=True)
class LocalTables:
    disk: TypedHistory  # Delta, and Iceberg in the default SQLite catalog
    rest: TypedHistory  # Iceberg in a REST catalog
    purged: TypedHistory  # Delta, and Iceberg in the REST catalog (`wide_purged`), ending with an erase --purge
    server: RestCatalogServer


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTables]:
    root = tmp_path_factory.mktemp("native")
    with rest_catalog(root / "rest-server") as server:
        rest = {"type": "rest", "uri": server.uri}
        tables = LocalTables(
            typed_history(root / "disk", ("delta", "iceberg"), retain_versions=5),
            typed_history(root / "rest", ("iceberg",), iceberg_catalog=rest, retain_versions=5),
            typed_history(
                root / "purged",
                ("delta", "iceberg"),
                {"table": {"name": "wide_purged"}},
                purge=True,
                iceberg_catalog=rest,
                retain_versions=5,
            ),
            server,
        )
        for history in (tables.disk, tables.rest, tables.purged):
            sanity(history)
        yield tables


def check_spark(seen: dict[str, Any], wanted: dict[str, Read]) -> None:
    """Every query answered: each read equals its expected rows, each refusal is the format's."""
    assert seen["spark"] == "4.1.4", "the Spark both Delta's and Iceberg's runtimes exist for"
    results = seen["results"]
    assert set(results) == set(wanted), "every query answered"
    for name, read in wanted.items():
        answer = results[name]
        if read.expected is None:
            assert "error" in answer, f"Spark {name}: time travel past the purge was answered: {answer}"
            assert re.search(read.refused(SPARK_REFUSED), answer["error"]), f"Spark {name}: {answer['error']}"
            continue
        assert "error" not in answer, f"Spark {name}: {answer.get('error')}"
        same_rows(answer["columns"], answer["rows"], read.expected, f"Spark {name}")
    # Spark's Delta reader prunes the other partition's files by the log's partition values.
    for name in [n for n, read in wanted.items() if read.fmt == "delta" and "/" not in n and "@" not in n]:
        files, odd = results[name]["files"], results[f"{name}/odd"]["files"]
        assert files and any("/p=even/" in f for f in files), name
        assert odd and all("/p=odd/" in f for f in odd), name


def spark_delta(name: str, location: str, history: TypedHistory) -> dict[str, Read]:
    return reads(name, f"delta.`{location}`", history, "delta", "VERSION AS OF")


def spark_iceberg(catalog: str, history: TypedHistory) -> dict[str, Read]:
    table = history.published["current"]["iceberg"]["identifier"]
    return reads(catalog + ":" + table, f"{catalog}.{table}", history, "iceberg", "VERSION AS OF")


def last(history: TypedHistory, fmt: str) -> dict[str, Any]:
    """What the newest publish of `fmt` reported."""
    published: dict[str, Any] = history.published["purged" if "purged" in history.published else "current"][fmt]
    return published


@pytest.mark.spark
def test_spark_reads_the_published_tables_with_its_own_delta_and_iceberg_readers(local_tables: LocalTables) -> None:
    """delta-spark on the Delta tables by path; Iceberg's Spark runtime through its JDBC catalog on the SQLite file
    `stitch publish` keeps, and through the REST catalog the other tables were published to."""
    disk, rest, purged = local_tables.disk, local_tables.rest, local_tables.purged
    iceberg = last(disk, "iceberg")
    catalogs: list[IcebergCatalog] = [
        # Iceberg's JDBC catalog keys its rows by the Spark catalog's name: it must be `stitchlake`.
        {
            "name": "stitchlake",
            "type": "jdbc",
            "uri": jdbc_sqlite(iceberg["catalog"]),
            "warehouse": iceberg["location"],
        },
        {"name": "rest", "type": "rest", "uri": last(rest, "iceberg")["catalog"]},
    ]
    assert last(rest, "iceberg")["catalog"] == last(purged, "iceberg")["catalog"] == local_tables.server.uri
    wanted = {
        **spark_delta("delta", last(disk, "delta")["location"], disk),
        **spark_delta("delta-purged", last(purged, "delta")["location"], purged),
        **spark_iceberg("stitchlake", disk),
        **spark_iceberg("rest", rest),
        **spark_iceberg("rest", purged),
    }
    queries = {name: read.sql for name, read in wanted.items()}
    check_spark(read_with_spark(Request(iceberg=catalogs, s3=None, queries=queries)), wanted)


LOCAL_FILES = {"fs.native-local.enabled": "true", "local.location": "/"}


def trino_delta_catalog(trino: Trino, metastore: Path, files: dict[str, str]) -> str:
    """A Delta Lake catalog over a file metastore (tables are registered by location)."""
    metastore.mkdir(parents=True, exist_ok=True)
    properties = {
        "hive.metastore": "file",
        "hive.metastore.catalog.dir": f"local://{metastore}",
        "delta.register-table-procedure.enabled": "true",
        **LOCAL_FILES,
        **files,
    }
    catalog = trino.create_catalog("delta_lake", properties, "delta")
    trino.query(f"CREATE SCHEMA {catalog}.published")
    return catalog


def register_delta(trino: Trino, catalog: str, name: str, location: str) -> str:
    trino.query(
        f"CALL {catalog}.system.register_table(schema_name => 'published', table_name => {quote(name)}, "
        f"table_location => {quote(location)})"
    )
    return f"{catalog}.published.{name}"


def trino_jdbc_catalog(trino: Trino, published: dict[str, Any], files: dict[str, str]) -> str:
    """An Iceberg catalog over the SQLite catalog `stitch publish` keeps (Trino's JDBC catalog names the catalog
    its rows belong to: `stitchlake`)."""
    properties = {
        "iceberg.catalog.type": "jdbc",
        "iceberg.jdbc-catalog.catalog-name": "stitchlake",
        "iceberg.jdbc-catalog.driver-class": "org.sqlite.JDBC",
        "iceberg.jdbc-catalog.connection-url": jdbc_sqlite(published["catalog"]),
        "iceberg.jdbc-catalog.default-warehouse-dir": published["location"],
        **LOCAL_FILES,
        **files,
    }
    return trino.create_catalog("iceberg", properties, "iceberg")


def trino_rest_catalog(trino: Trino, uri: str, files: dict[str, str]) -> str:
    return trino.create_catalog("iceberg", {"iceberg.catalog.type": "rest", "iceberg.rest-catalog.uri": uri, **files})


def millis(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as Trino's Delta Lake connector gives a Delta `timestamp`: `timestamp(3) with time zone`, the instant
    rounded to the nearest millisecond, half up (its type mapping; every other reader keeps the microseconds)."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    rounded = [{**row} for row in rows]
    for row in rounded:
        if isinstance(row.get("placed_at"), datetime.datetime):
            micros = (row["placed_at"] - epoch) // datetime.timedelta(microseconds=1)
            row["placed_at"] = epoch + datetime.timedelta(milliseconds=(micros + 500) // 1000)
    return rounded


def check_trino(trino: Trino, table: str, history: TypedHistory, fmt: str, data_files: dict[str, int]) -> None:
    """Current, time travel and partition reads of `table` equal `stitch read` (or, past a purge, are refused);
    the partition read takes only that partition's splits (`data_files`: how many data files the current version
    has in each partition)."""
    wanted = reads(table, table, history, fmt, "FOR VERSION AS OF")
    for name, read in wanted.items():
        if read.expected is None:
            with pytest.raises(Exception, match=read.refused(TRINO_REFUSED)):
                trino.query(read.sql)
            continue
        answer = trino.query(read.sql)
        expected = millis(read.expected) if fmt == "delta" else read.expected
        same_rows(answer.columns, answer.rows, expected, f"Trino {name}")
    current = trino.query(wanted[table].sql)
    odd = trino.query(wanted[f"{table}/odd"].sql)
    assert current.stats["totalSplits"] == sum(data_files.values()), current.stats
    assert odd.stats["totalSplits"] == data_files["odd"] < current.stats["totalSplits"], "p=even pruned"
    assert odd.stats["processedRows"] == len(odd.rows), odd.stats


def delta_files(location: str, storage_options: dict[str, str] | None = None) -> dict[str, int]:
    """How many data files the current Delta version lists per partition."""
    found = DeltaTable(location, storage_options=storage_options).file_uris()
    return {p: sum(1 for f in found if f"/p={p}/" in f) for p in ("even", "odd")}


def iceberg_files(table: Any) -> dict[str, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tasks = list(table.scan().plan_files())
    return {p: sum(1 for t in tasks if t.file.partition[0] == p) for p in ("even", "odd")}


@pytest.mark.trino
def test_trino_reads_the_published_tables_through_its_delta_lake_and_iceberg_catalogs(
    local_tables: LocalTables, trino_server: Trino, tmp_path: Path
) -> None:
    """Trino 476: the Delta tables registered in a Delta Lake catalog (file metastore), the Iceberg tables through
    a JDBC catalog on the SQLite file `stitch publish` keeps and through the REST catalog."""
    disk, rest, purged = local_tables.disk, local_tables.rest, local_tables.purged
    catalog = trino_delta_catalog(trino_server, tmp_path / "metastore", {})
    for name, history in (("wide", disk), ("wide_purged", purged)):
        delta = last(history, "delta")["location"]
        table = register_delta(trino_server, catalog, name, Path(delta).as_uri())
        check_trino(trino_server, table, history, "delta", delta_files(delta))

    iceberg = last(disk, "iceberg")
    jdbc = trino_jdbc_catalog(trino_server, iceberg, {})
    found = iceberg_catalog(iceberg["location"]).load_table(iceberg["identifier"])
    check_trino(trino_server, f"{jdbc}.{iceberg['identifier']}", disk, "iceberg", iceberg_files(found))

    served = trino_rest_catalog(trino_server, local_tables.server.uri, LOCAL_FILES)
    for history in (rest, purged):
        published = last(history, "iceberg")
        reader = iceberg_catalog(published["location"], {"type": "rest", "uri": local_tables.server.uri})
        found = reader.load_table(published["identifier"])
        check_trino(trino_server, f"{served}.{published['identifier']}", history, "iceberg", iceberg_files(found))


@dataclass(frozen=True)
class S3Tables:
    rest: TypedHistory  # Delta on S3, and Iceberg in a REST catalog whose warehouse is on S3
    purged: TypedHistory  # Delta on S3, and Iceberg on S3 in a SQLite catalog on local disk, ending with a purge
    server: S3Server
    catalog: RestCatalogServer
    bucket: str


def pyiceberg_s3(server: S3Server) -> dict[str, str]:
    return {
        "s3.endpoint": server.endpoint,
        "s3.region": server.region,
        "s3.access-key-id": server.access_key,
        "s3.secret-access-key": server.secret_key,
    }


@pytest.fixture(scope="module")
def s3_tables(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Tables]:
    """Two tables on the S3 server published to S3: Iceberg through a REST catalog keeping its warehouse on S3,
    and through a SQLite catalog on local disk (that one ends with a purge)."""
    bucket = f"t-native-{uuid.uuid4().hex[:10]}"
    gateway = s3_server._rgw()
    rgw.create_bucket(gateway, bucket)
    root = tmp_path_factory.mktemp("native-s3")
    secret = "STITCH_TEST_NATIVE_S3_SECRET"
    os.environ[secret] = s3_server.secret_key
    storage = {**s3_server.options(), "secret_access_key": f"${{{secret}}}"}
    sqlite = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}"}
    try:
        with rest_catalog(root / "rest-server", f"s3://{bucket}/rest-warehouse", pyiceberg_s3(s3_server)) as served:
            tables = S3Tables(
                typed_history(
                    root / "rest",
                    ("delta", "iceberg"),
                    {"table": {"path": f"s3://{bucket}/warehouse/wide"}, "storage": storage},
                    iceberg_catalog={"type": "rest", "uri": served.uri},
                    retain_versions=5,
                ),
                typed_history(
                    root / "purged",
                    ("delta", "iceberg"),
                    {
                        "table": {"path": f"s3://{bucket}/warehouse/wide_purged", "name": "wide_purged"},
                        "storage": storage,
                    },
                    purge=True,
                    iceberg_catalog=sqlite,
                    retain_versions=5,
                ),
                s3_server,
                served,
                bucket,
            )
            for history in (tables.rest, tables.purged):
                sanity(history)
            yield tables
    finally:
        os.environ.pop(secret, None)
        try:
            rgw.delete_bucket(gateway, bucket)
        except (rgw.RgwError, OSError) as exc:
            warnings.warn(f"could not delete bucket {bucket}: {exc}", stacklevel=1)


@pytest.mark.s3
@pytest.mark.spark
def test_spark_reads_the_published_tables_on_s3_through_hadoop_aws(s3_tables: S3Tables) -> None:
    """hadoop-aws 3.4.2 (`s3a://`, path-style, the test server's endpoint): the Delta tables by their `s3a://`
    paths; the Iceberg tables through the JDBC catalog (its warehouse given as `s3a://`) and through the REST
    catalog (with HadoopFileIO), whose metadata names `s3://` files (mapped to S3A)."""
    rest, purged, server = s3_tables.rest, s3_tables.purged, s3_tables.server
    iceberg = last(purged, "iceberg")
    for history in (rest, purged):
        assert last(history, "delta")["location"].startswith(f"s3://{s3_tables.bucket}/")
        assert last(history, "iceberg")["table_location"].startswith(f"s3://{s3_tables.bucket}/")
    assert last(rest, "iceberg")["table_location"].startswith(s3_tables.catalog.warehouse + "/")
    catalogs: list[IcebergCatalog] = [
        {
            "name": "stitchlake",
            "type": "jdbc",
            "uri": jdbc_sqlite(iceberg["catalog"]),
            "warehouse": s3a(iceberg["location"]),
        },
        {
            "name": "rest",
            "type": "rest",
            "uri": s3_tables.catalog.uri,
            "io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        },
    ]
    s3: S3Settings = {
        "endpoint": server.endpoint,
        "region": server.region,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
    }
    wanted = {
        **spark_delta("delta", s3a(last(rest, "delta")["location"]), rest),
        **spark_delta("delta-purged", s3a(last(purged, "delta")["location"]), purged),
        **spark_iceberg("stitchlake", purged),
        **spark_iceberg("rest", rest),
    }
    queries = {name: read.sql for name, read in wanted.items()}
    seen = read_with_spark(Request(iceberg=catalogs, s3=s3, queries=queries))
    check_spark(seen, wanted)
    assert all(f.startswith("s3a://") for f in seen["results"]["delta"]["files"])


def trino_s3(server: S3Server) -> dict[str, str]:
    """Trino's native S3 file system on the test server: path-style requests to its endpoint."""
    return {
        "fs.native-s3.enabled": "true",
        "s3.endpoint": server.endpoint,
        "s3.region": server.region,
        "s3.path-style-access": "true",
        "s3.aws-access-key": server.access_key,
        "s3.aws-secret-key": server.secret_key,
    }


@pytest.mark.s3
@pytest.mark.trino
def test_trino_reads_the_published_tables_on_s3_through_its_native_s3_file_system(
    s3_tables: S3Tables, trino_server: Trino, tmp_path: Path
) -> None:
    """The Delta tables by their `s3://` locations; Iceberg through the JDBC catalog and through the REST catalog
    whose warehouse is on S3."""
    rest, purged, server = s3_tables.rest, s3_tables.purged, s3_tables.server
    catalog = trino_delta_catalog(trino_server, tmp_path / "metastore", trino_s3(server))
    for name, history in (("wide", rest), ("wide_purged", purged)):
        delta = last(history, "delta")["location"]
        table = register_delta(trino_server, catalog, name, delta)
        options = delta_options(Target(delta, history.table.config.storage.options))
        check_trino(trino_server, table, history, "delta", delta_files(delta, options))

    storage = purged.table.config.storage.options
    iceberg = last(purged, "iceberg")
    jdbc = trino_jdbc_catalog(trino_server, iceberg, trino_s3(server))
    reader = iceberg_catalog(Target(iceberg["location"], storage), {"type": "sql", "uri": iceberg["catalog"]})
    found = reader.load_table(iceberg["identifier"])
    assert found.location().startswith(f"s3://{s3_tables.bucket}/")
    check_trino(trino_server, f"{jdbc}.{iceberg['identifier']}", purged, "iceberg", iceberg_files(found))

    served = trino_rest_catalog(trino_server, s3_tables.catalog.uri, trino_s3(server))
    iceberg = last(rest, "iceberg")
    reader = iceberg_catalog(Target(iceberg["location"], storage), {"type": "rest", "uri": s3_tables.catalog.uri})
    found = reader.load_table(iceberg["identifier"])
    check_trino(trino_server, f"{served}.{iceberg['identifier']}", rest, "iceberg", iceberg_files(found))
