"""Spark engine, in one real in-process session: source formats, batch order, the data source, bad rows.

These run the ingest job on a `SparkEngine`, as the `stitch ingest` spark-submit job does, so the code is the
job's; the CLI and process-level behaviour (concurrent jobs, kills, exit codes) is in test_spark_jobs.py.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from spark_fixtures import write_config

from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.errors import InputRejected

FORMATS = ("parquet", "json", "csv", "avro")


def sorted_rows(table: pa.Table, key: str = "order_id") -> pa.Table:
    return table.sort_by(key)


def spark_rows(frame: Any) -> pa.Table:
    """A Spark DataFrame as Arrow, with Spark's zone-less timestamps put back in UTC for comparison."""
    table = frame.toArrow()
    columns = {}
    for field in table.schema:
        column = table.column(field.name)
        if pa.types.is_timestamp(field.type):
            column = column.cast(pa.timestamp("us", tz="UTC"))
        columns[field.name] = column
    return pa.table(columns)


def slice_count(table: Table, partition: str | None = None) -> int:
    from stitchlake.reader import plan_slices, prune

    slices = plan_slices(table.config, table.view(), None, prune(table.config, None))
    return sum(1 for s in slices if partition is None or s.partition == partition)


def new_table(folder: Path, landing: Path, **changes: Any) -> Table:
    table = open_table(str(write_config(folder, landing, **changes)))
    table.init()
    return table


# ------------------------------------------------------------------------------------- format conversion


def _text(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _avro_schema(schema: pa.Schema) -> dict[str, Any]:
    kinds = {
        pa.int64(): "long",
        pa.float64(): "double",
        pa.string(): "string",
        pa.date32(): {"type": "int", "logicalType": "date"},
    }
    fields = []
    for field in schema:
        kind = kinds.get(field.type) or {"type": "long", "logicalType": "timestamp-micros"}
        fields.append({"name": field.name, "type": ["null", kind]})
    return {"type": "record", "name": "orders", "fields": fields}


def convert(source: Path, fmt: str, out: Path) -> None:
    """Write the rows of a Parquet landing file as `fmt`, the way an upstream system would."""
    import fastavro

    table = pq.read_table(source)
    rows = table.to_pylist()
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{source.stem}.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, target)
    elif fmt == "json":
        lines = [json.dumps({k: _text(v) for k, v in row.items()}) + "\n" for row in rows]
        target.write_text("".join(lines), encoding="utf-8")
    elif fmt == "csv":
        with open(target, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=table.column_names)
            writer.writeheader()
            writer.writerows({k: "" if v is None else _text(v) for k, v in row.items()} for row in rows)
    else:
        with open(target, "wb") as handle:
            fastavro.writer(handle, _avro_schema(table.schema), rows)


# ------------------------------------------------------------------------------------------------- tests


def test_each_source_format_gives_the_same_table(spark: Any, demo_data: Path, tmp_path: Path) -> None:
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    originals = sorted((demo_data / "landing" / "orders").glob("*.parquet"))
    reference = new_table(tmp_path / "local", demo_data / "landing")
    reference.ingest("orders")
    expected = sorted_rows(reference.read())
    assert expected.num_rows > 1000 and pc.sum(pc.is_valid(expected.column("currency"))).as_py() > 0

    for fmt in FORMATS:
        landing = tmp_path / f"landing-{fmt}"
        for original in originals:
            convert(original, fmt, landing / "orders")
        table = new_table(tmp_path / fmt, demo_data / "landing", sources={"orders": (fmt, landing / "orders")})
        result = ingest(table, SparkEngine(spark), "orders")
        assert (result.source_files, result.bad_rows) == (len(originals), 0), fmt
        actual = sorted_rows(table.read())
        assert actual.equals(expected), f"{fmt}: the table differs from the one ingested from Parquet"


