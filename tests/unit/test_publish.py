"""Publishing as Delta Lake and Iceberg (issue 13 points 1 and 2): other engines read what `stitch read` reads.

The table goes through late events, an update, a stream delete, an erase, a column default and an alter before it
is published; deltalake, Polars, DuckDB and pyiceberg then read the published tables and each must equal
`stitch read --mode read_optimized` of the published instant, cell by cell. Spark's and Trino's own readers are in
tests/integration/test_native_readers.py.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from stitchlake.api import Table
from stitchlake.errors import ConfigError, StitchError, UsageError
from stitchlake.io.published import iceberg_catalog
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import PublishCommit
from tests.support.published_history import MODEL, altered_document, expected_rows, history, rows_of
from tests.support.tables import batch, config, new_table


def test_delta_readers_see_exactly_the_read_optimized_table(published: tuple[Table, dict[str, Any]]) -> None:
    table, results = published
    delta = results["delta"]
    expected = expected_rows(table, delta["source"])
    keys = [row["k"] for row in expected]
    assert keys == [1, 2, 3, 4, 7], "late, deleted and erased keys resolved"
    assert {row["k"]: row["carrier"] for row in expected}[2] == "none", "the column default applied"
    assert {row["k"]: row["coupon"] for row in expected} == {1: "none", 2: "none", 3: "none", 4: "none", 7: "XMAS"}
    location = delta["location"]
    found = DeltaTable(location)
    assert not [name for name in found.schema().to_arrow().names if name.startswith("_sl__")]
    assert rows_of(found.to_pyarrow_table()) == expected
    assert rows_of(pl.read_delta(location)) == expected
    connection = duckdb.connect()
    dataset = found.to_pyarrow_dataset()
    connection.register("published", dataset)
    assert rows_of(connection.sql("SELECT * FROM published").to_arrow_table()) == expected
    # docs/operations.md's DuckDB example: a filter on the partition column goes down into the dataset's scan
    # (DuckDB's plan shows it there), where the dataset keeps only that partition's files.
    odd_rows = [row for row in expected if row["p"] == "odd"]
    odd_sql = "SELECT * FROM published WHERE p = 'odd'"
    assert rows_of(connection.sql(odd_sql).to_arrow_table()) == odd_rows and odd_rows
    plan = connection.sql(f"EXPLAIN {odd_sql}").fetchall()[0][1]
    assert re.search(r"ARROW_SCAN.*Filters: \"p\" = 'odd'", plan, re.S), plan
    scanned = [fragment.path for fragment in dataset.get_fragments(filter=pc.field("p") == "odd")]
    assert scanned and all(path.split("/")[-2] == "p=odd" for path in scanned), scanned
    assert len(list(dataset.get_fragments())) > len(scanned)
    # The data files the Delta log lists hold the published rows and nothing else.
    files = found.file_uris()
    assert sum(pq.read_metadata(f.removeprefix("file://")).num_rows for f in files) == len(expected)
    # Partitioned like the stitched table: a reader filtering on `p` skips the other partitions' files.
    assert found.metadata().partition_columns == ["p"]
    odd = found.to_pyarrow_table(filters=[("p", "=", "odd")])
    assert rows_of(odd) == [row for row in expected if row["p"] == "odd"] and odd.num_rows
    assert {f.split("/")[-2] for f in files} == {"p=even", "p=odd"}
    # The oldest protocol, no table features: what every Delta reader reads
    # (tests/integration/test_native_readers.py runs Spark's and Trino's).
    protocol = found.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.reader_features and not protocol.writer_features


def test_iceberg_readers_see_exactly_the_read_optimized_table(published: tuple[Table, dict[str, Any]]) -> None:
    table, results = published
    iceberg = results["iceberg"]
    expected = expected_rows(table, iceberg["source"])
    assert iceberg["identifier"] == "stitchlake.wide"
    catalog = iceberg_catalog(iceberg["location"])
    found = catalog.load_table(iceberg["identifier"])
    assert not [field.name for field in found.schema().fields if field.name.startswith("_sl__")]
    assert found.current_snapshot().snapshot_id == iceberg["version"]
    assert rows_of(found.scan().to_arrow()) == expected
    with warnings.catch_warnings():  # Polars would rather plan with its own plugin; pyiceberg plans correctly
        warnings.simplefilter("ignore")
        assert rows_of(pl.scan_iceberg(found).collect()) == expected
    connection = found.scan().to_duckdb("published")
    assert rows_of(connection.sql("SELECT * FROM published").to_arrow_table()) == expected
    # docs/operations.md's DuckDB example: pyiceberg plans the partition's files alone and hands DuckDB their rows.
    odd = found.scan(row_filter="p = 'odd'")
    assert {task.file.partition[0] for task in odd.plan_files()} == {"odd"}, "other partitions' files pruned"
    odd_rows = [row for row in expected if row["p"] == "odd"]
    assert rows_of(odd.to_duckdb("t").sql("SELECT * FROM t").to_arrow_table()) == odd_rows and odd_rows
    files = [task.file.file_path for task in found.scan().plan_files()]
    assert sum(pq.read_metadata(f.removeprefix("file://")).num_rows for f in files) == len(expected)
    assert found.metadata.format_version == 2, "the format version Spark, Trino and every Iceberg reader read"
    assert [(f.name, str(f.transform)) for f in found.spec().fields] == [("p", "identity")]
    even = found.scan(row_filter="p = 'even'")
    assert {task.file.partition[0] for task in even.plan_files()} == {"even"}, "other partitions' files pruned"
    assert rows_of(even.to_arrow()) == [row for row in expected if row["p"] == "even"]


def test_publishing_is_an_instant_on_the_timeline(published: tuple[Table, dict[str, Any]]) -> None:
    table, results = published
    timeline = table.timeline()
    done = timeline.completed([Action.PUBLISH])
    commits = [timeline.commit(instant) for instant in done]
    assert [c.format for c in commits if isinstance(c, PublishCommit)] == ["delta", "iceberg"]
    assert {c.version for c in commits if isinstance(c, PublishCommit)} == {
        results["delta"]["version"],
        results["iceberg"]["version"],
    }
    assert not timeline.pending()


def test_a_failed_publish_leaves_a_clean_timeline_and_nothing_compacted_is_refused(tmp_path: Path) -> None:
    empty = new_table(tmp_path / "empty")
    empty.write("orders", batch(MODEL["orders"], [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    with pytest.raises(UsageError, match="nothing is compacted yet"):
        empty.publish("delta")
    with pytest.raises(UsageError, match="publish format 'hudi' is not one of: delta, iceberg"):
        empty.publish("hudi")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the published tables should go")
    table = history(tmp_path / "t", location=str(blocker))
    with pytest.raises(StitchError, match="publishing as delta"):
        table.publish("delta")
    timeline = table.timeline()
    assert not timeline.pending() and not timeline.completed([Action.PUBLISH])


def test_the_iceberg_catalog_is_configurable(tmp_path: Path) -> None:
    """`publish.iceberg_catalog` holds pyiceberg catalog properties (a REST catalog takes `type: rest`); here a
    SQL catalog of one's own, which then holds the table while the default one does not exist."""
    database = tmp_path / "catalog-of-our-own.db"
    table = history(tmp_path / "t", iceberg_catalog={"type": "sql", "uri": f"sqlite:///{database}"})
    result = table.publish("iceberg").to_json()
    assert database.is_file() and not (Path(result["location"]) / "catalog.db").exists()
    found = iceberg_catalog(result["location"], {"type": "sql", "uri": f"sqlite:///{database}"})
    assert rows_of(found.load_table(result["identifier"]).scan().to_arrow()) == expected_rows(table, result["source"])


