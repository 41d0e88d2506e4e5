"""`make bench`: stitchlake's figures against its peers and the physical limit, written to docs/benchmarks.md.

    python -m scripts.bench [--sizes 200000,1000000] [--runs 3] [--no-spark] [--no-s3] [--out docs/benchmarks.md]

Every figure is the median of `--runs` runs (at least 15 for reads shorter than 0.1 s, whose noise 3 runs would
measure), each measured in a fresh process (so its peak memory is its own),
and every result is checked against the workload's ground truth (scripts/bench_workload.py): a fast wrong
answer fails the run (exit 1). The figures replace the block between the markers in the output file
(scripts/bench_report.py writes it); the hand-written analysis around it is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scripts import ROOT, bench_charts
from scripts import bench_workload as workload
from scripts.bench_report import (
    S3_TIMELINE_INSTANTS,
    SHORT_FIGURE_S,
    SHORT_RUNS,
    SLICE_TABLE,
    TIMELINE_INSTANTS,
    Results,
    machine,
    median,
    publish,
    render,
    results_from_json,
    with_charts,
)
from scripts.bench_workload import QUERY

if TYPE_CHECKING:
    from stitchlake.api import Table


# ------------------------------------------------------------------------------------------------ measuring


def peak_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def isolated(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run a measurement in a fresh process, so neither memory nor warm caches of another figure leak in."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        outcome = pool.submit(_guarded, function, *args).result()
    if "crashed" in outcome:
        raise RuntimeError(f"{function.__name__} failed in its process:\n{outcome['crashed']}")
    return outcome


def _guarded(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Exceptions of Spark or pyarrow may not pickle: send the traceback back as text instead."""
    try:
        return function(*args)
    except BaseException:
        import traceback

        return {"crashed": traceback.format_exc()}


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _collect(spark: Any, query: str) -> Any:
    return spark.sql(query).collect()


def check(name: str, actual: Any, truth: Any, columns: list[str] | None = None) -> list[str]:
    """Ground-truth problems of one result, each prefixed with the figure it came from."""
    return [f"{name}: {problem}" for problem in workload.differences(actual, truth, columns)]


def new_table(path: Path, log_format: str = "parquet", **document: Any) -> Table:
    from stitchlake.api import Table
    from stitchlake.config import parse_config

    if path.exists():
        shutil.rmtree(path)
    data = workload.table_document(str(path), log_format)
    data.update(document)
    table = Table(parse_config(data, file=str(path) + ".yaml", base=path.parent))
    table.init()
    return table


def open_table(path: Path) -> Table:
    """A benchmark table (Parquet logs) as its writers open it: by its config (a folder's handle only reads)."""
    from stitchlake.api import Table
    from stitchlake.config import parse_config

    return Table(parse_config(workload.table_document(str(path)), file=str(path) + ".yaml", base=path.parent))


# ---------------------------------------------------------------------------- in-process figures (children)


def write_batches(table: Table, loaded: workload.Workload) -> float:
    """Seconds `Table.write` took for all of the workload's batches (the writes only, not the setup)."""
    elapsed = 0.0
    for stream, batch in loaded.batches:
        took, _ = timed(partial(table.write, stream, batch))
        elapsed += took
    return elapsed


def measure_ingest(data: str, tables: str, log_format: str, runs: int) -> dict[str, Any]:
    """All 12 batches through `Table.write`, a fresh table per run; the last run's table is kept for reads."""
    loaded = workload.load(Path(data), 0, 0)
    seconds = []
    table = None
    for _ in range(runs):
        table = new_table(Path(tables) / f"ingest-{log_format}", log_format)
        seconds.append(write_batches(table, loaded))
    assert table is not None
    problems = check(f"ingest ({log_format})", table.read(), loaded.truth)
    return {"seconds": seconds, "peak_mib": peak_mib(), "problems": problems, "table": table.path}


