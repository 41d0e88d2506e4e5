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

from stitchlake.api import Table
from stitchlake.errors import InputRejected
from stitchlake.jobs.spark_conf import reader_enabled
from tests.support.reads import spark_rows
from tests.support.spark_fixtures import demo_table
from tests.support.tables import new_table_file, write_table_yaml

FORMATS = ("parquet", "json", "csv", "avro")


def sorted_rows(table: pa.Table, key: str = "order_id") -> pa.Table:
    return table.sort_by(key)


def slice_count(table: Table, partition: str | None = None) -> int:
    from stitchlake.reading.filters import prune
    from stitchlake.reading.snapshot import plan_slices

    slices = plan_slices(table.config, table.view(), None, prune(table.config, None))
    return sum(1 for s in slices if partition is None or s.partition == partition)


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
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    originals = sorted((demo_data / "landing" / "orders").glob("*.parquet"))
    _, reference = demo_table(tmp_path / "local", demo_data / "landing")
    reference.ingest("orders")
    expected = sorted_rows(reference.read())
    assert expected.num_rows > 1000 and pc.sum(pc.is_valid(expected.column("currency"))).as_py() > 0

    for fmt in FORMATS:
        landing = tmp_path / f"landing-{fmt}"
        for original in originals:
            convert(original, fmt, landing / "orders")
        _, table = demo_table(tmp_path / fmt, demo_data / "landing", sources={"orders": (fmt, landing / "orders")})
        result = ingest(table, SparkEngine(spark), "orders")
        assert (result.source_files, result.bad_rows) == (len(originals), 0), fmt
        actual = sorted_rows(table.read())
        assert actual.equals(expected), f"{fmt}: the table differs from the one ingested from Parquet"