def test_a_config_that_publishes_iceberg_to_s3_without_a_catalog_is_refused(tmp_path: Path) -> None:
    """Refused when the config is read (`stitch validate`), not after a compaction that would then fail to publish."""
    document = altered_document({"table": {"path": "s3://bucket/wide"}}, formats=["iceberg"])
    with pytest.raises(ConfigError, match=r"publish\.iceberg_catalog.*not a file on the object store"):
        config(tmp_path, document)
    document["publish"]["iceberg_catalog"] = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    assert config(tmp_path, document).publish.iceberg_catalog["uri"].startswith("sqlite:///")
    document["publish"] = {"formats": ["iceberg"], "location": str(tmp_path / "published")}
    assert config(tmp_path, document).publish.location == str(tmp_path / "published")


def test_a_rest_catalog_holds_the_published_iceberg_table_and_its_versions(tmp_path: Path) -> None:
    """`publish.iceberg_catalog: {type: rest, uri: ...}`: creating, evolving, overwriting and expiring the
    published table all go through pyiceberg's REST client; the server's catalog chooses where the table lives,
    and a reader that knows only the REST endpoint sees the published rows, version by version."""
    from pyiceberg.catalog import load_catalog

    from tests.support.iceberg_rest_catalog import rest_catalog

    with rest_catalog(tmp_path / "rest") as server:
        table = history(tmp_path / "t", iceberg_catalog={"type": "rest", "uri": server.uri}, retain_versions=1)
        first = table.publish("iceberg").to_json()
        assert first["table_location"].startswith(server.warehouse), "where the REST catalog put it"
        assert first["catalog"] == server.uri
        assert not [q for q in server.queries if "warehouse" in q], "a REST catalog is not sent a local warehouse"
        assert not (Path(first["location"]) / "catalog.db").exists(), "no SQLite catalog of our own"
        reader = load_catalog("reader", type="rest", uri=server.uri)
        found = reader.load_table(first["identifier"])
        assert getattr(found.current_snapshot(), "snapshot_id", None) == first["version"]
        assert not [field.name for field in found.schema().fields if field.name.startswith("_sl__")]
        before = expected_rows(table, first["source"])
        assert rows_of(found.scan().to_arrow()) == before

        orders = MODEL["orders"]
        more = batch(orders, [{"k": 2, "amount": 2000, "status": "refund", "ots": 20}])
        table.write("orders", more.append_column("coupon", pa.array(["BACK"])))
        table.compact()
        second = table.publish("iceberg").to_json()
        after = expected_rows(table, second["source"])
        assert before != after
        found = reader.load_table(second["identifier"])
        assert getattr(found.current_snapshot(), "snapshot_id", None) == second["version"] != first["version"]
        assert rows_of(found.scan().to_arrow()) == after
        # retain_versions 1: the first publish's snapshot was expired through the catalog, its files deleted.
        assert first["version"] not in {s.snapshot_id for s in found.snapshots()}
        assert second["removed_files"] > 0
        commits = [path for method, path in server.requests if method == "POST" and path.endswith("/tables/wide")]
        assert len(commits) >= 3, f"overwrite, schema and expiry commits went through REST: {server.requests}"


