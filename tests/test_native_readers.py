"""Every engine reads the published tables natively (issue 26): Spark's own Delta and Iceberg readers on Spark 4.1,
and Trino's Delta Lake and Iceberg connectors, on local disk and on S3.

Each table goes through late events, an update, a stream delete, an erase, a column default and an alter, is
published, changes again (a late update, a compaction, an erase that republishes), and is published again. Every
engine then reads the current version, the version before (time travel) and one partition, and each answer must
equal `stitch read --mode read_optimized` as of the source the publish read, cell by cell and in column order.
Spark runs in a process of its own (tests/spark_native_reader.py), one per check; Trino is one server for the
session (tests/trino_server.py), each check making its own catalogs.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from iceberg_rest_catalog import RestCatalogServer, rest_catalog
from published_history import MODEL, expected_rows, history, rows_of
from s3_server import S3Server, rgw
from spark_native_reader import IcebergCatalog, Request, S3Settings, read_with_spark
from tables import batch
from trino_server import Trino, quote

from stitchlake.api import Table
from stitchlake.io.published import Target, delta_options, iceberg_catalog
from stitchlake.jobs.results import plain


@dataclass(frozen=True)
class Published:
    """A table published twice: `first` and `second` are what each publish reported (by format), `before` and
    `after` what `stitch read --mode read_optimized` showed as of each one's source."""

    table: Table
    first: dict[str, dict[str, Any]]
    second: dict[str, dict[str, Any]]
    before: list[dict[str, Any]]
    after: list[dict[str, Any]]

    @property
    def odd(self) -> list[dict[str, Any]]:
        """The current rows of partition p=odd (the partition filter every engine is asked for)."""
        rows = [row for row in self.after if row["p"] == "odd"]
        assert rows and len(rows) < len(self.after)
        return rows


def erase_keys(*keys: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "p": pa.array(["even" if k % 2 == 0 else "odd" for k in keys])})


def publish_twice(
    root: Path, formats: tuple[str, ...], place: dict[str, Any] | None = None, **publish: Any
) -> Published:
    """The history table, published; then a late update and a compaction, and an erase that republishes."""
    table = history(root, place, retain_versions=3, **publish)
    first = {fmt: table.publish(fmt).to_json() for fmt in formats}
    more = batch(MODEL["orders"], [{"k": 2, "amount": 2000, "status": "refund", "ots": 20}])
    table.write("orders", more.append_column("coupon", pa.array(["BACK"])))
    assert table.compact() is not None
    erased = table.erase(erase_keys(3))
    second = {result.format: plain(result) for result in erased.published}
    assert set(second) == set(formats), "the erase republished every published format"
    sources = {second[fmt]["source"] for fmt in formats} | {first[fmt]["source"] for fmt in formats}
    assert len(sources) == 2
    before = expected_rows(table, first[formats[0]]["source"])
    after = expected_rows(table, second[formats[0]]["source"])
    assert before != after and 3 in {r["k"] for r in before} and 3 not in {r["k"] for r in after}
    assert {r["k"]: r["amount"] for r in after}[2] == 2000 and {r["k"]: r["coupon"] for r in after}[7] == "XMAS"
    return Published(table, first, second, before, after)


def same_rows(answer: dict[str, Any], expected: list[dict[str, Any]], what: str) -> None:
    """An engine's answer (`columns`, `rows` as dicts) equals `expected` cell by cell, columns in order."""
    assert answer["columns"] == list(expected[0]), f"{what}: columns {answer['columns']}"
    assert rows_of(pa.Table.from_pylist(answer["rows"])) == expected, what


def jdbc_sqlite(catalog: str) -> str:
    """`stitch publish`'s catalog URI (sqlite:////abs/catalog.db) as the JDBC URL Java readers take."""
    assert catalog.startswith("sqlite:///"), catalog
    return "jdbc:sqlite:" + catalog.removeprefix("sqlite:///")


@dataclass(frozen=True)
class LocalTables:
    disk: Published  # Delta, and Iceberg in the default SQLite catalog
    rest: Published  # Iceberg in a REST catalog
    server: RestCatalogServer


@pytest.fixture(scope="module")
def local_tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTables]:
    root = tmp_path_factory.mktemp("native")
    with rest_catalog(root / "rest-server") as server:
        disk = publish_twice(root / "disk", ("delta", "iceberg"))
        rest = publish_twice(root / "rest", ("iceberg",), iceberg_catalog={"type": "rest", "uri": server.uri})
        yield LocalTables(disk, rest, server)


