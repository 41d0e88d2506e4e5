"""One system's part of `make bench-peers`, run in a process of its own under its Spark environment.

    python -m scripts.peer_job SYSTEM DATA WORK OUT.json [WARM_READS [FRESH]]
    python -m scripts.peer_job --fresh-read SYSTEM DATA WORK OUT.json      # (started by the first, see below)

`bench_peers.py` starts this with the pinned PySpark of the system's environment first on the path
(`spark_envs.Installed.environ`). It builds one fresh `local[2]` session with the settings every system shares
(`COMMON_CONF`) plus the system's own, then measures, in this order: the ingest of the workload's 12 batches
(streams taking turns, as `make bench` commits them), the snapshot read of the uncompacted table (every column into
Spark's `noop` sink, then one aggregation, each timed as its first run and warm: the median of WARM_READS more,
default 3), the compaction, and the same reads after it. The table's rows are also written as Parquet (untimed) under
WORK/answers/, for the driver to count wrong cells against the ground truth.

The session's first read is not a cold one for every system: a `MERGE INTO` reads the table it merges into, so
Iceberg's and Delta's sessions have run their scan of the table twelve times before it, where stitchlake's ingest
never reads the table. So before each pair of reads the job also starts a **new session in a process of its own**
(`--fresh-read`, the same environment) that reads the table as a dashboard's or a downstream job's session does:
its session start, then every column, then the aggregation, each that session's first; its own peak memory is
reported apart (bench_peers leaves that process out of the job's tree).

Each system is a module `peer_<system>.py` with `CONF` (its session settings), `VERSIONS` (its own, reported beside
Spark's) and a class `Job` with `ingest_batch`, `frame` (the table as a DataFrame of the wide table's columns),
`compact` and `path`, made as `Job(spark, work, data)` to create the table, or with `existing=True` to read the one
the job made (the new session's reader). The formats whose table Spark SQL creates build theirs on `SparkTableJob`.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from scripts import bench_workload as workload
from scripts import module_argv
from scripts.bench_workload import QUERY

SYSTEMS = ("stitchlake", "hudi", "paimon", "delta", "iceberg")
#: The settings every system's session shares (the issue: same driver memory and shuffle partitions).
MASTER = "local[2]"
COMMON_CONF = {
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    # The answers written for the ground-truth check: microsecond timestamps, not Spark 3's INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
#: The wide table's columns, in the ground truth's order.
WIDE = [f.name for f in workload.TRUTH_SCHEMA]
SQL_TYPES = {"long": "BIGINT", "double": "DOUBLE", "string": "STRING", "timestamp": "TIMESTAMP"}


#: The argument that makes this module a new session's reader (and marks its process for bench_peers' sampler).
FRESH_READ = "--fresh-read"
#: The tables a new session reads by default (FRESH: a comma-separated subset, empty for none).
FRESH_STATES = ("uncompacted", "compacted")


class Job(Protocol):
    def ingest_batch(self, stream: str, file: Path) -> None: ...
    def frame(self) -> Any: ...
    def compact(self) -> None: ...
    def path(self) -> Path: ...


def sql_type(column: str) -> str:
    """The SQL type of a wide-table column."""
    for stream in workload.STREAMS:
        if column in workload.COLUMNS[stream]:
            return SQL_TYPES[workload._type_name(workload.COLUMNS[stream][column][0])]
    return "BIGINT"  # the key


def table_columns(versions: Iterable[str] = ()) -> str:
    """The wide table's columns as a SQL column list, then the `versions` columns (`_v_<column>`) as TIMESTAMPs."""
    return ", ".join([*(f"{c} {sql_type(c)}" for c in WIDE), *(f"{c} TIMESTAMP" for c in versions)])


def sql_properties(properties: dict[str, str]) -> str:
    """`properties` as the list a `TBLPROPERTIES (...)` clause takes."""
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())


def landing_batches(data: Path) -> list[tuple[str, Path]]:
    """The workload's landing files in commit order (streams take turns, as `make bench` writes them)."""
    return workload.landing_files(data)


