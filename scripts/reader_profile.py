"""How fast `format("stitchlake")` reads on Spark: the JVM reader against the Python data source and the floor
(issue 35).

    python -m scripts.reader_profile [--keys 200000] [--runs 3] [--reuse] [--only jvm] [--jfr X.jfr] [--first-parts]
    python -m scripts.reader_profile --series 9 [--series-kind aggregate] [--compact-at 4] [--reuse] [--keys ...]

A sibling of scripts/peer_profile.py on the project's own PySpark (no side environment): the peers workload
(scripts/bench_workload.py, the same folder bench_peers.py uses) ingested as `make bench-peers` ingests it
(`peer_stitchlake.Job`: 12 batches, one commit each, on the `SparkEngine`), then one `local[2]` session with the
JVM reader's jar and the harness's settings (peer_job.COMMON_CONF) measures, one line each as it goes:

- per reader (`stitchlake`, the JVM reader; `stitchlake_python`, the Python data source): all columns
  (`.select(*WIDE)` into Spark's `noop` sink) and the aggregation of bench_peers (bench_workload.QUERY), each as the
  first read of its kind in the session and warm (the median of `--runs` more);
- the floor: `spark.read.parquet` of the final rows (written once by the JVM reader);
- after compaction the same, the floor being `spark.read.parquet` of the base files (`.select(*WIDE)`);
- the peak resident memory of the JVM (VmHWM), and the load average before and after.

`--reuse` keeps the ingested table between runs (a copy under the work folder) so that a run measures reads only;
`--jfr PATH` starts the JVM with Java Flight Recorder writing PATH (`jfr print --events jdk.ExecutionSample PATH`).
`--series N` measures instead N reads of one kind in one session, each on its own line (wall time and its tasks'
CPU), with a compaction before read `--compact-at`: how reads speed up as the JVM compiles the reader.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from scripts import ROOT
from scripts.bench_workload import QUERY

READERS = {"jvm": "stitchlake", "python": "stitchlake_python"}
EVENT_LOG = tempfile.mkdtemp(prefix="reader-profile-events-")


def show(label: str, seconds: float | str) -> None:
    value = f"{seconds:7.2f} s" if isinstance(seconds, float) else seconds
    print(f"{label:<64} {value}", flush=True)


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def jvm_pid() -> int | None:
    """The Spark driver JVM: the `java` child of this process."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "java" and stat.rsplit(")", 1)[1].split()[1] == me:
            return int(entry.name)
    return None


def peak_rss_mib(pid: int | None) -> str:
    if pid is None:
        return "?"
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return f"{int(line.split()[1]) / 1024:.0f} MiB"
    return "?"


def workload_folder(keys: int, seed: int, workdir: Path) -> Path:
    from scripts import bench_workload as workload

    folder = workdir / f"keys-{keys}"
    data = folder / "data"
    marker = data / f".complete-{seed}-{workload.BATCHES_PER_STREAM}"  # bench_peers.py's folder and marker
    if not marker.exists():
        shutil.rmtree(data, ignore_errors=True)
        generated = workload.generate(keys, seed)
        workload.save(generated, data)
        stats = {**generated.stats, "batches": len(generated.batches)}
        (data / "stats.json").write_text(json.dumps(stats), encoding="utf-8")
        marker.write_text("ok", encoding="utf-8")
    return folder