def spark_queries(delta: str, iceberg: dict[str, str], published: dict[str, Published]) -> dict[str, str]:
    """Current, time travel and partition queries: Delta by path, Iceberg by catalog name (`iceberg`: catalog ->
    which `published` table it holds)."""
    disk = published["delta"]
    queries = {
        "delta": f"SELECT * FROM delta.`{delta}`",
        "delta@first": f"SELECT * FROM delta.`{delta}` VERSION AS OF {disk.first['delta']['version']}",
        "delta/odd": f"SELECT * FROM delta.`{delta}` WHERE p = 'odd'",
    }
    for catalog, key in iceberg.items():
        table = f"{catalog}.stitchlake.wide"
        snapshot = published[key].first["iceberg"]["version"]
        queries[catalog] = f"SELECT * FROM {table}"
        queries[f"{catalog}@first"] = f"SELECT * FROM {table} VERSION AS OF {snapshot}"
        queries[f"{catalog}/odd"] = f"SELECT * FROM {table} WHERE p = 'odd'"
    return queries


def check_spark(seen: dict[str, Any], published: dict[str, Published]) -> None:
    assert seen["spark"] == "4.1.4", "the Spark both Delta's and Iceberg's runtimes exist for"
    results = seen["results"]
    for name, answer in results.items():
        source = published[name.split("@")[0].split("/")[0]]
        expected = source.before if "@first" in name else source.odd if "/odd" in name else source.after
        same_rows(answer, expected, f"Spark {name}")
    # Spark's Delta reader prunes the other partition's files by the log's partition values.
    assert results["delta"]["files"] and any("/p=even/" in f for f in results["delta"]["files"])
    assert results["delta/odd"]["files"] and all("/p=odd/" in f for f in results["delta/odd"]["files"])


@pytest.mark.spark
def test_spark_reads_the_published_tables_with_its_own_delta_and_iceberg_readers(local_tables: LocalTables) -> None:
    """delta-spark on the Delta table by path; Iceberg's Spark runtime through its JDBC catalog on the SQLite file
    `stitch publish` keeps, and through the REST catalog the other table was published to."""
    disk, rest = local_tables.disk, local_tables.rest
    iceberg = disk.second["iceberg"]
    catalogs: list[IcebergCatalog] = [
        # Iceberg's JDBC catalog keys its rows by the Spark catalog's name: it must be `stitchlake`.
        {
            "name": "stitchlake",
            "type": "jdbc",
            "uri": jdbc_sqlite(iceberg["catalog"]),
            "warehouse": iceberg["location"],
        },
        {"name": "rest", "type": "rest", "uri": rest.second["iceberg"]["catalog"]},
    ]
    assert rest.second["iceberg"]["catalog"] == local_tables.server.uri
    published = {"delta": disk, "stitchlake": disk, "rest": rest}
    queries = spark_queries(disk.second["delta"]["location"], {"stitchlake": "stitchlake", "rest": "rest"}, published)
    check_spark(read_with_spark(Request(iceberg=catalogs, s3=None, queries=queries)), published)


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


def register_delta(trino: Trino, catalog: str, location: str) -> str:
    trino.query(
        f"CALL {catalog}.system.register_table(schema_name => 'published', table_name => 'wide', "
        f"table_location => {quote(location)})"
    )
    return f"{catalog}.published.wide"


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


def check_trino(trino: Trino, table: str, published: Published, fmt: str, data_files: dict[str, int]) -> None:
    """Current, time travel and partition reads of `table` equal `stitch read`; the partition read takes only
    that partition's splits (`data_files`: how many data files the current version has in each partition)."""
    current = trino.query(f"SELECT * FROM {table}")
    same_rows(current.__dict__, published.after, f"Trino {table}")
    version = published.first[fmt]["version"]
    same_rows(trino.query(f"SELECT * FROM {table} FOR VERSION AS OF {version}").__dict__, published.before, table)
    odd = trino.query(f"SELECT * FROM {table} WHERE p = 'odd'")
    same_rows(odd.__dict__, published.odd, f"Trino {table} WHERE p = 'odd'")
    assert current.stats["totalSplits"] == sum(data_files.values()), current.stats
    assert odd.stats["totalSplits"] == data_files["odd"] < current.stats["totalSplits"], "p=even pruned"
    assert odd.stats["processedRows"] == len(published.odd), odd.stats


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
    """Trino 476: the Delta table registered in a Delta Lake catalog (file metastore), the Iceberg tables through
    a JDBC catalog on the SQLite file `stitch publish` keeps and through the REST catalog."""
    disk, rest = local_tables.disk, local_tables.rest
    delta = disk.second["delta"]["location"]
    catalog = trino_delta_catalog(trino_server, tmp_path / "metastore", {})
    table = register_delta(trino_server, catalog, Path(delta).as_uri())
    check_trino(trino_server, table, disk, "delta", delta_files(delta))

    iceberg = disk.second["iceberg"]
    jdbc = trino_jdbc_catalog(trino_server, iceberg, {})
    found = iceberg_catalog(iceberg["location"]).load_table(iceberg["identifier"])
    check_trino(trino_server, f"{jdbc}.stitchlake.wide", disk, "iceberg", iceberg_files(found))

    properties = {"iceberg.catalog.type": "rest", "iceberg.rest-catalog.uri": local_tables.server.uri, **LOCAL_FILES}
    served = trino_server.create_catalog("iceberg", properties, "rest")
    reader = iceberg_catalog(rest.second["iceberg"]["location"], {"type": "rest", "uri": local_tables.server.uri})
    found = reader.load_table(rest.second["iceberg"]["identifier"])
    check_trino(trino_server, f"{served}.stitchlake.wide", rest, "iceberg", iceberg_files(found))