def latest_per_key(events: Any, stream: str, versions: bool = False) -> Any:
    """A batch deduplicated the way the stream's rule merges it: one row per key.

    `nulls: overwrite`: the event with the greatest ordering value. `nulls: ignore`: per column the newest non-null
    value, the ordering column its maximum; with `versions`, also `_v_<column>`, the ordering value each column's
    value came from (what a MERGE needs to honour the rule against the table)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordering = workload.ORDERING[stream]
    columns = list(workload.COLUMNS[stream])
    if workload.NULLS[stream] == "overwrite":
        rank = F.row_number().over(Window.partitionBy("order_id").orderBy(F.col(ordering).desc()))
        return events.withColumn("_rank", rank).where("_rank = 1").select("order_id", *columns)
    aggregates = []
    for column in columns:
        if column == ordering:
            aggregates.append(F.max(ordering).alias(ordering))
            continue
        seen = F.when(F.col(column).isNotNull(), F.col(ordering))
        aggregates.append(F.max_by(column, seen).alias(column))
        if versions:
            aggregates.append(F.max(seen).alias(f"_v_{column}"))
    return events.groupBy("order_id").agg(*aggregates)


def version_columns() -> list[str]:
    """The extra columns a MERGE-based table keeps for `nulls: ignore` streams: per column, the ordering value its
    value came from (without them a late non-null value could not be placed against a newer null)."""
    return [
        f"_v_{c}"
        for s in workload.STREAMS
        if workload.NULLS[s] == "ignore"
        for c in workload.COLUMNS[s]
        if c != workload.ORDERING[s]
    ]


def merge_sql(target: str, source: str, stream: str) -> str:
    """One `MERGE INTO` of a deduplicated batch (`latest_per_key(..., versions=True)`) that honours the stream's
    ordering and null rule and touches only the stream's columns."""
    ordering = workload.ORDERING[stream]
    columns = list(workload.COLUMNS[stream])
    inserted = ["order_id", *columns]
    if workload.NULLS[stream] == "overwrite":
        newer = f"(t.{ordering} IS NULL OR s.{ordering} > t.{ordering})"
        sets = ", ".join(f"t.{c} = s.{c}" for c in columns)
    else:
        wins = {
            c: f"(s.{c} IS NOT NULL AND (t._v_{c} IS NULL OR s._v_{c} > t._v_{c}))" for c in columns if c != ordering
        }
        newer = "(" + " OR ".join([f"t.{ordering} IS NULL OR s.{ordering} > t.{ordering}", *wins.values()]) + ")"
        parts = [f"t.{ordering} = greatest(t.{ordering}, s.{ordering})"]
        for c, won in wins.items():
            parts.append(f"t.{c} = CASE WHEN {won} THEN s.{c} ELSE t.{c} END")
            parts.append(f"t._v_{c} = CASE WHEN {won} THEN s._v_{c} ELSE t._v_{c} END")
        sets = ", ".join(parts)
        inserted += [f"_v_{c}" for c in wins]
    return (
        f"MERGE INTO {target} t USING {source} s ON t.order_id = s.order_id "
        f"WHEN MATCHED AND {newer} THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(inserted)}) VALUES ({', '.join('s.' + c for c in inserted)})"
    )


def widened(frame: Any, stream: str) -> Any:
    """A stream's rows with every wide-table column: the other streams' columns as typed nulls."""
    from pyspark.sql import functions as F

    own = set(workload.COLUMNS[stream]) | {"order_id"}
    return frame.select(*[F.col(c) if c in own else F.lit(None).cast(sql_type(c)).alias(c) for c in WIDE])