def repeated(action: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """`runs` timings of `action` (SHORT_RUNS while their median is under SHORT_FIGURE_S), and its last result."""
    seconds: list[float] = []
    result: Any = None
    while len(seconds) < runs or (len(seconds) < SHORT_RUNS and median(seconds) < SHORT_FIGURE_S):
        took, result = timed(action)
        seconds.append(took)
    return seconds, result


def measure_read(table_path: str, data: str, mode: str, runs: int) -> dict[str, Any]:
    truth = workload.load_truth(Path(data))
    table = open_table(Path(table_path))
    table.read(mode=mode)  # warm the page cache: every figure reads from memory, as the Parquet scan does
    seconds, result = repeated(lambda: table.read(mode=mode), runs)
    return {"seconds": seconds, "peak_mib": peak_mib(), "problems": check(f"{mode} read", result, truth)}


def measure_compaction(table_path: str, work: str, data: str, runs: int) -> dict[str, Any]:
    """Compact a copy of the uncompacted table per run; the last copy stays for the read-optimized figure."""
    truth = workload.load_truth(Path(data))
    seconds, rows, copy = [], 0, Path(work)
    for _ in range(runs):
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(table_path, copy)
        table = open_table(copy)
        took, result = timed(table.compact)
        seconds.append(took)
        assert result.done is not None, "the uncompacted table had nothing to compact"
        rows = result.done.rows
    problems = check("compaction", open_table(copy).read(mode="read_optimized"), truth)
    return {"seconds": seconds, "rows": rows, "peak_mib": peak_mib(), "problems": problems, "table": str(copy)}


def measure_parquet_scan(data: str, runs: int) -> dict[str, Any]:
    """The physical limit: the same final rows as one Parquet file, read with pyarrow."""
    import pyarrow.parquet as pq

    path = Path(data) / "final-rows.parquet"
    truth = workload.load_truth(Path(data))
    pq.write_table(truth, path)
    pq.read_table(path)
    seconds, result = repeated(lambda: pq.read_table(path), runs)
    return {"seconds": seconds, "peak_mib": peak_mib(), "problems": check("parquet scan", result, truth)}


# ----------------------------------------------------------------------------------------- Spark figures


def yaml_config(folder: Path, table: Path, landing: Path) -> Path:
    import yaml

    document = workload.table_document(str(table))
    for stream, spec in document["streams"].items():
        spec["source"] = {"format": "parquet", "path": str(landing / stream)}
    path = folder / "bench-spark.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def stitch(*args: str) -> dict[str, Any]:
    """Run the `stitch` CLI with --json; its wall time and its summary."""
    argv = [str(Path(sys.executable).parent / "stitch"), *args, "--json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {"wall": wall, "summary": json.loads(done.stdout)}


def measure_spark_ingest(data: str, work: str, runs: int) -> dict[str, Any]:
    """One `stitch ingest --stream orders` (4 landing files) through spark-submit, a fresh table per run."""
    folder = Path(work)
    walls, inside = [], []
    truth = workload.load_truth(Path(data))
    table_path = folder / "spark-table"
    config = yaml_config(folder, table_path, Path(data) / "landing")
    for _ in range(runs):
        if table_path.exists():
            shutil.rmtree(table_path)
        stitch("init", "-c", str(config))
        result = stitch("ingest", "-c", str(config), "--stream", "orders", "--engine", "spark")
        walls.append(result["wall"])
        inside.append(float(result["summary"]["job_seconds"]))
    columns = list(workload.COLUMNS["orders"])
    problems = check("spark ingest", open_table(table_path).read(columns=["order_id", *columns]), truth, columns)
    return {"wall": walls, "job": inside, "problems": problems}


def _spark(cores: int, conf: dict[str, str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    from stitchlake.jobs.spark_conf import DEFAULT_CONF, reader_conf
    from stitchlake.spark.session import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need our packages
    builder = SparkSession.builder.master(f"local[{cores}]").appName("stitch-bench")
    settings = {
        **DEFAULT_CONF,
        "spark.driver.memory": "4g",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(4 * cores),
        **(conf or {}),
    }
    # The reader a stitchlake session gets (`stitchlake.spark.session`): the JVM reader unless it is switched off.
    for key, value in {**settings, **reader_conf(settings)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return register(spark)


def raw_join(spark: Any, landing: Path) -> Any:
    """What a user writes without stitchlake: dedup each stream by event time, then full outer joins."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def latest(stream: str) -> Any:
        events = spark.read.parquet(str(landing / stream))
        ordering = workload.ORDERING[stream]
        columns = list(workload.COLUMNS[stream])
        if workload.NULLS[stream] == "ignore":  # per column, the latest non-null value
            latest_values = [F.max_by(c, F.when(F.col(c).isNotNull(), F.col(ordering))).alias(c) for c in columns]
            return events.groupBy("order_id").agg(*latest_values)
        rank = F.row_number().over(Window.partitionBy("order_id").orderBy(F.col(ordering).desc()))
        return events.withColumn("_rank", rank).where("_rank = 1").select("order_id", *columns)

    return latest("orders").join(latest("payments"), "order_id", "full").join(latest("shipments"), "order_id", "full")


def expected_answer(truth: Any) -> list[tuple[Any, ...]]:
    import pyarrow.compute as pc

    delivered = pc.cast(pc.fill_null(pc.equal(truth.column("ship_status"), "delivered"), False), "int64")
    grouped = (
        truth.append_column("delivered_flag", delivered)
        .group_by("currency")
        .aggregate([("order_id", "count"), ("paid_amount", "sum"), ("delivered_flag", "sum")])
    )
    return _canonical(zip(*(grouped.column(i).to_pylist() for i in range(4)), strict=True), sums_at=(2, 1))


def _canonical(rows: Any, sums_at: tuple[int, int] = (2, 1)) -> list[tuple[Any, ...]]:
    """Rows as (currency, orders, paid rounded, delivered), sorted; `sums_at` = (paid index, orders index)."""
    paid, count = sums_at
    out = []
    for row in rows:
        values = list(row)
        out.append((values[0] or "", int(values[count]), round(float(values[paid] or 0.0), 2), int(values[-1])))
    return sorted(out)


def reader_name(spark: Any) -> str:
    """Which reader `format("stitchlake")` is in this session (the figures say which one they measured)."""
    from stitchlake.jobs.spark_conf import READER_JAR_NAME

    return "the JVM reader" if READER_JAR_NAME in spark.conf.get("spark.jars", "") else "the Python data source"


def measure_spark_query(data: str, tables: dict[str, str], runs: int) -> dict[str, Any]:
    """The same question asked of the stitched table (via the data source) and of the raw streams."""
    spark = _spark(os.cpu_count() or 2)
    truth = workload.load_truth(Path(data))
    want = expected_answer(truth)
    candidates = {name: spark.read.format("stitchlake").load(path) for name, path in tables.items()}
    candidates["spark_join"] = raw_join(spark, Path(data) / "landing")
    seconds: dict[str, list[float]] = {}
    problems: list[str] = []
    for name, frame in candidates.items():
        frame.createOrReplaceTempView(name)
        query = QUERY.format(view=name)
        spark.sql(query).collect()  # warm-up: JIT, Python workers, page cache
        seconds[name] = []
        for _ in range(runs):
            took, rows = timed(partial(_collect, spark, query))
            seconds[name].append(took)
        got = _canonical(tuple(r) for r in rows)
        if got != want:
            problems.append(f"spark query on {name}: {got[:3]} ... != expected {want[:3]} ...")
    spark.stop()
    return {"seconds": seconds, "problems": problems}


# -------------------------------------------------------------- Spark against its floor (issue 15), one session


def spark_table(path: Path, landing: Path, existing: bool = False) -> Any:
    """A new benchmark table whose streams read the workload's landing folders (`existing`: the one at `path`)."""
    from stitchlake.api import Table
    from stitchlake.config import parse_config

    if path.exists() and not existing:
        shutil.rmtree(path)
    document = workload.table_document(str(path))
    for stream, spec in document["streams"].items():
        spec["source"] = {"format": "parquet", "path": str(landing / stream)}
    table = Table(parse_config(document, file=str(path) + ".yaml", base=path.parent))
    if not existing:
        table.init()
    return table


def sliced_table(path: Path) -> Any:
    """A table of many small file slices (`SLICE_TABLE`), written in one commit: what packing is for."""
    import numpy as np
    import pyarrow as pa

    from stitchlake.api import Table
    from stitchlake.config import parse_config

    if path.exists():
        shutil.rmtree(path)
    rows = SLICE_TABLE["rows"]
    document = {
        "table": {
            "name": "slices",
            "path": str(path),
            "key": {"order_id": "long"},
            "partition_by": {"region": "string"},
            "buckets": SLICE_TABLE["buckets"],
        },
        "streams": {"orders": {"columns": {"amount": "double", "order_ts": "timestamp"}, "ordering": "order_ts"}},
    }
    table = Table(parse_config(document, file=str(path) + ".yaml", base=path.parent))
    table.init()
    ids = np.arange(rows, dtype=np.int64)
    batch = pa.table(
        {
            "order_id": ids,
            "region": pa.array([f"r{i % SLICE_TABLE['partitions']:02d}" for i in range(rows)]),
            "amount": ids.astype(np.float64) / 100,
            "order_ts": pa.array((ids + workload.START_US).astype("datetime64[us]"), workload.TIMESTAMP),
        }
    )
    table.write("orders", batch)
    return table


def _drain(frame: Any) -> None:
    """Materialise every row and column of a DataFrame without collecting it (Spark's `noop` sink)."""
    frame.write.format("noop").mode("overwrite").save()


def arrow_file_source() -> type:
    """A Python data source that does nothing but read Parquet files with pyarrow, one task per file: the floor of
    any Python data source (Spark's Python workers and the Arrow hand-over to the JVM), with no merge at all.

    With the `logs` option (a JSON list, per file, of log files) each task first reads its share of an uncompacted
    table's log files as the stitched reader reads them (every column, page checksums verified) and drops them:
    what any Python merge-on-read of those files pays before it merges anything."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FilesReader(DataSourceReader):
        def __init__(self, files: list[str], logs: list[list[str]]) -> None:
            self.files = files
            self.logs = logs or [[] for _ in files]

        def partitions(self) -> list[InputPartition]:
            return [InputPartition((path, logs)) for path, logs in zip(self.files, self.logs, strict=True)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow.parquet as pq

            path, logs = partition.value
            for log in logs:
                pq.ParquetFile(log, page_checksum_verification=True).read()
            rows = pq.read_table(path, coerce_int96_timestamp_unit="us")  # Spark writes INT96 times
            yield from rows.to_batches(max_chunksize=65536)

    class FilesSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_arrow_files"

        def schema(self) -> Any:
            import pyarrow.parquet as pq
            from pyspark.sql.pandas.types import from_arrow_schema

            return from_arrow_schema(pq.read_schema(self.options["path"].split(",")[0]))

        def reader(self, schema: Any) -> DataSourceReader:
            return FilesReader(self.options["path"].split(","), json.loads(self.options.get("logs", "[]")))

    return FilesSource


def measure_spark_speed(data: str, work: str, uncompacted: str, runs: int, sliced: bool) -> dict[str, Any]:
    """Spark ingest and read against the plain Spark jobs that bound them, in one `local[cores]` session.

    Floors: for ingest, reading the same landing files and writing them as Parquet (what any Spark writer pays);
    for read, `spark.read.parquet` of the same final rows (written by Spark from the stitched read). Each pair is
    run alternately, after one unmeasured round, so neither side gets the warmer JVM."""
    import pyarrow.parquet as pq

    from stitchlake.services.writes.ingest import ingest
    from stitchlake.spark.engine import SparkEngine

    cores = os.cpu_count() or 2
    spark = _spark(cores)
    engine = SparkEngine(spark)
    landing = Path(data) / "landing"
    folder = Path(work) / "spark-speed"
    folder.mkdir(parents=True, exist_ok=True)
    truth = workload.load_truth(Path(data))
    events = sum(pq.ParquetFile(f).metadata.num_rows for f in landing.rglob("*.parquet"))
    problems: list[str] = []

    sliced_figures: dict[str, Any] | None = None
    if sliced:  # first of all: a fresh session's first query pays Spark's Python start-up
        tables = [sliced_table(folder / f"sliced-{n}") for n in range(2)]
        slices = sum(1 for _ in tables[0].view().latest_slices(None))
        expected = tables[0].read().sort_by("order_id")
        frames = [spark.read.format("stitchlake").load(t.path) for t in tables]
        cold, _ = timed(lambda: _drain(frames[0]))  # the session's first Python work
        first, _ = timed(lambda: _drain(frames[1]))  # the first read of another table, Python workers up
        warm = [timed(lambda: _drain(frames[1]))[0] for _ in range(runs)]
        got = frames[1].toArrow().sort_by("order_id").select(expected.column_names)
        if not got.equals(expected):
            problems.append(f"spark read of the {slices}-slice table differs from stitchlake.read")
        sliced_figures = {
            "slices": slices,
            "rows": expected.num_rows,
            "partitions": frames[1].rdd.getNumPartitions(),
            "cold": cold,
            "first": first,
            "warm": warm,
        }

    def floor_ingest() -> None:
        for stream in workload.STREAMS:
            spark.read.parquet(str(landing / stream)).write.mode("overwrite").parquet(str(folder / "floor" / stream))

    table = None

    def stitch_ingest() -> None:
        nonlocal table
        table = spark_table(folder / "table", landing)
        for stream in workload.STREAMS:
            ingest(table, engine, stream)

    seconds: dict[str, list[float]] = {
        name: []
        for name in (
            "floor_ingest",
            "spark_ingest",
            "floor_read",
            "python_floor_read",
            "python_logs_floor_read",
            "spark_read",
        )
    }
    for run in range(runs + 1):  # the first round warms the JVM and the Python workers
        for name, action in (("floor_ingest", floor_ingest), ("spark_ingest", stitch_ingest)):
            took, _ = timed(action)
            if run:
                seconds[name].append(took)
    assert table is not None
    problems += check("spark ingest", open_table(Path(table.path)).read(), truth)
    timeline = table.timeline()
    profile: dict[str, float] = {}
    for instant in timeline.completed():
        for step, spent in timeline.commit(instant).timings.items():
            profile[step] = profile.get(step, 0.0) + spent

    stitched = spark.read.format("stitchlake").load(uncompacted)
    final = folder / "final-rows"
    stitched.write.mode("overwrite").parquet(str(final))
    problems += check("spark read", stitched.toArrow(), truth)
    plain = spark.read.parquet(str(final))
    spark.dataSource.register(arrow_file_source())
    parts = ",".join(str(p) for p in sorted(final.glob("*.parquet")))
    python_floor = spark.read.format("bench_arrow_files").option("path", parts).load()
    finals = parts.split(",")
    shares: list[list[str]] = [[] for _ in finals]
    logs = [
        f"{uncompacted}/{log.path}" for s in open_table(Path(uncompacted)).view().latest_slices(None) for log in s.logs
    ]
    for n, log in enumerate(logs):
        shares[n % len(finals)].append(log)
    logs_floor = spark.read.format("bench_arrow_files").option("path", parts).option("logs", json.dumps(shares)).load()
    readers = (
        ("floor_read", plain),
        ("python_floor_read", python_floor),
        ("python_logs_floor_read", logs_floor),
        ("spark_read", stitched),
    )
    for run in range(runs + 1):
        for name, frame in readers:
            took, _ = timed(partial(_drain, frame))
            if run:
                seconds[name].append(took)
    out: dict[str, Any] = {
        "seconds": seconds,
        "events": events,
        "rows": truth.num_rows,
        "cores": cores,
        "read_partitions": stitched.rdd.getNumPartitions(),
        "reader": reader_name(spark),
        "profile": profile,
        "problems": problems,
    }
    if sliced_figures is not None:
        out["sliced"] = sliced_figures
    spark.stop()
    return out


# ------------------------------------------------------------------------------ a timeline of 10,000 instants


def timeline_table(folder: Path, instants: int) -> Path:
    """A table whose active timeline holds `instants` completed deltacommits, each adding one real log file.

    Writing 10,000 commits through the write path would take a quarter of an hour (every commit loads the
    growing timeline; archival normally keeps it at `archive.keep_instants`), so a few real commits are
    made and then replayed: the same instant and data files under new, increasing times. What `timeline
    show` and `status` read is exactly what 10,000 real commits leave.
    """
    from stitchlake.layout.names import log_name, parse_name
    from stitchlake.timeline.clock import from_millis, to_millis
    from stitchlake.timeline.instant import State, completed_file_name, pending_file_name
    from stitchlake.timeline.timeline import encode_metadata, read_instant_file

    path = folder / f"timeline-{instants}"
    marker = path / ".bench-complete"
    if marker.exists():
        return path
    table = new_table(path, archive={"keep_instants": instants * 2})
    loaded = workload.generate(300, seed=1)
    for stream, batch in loaded.batches[:3]:
        table.write(stream, batch.slice(0, 20))
    timeline = table.timeline()
    templates = [(i, read_instant_file(table.storage, i.file_name)) for i in timeline.completed()]  # raw JSON
    clock = to_millis(max(timeline.all_times())) + 1
    stitch_dir = path / ".stitch" / "timeline"
    for number in range(instants - len(templates)):
        _, meta = templates[number % len(templates)]
        requested, completed = from_millis(clock), from_millis(clock + 1)
        clock += 2
        added = []
        for item in meta["added"]:
            parsed = parse_name(Path(item["path"]).name)
            assert parsed is not None
            name = log_name(item["file_group"], requested, "parquet")
            target = str(Path(item["path"]).parent / name) if "/" in item["path"] else name
            os.link(path / item["path"], path / target)
            added.append({**item, "path": target})
        content = {**meta, "added": added, "requested": requested, "completed": completed}
        body = {"stream": meta["stream"]}
        action = "deltacommit"
        (stitch_dir / pending_file_name(requested, action, State.REQUESTED)).write_bytes(encode_metadata(body))
        (stitch_dir / pending_file_name(requested, action, State.INFLIGHT)).write_bytes(b"{}")
        (stitch_dir / completed_file_name(requested, completed, action)).write_bytes(encode_metadata(content))
    marker.write_text("ok", encoding="utf-8")
    return path


def measure_metadata_commands(folder: str, runs: int) -> dict[str, Any]:
    """`stitch timeline show` and `stitch status` as a user runs them (process start-up included)."""
    path = timeline_table(Path(folder), TIMELINE_INSTANTS)
    newest = max(p.name for p in (path / ".stitch" / "timeline").glob("*_*.deltacommit"))
    out: dict[str, Any] = {"problems": []}
    for name, args in {"timeline_show": ["timeline", "show"], "status": ["status"]}.items():
        walls = []
        for _ in range(runs + 1):
            result = stitch(*args, "--table", str(path))
            walls.append(result["wall"])
        out[name] = walls[1:]  # the first run warms the page cache
        summary = result["summary"]
        if name == "timeline_show" and newest.split("_")[0] not in json.dumps(summary):
            out["problems"].append(f"timeline show does not list the newest instant {newest}")
        if name == "status" and summary["timeline"]["active_instants"] != TIMELINE_INSTANTS:
            out["problems"].append(f"status counts {summary['timeline']['active_instants']} active instants")
    return out


# --------------------------------------------------------------------------------------------- S3 figures


def s3_endpoint(workdir: Path) -> tuple[dict[str, str], Callable[[], None]]:
    """AWS_* variables of an S3 server, and how to stop it: $STITCH_S3_ENDPOINT (with $STITCH_S3_ACCESS_KEY and
    $STITCH_S3_SECRET_KEY) if set, else a throw-away Ceph RADOS Gateway on 127.0.0.1 (scripts/rgw.py)."""
    external = os.environ.get("STITCH_S3_ENDPOINT")
    if external:
        server = {
            "endpoint": external,
            "access_key": os.environ.get("STITCH_S3_ACCESS_KEY", ""),
            "secret_key": os.environ.get("STITCH_S3_SECRET_KEY", ""),
        }
        stop: Callable[[], None] = lambda: None  # noqa: E731
    else:
        from scripts import rgw

        rgw.ensure_installed()
        started = rgw.start(workdir / "rgw", watch_pid=os.getpid())
        server = {"endpoint": started.endpoint, "access_key": started.access_key, "secret_key": started.secret_key}
        stop = lambda: rgw.stop(started.dir)  # noqa: E731
    env = {
        "AWS_ENDPOINT_URL": server["endpoint"],
        "AWS_ACCESS_KEY_ID": server["access_key"],
        "AWS_SECRET_ACCESS_KEY": server["secret_key"],
        "AWS_REGION": os.environ.get("STITCH_S3_REGION", "us-east-1"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return env, stop


def s3_bucket(env: dict[str, str]) -> str:
    """A new bucket for this run's S3 tables."""
    import uuid

    from scripts import rgw

    name = f"bench-{uuid.uuid4().hex[:10]}"
    server = rgw.RgwServer(
        env["AWS_ENDPOINT_URL"],
        env["AWS_ACCESS_KEY_ID"],
        env["AWS_SECRET_ACCESS_KEY"],
        env["AWS_REGION"],
        dir="",
        pids={},
    )
    rgw.create_bucket(server, name)
    return name


def new_s3_table(uri: str, log_format: str = "parquet") -> Any:
    from stitchlake.api import Table
    from stitchlake.config import parse_config
    from stitchlake.storage import storage_for

    storage = storage_for(uri)
    if storage.exists(".stitch/table.json"):
        storage.delete_tree("")
    table = Table(parse_config(workload.table_document(uri, log_format), file="bench-s3.yaml"))
    table.init()
    return table


def measure_s3_ingest(data: str, uri: str, env: dict[str, str], runs: int) -> dict[str, Any]:
    """`measure_ingest` with the table on S3 (a fresh table per run; the last one is kept for the read)."""
    os.environ.update(env)
    loaded = workload.load(Path(data), 0, 0)
    seconds = []
    table = None
    for run in range(runs):
        table = new_s3_table(f"{uri}-{run}")
        seconds.append(write_batches(table, loaded))
    assert table is not None
    problems = check("ingest (S3)", table.read(), loaded.truth)
    return {"seconds": seconds, "peak_mib": peak_mib(), "problems": problems, "table": table.path}


def measure_s3_read(uri: str, data: str, env: dict[str, str], runs: int) -> dict[str, Any]:
    """A snapshot read of the uncompacted S3 table; the first read (cold: nothing cached) is reported apart."""
    import stitchlake

    os.environ.update(env)
    truth = workload.load_truth(Path(data))
    table = stitchlake.open(uri)
    cold, result = timed(table.read)
    seconds = []
    for _ in range(runs):
        took, result = timed(table.read)
        seconds.append(took)
    problems = check("snapshot read (S3)", result, truth)
    return {"seconds": seconds, "cold": cold, "peak_mib": peak_mib(), "problems": problems}


def measure_s3_timeline(workdir: str, uri: str, env: dict[str, str], runs: int) -> dict[str, Any]:
    """`stitch timeline show` as a user runs it on the same 200-instant table, on local disk and on S3."""
    from concurrent.futures import ThreadPoolExecutor

    from stitchlake.storage import LocalStorage, storage_for

    os.environ.update(env)
    local = timeline_table(Path(workdir), S3_TIMELINE_INSTANTS)
    source, target = LocalStorage(str(local)), storage_for(uri)
    files = [info.path for info in source.list_files() if not info.path.startswith(".bench")]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda path: target.write_bytes(path, source.read_bytes(path)), files))
    out: dict[str, Any] = {"problems": []}
    for name, where in (("local", str(local)), ("s3", uri)):
        walls = []
        for _ in range(runs + 1):
            result = stitch("timeline", "show", "--table", where, "-n", "0")
            walls.append(result["wall"])
        out[name] = walls[1:]
        shown = len(result["summary"].get("instants", []))
        if shown != S3_TIMELINE_INSTANTS:
            out["problems"].append(f"timeline show ({name}) lists {shown} instants, not {S3_TIMELINE_INSTANTS}")
    return out


def run_s3(results: Results, workdir: Path, seed: int) -> None:
    """The S3 figures at the smallest size, next to the local ones of the same run."""
    keys = results.sizes[0]
    data, _stats = prepare(workdir, keys, seed)
    say("S3: starting the S3 server" if not os.environ.get("STITCH_S3_ENDPOINT") else "S3: external endpoint")
    try:
        env, stop = s3_endpoint(workdir)
    except Exception as exc:  # no Ceph and no way to install it: say so in the figures instead of failing
        results.s3 = {"skipped": f"no S3 server ({exc})".splitlines()[0][:300]}
        return
    try:
        bucket = s3_bucket(env)
        runs = results.runs
        say(f"S3: {keys:,} keys: in-process ingest into a table on S3, {runs} runs")
        ingest = isolated(measure_s3_ingest, str(data), f"s3://{bucket}/ingest", env, runs)
        say(f"S3: {keys:,} keys: snapshot read of the uncompacted S3 table")
        read = isolated(measure_s3_read, ingest["table"], str(data), env, runs)
        say(f"S3: `stitch timeline show` at {S3_TIMELINE_INSTANTS} instants, local and S3")
        timeline = isolated(measure_s3_timeline, str(workdir), f"s3://{bucket}/timeline-200", env, runs)
        results.s3 = {"keys": keys, "ingest": ingest, "read": read, "timeline": timeline, "endpoint": env}
        results.problems += ingest["problems"] + read["problems"] + timeline["problems"]
    finally:
        stop()


# ---------------------------------------------------------------------------------------------- the run


def prepare(workdir: Path, keys: int, seed: int) -> tuple[Path, dict[str, Any]]:
    """Generate (or reuse) the seeded workload's landing files and truth."""
    data = workdir / f"keys-{keys}-seed-{seed}"
    stats_file = data / "stats.json"
    if not stats_file.exists():
        if data.exists():
            shutil.rmtree(data)
        generated = workload.generate(keys, seed)
        workload.save(generated, data)
        stats_file.write_text(json.dumps(generated.stats), encoding="utf-8")
    return data, json.loads(stats_file.read_text(encoding="utf-8"))


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_size(results: Results, workdir: Path, keys: int, seed: int, spark: bool) -> None:
    runs = results.runs
    data, stats = prepare(workdir, keys, seed)
    results.workloads[keys] = stats
    tables = workdir / f"tables-{keys}"
    tables.mkdir(exist_ok=True)
    figures: dict[str, Any] = {}
    for log_format in ("parquet", "avro"):
        say(f"{keys:,} keys: in-process ingest, {log_format} logs, {runs} runs")
        got = isolated(measure_ingest, str(data), str(tables), log_format, runs)
        figures[f"ingest_{log_format}"] = got
        results.problems += got["problems"]
    uncompacted = figures["ingest_parquet"]["table"]
    say(f"{keys:,} keys: snapshot read of the uncompacted table")
    figures["snapshot"] = isolated(measure_read, uncompacted, str(data), "snapshot", runs)
    say(f"{keys:,} keys: compaction")
    figures["compaction"] = isolated(measure_compaction, uncompacted, str(tables / "compacted"), str(data), runs)
    compacted = figures["compaction"]["table"]
    say(f"{keys:,} keys: read-optimized read, plain Parquet scan")
    figures["read_optimized"] = isolated(measure_read, compacted, str(data), "read_optimized", runs)
    figures["parquet_scan"] = isolated(measure_parquet_scan, str(data), runs)
    for name in ("snapshot", "compaction", "read_optimized", "parquet_scan"):
        results.problems += figures[name]["problems"]
    results.figures[keys] = figures
    if spark and "ingest" not in results.spark:
        say(f"{keys:,} keys: one `stitch ingest` through spark-submit, {runs} runs")
        results.spark["ingest"] = measure_spark_ingest(str(data), str(tables), runs)
        results.spark["ingest_keys"] = keys
        results.problems += results.spark["ingest"]["problems"]
    if spark:
        say(f"{keys:,} keys: Spark ingest and read against plain Spark jobs, {runs} runs")
        speed = isolated(measure_spark_speed, str(data), str(tables), uncompacted, runs, "sliced" not in results.spark)
        results.spark.setdefault("speed", {})[keys] = speed
        if "sliced" in speed:
            results.spark["sliced"] = speed["sliced"]
        results.problems += speed["problems"]
        say(f"{keys:,} keys: stitched query vs the Spark join of the raw streams")
        query_tables = {"stitched_uncompacted": uncompacted, "stitched_compacted": compacted}
        query = isolated(measure_spark_query, str(data), query_tables, runs)
        results.spark.setdefault("query", {})[keys] = query["seconds"]
        results.problems += query["problems"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="200000,1000000", help="comma-separated key counts (first: targets)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the median is reported)")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--workdir", default=str(ROOT / "bench-data"), help="workloads and tables (reused)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--no-spark", action="store_true", help="skip the spark-submit and Spark-join figures")
    parser.add_argument("--no-metadata", action="store_true", help="skip the 10,000-instant timeline figures")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 figures (they start a local S3 server)")
    parser.add_argument("--json", default=None, help="also write every figure as one JSON object to this path")
    bench_charts.add_arguments(parser, "--json report")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = bench_charts.saved_report(args)
        loaded = results_from_json(saved["results"])
        block = with_charts(render(loaded, saved["arguments"]), loaded, args)
        publish(Path(args.out), block)
        print(block)
        return 0
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(","))
    results = Results(sizes=sizes, runs=max(1, args.runs))
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for keys in sizes:
        run_size(results, workdir, keys, args.seed, spark=not args.no_spark)
    if not args.no_metadata:
        say(f"metadata commands on a {TIMELINE_INSTANTS:,}-instant timeline")
        results.metadata = isolated(measure_metadata_commands, str(workdir), results.runs)
        results.problems += results.metadata["problems"]
    if not args.no_s3:
        run_s3(results, workdir, args.seed)
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    results.header = machine()
    if args.json:
        saved = {"arguments": shown, "results": asdict(results)}
        Path(args.json).write_text(json.dumps(saved, indent=1, default=str), encoding="utf-8")
    block = with_charts(render(results, shown), results, args)
    publish(Path(args.out), block)
    print(block)
    say(f"done in {time.perf_counter() - started:.0f} s; figures written to {args.out}")
    if results.problems:
        print(f"FAILED: {len(results.problems)} result(s) differ from the ground truth", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