@pytest.fixture(scope="module")
def stitched(spark: Any, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A table fed one landing file per commit, streams interleaved at random, each stream's files reversed."""
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    _, table = demo_table(tmp_path_factory.mktemp("stitched"), demo_data / "landing")
    streams = ("orders", "payments", "shipments")
    queue = {s: sorted((demo_data / "landing" / s).iterdir(), reverse=True) for s in streams}
    order = [s for s, files in queue.items() for _ in files]
    random.Random(5).shuffle(order)
    for stream in order:
        result = ingest(table, SparkEngine(spark), stream, [str(queue[stream].pop(0))])
        assert result.source_files == 1
    return table


def test_any_order_of_batches_gives_the_ground_truth(stitched: Table, demo_data: Path) -> None:
    from scripts.demo_data import compare

    assert len(stitched.timeline().completed()) == 9
    assert compare(stitched.read(), demo_data / "truth.parquet") == []


def test_spark_read_returns_the_same_rows_as_stitchlake_read(spark: Any, stitched: Table) -> None:
    import stitchlake

    expected = sorted_rows(stitchlake.read(stitched.path))
    frame = spark.read.format("stitchlake").load(stitched.path)
    assert frame.rdd.getNumPartitions() < slice_count(stitched)  # small slices are packed into few tasks
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
        .option("maxPartitionBytes", 1)  # every slice its own input partition, to count them
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
    from scripts.demo_data import compare
    from stitchlake.services.rewrites.compaction import compact
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
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    _bad_payments(tmp_path / "landing" / "payments")
    _, table = demo_table(tmp_path / "t", tmp_path / "landing", bad_rows="quarantine")
    result = ingest(table, SparkEngine(spark), "payments")
    assert (result.rows, result.bad_rows) == (4, 3)
    assert result.quarantine == f".stitch/quarantine/{result.instant}"
    rejected = pq.read_table(table.storage.describe(result.quarantine))  # the folder of the tasks' quarantine files
    reasons = sorted(rejected.column("_reason").to_pylist())
    assert len(reasons) == 3 and any("order_id" in r for r in reasons) and any("pay_ts" in r for r in reasons)
    assert sorted(table.read().column("order_id").to_pylist()) == [1, 3, 5, 6]


def test_bad_rows_fail_the_batch_and_write_nothing(spark: Any, tmp_path: Path) -> None:
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    _bad_payments(tmp_path / "landing" / "payments")
    _, table = demo_table(tmp_path / "t", tmp_path / "landing", bad_rows="fail")
    with pytest.raises(InputRejected, match=r"3 bad rows .*part-0001\.json.*nothing was written"):
        ingest(table, SparkEngine(spark), "payments")
    assert table.timeline().completed() == [] and table.timeline().pending() == []
    assert table.read().num_rows == 0
    assert [p for p in Path(table.path).rglob("*") if p.is_file() and ".stitch" not in p.parts] == []


def test_a_source_missing_a_column_is_rejected_naming_file_and_column(spark: Any, tmp_path: Path) -> None:
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    folder = tmp_path / "landing" / "shipments"
    folder.mkdir(parents=True)
    header, row = "order_id,order_date,carrier,ship_ts", "1,2026-11-20,dhl,2026-11-20T00:00:00Z"
    (folder / "part-0001.csv").write_text(f"{header}\n{row}\n")
    _, table = demo_table(tmp_path / "t", tmp_path / "landing", bad_rows="fail")
    with pytest.raises(InputRejected, match=r"part-0001\.csv: missing column ship_status needed by stream shipments"):
        ingest(table, SparkEngine(spark), "shipments")
    assert table.timeline().completed() == [] and table.timeline().pending() == []
    # Under bad_rows: quarantine the file is set aside whole, with why, and stops blocking its stream.
    _, table = demo_table(tmp_path / "q", tmp_path / "landing", bad_rows="quarantine")
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

    import stitchlake
    from stitchlake.services.rewrites.compaction import compact
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine
    from tests.support.schema_changes import BASE, NESTED_AVRO, add_extra, drop_w

    document = copy.deepcopy(BASE)
    document["table"]["log_format"] = log_format
    document["bad_rows"] = "fail"
    landing = tmp_path / "landing"
    for fmt in ("json", "parquet", "avro"):
        (landing / fmt).mkdir(parents=True)
    document["streams"]["n"]["source"] = {"format": "json", "path": str(landing / "json")}
    document["streams"]["b"]["source"] = {"format": "parquet", "path": str(landing / "parquet")}
    table, _ = new_table_file(tmp_path, document)
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
    config = write_table_yaml(tmp_path, document)
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


# ------------------------------------------------------------- issue 15 and issue 13 point 4: reads from Spark


@pytest.fixture(scope="module")
def history(demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, str]]:
    """A partitioned table with a past worth reading changes of: one landing file per commit (deletes and late
    events among them), a compaction and an erase in between. Returns it with the completion times of interest."""
    _, table = demo_table(tmp_path_factory.mktemp("history"), demo_data / "landing")
    files = {s: sorted((demo_data / "landing" / s).iterdir()) for s in ("orders", "payments", "shipments")}
    times: dict[str, str] = {}

    def ingest(stream: str, number: int) -> str:
        result = table.ingest(stream, [str(files[stream][number])]).result
        assert result.source_files == 1
        return str(result.completed)

    times["first"] = ingest("orders", 0)
    ingest("payments", 0)
    ingest("shipments", 0)
    assert table.compact().done is not None
    times["compacted"] = str(table.timeline().latest_completed().completed)  # type: ignore[union-attr]
    ingest("orders", 1)
    times["before_erase"] = ingest("payments", 1)
    erased = table.read().column("order_id").to_pylist()[:5]
    table.erase(pa.table({"order_id": pa.array(erased, pa.int64())}))
    times["erase"] = str(table.timeline().latest_completed().completed)  # type: ignore[union-attr]
    for stream, number in (("shipments", 1), ("orders", 2), ("payments", 2), ("shipments", 2)):
        ingest(stream, number)
    return table, times


#: (Spark SQL condition, the same as a stitchlake filter): none, partition =, partition IN, key =, key IN, both.
FILTERS: list[tuple[str | None, Any]] = [
    (None, None),
    ("order_date = DATE'2026-11-20'", ["order_date=2026-11-20"]),
    ("order_date IN (DATE'2026-11-21', DATE'2026-11-25')", {"order_date": ["2026-11-21", "2026-11-25"]}),
]