def test_an_iceberg_publish_that_fails_leaves_the_schema_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schema change (and the partitioning) committed on its own before the rows: a publish that failed there
    left readers the old rows under the new schema (a dropped column gone, an added one null, not its default).
    The schema, the spec and the rows are one commit now."""
    import copy

    from pyiceberg.table import Transaction

    from stitchlake.services.upkeep.alter import alter
    from tests.support.published_history import altered_document

    root = tmp_path / "t"
    table = history(root, formats=["iceberg"])
    first = table.publish("iceberg").to_json()
    published = iceberg_catalog(first["location"]).load_table(first["identifier"])
    before = (published.schema(), rows_of(published.scan().to_arrow()))
    document = copy.deepcopy(altered_document())  # publishes nothing on its own: the publish below does
    document["streams"]["shipments"]["columns"]["late"] = {"type": "string", "default": "none"}
    widened = Table(config(root, document))
    alter(widened)

    def overwrite(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("the store went away while the rows were written")

    monkeypatch.setattr(Transaction, "overwrite", overwrite)
    with pytest.raises(StitchError, match="the store went away"):
        widened.publish("iceberg")
    monkeypatch.undo()
    again = iceberg_catalog(first["location"]).load_table(first["identifier"])
    assert (again.schema(), rows_of(again.scan().to_arrow())) == before
    done = widened.publish("iceberg").to_json()
    published = iceberg_catalog(done["location"]).load_table(done["identifier"])
    assert {r["late"] for r in published.scan().to_arrow().to_pylist()} == {"none"}


def test_the_published_delta_files_carry_no_statistics_of_float_columns(tmp_path: Path) -> None:
    """delta-rs leaves NaN out of a float column's min and max, and Spark orders NaN above every number: with them,
    Spark skipped a file holding a NaN that `WHERE x > 5` must return. The floats' statistics are left out."""
    import json

    document = {
        "table": {"name": "floats", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {"s": {"columns": {"x": "double", "pt": "struct<a:double,b:string>", "n": "long"}}},
        "publish": {"formats": ["delta"]},
    }
    table = new_table(tmp_path, document)
    rows = pa.table(
        {
            "k": pa.array([1, 2, 3], pa.int64()),
            "x": pa.array([1.0, float("nan"), 2.0]),
            "pt": pa.array([{"a": 1.0, "b": "u"}, None, {"a": float("nan"), "b": "v"}]),
            "n": pa.array([5, 6, 7], pa.int64()),
        }
    )
    table.write("s", rows)
    table.compact()
    done = table.publish("delta").to_json()
    log = Path(done["location"]) / "_delta_log"
    stats = [
        json.loads(json.loads(line)["add"]["stats"])
        for entry in sorted(log.glob("*.json"))
        for line in entry.read_text().splitlines()
        if '"add"' in line
    ]
    assert stats and all(set(s["minValues"]) == {"k", "n"} for s in stats), stats
    published = DeltaTable(done["location"])
    assert published.metadata().configuration["delta.dataSkippingStatsColumns"] == "`k`,`n`"
    # A table published before (statistics of every column): set right at the next publish.
    published.alter.set_table_properties({"delta.dataSkippingStatsColumns": "`k`,`x`,`n`"}, raise_if_not_exists=False)
    again = table.publish("delta").to_json()
    newest = sorted(log.glob("*.json"))[-1].read_text().splitlines()
    added = [json.loads(json.loads(line)["add"]["stats"]) for line in newest if '"add"' in line]
    assert added and all(set(s["minValues"]) == {"k", "n"} for s in added), (again, added)


def test_old_iceberg_snapshots_are_expired_by_ancestry_not_by_their_hosts_clocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots were ordered by their timestamps, which each publishing host's clock sets: a publish from a host
    whose clock was an hour behind sorted first, and the expiry then took the current snapshot for an old one (the
    catalog refused it: the publish failed after its commit). The current snapshot's ancestry says which is old."""
    import time as real_time
    from types import SimpleNamespace

    import pyiceberg.table.snapshots as snapshots_module

    table = history(tmp_path / "t", retain_versions=1)
    table.publish("iceberg")
    table.publish("iceberg")
    behind = SimpleNamespace(time=lambda: real_time.time() - 3600)
    monkeypatch.setattr(snapshots_module, "time", behind)
    done = table.publish("iceberg").to_json()
    monkeypatch.undo()
    published = iceberg_catalog(done["location"]).load_table(done["identifier"])
    current = published.current_snapshot()
    assert current is not None and current.snapshot_id == done["version"]
    assert rows_of(published.scan().to_arrow()) == expected_rows(table, done["source"])
