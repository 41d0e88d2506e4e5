"""Metadata tables (issue 38): each returns the same rows through `stitch sql` and through Spark
(`stitchlake.spark.metadata.table`), and they agree with `stitch timeline show --json` and `stitch status --json`.

The table is real and made through the real CLI (tests/support/operator_table.py): three streams, one of them fed from a
topic of the session's real Kafka broker, a compaction, a savepoint, a rescale, and records left in the topic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.services.inspect.metadata_tables import NAMES, schema
from tests.support.cli import stitch_json
from tests.support.operator_table import LEFT_IN_TOPIC, OperatorTable, build, timeline_names
from tests.support.processes import run_stitch

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def operator_table(demo_data: Path, kafka_broker: str, tmp_path_factory: pytest.TempPathFactory) -> OperatorTable:
    return build(tmp_path_factory.mktemp("operator"), demo_data, kafka_broker)


def sql_rows(config: Path, query: str, out: Path) -> pa.Table:
    """`stitch sql --out x.parquet`: the result with its Arrow types."""
    done = run_stitch("sql", "-c", str(config), query, "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return pq.read_table(out)


def canonical(rows: pa.Table, name: str) -> list[tuple[Any, ...]]:
    """Rows as sorted tuples, after the cast to the metadata table's schema (Spark hands back microseconds and its
    own names for a map's parts)."""
    cast = rows.select(schema(name).names).cast(schema(name))
    return sorted((tuple(repr(v) for v in row.values()) for row in cast.to_pylist()), key=repr)


def test_each_metadata_table_is_the_same_in_sql_and_spark_and_agrees_with_timeline_and_status(
    operator_table: OperatorTable, spark: Any, tmp_path: Path
) -> None:
    from stitchlake.spark import metadata

    config = operator_table.config
    table_path = config.parent / "table"
    before = timeline_names(table_path)
    found: dict[str, pa.Table] = {}
    for name in NAMES:
        via_sql = sql_rows(config, f"SELECT * FROM t${name}", tmp_path / f"{name}.parquet")
        assert via_sql.schema.names == schema(name).names, name
        via_spark = metadata.table(spark, str(config), name)
        assert via_spark.columns == schema(name).names, name
        assert canonical(via_sql, name) == canonical(via_spark.toArrow(), name), name
        assert via_sql.num_rows > 0, f"{name} is empty on a table that has some of everything"
        found[name] = via_sql.cast(schema(name))
    assert timeline_names(table_path) == before, "querying the metadata tables changed the table's metadata"

    # timeline == `stitch timeline show`, instant by instant
    shown = stitch_json("timeline", "show", "-c", str(config), "--limit", "0")["instants"]
    keys = ("instant", "action", "state", "completed", "stream", "rows", "files")
    timeline = [r for r in found["timeline"].to_pylist() if not r["archived"]]
    assert sorted(tuple(r[k] for k in keys) for r in timeline) == sorted(tuple(r[k] for k in keys) for r in shown)
    actions = {r["action"] for r in timeline}
    assert {"deltacommit", "compaction", "savepoint", "rescale"} <= actions, actions

    status = stitch_json("status", "-c", str(config))
    totals = status["totals"]
    files = found["files"].to_pylist()
    assert len(files) == totals["live_files"]
    assert sum(f["bytes"] for f in files) == totals["bytes"]
    assert sum(1 for f in files if f["kind"] == "base") == totals["base_files"]
    assert sum(1 for f in files if f["kind"] == "log") == totals["log_files"]
    assert any(f["savepoints"] == ["before-rescale"] for f in files), "the savepoint pins files"
    assert {f["buckets"] for f in files} == {4, 8}, "files of both layouts: before and after the rescale"

    groups = found["file_groups"].to_pylist()
    assert len(groups) == totals["file_groups"]
    assert sum(g["bytes"] for g in groups) == totals["latest_slice_bytes"]
    assert max(g["bytes"] for g in groups) == totals["largest_file_group_bytes"]
    for partition, health in status["partitions"].items():
        mine = [g for g in groups if g["partition"] == partition]
        assert len(mine) == health["file_groups"] == health["buckets"] == 8, partition
        assert sum(g["log_files"] for g in mine) == health["log_files"], partition
        assert sum(g["base_rows"] for g in mine) == health["rows"], partition
        for group in mine:
            per_stream = dict(group["log_files_per_stream"])
            assert sum(per_stream.values()) == group["log_files"]

    streams = found["streams"].to_pylist()
    for stream, last in status["streams"].items():
        for row in (r for r in streams if r["stream"] == stream):
            assert (row["last_instant"], row["last_completed"], row["last_rows"], row["last_files"]) == (
                last["instant"],
                last["completed"],
                last["rows"],
                last["files"],
            ), stream
    orders = sorted((r for r in streams if r["stream"] == "orders"), key=lambda r: r["partition"])
    assert [r["partition"] for r in orders] == sorted(operator_table.produced)
    for row in orders:
        partition = row["partition"]
        assert row["topic"] == operator_table.topic and row["source"] == "kafka" and row["note"] is None
        assert row["next_offset"] == operator_table.ingested[partition]
        assert row["end_offset"] == operator_table.produced[partition]
        assert row["lag"] == operator_table.produced[partition] - operator_table.ingested[partition]
    assert sum(r["lag"] for r in orders) == LEFT_IN_TOPIC
    landing = {r["stream"]: r for r in streams if r["source"] != "kafka"}
    assert set(landing) == {"payments", "shipments"}
    assert all(r["landing_files"] and r["partition"] is None for r in landing.values())

    listed = stitch_json("savepoint", "list", "-c", str(config))
    [savepoint] = found["savepoints"].to_pylist()
    [expected] = [s for s in listed["savepoints"] if s["name"] == "before-rescale"]
    assert (savepoint["instant"], savepoint["savepoint_of"], savepoint["of_instant"], savepoint["files"]) == (
        expected["instant"],
        expected["savepoint_of"],
        expected["of_instant"],
        expected["files"],
    )
    pinned = [f for f in files if "before-rescale" in f["savepoints"]]
    assert savepoint["bytes"] >= sum(f["bytes"] for f in pinned) > 0

    rescales = found["rescales"].to_pylist()
    assert rescales[0]["instant"] is None and rescales[0]["to_buckets"] == 4
    assert {r["completed"] for r in rescales[1:]} == {status["timeline"]["last_rescale"]}
    assert {(r["from_buckets"], r["to_buckets"]) for r in rescales[1:]} == {(4, 8)}
    assert {r["partition"] for r in rescales[1:]} == set(status["partitions"])


def test_metadata_tables_join_the_table_and_refuse_to_change_anything(
    operator_table: OperatorTable, tmp_path: Path
) -> None:
    """`t$files` by the table's own name too, joined with the table; a query can only read them."""
    config = str(operator_table.config)
    counted = stitch_json(
        "sql",
        "-c",
        config,
        "SELECT kind, count(*) AS n FROM orders_wide$files WHERE latest GROUP BY kind ORDER BY kind",
    )
    assert [r["kind"] for r in counted["records"]] == ["base", "log"]
    joined = stitch_json(
        "sql",
        "-c",
        config,
        "SELECT count(*) AS n FROM t JOIN (SELECT DISTINCT stream FROM t$streams) s ON s.stream = 'orders'",
    )
    assert joined["records"][0]["n"] > 0
    refused = run_stitch("sql", "-c", config, "DELETE FROM t$files", "--json")
    assert refused.returncode == 2, refused.stdout