def _key_filters(table: Table) -> list[tuple[str, Any]]:
    keys = sorted(table.read(columns=["order_id"]).column("order_id").to_pylist())
    some = [keys[0], keys[len(keys) // 2], keys[-1]]
    listed = ", ".join(map(str, some))
    return [
        (f"order_id = {keys[7]}", {"order_id": keys[7]}),
        (f"order_id IN ({listed})", {"order_id": some}),
        (f"order_date = DATE'2026-11-21' AND order_id IN ({listed})", {"order_date": "2026-11-21", "order_id": some}),
    ]


def _read(spark: Any, table: Table, where: str | None, **options: Any) -> Any:
    frame = spark.read.format("stitchlake").options(**{k: str(v) for k, v in options.items()}).load(table.path)
    return frame.where(where) if where else frame


def _rows(frame: Any) -> pa.Table:
    return spark_rows(frame).sort_by([("order_id", "ascending")])


def test_packed_read_returns_the_rows_of_the_per_slice_read_with_partition_and_key_filters(
    spark: Any, history: tuple[Table, dict[str, str]]
) -> None:
    """Issue 15: several file slices per task. The packed read, the per-slice read (`maxPartitionBytes` 1: every
    slice its own partition, as before) and `stitchlake.read` return the same rows, and filters still prune."""
    from stitchlake.reading.filters import prune
    from stitchlake.reading.snapshot import plan_slices

    table, _ = history
    every_slice = slice_count(table)
    assert every_slice >= 8
    for where, stitch_filter in FILTERS + _key_filters(table):
        expected = table.read(filter=stitch_filter).sort_by("order_id")
        packed = _read(spark, table, where)
        per_slice = _read(spark, table, where, maxPartitionBytes=1)
        planned = len(plan_slices(table.config, table.view(), None, prune(table.config, stitch_filter)))
        assert per_slice.rdd.getNumPartitions() == max(1, planned), where  # pruned: only those slices are read
        assert planned < every_slice or where is None
        assert packed.rdd.getNumPartitions() <= per_slice.rdd.getNumPartitions(), where
        assert _rows(packed).equals(expected), where
        assert _rows(per_slice).equals(expected), where
    # local[1], and at most 128 MiB a task (each file counting 4 MiB more): a handful of tasks for every slice.
    assert _read(spark, table, None).rdd.getNumPartitions() <= every_slice // 3
    # `minPartitions` (the session's cores by default) spreads a small read once opening files is cheap.
    spread = _read(spark, table, None, openCostInBytes=1, minPartitions=3)
    assert 3 <= spread.rdd.getNumPartitions() < every_slice
    assert _rows(spread).equals(table.read().sort_by("order_id"))
    snapshot = _read(spark, table, None, mode="read_optimized", maxPartitionBytes=1)
    assert _rows(snapshot).equals(table.read(mode="read_optimized").sort_by("order_id"))


def test_register_takes_the_sessions_packing_settings(spark: Any, history: tuple[Table, dict[str, str]]) -> None:
    """A Python data source never sees the session's conf: `register` reads it and bakes it into the class."""
    from stitchlake.spark.session import packing_defaults, register

    table, _ = history
    try:
        spark.conf.set("spark.sql.files.maxPartitionBytes", "1b")
        assert packing_defaults(spark)["maxpartitionbytes"] == "1b"
        register(spark)
        assert _read(spark, table, None).rdd.getNumPartitions() == slice_count(table)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        register(spark)
    assert _read(spark, table, None).rdd.getNumPartitions() <= slice_count(table) // 3


def test_incremental_spark_reads_return_the_changes_of_stitchlake_read(
    spark: Any, history: tuple[Table, dict[str, str]]
) -> None:
    """Issue 13 point 4: `since`/`until` (instant times, ISO times or savepoint names) give `_op` and exactly the
    change rows of `stitchlake.read(since=..., until=...)`: inserts, updates, deletes and erased keys."""
    from stitchlake.errors import UsageError

    table, times = history
    ranges: list[dict[str, Any]] = [
        {"since": times["first"]},
        {"since": times["compacted"], "until": times["erase"]},
        {"since": times["before_erase"], "until": times["erase"]},  # the erase alone: its keys are D
        {"until": times["compacted"]},
    ]
    seen: set[str] = set()
    for options in ranges:
        for where, stitch_filter in [FILTERS[0], FILTERS[1], _key_filters(table)[1]]:
            expected = table.read(filter=stitch_filter, **options).sort_by("order_id")
            frame = _read(spark, table, where, **options)
            assert frame.columns == expected.column_names and frame.columns[-3:] == ["_op", "_commit_time", "_streams"]
            actual = _rows(frame)
            assert actual.num_rows == expected.num_rows, (options, where)
            assert actual.equals(expected), (options, where)
            seen |= set(expected.column("_op").to_pylist())
    assert seen == {"I", "U", "D"}
    erased = table.read(since=times["before_erase"], until=times["erase"])
    assert erased.num_rows == 5 and set(erased.column("_op").to_pylist()) == {"D"}
    with pytest.raises(Exception, match="either as_of"):
        _read(spark, table, None, as_of=times["first"], since=times["first"]).collect()
    with pytest.raises(UsageError):
        table.read(as_of=times["first"], since=times["first"])


def test_sql_tables_and_views_over_a_stitched_table(spark: Any, history: tuple[Table, dict[str, str]]) -> None:
    """`CREATE TABLE t USING stitchlake OPTIONS (path ...)` (or LOCATION) after `register(spark)`, with the
    options kept (Spark hands them to a Python data source only through the schema, see spark/read.py), and
    `CREATE TEMPORARY VIEW ... USING stitchlake OPTIONS (...)`. A catalog table reads the latest state on every
    query."""
    table, times = history
    path = table.path.replace("'", "\\'")
    since = times["compacted"]
    spark.sql("DROP TABLE IF EXISTS sl_snapshot")
    spark.sql("DROP TABLE IF EXISTS sl_located")
    spark.sql("DROP TABLE IF EXISTS sl_changes")
    spark.sql("DROP TABLE IF EXISTS sl_declared")
    spark.sql(f"CREATE TABLE sl_snapshot USING stitchlake OPTIONS (path '{path}')")
    spark.sql(f"CREATE TABLE sl_located USING stitchlake LOCATION '{path}'")
    spark.sql(f"CREATE TABLE sl_changes USING stitchlake OPTIONS (path '{path}', since '{since}')")
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sl_view USING stitchlake OPTIONS (path '{path}', since '{since}')")
    try:
        for name in ("sl_snapshot", "sl_located"):
            assert _rows(spark.table(name)).equals(table.read().sort_by("order_id")), name
            day = spark.sql(f"SELECT * FROM {name} WHERE order_date = DATE'2026-11-21'")
            assert _rows(day).equals(table.read(filter=["order_date=2026-11-21"]).sort_by("order_id"))
        changes = table.read(since=since).sort_by("order_id")
        for name in ("sl_changes", "sl_view"):
            assert spark.table(name).columns[-3:] == ["_op", "_commit_time", "_streams"]
            assert _rows(spark.table(name)).equals(changes), name
        # Each query plans again: a commit made after CREATE TABLE is read.
        late = table.read(columns=["order_id", "order_date"]).slice(0, 3)
        when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        late = late.append_column("carrier", pa.array(["DHL"] * 3)).append_column(
            "ship_status", pa.array(["returned"] * 3)
        )
        table.write("shipments", late.append_column("ship_ts", pa.array([when] * 3, pa.timestamp("us", tz="UTC"))))
        assert _rows(spark.table("sl_snapshot")).equals(table.read().sort_by("order_id"))
        assert spark.sql("SELECT count(*) FROM sl_snapshot WHERE ship_status = 'returned'").collect()[0][0] >= 3
        # A temporary view keeps the read its first query planned (Spark 4.3 caches it with the view's data
        # source): made again, it reads the new commit too.
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sl_view USING stitchlake OPTIONS (path '{path}', since '{since}')")
        assert _rows(spark.table("sl_view")).equals(table.read(since=since).sort_by("order_id"))
        spark.sql(f"CREATE TABLE sl_declared (order_id BIGINT) USING stitchlake OPTIONS (path '{path}')")
        spark.sql(f"CREATE TABLE sl_mistyped (order_id INT) USING stitchlake OPTIONS (path '{path}')")
        if reader_enabled():
            # The JVM reader is handed a declared table's options: it reads the declared columns as the table has
            # them, and a column declared under another type is the user's mistake, said so (not a "damaged file").
            want = table.read(columns=["order_id"]).sort_by("order_id")
            assert _rows(spark.table("sl_declared")).equals(want)
            with pytest.raises(Exception, match="order_id is declared int but the table has it as bigint"):
                spark.table("sl_mistyped").collect()
        else:
            # The Python data source has no way to learn a declared table's path: said so, not an empty read.
            with pytest.raises(Exception, match="no column list"):
                spark.table("sl_declared").collect()
    finally:
        for name in ("sl_snapshot", "sl_located", "sl_changes", "sl_declared", "sl_mistyped"):
            spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql("DROP VIEW IF EXISTS sl_view")
    assert table.read().num_rows > 0  # the tables were EXTERNAL: dropping them left the stitched table alone


def test_spark_ingest_writes_one_log_per_file_group_and_commit(spark: Any, demo_data: Path, tmp_path: Path) -> None:
    """Issue 15 point 2: the read tasks route rows to file groups once; each file group's rows go to one write
    task, which precombines and writes them without routing again. Buckets spread over the write tasks."""
    from stitchlake.io.landing import LandingFile
    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine, balanced, stable_partition

    assert len({stable_partition(("order_date=2026-11-20", f"{b:05d}")) % 4 for b in range(4)}) == 4
    sizes = [9, 1, 1, 1, 8]
    shares = balanced([LandingFile("/", f"f{i}", f"f{i}", size, "v") for i, size in enumerate(sizes)], 2)
    assert sorted(sum(sizes[i] for i, _ in share) for share in shares) == [10, 10]  # largest first, to the lightest
    _, table = demo_table(tmp_path / "spark", demo_data / "landing")
    _, reference = demo_table(tmp_path / "local", demo_data / "landing")
    for stream in ("orders", "payments", "shipments"):
        result = ingest(table, SparkEngine(spark), stream)
        assert result.source_files == 3
        reference.ingest(stream)
        commit = table.timeline().commit(table.timeline().latest_completed())  # type: ignore[arg-type]
        groups = [f.group for f in commit.added_files]
        assert len(groups) == len(set(groups)) > 1  # one log file per file group the commit touched
        # The job's profile: every step of the read and write tasks, recorded in the commit and the result.
        steps = {"read_task_s", "route_task_s", "shuffle_write_s", "shuffle_read_s", "write_task_s", "spark_job_s"}
        assert set(commit.timings) >= steps | {"total_s"} and result.timings == {
            k: v for k, v in commit.timings.items() if k != "total_s"
        }
        assert all(commit.timings[k] >= 0 for k in steps) and commit.timings["spark_job_s"] > 0
    assert sorted_rows(table.read()).equals(sorted_rows(reference.read()))


def test_where_on_spark_compares_floats_as_the_local_read_does(spark: Any) -> None:
    """`stitch read --engine spark --where` (`spark.where.term`) and `stitch read --where`
    (`reading.filters.Condition.expression`) keep the same rows on float columns. Spark's own rules differed: NaN
    equals NaN and is greater than any number, and a `float` column against an untyped literal is widened (0.1
    then matches no float). Both now compare as IEEE 754 does: -0.0 equals 0.0, NaN equals and orders with
    nothing."""
    from stitchlake.reading.filters import Condition
    from stitchlake.spark.where import term

    nan = float("nan")
    f = [-0.0, nan, 1.5, None, 0.0]
    g = [0.1, 0.2, None, 0.1, nan]
    arrow = pa.table({"i": list(range(5)), "f": pa.array(f, pa.float64()), "g": pa.array(g, pa.float32())})
    frame = spark.createDataFrame(list(zip(range(5), f, g, strict=True)), "i int, f double, g float")
    kinds = {"f": ("double", pa.float64()), "g": ("float", pa.float32())}
    expected = {
        ("f", "=", (0.0,)): [0, 4],
        ("f", "=", (nan,)): [],
        ("f", "=", (1.5, nan)): [2],
        ("f", ">", (1.0,)): [2],
        ("f", "<", (nan,)): [],
        ("f", "<=", (1.5,)): [0, 2, 4],
        ("f", "!=", (nan,)): [0, 1, 2, 4],
        ("f", "!=", (0.0,)): [1, 2],
        ("g", "=", (0.1,)): [0, 3],
        ("g", ">", (0.1,)): [1],
        ("g", ">=", (0.2,)): [1],
    }
    for (column, op, values), rows in expected.items():
        condition = Condition(column, op, values)
        spark_type, arrow_type = kinds[column]
        local = sorted(arrow.filter(condition.expression(arrow_type)).column("i").to_pylist())
        remote = sorted(row.i for row in frame.filter(term(condition, spark_type)).collect())
        assert local == rows, (condition, local)
        assert remote == rows, (condition, remote)


def test_where_on_spark_types_its_values_by_the_columns_of_the_reads_time(spark: Any, tmp_path: Path) -> None:
    """`stitch read --engine spark --as-of T --where` typed its values by today's columns: after an alter widened a
    float to a double, `f=0.1` as of before it compared the float 0.1 widened to a double against 0.1 and matched
    nothing, where the local read, typed by the columns of T, matched it."""
    import copy

    import yaml

    from stitchlake.api import open as open_table
    from stitchlake.jobs.requests import SparkReadRequest
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.spark.read_job import read_frame
    from tests.support.tables import new_table_file

    document: dict[str, Any] = {
        "table": {"name": "w", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {"a": {"columns": {"f": "float"}}},
    }
    table, path = new_table_file(tmp_path, document, "t.yaml")
    floats = pa.table({"k": pa.array([1, 2], pa.int64()), "f": pa.array([0.1, 0.5], pa.float32())})
    before = str(table.write("a", floats).completed)
    widened = copy.deepcopy(document)
    widened["streams"]["a"]["columns"]["f"] = "double"
    path.write_text(yaml.safe_dump(widened), encoding="utf-8")
    table = open_table(path)
    alter(table)
    for where in ("f=0.1", "f>0.1"):
        local = sorted(r["k"] for r in table.read(as_of=before, filter=where).to_pylist())
        request = SparkReadRequest(as_of=before, where=(where,))
        remote = sorted(row.k for row in read_frame(spark, table, request).collect())
        assert local == remote == ([1] if where == "f=0.1" else [2]), (where, local, remote)