@dataclass(frozen=True)
class S3Tables:
    published: Published
    server: S3Server
    bucket: str
    storage: dict[str, str]


@pytest.fixture(scope="module")
def s3_tables(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Tables]:
    """A table on the S3 server published to S3 (Delta; Iceberg with its SQLite catalog on local disk)."""
    bucket = f"t-native-{uuid.uuid4().hex[:10]}"
    gateway = s3_server._rgw()
    rgw.create_bucket(gateway, bucket)
    root = tmp_path_factory.mktemp("native-s3")
    secret = "STITCH_TEST_NATIVE_S3_SECRET"
    os.environ[secret] = s3_server.secret_key
    storage = {**s3_server.options(), "secret_access_key": f"${{{secret}}}"}
    place = {"table": {"path": f"s3://{bucket}/warehouse/wide"}, "storage": storage}
    catalog = {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}"}
    try:
        yield S3Tables(
            publish_twice(root, ("delta", "iceberg"), place, iceberg_catalog=catalog), s3_server, bucket, storage
        )
    finally:
        os.environ.pop(secret, None)
        try:
            rgw.delete_bucket(gateway, bucket)
        except (rgw.RgwError, OSError) as exc:
            warnings.warn(f"could not delete bucket {bucket}: {exc}", stacklevel=1)


@pytest.mark.s3
@pytest.mark.spark
def test_spark_reads_the_published_tables_on_s3_through_hadoop_aws(s3_tables: S3Tables) -> None:
    """hadoop-aws 3.4.2 (`s3a://`, path-style, the test server's endpoint): the Delta table by its `s3a://` path,
    the Iceberg table through the JDBC catalog, whose metadata names `s3://` files (mapped to S3A)."""
    published, server = s3_tables.published, s3_tables.server
    delta = published.second["delta"]["location"]
    iceberg = published.second["iceberg"]
    assert delta.startswith("s3://") and iceberg["table_location"].startswith("s3://")
    catalogs: list[IcebergCatalog] = [
        {
            "name": "stitchlake",
            "type": "jdbc",
            "uri": jdbc_sqlite(iceberg["catalog"]),
            "warehouse": "s3a://" + iceberg["location"].removeprefix("s3://"),
        }
    ]
    s3: S3Settings = {
        "endpoint": server.endpoint,
        "region": server.region,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
    }
    published_by = {"delta": published, "stitchlake": published}
    queries = spark_queries("s3a://" + delta.removeprefix("s3://"), {"stitchlake": "stitchlake"}, published_by)
    seen = read_with_spark(Request(iceberg=catalogs, s3=s3, queries=queries))
    check_spark(seen, published_by)
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
    published, server = s3_tables.published, s3_tables.server
    delta = published.second["delta"]["location"]
    catalog = trino_delta_catalog(trino_server, tmp_path / "metastore", trino_s3(server))
    table = register_delta(trino_server, catalog, delta)
    storage = published.table.config.storage.options
    options = delta_options(Target(delta, storage))
    check_trino(trino_server, table, published, "delta", delta_files(delta, options))

    iceberg = published.second["iceberg"]
    jdbc = trino_jdbc_catalog(trino_server, iceberg, trino_s3(server))
    reader = iceberg_catalog(Target(iceberg["location"], storage), {"type": "sql", "uri": iceberg["catalog"]})
    found = reader.load_table(iceberg["identifier"])
    assert found.location().startswith(f"s3://{s3_tables.bucket}/")
    check_trino(trino_server, f"{jdbc}.stitchlake.wide", published, "iceberg", iceberg_files(found))