@pytest.fixture(scope="module")
def stitched(spark: Any, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A table fed one landing file per commit, streams interleaved at random, each stream's files reversed."""
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    table = new_table(tmp_path_factory.mktemp("stitched"), demo_data / "landing")
    streams = ("orders", "payments", "shipments")
    queue = {s: sorted((demo_data / "landing" / s).iterdir(), reverse=True) for s in streams}
    order = [s for s, files in queue.items() for _ in files]
    random.Random(5).shuffle(order)
    for stream in order:
        result = ingest(table, SparkEngine(spark), stream, [str(queue[stream].pop(0))])
        assert result.source_files == 1
    return table


def test_any_order_of_batches_gives_the_ground_truth(stitched: Table, demo_data: Path) -> None:
    from demo_data import compare

    assert len(stitched.timeline().completed()) == 9
    assert compare(stitched.read(), demo_data / "truth.parquet") == []


def test_spark_read_returns_the_same_rows_as_stitchlake_read(spark: Any, stitched: Table) -> None:
    import stitchlake

    expected = sorted_rows(stitchlake.read(stitched.path))
    frame = spark.read.format("stitchlake").load(stitched.path)
    assert frame.rdd.getNumPartitions() == slice_count(stitched) > 1  # one input partition per file slice
    actual = sorted_rows(spark_rows(frame))
    assert actual.schema.names == expected.schema.names
    assert actual.equals(expected)


def test_spark_read_prunes_columns_and_pushes_partition_filters(spark: Any, stitched: Table) -> None:
    import stitchlake

    day = dt.date(2026, 11, 20)
    every = stitchlake.read(stitched.path, columns=["order_id", "order_date", "pay_status"])
    expected = sorted_rows(every.filter(pc.equal(every.column("order_date"), pa.scalar(day))))
    frame = (
        spark.read.format("stitchlake")
        .option("config", stitched.config.source_file)
        .load(stitched.path)
        .select("order_id", "order_date", "pay_status")
        .where(f"order_date = DATE'{day.isoformat()}'")
    )
    # Pushed down: only that day's file slices become input partitions.
    assert frame.rdd.getNumPartitions() == slice_count(stitched, f"order_date={day.isoformat()}") > 0
    actual = sorted_rows(spark_rows(frame))
    assert 0 < actual.num_rows < stitchlake.read(stitched.path).num_rows
    assert actual.equals(expected)


def test_spark_compaction_then_read_optimized_equals_snapshot(spark: Any, stitched: Table, demo_data: Path) -> None:
    from demo_data import compare

    from stitchlake.services.compaction import compact
    from stitchlake.spark.engine import SparkEngine

    before = sorted_rows(stitched.read())
    result = compact(stitched, engine=SparkEngine(spark))
    assert result is not None and result.file_groups == slice_count(stitched)
    optimized = spark.read.format("stitchlake").option("mode", "read_optimized").load(stitched.path)
    assert sorted_rows(spark_rows(optimized)).equals(before)
    assert compare(stitched.read(), demo_data / "truth.parquet") == []


# ------------------------------------------------------------------------------------------------ bad rows


def _bad_payments(folder: Path) -> Path:
    """A JSON landing file with 4 good rows and 3 bad ones (null key, unparsable timestamp, null ordering)."""
    names = ("order_id", "order_date", "pay_status", "paid_amount", "pay_ts")
    values = [
        (1, "2026-11-20", "paid", 1.5, "2026-11-20T10:00:00Z"),
        (None, "2026-11-20", "paid", 2.0, "2026-11-20T10:00:00Z"),
        (2, "2026-11-20", "paid", 2.5, "yesterday"),
        (3, "2026-11-21", "failed", None, "2026-11-21T01:00:00Z"),
        (4, "2026-11-21", "paid", 9.0, None),
        (5, "2026-11-21", None, 4.0, "2026-11-21T02:00:00Z"),
        (6, "2026-11-22", "paid", 6.0, "2026-11-22T02:00:00Z"),
    ]
    rows = [dict(zip(names, v, strict=True)) for v in values]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "part-0001.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_bad_rows_are_quarantined_with_their_reason(spark: Any, tmp_path: Path) -> None:
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    _bad_payments(tmp_path / "landing" / "payments")
    table = new_table(tmp_path / "t", tmp_path / "landing", bad_rows="quarantine")
    result = ingest(table, SparkEngine(spark), "payments")
    assert (result.rows, result.bad_rows) == (4, 3)
    assert result.quarantine == f".stitch/quarantine/{result.instant}"
    rejected = pq.read_table(table.storage.describe(result.quarantine))  # the folder of the tasks' quarantine files
    reasons = sorted(rejected.column("_reason").to_pylist())
    assert len(reasons) == 3 and any("order_id" in r for r in reasons) and any("pay_ts" in r for r in reasons)
    assert sorted(table.read().column("order_id").to_pylist()) == [1, 3, 5, 6]


def test_bad_rows_fail_the_batch_and_write_nothing(spark: Any, tmp_path: Path) -> None:
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    _bad_payments(tmp_path / "landing" / "payments")
    table = new_table(tmp_path / "t", tmp_path / "landing", bad_rows="fail")
    with pytest.raises(InputRejected, match=r"3 bad rows .*part-0001\.json.*nothing was written"):
        ingest(table, SparkEngine(spark), "payments")
    assert table.timeline().completed() == [] and table.timeline().pending() == []
    assert table.read().num_rows == 0
    assert [p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts] == []


def test_a_source_missing_a_column_is_rejected_naming_file_and_column(spark: Any, tmp_path: Path) -> None:
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    folder = tmp_path / "landing" / "shipments"
    folder.mkdir(parents=True)
    header, row = "order_id,order_date,carrier,ship_ts", "1,2026-11-20,dhl,2026-11-20T00:00:00Z"
    (folder / "part-0001.csv").write_text(f"{header}\n{row}\n")
    table = new_table(tmp_path / "t", tmp_path / "landing", bad_rows="fail")
    with pytest.raises(InputRejected, match=r"part-0001\.csv: missing column ship_status needed by stream shipments"):
        ingest(table, SparkEngine(spark), "shipments")
    assert table.timeline().completed() == [] and table.timeline().pending() == []
    # Under bad_rows: quarantine the file is set aside whole, with why, and stops blocking its stream.
    table = new_table(tmp_path / "q", tmp_path / "landing", bad_rows="quarantine")
    result = ingest(table, SparkEngine(spark), "shipments")
    assert (result.source_files, result.rows, result.quarantined_files) == (1, 0, 1)
    [rejected] = table.timeline().commit(table.timeline().completed()[0]).quarantined_files  # type: ignore[attr-defined]
    assert rejected.name == "part-0001.csv" and "missing column ship_status" in rejected.reason
    assert ingest(table, SparkEngine(spark), "shipments").source_files == 0


# ------------------------------------------------------------------------------------ tables that change


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
def test_spark_ingests_nested_columns_compacts_across_alters_and_reports_each_schema(
    spark: Any, tmp_path: Path, log_format: str
) -> None:
    """Issue 11 on the Spark engine: nested columns from JSON, Parquet and Avro landing files; files written under
    older schema versions compacted into the latest one (a dropped column is no longer carried); the data source
    reports the current schema, and the old one with `as_of`."""
    import copy

    import fastavro
    from test_schema_evolution import BASE, NESTED_AVRO, add_extra, drop_w, write_yaml

    import stitchlake
    from stitchlake.services.alter import alter
    from stitchlake.services.compaction import compact
    from stitchlake.services.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    document = copy.deepcopy(BASE)
    document["table"]["log_format"] = log_format
    document["bad_rows"] = "fail"
    landing = tmp_path / "landing"
    for fmt in ("json", "parquet", "avro"):
        (landing / fmt).mkdir(parents=True)
    document["streams"]["n"]["source"] = {"format": "json", "path": str(landing / "json")}
    document["streams"]["b"]["source"] = {"format": "parquet", "path": str(landing / "parquet")}
    table = stitchlake.open(write_yaml(tmp_path, document))
    table.init()
    nested = [{"k": 1, "tags": ["x", "y"], "info": {"x": 1, "y": "u"}}, {"k": 2, "tags": [], "info": None}]
    (landing / "json" / "f1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nested))
    pq.write_table(
        pa.table({"k": [1, 2], "op": ["I", "I"], "w": [10, 20], "d": pa.array([1, 2], pa.decimal128(10, 2))}),
        landing / "parquet" / "b1.parquet",
    )
    engine = SparkEngine(spark)
    assert ingest(table, engine, "n").rows == 2
    assert ingest(table, engine, "b").rows == 2
    before = table.timeline().latest_completed()
    assert before is not None

    add_extra(document)
    drop_w(document)
    document["streams"]["n"]["source"] = {"format": "avro", "path": str(landing / "avro")}  # a source change
    config = write_yaml(tmp_path, document)
    alter(stitchlake.open(config))
    table = stitchlake.open(config)
    with open(landing / "avro" / "f2.avro", "wb") as handle:
        fastavro.writer(
            handle, fastavro.parse_schema(NESTED_AVRO), [{"k": 2, "tags": ["z"], "info": {"x": 5, "y": "v"}}]
        )
    assert ingest(table, engine, "n").rows == 1

    result = compact(table, engine=engine)
    assert result is not None
    bases = [f for f in table.view().live_files() if f.kind == "base"]
    assert bases and all("w" not in pq.read_schema(tmp_path / "table" / f.path).names for f in bases)
    expected = stitchlake.read(config).sort_by("k")
    assert expected.column("tags").to_pylist() == [["x", "y"], ["z"]]
    assert expected.column("extra").to_pylist() == ["dflt", "dflt"]  # stream a never wrote them: its default
    frame = spark.read.format("stitchlake").option("config", str(config)).load(str(tmp_path / "table"))
    assert frame.columns == expected.column_names and "w" not in frame.columns
    assert spark_rows(frame).sort_by("k").to_pylist() == expected.to_pylist()
    old = spark.read.format("stitchlake").option("as_of", before.completed).load(str(tmp_path / "table"))
    assert "w" in old.columns and "extra" not in old.columns
    assert sorted(r["w"] for r in old.collect()) == [10, 20]
