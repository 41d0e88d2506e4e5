"""Publishing as Delta Lake and Iceberg (issue 13 points 1 and 2): other engines read what `stitch read` reads.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_publish.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from stitchlake.errors import UsageError
from stitchlake.io.published import Target, delta_options, iceberg_catalog
from tests.support.processes import run_stitch
from tests.support.published_history import MODEL, altered_document, expected_rows, history, rows_of
from tests.support.tables import batch


def test_each_publish_is_a_new_version_and_clean_keeps_what_kept_versions_read(tmp_path: Path) -> None:
    table = history(tmp_path / "t", retain_versions=2)
    first = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    before = expected_rows(table, first["delta"]["source"])
    orders = MODEL["orders"]
    more = batch(orders, [{"k": 2, "amount": 2000, "status": "refund", "ots": 20}])
    table.write("orders", more.append_column("coupon", pa.array(["BACK"])))
    table.compact()
    second = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    after = expected_rows(table, second["delta"]["source"])
    assert before != after and {r["k"]: r["amount"] for r in after}[2] == 2000
    table.clean()  # the table's own retention: the published files are not its files
    location = second["delta"]["location"]
    assert rows_of(DeltaTable(location, version=first["delta"]["version"]).to_pyarrow_table()) == before
    assert rows_of(DeltaTable(location).to_pyarrow_table()) == after
    found = iceberg_catalog(second["iceberg"]["location"]).load_table(second["iceberg"]["identifier"])
    assert rows_of(found.scan(snapshot_id=first["iceberg"]["version"]).to_arrow()) == before
    assert rows_of(found.scan().to_arrow()) == after
    # A third publish with retain_versions 2 drops what only the first version read.
    table.write(
        "orders",
        batch(orders, [{"k": 3, "amount": 3, "status": "x", "ots": 30}]).append_column(
            "coupon", pa.array([None], pa.string())
        ),
    )
    table.compact()
    only_first = set(DeltaTable(location, version=first["delta"]["version"]).file_uris()) - set(
        DeltaTable(location, version=second["delta"]["version"]).file_uris()
    )
    third = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    assert third["delta"]["removed_files"] == len(only_first) > 0, "the files only the first version read"
    assert third["iceberg"]["removed_files"] > 0
    with pytest.raises(Exception, match=r"not found|No such file|FileNotFound"):
        DeltaTable(location, version=first["delta"]["version"]).to_pyarrow_table()
    assert rows_of(DeltaTable(location, version=second["delta"]["version"]).to_pyarrow_table()) == after
    found = iceberg_catalog(third["iceberg"]["location"]).load_table(third["iceberg"]["identifier"])
    assert rows_of(found.scan(snapshot_id=second["iceberg"]["version"]).to_arrow()) == after


def test_the_cli_publishes_on_demand_and_after_every_compaction(tmp_path: Path) -> None:
    table = history(tmp_path / "t")
    document = altered_document(formats=["delta"])
    document["table"]["path"] = table.path
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    done = run_stitch("publish", "-c", str(path), "--json")
    assert done.returncode == 0, done.stderr
    (first,) = json.loads(done.stdout)["published"]
    assert first["format"] == "delta" and first["location"].endswith(".stitch/published/delta")
    more = batch(MODEL["orders"], [{"k": 4, "amount": 44, "status": "again", "ots": 40}])
    table.write("orders", more.append_column("coupon", pa.array(["CLI"])))
    compacted = run_stitch("compact", "-c", str(path), "--engine", "local", "--json")
    assert compacted.returncode == 0, compacted.stderr
    (auto,) = json.loads(compacted.stdout)["result"]["published"]
    assert auto["version"] > first["version"] and auto["source"] > first["source"]
    assert rows_of(DeltaTable(auto["location"]).to_pyarrow_table()) == expected_rows(table, auto["source"])
    refused = run_stitch("publish", "-c", str(path), "--format", "parquet", "--json")
    assert refused.returncode == 2 and "is not one of: delta, iceberg" in json.loads(refused.stdout)["error"]


@pytest.mark.s3
def test_a_table_on_s3_publishes_to_s3_with_its_own_storage_settings(
    s3_bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta-rs and pyiceberg reach the store with the table's `storage:` block (no AWS_* in the environment);
    readers see each published version as `stitch read` does, and old versions' objects go at the next publish."""
    for name in list(os.environ):
        if name.startswith("AWS_") and "CHECKSUM" not in name:
            monkeypatch.delenv(name)
    monkeypatch.setenv("STITCH_TEST_S3_SECRET", s3_bucket.server.secret_key)
    storage = {**s3_bucket.options, "secret_access_key": "${STITCH_TEST_S3_SECRET}"}
    database = tmp_path / "catalog.db"
    place = {"table": {"path": f"{s3_bucket.url}/warehouse/wide"}, "storage": storage}
    table = history(tmp_path, place, retain_versions=1)
    with pytest.raises(UsageError, match="needs a catalog that is not a file on the object store"):
        table.publish("iceberg")
    catalog = {"type": "sql", "uri": f"sqlite:///{database}"}
    table = history(
        tmp_path,
        {**place, "table": {"path": f"{s3_bucket.url}/warehouse/wide2"}},
        retain_versions=1,
        iceberg_catalog=catalog,
    )
    first = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    assert first["delta"]["location"] == f"{s3_bucket.url}/warehouse/wide2/.stitch/published/delta"
    before = expected_rows(table, first["delta"]["source"])
    more = batch(MODEL["orders"], [{"k": 3, "amount": 33, "status": "s3", "ots": 50}])
    table.write("orders", more.append_column("coupon", pa.array(["S3"])))
    table.compact()
    second = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    after = expected_rows(table, second["delta"]["source"])
    assert before != after and second["delta"]["removed_files"] > 0 and second["iceberg"]["removed_files"] > 0

    target = Target(second["delta"]["location"], table.config.storage.options)
    options = delta_options(target)
    assert options is not None and options["AWS_ENDPOINT_URL"] == s3_bucket.server.endpoint
    found = DeltaTable(target.location, storage_options=options)
    assert rows_of(found.to_pyarrow_table()) == after
    assert rows_of(pl.read_delta(target.location, storage_options=options)) == after
    connection = duckdb.connect()  # DuckDB as docs/operations.md shows it, on S3
    connection.register("published", found.to_pyarrow_dataset())
    assert rows_of(connection.sql("SELECT * FROM published").to_arrow_table()) == after
    objects = [info.path for info in target.storage().list_files("") if not info.path.startswith("_delta_log/")]
    assert sorted(f"{target.location}/{path}" for path in objects) == sorted(found.file_uris()), (
        "the objects of the version no kept one reads are gone"
    )
    iceberg = iceberg_catalog(Target(second["iceberg"]["location"], storage), catalog)
    published = iceberg.load_table(second["iceberg"]["identifier"])
    assert published.location().startswith(f"{s3_bucket.url}/warehouse/wide2/.stitch/published/iceberg/")
    assert second["iceberg"]["table_location"] == published.location()
    assert second["delta"]["table_location"] == second["delta"]["location"]
    assert rows_of(published.scan().to_arrow()) == after
    odd = [row for row in after if row["p"] == "odd"]
    connection = published.scan(row_filter="p = 'odd'").to_duckdb("t")
    assert rows_of(connection.sql("SELECT * FROM t").to_arrow_table()) == odd and odd
    data = [task.file.file_path for task in published.scan().plan_files()]
    listed = Target(published.location(), storage).storage().list_files("data")
    assert sorted(f"{published.location()}/{info.path}" for info in listed) == sorted(data)
    # The CLI in its own process: settings from the YAML, the secret from the environment it inherits.
    document = altered_document(
        {**place, "table": {"path": table.path}}, formats=["delta"], retain_versions=1, iceberg_catalog=catalog
    )
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    done = run_stitch("publish", "-c", str(path), "-f", "iceberg", "--json")
    assert done.returncode == 0, done.stderr
    (third,) = json.loads(done.stdout)["published"]
    assert third["location"] == second["iceberg"]["location"] and third["version"] != second["iceberg"]["version"]
    assert rows_of(iceberg.load_table(third["identifier"]).scan().to_arrow()) == after