class SparkTableJob:
    """A `Job` whose table Spark SQL creates and writes (Delta, Iceberg, Hudi, Paimon). What `run` and
    `read_in_new_session` ask of every such format is here once: the table's folder under WORK, the session settings
    that point at it (set by the writer and a new session's reader alike), and the table created only by the job
    that writes it. Each format says its folder, its settings and its CREATE; `merge_view` is the batch a MERGE
    reads."""

    #: The table's folder under WORK (for a catalog, its warehouse).
    folder_name: ClassVar[str]

    def __init__(self, spark: Any, work: Path, data: Path, existing: bool = False) -> None:
        self.spark = spark
        self.folder = work / self.folder_name
        for key, value in self.settings().items():
            spark.conf.set(key, value)
        if not existing:
            self.create()

    def settings(self) -> dict[str, str]:
        """Session settings the table needs, set as the job is made (a catalog's warehouse is known only then)."""
        return {}

    def create(self) -> None:
        """Create the empty table."""
        raise NotImplementedError

    def path(self) -> Path:
        return self.folder

    def merge_view(self, stream: str, file: Path) -> str:
        """One landing file deduplicated by the stream's rule, with the `_v_` versions a MERGE needs
        (`latest_per_key(..., versions=True)`), as a temporary view; returns the view's name."""
        latest_per_key(self.spark.read.parquet(str(file)), stream, versions=True).createOrReplaceTempView("batch")
        return "batch"


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def session(conf: dict[str, str], app: str) -> Any:
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(MASTER).appName(app)
    jars = os.environ.get("STITCH_SPARK_JARS")
    if jars:
        builder = builder.config("spark.jars", jars)
    for key, value in {**COMMON_CONF, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def drain(frame: Any) -> None:
    """Materialise every row and column without collecting them: Spark's `noop` sink."""
    frame.write.format("noop").mode("overwrite").save()


def hash_every_column(frame: Any) -> None:
    """Materialise every column by hashing all of them, the hashes folded with `bit_xor`: for a table whose scans
    the `noop` sink refuses (Delta with deletion vectors, `peer_delta.py`)."""
    from pyspark.sql import functions as F

    frame.agg(F.bit_xor(F.xxhash64(*frame.columns))).collect()


#: Warm reads after the first (`bench_peers.py --warm-reads`): each warm figure is their median.
WARM_READS = 3


def first_and_warm(action: Callable[[], Any], warm_reads: int = WARM_READS) -> tuple[float, float]:
    """The seconds of `action`'s first run, and the median of `warm_reads` runs after it: a job that reads a table
    once sees the first (a session's first read of a table pays its planner's and workers' start-up), a dashboard
    the warm."""
    first = timed(action)
    return first, statistics.median(timed(action) for _ in range(max(1, warm_reads)))


def aggregate(spark: Any, job: Job) -> list[Any]:
    """The benchmark's aggregation (bench_workload.QUERY) over a new DataFrame of the table, collected."""
    job.frame().createOrReplaceTempView("peer_read")
    rows: list[Any] = spark.sql(QUERY.format(view="peer_read")).collect()
    return rows


def scan_lines(frame: Any) -> list[str]:
    """The scan nodes of a query's physical plan: which reader, and which columns it reads (issue 35: the
    aggregation's only)."""
    plan = str(frame._jdf.queryExecution().executedPlan().toString())
    return [line.strip(" :+-") for line in plan.splitlines() if "Scan " in line]


def aggregation_scan(spark: Any, job: Job, work: Path) -> list[str]:
    """The aggregation's scan nodes (untimed), the work folder's path shortened to WORK."""
    job.frame().createOrReplaceTempView("peer_read")
    return [line.replace(str(work), "WORK") for line in scan_lines(spark.sql(QUERY.format(view="peer_read")))]


def measure_read(spark: Any, job: Job, answer: Path, warm_reads: int = WARM_READS) -> dict[str, Any]:
    """Every column into the `noop` sink, then the aggregation, each timed first and warm (a new DataFrame of the
    table for every read, as a new query would build); the first read's rows are written untimed for the check,
    and the aggregation's scan nodes kept."""
    sink = getattr(job, "drain", drain)
    noop_first, noop_warm = first_and_warm(lambda: sink(job.frame()), warm_reads)
    rows: list[Any] = []

    def query() -> None:
        rows[:] = aggregate(spark, job)

    query_first, query_warm = first_and_warm(query, warm_reads)
    job.frame().write.mode("overwrite").parquet(str(answer))
    return {
        "noop_s": noop_first,
        "noop_warm_s": noop_warm,
        "query_s": query_first,
        "query_warm_s": query_warm,
        "query_rows": [list(r) for r in rows],
        "aggregation_scan": aggregation_scan(spark, job, answer.parent.parent),
    }


def process_tree(root: int, leave_out: str | None = None) -> list[int]:
    """A process and all its descendants (from /proc; vanished ones skipped); with `leave_out`, without the subtree
    of any process whose command line holds that argument."""
    pids, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            if leave_out is not None and pid != root:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if leave_out.encode() in cmdline.read().split(b"\0"):
                        continue
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # the process ended
        pids.append(pid)
        for task in tasks:
            try:  # a thread that ended meanwhile (a JVM's come and go) hides no process
                with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                    todo.extend(int(c) for c in children.read().split())
            except (OSError, ValueError):
                continue
    return pids


def peak_tree_mib() -> float:
    """The peak resident memory of this process and its descendants alive now (each one's own peak, summed)."""
    total = 0
    for pid in process_tree(os.getpid()):
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        except (OSError, StopIteration, ValueError):
            continue
    return total / 1024


def read_in_new_session(system: str, data: Path, work: Path) -> dict[str, Any]:
    """`--fresh-read`: a new session's first reads of the table the job wrote (session start, every column, then
    the aggregation), and this process tree's peak memory."""
    module = importlib.import_module(f"scripts.peer_{system}")
    started = time.perf_counter()
    spark = session(module.CONF, f"bench-peers-{system}-reader")
    out: dict[str, Any] = {"session_s": time.perf_counter() - started}
    job: Job = module.Job(spark, work, data, existing=True)
    sink = getattr(job, "drain", drain)
    out["noop_s"] = timed(lambda: sink(job.frame()))
    out["query_s"] = timed(lambda: aggregate(spark, job))
    out["peak_rss_mib"] = peak_tree_mib()
    spark.stop()
    return out


def fresh_read(system: str, data: Path, work: Path, label: str) -> dict[str, Any]:
    """Runs `read_in_new_session` in a process of its own, with this process's environment, and waits for it."""
    target = work / f"fresh-{label}.json"
    subprocess.run(module_argv("peer_job", FRESH_READ, system, str(data), str(work), str(target)), check=True)
    result: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
    return result


def run(
    system: str, data: Path, work: Path, warm_reads: int = WARM_READS, fresh: tuple[str, ...] = FRESH_STATES
) -> dict[str, Any]:
    module = importlib.import_module(f"scripts.peer_{system}")
    started = time.perf_counter()
    spark = session(module.CONF, f"bench-peers-{system}")
    import pyspark

    out: dict[str, Any] = {"system": system, "session_s": time.perf_counter() - started}
    out["versions"] = {"spark": pyspark.__version__, **module.VERSIONS}
    job: Job = module.Job(spark, work, data)
    batches = []
    for stream, file in landing_batches(data):
        batches.append(timed(lambda stream=stream, file=file: job.ingest_batch(stream, file)))  # type: ignore[misc]
    out["batches_s"] = batches
    out["ingest_s"] = sum(batches)
    out["bytes_uncompacted"] = folder_bytes(job.path())
    if "uncompacted" in fresh:
        out["fresh_uncompacted"] = fresh_read(system, data, work, "uncompacted")
    out["read_uncompacted"] = measure_read(spark, job, work / "answers" / "uncompacted", warm_reads)
    out["compaction_s"] = timed(job.compact)
    out["bytes_compacted"] = folder_bytes(job.path())
    if "compacted" in fresh:
        out["fresh_compacted"] = fresh_read(system, data, work, "compacted")
    out["read_compacted"] = measure_read(spark, job, work / "answers" / "compacted", warm_reads)
    spark.stop()
    return out


if __name__ == "__main__":
    if sys.argv[1] == FRESH_READ:
        name, data_folder, work_folder, target = sys.argv[2:6]
        fresh = read_in_new_session(name, Path(data_folder), Path(work_folder))
        Path(target).write_text(json.dumps(fresh, indent=1), encoding="utf-8")
        sys.exit(0)
    name, data_folder, work_folder, target = sys.argv[1:5]
    warm = int(sys.argv[5]) if len(sys.argv) > 5 else WARM_READS
    states = tuple(s for s in sys.argv[6].split(",") if s) if len(sys.argv) > 6 else FRESH_STATES
    Path(work_folder).mkdir(parents=True, exist_ok=True)
    result = run(name, Path(data_folder), Path(work_folder), warm, states)
    Path(target).write_text(json.dumps(result, indent=1), encoding="utf-8")