def session(jfr: str | None, extra: list[str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    from scripts import peer_job
    from stitchlake.jobs.spark_conf import REQUIRED_CONF, reader_conf, reader_jar

    if not reader_jar().is_file():
        raise SystemExit(f"no JVM reader jar at {reader_jar()}: run `make jvm`")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(peer_job.MASTER).appName("reader-profile")
    conf = {**peer_job.COMMON_CONF, **REQUIRED_CONF, **reader_conf(enabled=True)}
    conf["spark.pyspark.python"] = conf["spark.pyspark.driver.python"] = sys.executable
    if jfr:
        conf["spark.driver.extraJavaOptions"] = (
            f"-XX:+FlightRecorder -XX:StartFlightRecording=filename={jfr},settings=profile"
        )
    # The event log gives each measured read's task CPU time, steadier than wall time on a loaded machine.
    conf["spark.eventLog.enabled"] = "true"
    conf["spark.eventLog.dir"] = EVENT_LOG
    conf["spark.eventLog.compress"] = "false"
    conf["spark.eventLog.rolling.enabled"] = "false"
    for item in extra or []:
        key, _, value = item.partition("=")
        conf[key] = value
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def table(spark: Any, folder: Path, reuse: bool) -> Any:
    """The uncompacted table at folder/profile/stitchlake (ingested, or restored from the kept copy)."""
    from scripts import peer_job, peer_stitchlake

    data, work = folder / "data", folder / "profile"
    kept = work / "uncompacted-copy"
    if reuse and kept.is_dir():
        job = peer_stitchlake.Job.__new__(peer_stitchlake.Job)
        from stitchlake.spark.engine import SparkEngine
        from stitchlake.spark.session import register

        job.spark = register(spark)
        job.engine = SparkEngine(spark)
        job.folder = work / "stitchlake"
        shutil.rmtree(job.folder, ignore_errors=True)
        shutil.copytree(kept, job.folder)
        from scripts.bench import spark_table

        job.table = spark_table(job.folder, data / "landing", existing=True)
        show("uncompacted table restored from", str(kept))
        # What the ingest would have warmed: Spark SQL, its Parquet reader and writer.
        landing = peer_job.landing_batches(data)[0][1]
        spark.read.parquet(str(landing)).write.mode("overwrite").parquet(str(work / "warm-up"))
        return job
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    job = peer_stitchlake.Job(spark, work, data)
    took = sum(timed(lambda s=s, f=f: job.ingest_batch(s, f)) for s, f in peer_job.landing_batches(data))  # type: ignore[misc]
    show("ingest (12 batches)", took)
    shutil.copytree(job.folder, kept)
    return job


def measure(spark: Any, label: str, frame: Callable[[], Any], runs: int) -> dict[str, float]:
    """All columns into `noop`, then the aggregation: first, then the median of `runs` warm ones."""
    from scripts import peer_job

    out = {}
    view = "rp_" + "".join(c if c.isalnum() else "_" for c in label)

    def drain() -> None:
        peer_job.drain(frame())

    def query() -> None:
        frame().createOrReplaceTempView(view)
        spark.sql(QUERY.format(view=view)).collect()

    def labelled(kind: str, n: int, action: Callable[[], None]) -> float:
        spark.sparkContext.setJobDescription(f"{label}|{kind}|{n}")
        try:
            return timed(action)
        finally:
            spark.sparkContext.setJobDescription(None)

    for kind, action in (("all columns", drain), ("aggregate", query)):
        first = labelled(kind, 0, action)
        warm = statistics.median(labelled(kind, n + 1, action) for n in range(runs))
        out[kind] = warm
        show(f"{label}: {kind}, first / warm", f"{first:7.2f} s {warm:7.2f} s")
    for line in peer_job.scan_lines(spark.sql(QUERY.format(view=view))):
        print(f"  the aggregation's scan: {line}", flush=True)
    return out


def first_read_parts(spark: Any, fmt: str, path: str) -> None:
    """The session's first read of the table, in parts: `load()` (the table's schema, the planner's first answer;
    the session started the planner process when it registered the source), planning the scan (the planner's
    plan), and running it into `noop`."""
    from scripts import peer_job

    started = time.perf_counter()
    frame = spark.read.format(fmt).load(path).select(*peer_job.WIDE)
    loaded = time.perf_counter()
    frame._jdf.queryExecution().executedPlan()
    planned = time.perf_counter()
    peer_job.drain(frame)
    ran = time.perf_counter()
    parts = f"load {loaded - started:.2f} s, plan {planned - loaded:.2f} s, run {ran - planned:.2f} s"
    show(f"first read of the session ({fmt}), all columns", f"{ran - started:7.2f} s ({parts})")


def profile(
    folder: Path, runs: int, readers: list[str], reuse: bool, jfr: str | None, extra: list[str], parts: bool = False
) -> None:
    from scripts import peer_job

    print(f"warm = the median of {runs} reads after the first")
    print(f"load average before: {os.getloadavg()}", flush=True)
    spark = session(jfr, extra)
    pid = jvm_pid()
    job = table(spark, folder, reuse)
    path = str(job.folder)

    def stitched(fmt: str) -> Callable[[], Any]:
        return lambda: spark.read.format(fmt).load(path).select(*peer_job.WIDE)

    if parts:
        first_read_parts(spark, READERS[readers[0]], path)
    results: dict[str, dict[str, float]] = {}
    for name in readers:
        results[f"uncompacted {name}"] = measure(spark, f"uncompacted {name}", stitched(READERS[name]), runs)
    final = folder / "profile" / "final-rows"
    stitched("stitchlake")().repartition(2).write.mode("overwrite").parquet(str(final))
    results["uncompacted floor"] = measure(
        spark, "uncompacted floor (final rows)", lambda: spark.read.parquet(str(final)), runs
    )
    show("compaction", timed(job.compact))
    import stitchlake

    opened = stitchlake.open(path)
    bases = [str(job.folder / s.base.path) for s in opened.view().latest_slices(None) if s.base]
    for name in readers:
        results[f"compacted {name}"] = measure(spark, f"compacted {name}", stitched(READERS[name]), runs)
    results["compacted floor"] = measure(
        spark,
        f"compacted floor ({len(bases)} base files)",
        lambda: spark.read.parquet(*bases).select(*peer_job.WIDE),
        runs,
    )
    for state in ("uncompacted", "compacted"):
        floor = results[f"{state} floor"]
        for name in readers:
            got = results[f"{state} {name}"]
            ratios = ", ".join(f"{k} {got[k] / floor[k]:.2f}x" for k in got)
            show(f"{state} {name} warm / floor", ratios)
    show("peak RSS of the JVM", peak_rss_mib(pid))
    spark.stop()
    print(f"load average after: {os.getloadavg()}", flush=True)
    task_cpu(Path(EVENT_LOG))
    shutil.rmtree(EVENT_LOG, ignore_errors=True)


def task_cpu(folder: Path) -> None:
    """Each measured read's task CPU time (all its jobs' tasks), first and the median of the warm ones."""
    cpu = cpu_by_description(folder)
    reads: dict[tuple[str, str], dict[int, float]] = {}
    for text, seconds in cpu.items():
        label, kind, n = text.split("|")
        reads.setdefault((label, kind), {})[int(n)] = seconds
    print("task CPU time of the JVM's tasks (first / warm median; the Python source's merge runs in Python workers,")
    print("whose CPU this leaves out):")
    for (label, kind), runs in reads.items():
        warm = statistics.median(v for k, v in runs.items() if k > 0) if len(runs) > 1 else float("nan")
        show(f"  {label}: {kind}", f"{runs.get(0, float('nan')):7.2f} s {warm:7.2f} s")


def cpu_by_description(folder: Path) -> dict[str, float]:
    """The CPU seconds of the tasks of every job described "label|kind|n", by description, from the event log."""
    description: dict[int, str] = {}
    cpu: dict[str, float] = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"SparkListenerJobStart"' in line or '"SparkListenerStageSubmitted"' in line:
                event = json.loads(line)
                text = (event.get("Properties") or {}).get("spark.job.description")
                if text and "|" in text:
                    stage = event.get("Stage Info", {}).get("Stage ID")
                    for s in [stage] if stage is not None else event.get("Stage IDs", []):
                        description[s] = text
            elif '"SparkListenerTaskEnd"' in line:
                event = json.loads(line)
                text = description.get(event["Stage ID"])
                if text:
                    metrics = event.get("Task Metrics") or {}
                    cpu[text] = cpu.get(text, 0.0) + metrics.get("Executor CPU Time", 0) / 1e9
    return cpu


def series(
    folder: Path, reads: int, kind: str, compact_at: int | None, reuse: bool, jfr: str | None, extra: list[str]
) -> None:
    """`--series`: one session's reads of the uncompacted table through the JVM reader, one after another with no
    other read before them, each with its wall time and its tasks' CPU; the table compacted before read
    `compact_at`. How a session's reads speed up as the JVM compiles the reader (docs/spark-reader.md, "Compiled
    early"), which the medians of `measure` blur."""
    from scripts import peer_job

    print(f"load average before: {os.getloadavg()}", flush=True)
    spark = session(jfr, extra)
    job = table(spark, folder, reuse)
    path = str(job.folder)
    walls = []
    for n in range(reads):
        if n == compact_at:
            show("compaction", timed(job.compact))
        frame = spark.read.format("stitchlake").load(path).select(*peer_job.WIDE)
        if kind == "aggregate":
            frame.createOrReplaceTempView("rp_series")
            frame = spark.sql(QUERY.format(view="rp_series"))
        spark.sparkContext.setJobDescription(f"series|{kind}|{n}")
        action = partial(peer_job.drain, frame) if kind == "all columns" else frame.collect
        walls.append(timed(action))
        spark.sparkContext.setJobDescription(None)
    spark.stop()
    print(f"load average after: {os.getloadavg()}", flush=True)
    cpu = cpu_by_description(Path(EVENT_LOG))
    shutil.rmtree(EVENT_LOG, ignore_errors=True)
    for n, wall in enumerate(walls):
        state = "compacted" if compact_at is not None and n >= compact_at else "uncompacted"
        took = cpu.get(f"series|{kind}|{n}", float("nan"))
        show(f"read {n}, {state}, {kind}: wall / task CPU", f"{wall:7.2f} s {took:7.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3, help="warm reads per measurement (their median is shown)")
    parser.add_argument("--only", choices=sorted(READERS), action="append", help="measure only this reader")
    parser.add_argument("--reuse", action="store_true", help="keep the ingested table between runs")
    parser.add_argument("--jfr", help="record the JVM with Java Flight Recorder into this file")
    parser.add_argument("--conf", action="append", default=[], help="another Spark setting, KEY=VALUE")
    parser.add_argument("--workdir", default=str(ROOT / "bench-data" / "peers"))
    parser.add_argument(
        "--first-parts",
        action="store_true",
        help="time the session's first read in parts (load, plan, run) before the measurements (whose 'first' is "
        "then the second read)",
    )
    parser.add_argument(
        "--series",
        type=int,
        metavar="READS",
        help="instead of the measurements: READS reads of the JVM reader in one session, each with its wall time "
        "and task CPU",
    )
    parser.add_argument("--series-kind", choices=["all columns", "aggregate"], default="all columns")
    parser.add_argument("--compact-at", type=int, metavar="N", help="with --series: compact before read N")
    args = parser.parse_args(argv)
    if args.series is not None and args.series < 1:
        parser.error(f"--series {args.series}: give 1 or more reads")
    if args.compact_at is not None and not (args.series and 0 <= args.compact_at < args.series):
        parser.error(f"--compact-at {args.compact_at}: needs --series with more reads than that (reads count from 0)")
    folder = workload_folder(args.keys, args.seed, Path(args.workdir))
    if args.series:
        series(folder, args.series, args.series_kind, args.compact_at, args.reuse, args.jfr, args.conf)
        return 0
    profile(folder, args.runs, args.only or list(READERS), args.reuse, args.jfr, args.conf, args.first_parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
