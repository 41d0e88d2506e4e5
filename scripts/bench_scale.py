"""`make bench-scale` (issue 27 point 4): the `make bench` workload at scale, as a user runs it, every process watched.

    python -m scripts.bench_scale [--keys 30000000] [--chunk-keys 1000000] [--workdir bench-data/scale]
                                  [--out docs/benchmarks.md]

`--keys` takes one size or several, comma-separated (`--keys 1000000,10000000`: the growth from the first to the
last is measured in the same run). Per size: the workload generated in chunks of `--chunk-keys` keys (bounded
memory, whatever the size), Spark ingest of the three streams (`stitch ingest --engine spark`, one batch of one
stream per deltacommit, 12 in all, as `make bench` commits them), `stitch status` and `stitch sql` over the
uncompacted table (snapshot), a Spark read of it, a compaction on Spark (`stitch compact --engine spark`), `stitch
sql` read-optimized, then `stitch rescale` from 4 to 32 buckets and `stitch sql` again. Each step is a new process;
its wall time and the peak resident memory of every process of its tree (the `stitch` CLI, the JVM, PySpark's daemon
and Python workers) are sampled from /proc. Every answer is checked against the ground truth: exactly, through an
integer fingerprint of every cell (`bench_workload.fingerprint`) computed from the truth chunk by chunk, never by
loading the table whole. A wrong answer fails the run (exit 1), and so does the acceptance query (`stitch sql
"SELECT count(*), sum(amount) FROM t"` on the uncompacted table) peaking above 1.5 GB at up to 10M keys. The
figures replace the block between the `bench-scale` markers in the output. `--engine local` runs ingest and
compaction in-process: the small mode tests/integration/test_bench_scale.py runs."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts import ROOT, bench_charts, bench_report, child_env
from scripts import bench_workload as workload

BEGIN, END = "<!-- bench-scale:figures:begin -->", "<!-- bench-scale:figures:end -->"
#: What the acceptance criterion of issue 27 runs, verbatim: on the uncompacted table at up to ACCEPTANCE_KEYS keys
#: it must be exact and peak at most ACCEPTANCE_PEAK_MIB of resident memory (1.5 GB). Past that size the file groups
#: of the 4-bucket table outgrow it (memory follows the file group), so the limit is not checked there.
ACCEPTANCE_SQL = "SELECT count(*), sum(amount) FROM t"
ACCEPTANCE_KEYS = 10_000_000
ACCEPTANCE_PEAK_MIB = 1430  # 1.5e9 bytes is 1,430.5 MiB
#: Bytes of disk one key takes, landing files and every table state included (measured at 10M keys: 1.3 GB of
#: landing files, 1.3 GB uncompacted, 0.9 GB compacted; the rescaled copy about as much again).
DISK_PER_KEY = 500
#: Memory a merge of one file slice takes, as a multiple of its file bytes (services/inspect/status.py says the same).
MEMORY_FACTOR = 8
START_BUCKETS, RESCALED_BUCKETS = 4, 32
STITCH = str(Path(sys.executable).parent / "stitch")
#: `--engine`: how ingest, compaction and the rescale run. `spark` is the benchmark; `local` (in-process) is the
#: small mode tests/integration/test_bench_scale.py runs, so the script's every other step cannot rot between real runs.
ENGINES = {"spark": "on Spark", "local": "in-process"}


# ------------------------------------------------------------------------------------------ process trees


def _processes() -> dict[int, tuple[int, str, int]]:
    """Every process: pid -> (parent pid, command line, resident KiB)."""
    out = {}
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            resident = int((entry / "statm").read_text().split()[1]) * page_kib
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        out[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), command, resident)
    return out


def high_water_kib(pid: int) -> int:
    """A process's own peak resident memory so far (VmHWM): exact between samples, unlike its current size."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def role(pid: int, processes: dict[int, tuple[int, str, int]]) -> str:
    """What a process below a step's root is, for the figures: the JVM, PySpark's daemon or a worker."""
    parent, command, _ = processes[pid]
    if "java" in command.split(" ", 1)[0]:
        return "JVM"
    if "pyspark.daemon" in command:
        return "Python worker" if "pyspark.daemon" in processes.get(parent, (0, "", 0))[1] else "PySpark daemon"
    if "pyspark" in command and "worker" in command:
        return "Python worker"
    if "spark/submit.py" in command or "stitchlake/spark/submit" in command:
        return "Spark driver (Python)"
    if "spark-submit" in command or "spark-class" in command:
        return "spark-submit script"
    return Path(command.split(" ", 1)[0]).name or "other"


@dataclass
class Watch:
    """Peak resident memory of every process below `root`: each one's own high-water mark (VmHWM) read from /proc
    every `interval` seconds, and the peak of their current sizes summed."""

    root: int
    #: What the root process is ("stitch CLI", "driver").
    root_role: str = "driver"
    interval: float = 0.25
    peaks: dict[int, tuple[str, int]] = field(default_factory=dict)
    peak_total_kib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        processes = _processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in processes.items():
            children.setdefault(parent, []).append(pid)
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            if pid in processes:
                tree.append(pid)
                todo.extend(children.get(pid, []))
        total = 0
        for pid in tree:
            total += processes[pid][2]
            name = self.root_role if pid == self.root else role(pid, processes)
            peak = max(processes[pid][2], high_water_kib(pid))
            if peak > self.peaks.get(pid, (name, 0))[1]:
                self.peaks[pid] = (name, peak)
        self.peak_total_kib = max(self.peak_total_kib, total)

    def by_role(self) -> dict[str, dict[str, float]]:
        """Per role: the largest peak of its processes (MiB) and how many there were."""
        out: dict[str, dict[str, float]] = {}
        for name, kib in self.peaks.values():
            entry = out.setdefault(name, {"peak_mib": 0.0, "processes": 0})
            entry["peak_mib"] = max(entry["peak_mib"], kib / 1024)
            entry["processes"] += 1
        return out


def run(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one step's process; its output, wall time and the peaks of its tree (a lone process's exactly, wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        root_role = "stitch CLI" if argv[0] == STITCH else "driver"
        watch = Watch(process.pid, root_role).start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            watch.stop()
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    roles = watch.by_role()
    roles.setdefault(root_role, {"peak_mib": 0.0, "processes": 1})
    if len(watch.peaks) <= 1:  # wait4's figure is the largest of the root and its children: the root's when alone
        roles[root_role]["peak_mib"] = max(roles[root_role]["peak_mib"], usage.ru_maxrss / 1024)
    return {
        "argv": argv,
        "exit": process.returncode,
        "wall_s": wall,
        "stdout": stdout,
        "stderr": stderr,
        "roles": roles,
        "tree_peak_mib": max(watch.peak_total_kib / 1024, usage.ru_maxrss / 1024),
    }


def stitch(*args: str) -> dict[str, Any]:
    """A `stitch ... --json` step; fails the run if it fails."""
    step = run([STITCH, *args, "--json"])
    if step["exit"] != 0:
        raise RuntimeError(
            f"stitch {' '.join(args)} exited {step['exit']}:\n{step['stdout'][-3000:]}{step['stderr'][-3000:]}"
        )
    step["json"] = json.loads(step["stdout"].strip().splitlines()[-1])
    return step


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------------------------ the steps


def generate(folder: Path, keys: int, seed: int, chunk_keys: int) -> dict[str, Any]:
    """The chunked workload (reused when its stats say it is complete), generated in a child process whose peak
    memory is the generator's own."""
    stats_file = folder / "stats.json"
    if stats_file.exists():
        stats = json.loads(stats_file.read_text(encoding="utf-8"))
        if stats.get("chunk_keys") == chunk_keys:
            return {**stats, "reused": True}
    if folder.exists():
        shutil.rmtree(folder)
    code = (
        "import json, resource, sys, time; from scripts import bench_workload as w; "
        "from pathlib import Path; t = time.perf_counter(); "
        "s = w.save_chunked(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])); "
        "s.update(chunk_keys=int(sys.argv[4]), seconds=time.perf_counter() - t, "
        "peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024); print(json.dumps(s))"
    )
    step = run([sys.executable, "-c", code, str(keys), str(seed), str(folder), str(chunk_keys)], child_env())
    if step["exit"] != 0:
        raise RuntimeError(f"generating {keys:,} keys failed:\n{step['stderr'][-3000:]}")
    stats = json.loads(step["stdout"].strip().splitlines()[-1])
    stats_file.write_text(json.dumps(stats), encoding="utf-8")
    return {**stats, "reused": False}


def write_config(path: Path, table: Path, landing: Path, buckets: int, conf: dict[str, str] | None = None) -> Path:
    import yaml

    document = workload.table_document(str(table), buckets=buckets)
    for stream, spec in document["streams"].items():
        spec["source"] = {"format": "parquet", "path": str(landing / stream)}
    document["spark"]["conf"].update(conf or {})
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def check_sql(step: dict[str, Any], expected: dict[str, int], what: str) -> list[str]:
    """The fingerprint query's answer against the truth's fingerprint."""
    [row] = step["json"]["records"]
    got = workload.fingerprint_of_row(row)
    wrong = [f"{name}: {got.get(name)} != {value}" for name, value in expected.items() if got.get(name) != value]
    return [f"{what}: fingerprint differs ({'; '.join(wrong[:4])})"] if wrong else []


def peak_mib(step: dict[str, Any]) -> float:
    """A step's peak resident memory: the largest of its processes' own peaks and of their sizes summed."""
    return max([float(step["tree_peak_mib"]), *(float(e["peak_mib"]) for e in step["roles"].values())])


def check_acceptance(
    step: dict[str, Any], expected: dict[str, int], what: str, peak_limit_mib: float | None = None
) -> list[str]:
    """`SELECT count(*), sum(amount)`: the count exactly, the sum to the cent (the truth sums cents as integers),
    and with `peak_limit_mib` the step's peak resident memory at most that."""
    [row] = step["json"]["records"]
    count, total = row["count_star()"], row["sum(amount)"]
    cents = round(float(total) * 100)
    problems = []
    if count != expected["rows"] or cents != expected["amount_sum"]:
        problems.append(f"{what}: count {count}, sum {total} != {expected['rows']}, {expected['amount_sum'] / 100:.2f}")
    peak = peak_mib(step)
    if peak_limit_mib is not None and peak > peak_limit_mib:
        problems.append(f"{what}: peak resident memory {peak:,.0f} MiB, over the limit of {peak_limit_mib:,.0f} MiB")
    return problems


def memory_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def spark_conf_for(slice_bytes: int, cores: int) -> dict[str, str]:
    """Spark settings for jobs whose tasks each merge one file slice of up to `slice_bytes`: one task per core,
    unless the cores' merges would not fit the memory this host has free (then one task at a time, the tasks'
    memory being the file group's: docs/operations.md, "Sizing file groups")."""
    per_task_mib = MEMORY_FACTOR * slice_bytes / 2**20
    if cores > 1 and cores * per_task_mib > 0.6 * memory_available_mib():
        return {"spark.task.cpus": str(cores)}
    return {}


SPARK_READ = """
import json, sys
from scripts import bench
spark = bench._spark(int(sys.argv[2]), json.loads(sys.argv[3]))
row = spark.read.format("stitchlake").load(sys.argv[1]).selectExpr(
    "count(*) AS rows", "sum(order_id) AS keys", "count(amount) AS amount_count",
    "sum(CAST(round(amount * 100) AS BIGINT)) AS amount_sum", "count(customer_id) AS customer_id_count",
    "count(pay_status) AS pay_status_count", "count(ship_status) AS ship_status_count",
).collect()[0]
print(json.dumps(row.asDict()))
spark.stop()
"""


def spark_read(
    table: Path, cores: int, conf: dict[str, str], expected: dict[str, int]
) -> tuple[dict[str, Any], list[str]]:
    """A Spark read of the table (`spark.read.format('stitchlake')`) in a fresh `local[cores]` session: each task
    merges its slices in a Python worker."""
    env = child_env({**os.environ, "PYSPARK_PYTHON": sys.executable})
    step = run([sys.executable, "-c", SPARK_READ, str(table), str(cores), json.dumps(conf)], env)
    if step["exit"] != 0:
        raise RuntimeError(f"Spark read failed:\n{step['stderr'][-3000:]}")
    got = json.loads(step["stdout"].strip().splitlines()[-1])
    mask = (1 << workload.FINGERPRINT_BITS) - 1
    wrong = [name for name, value in got.items() if (int(value or 0) & mask) != expected[name]]
    return step, [f"Spark read: {', '.join(wrong)} differ from the truth"] if wrong else []


def run_size(keys: int, args: argparse.Namespace, cores: int) -> dict[str, Any]:
    workdir = Path(args.workdir).resolve()  # configs written there name paths that must not resolve twice
    data = workdir / f"keys-{keys}-seed-{args.seed}"
    table = workdir / f"table-{keys}"
    say(f"{keys:,} keys: generating the workload in chunks of {args.chunk_keys:,} keys")
    stats = generate(data, keys, args.seed, args.chunk_keys)
    expected = stats["fingerprint"]
    chunks = stats["chunks"]
    figures: dict[str, Any] = {"keys": keys, "stats": stats, "steps": {}, "problems": [], "cores": cores}
    figures["engine"] = args.engine
    steps = figures["steps"]
    if table.exists():
        shutil.rmtree(table)
    config = write_config(workdir / f"table-{keys}.yaml", table, data / "landing", START_BUCKETS)
    stitch("init", "-c", str(config))

    say(f"{keys:,} keys: ingest {ENGINES[args.engine]}, 4 batches x 3 streams ({chunks} landing files each)")
    ingests = []
    for number in range(workload.BATCHES_PER_STREAM):
        for stream in workload.STREAMS:
            step = stitch(
                "ingest", "-c", str(config), "--stream", stream, "--engine", args.engine, "--max-files", str(chunks)
            )
            step["events"] = int(step["json"].get("rows") or 0)
            ingests.append(step)
            say(f"  batch {number + 1} {stream}: {step['events']:,} events in {step['wall_s']:.1f} s")
    steps["ingest"] = ingests

    say(f"{keys:,} keys: stitch status and stitch sql over the uncompacted table")
    steps["status_uncompacted"] = stitch("status", "-c", str(config))
    largest = int(steps["status_uncompacted"]["json"]["totals"]["largest_file_group_bytes"])
    steps["sql_acceptance"] = stitch("sql", "-c", str(config), ACCEPTANCE_SQL)
    limit = ACCEPTANCE_PEAK_MIB if keys <= ACCEPTANCE_KEYS else None
    figures["acceptance_memory"] = {"peak_mib": peak_mib(steps["sql_acceptance"]), "limit_mib": limit}
    figures["problems"] += check_acceptance(steps["sql_acceptance"], expected, "stitch sql (uncompacted)", limit)
    steps["sql_snapshot"] = stitch("sql", "-c", str(config), workload.fingerprint_sql())
    figures["problems"] += check_sql(steps["sql_snapshot"], expected, "stitch sql, every column (uncompacted)")

    conf = spark_conf_for(largest, cores)
    figures["spark_conf"] = conf
    figures["largest_uncompacted_bytes"] = largest
    if not args.no_spark_read:
        say(f"{keys:,} keys: a Spark read of the uncompacted table")
        steps["spark_read"], problems = spark_read(table, cores, conf, expected)
        figures["problems"] += problems

    say(f"{keys:,} keys: compaction {ENGINES[args.engine]}{' (one task at a time: ' + str(conf) + ')' if conf else ''}")
    compact_config = write_config(workdir / f"table-{keys}-compact.yaml", table, data / "landing", START_BUCKETS, conf)
    steps["compact"] = stitch("compact", "-c", str(compact_config), "--engine", args.engine)
    steps["status_compacted"] = stitch("status", "-c", str(config))
    steps["sql_read_optimized"] = stitch(
        "sql", "-c", str(config), "--mode", "read_optimized", workload.fingerprint_sql()
    )
    figures["problems"] += check_sql(steps["sql_read_optimized"], expected, "stitch sql read-optimized")
    steps["sql_acceptance_compacted"] = stitch("sql", "-c", str(config), ACCEPTANCE_SQL)
    figures["problems"] += check_acceptance(steps["sql_acceptance_compacted"], expected, "stitch sql (compacted)")

    say(f"{keys:,} keys: stitch rescale {START_BUCKETS} -> {RESCALED_BUCKETS} buckets, {ENGINES[args.engine]}")
    rescaled = write_config(workdir / f"table-{keys}-32.yaml", table, data / "landing", RESCALED_BUCKETS, conf)
    steps["rescale"] = stitch(
        "rescale", "-c", str(rescaled), "--buckets", str(RESCALED_BUCKETS), "--engine", args.engine
    )
    steps["status_rescaled"] = stitch("status", "-c", str(rescaled))
    steps["sql_rescaled"] = stitch("sql", "-c", str(rescaled), workload.fingerprint_sql())
    figures["problems"] += check_sql(steps["sql_rescaled"], expected, "stitch sql after the rescale")
    figures["rescale"] = "done"

    if not args.keep_tables:
        shutil.rmtree(table, ignore_errors=True)
    for problem in figures["problems"]:
        say(f"PROBLEM: {problem}")
    return figures


# ------------------------------------------------------------------------------------------------ rendering


def _mib(step: dict[str, Any], name: str) -> float:
    return float(step["roles"].get(name, {}).get("peak_mib", 0.0))


def memory_cell(steps: list[dict[str, Any]]) -> str:
    """Peak resident memory per role over one or more processes' trees, as `role MiB`."""
    roles: dict[str, float] = {}
    for step in steps:
        for name, entry in step["roles"].items():
            roles[name] = max(roles.get(name, 0.0), float(entry["peak_mib"]))
    shown = [f"{name} {value:,.0f}" for name, value in sorted(roles.items(), key=lambda item: -item[1]) if value >= 20]
    tree = max(float(step["tree_peak_mib"]) for step in steps)
    return f"{', '.join(shown)}; tree {tree:,.0f}"


def rows_of(figures: dict[str, Any]) -> list[tuple[str, str, str, float | None]]:
    """(figure, time, memory, seconds) of one size."""
    steps = figures["steps"]
    stats = figures["stats"]
    cores = figures["cores"]
    out: list[tuple[str, str, str, float | None]] = []
    generated = "reused" if stats.get("reused") else f"{stats['seconds']:.0f} s"
    out.append(
        (
            f"workload generated in chunks of {stats['chunk_keys']:,} keys",
            generated,
            f"generator {stats['peak_mib']:,.0f}",
            float(stats["seconds"]),
        )
    )
    ingests = steps["ingest"]
    on = ENGINES[figures["engine"]]
    wall = sum(s["wall_s"] for s in ingests)
    job = sum(float(s["json"].get("job_seconds") or 0.0) for s in ingests)
    events = sum(s["events"] for s in ingests)
    timing = f"{events:,} events in {wall:.0f} s; {events / wall / cores:,.0f} events/s/core"
    if job:  # a Spark job says how long it ran after its JVM started
        timing = f"{events:,} events in {wall:.0f} s ({job:.0f} s); {events / wall / cores:,.0f} events/s/core"
        timing += f" ({events / job / cores:,.0f})"
    label = f"ingest {on}, 12 deltacommits: wall" + (" (job after JVM start)" if job else "")
    out.append((label, timing, memory_cell(ingests), wall))
    for name, label in (
        ("sql_acceptance", f'`stitch sql "{ACCEPTANCE_SQL}"`, uncompacted'),
        ("sql_snapshot", "`stitch sql` fingerprint of every cell, uncompacted (snapshot)"),
        ("spark_read", "Spark read of the uncompacted table (`format('stitchlake')`, 7 aggregates)"),
        ("compact", f"compaction {on} (`stitch compact --engine {figures['engine']}`)"),
        ("sql_read_optimized", "`stitch sql --mode read_optimized` fingerprint of every cell"),
        ("sql_acceptance_compacted", f'`stitch sql "{ACCEPTANCE_SQL}"`, compacted'),
        ("rescale", f"`stitch rescale --buckets {RESCALED_BUCKETS}` {on}"),
        ("sql_rescaled", f"`stitch sql` fingerprint after the rescale ({RESCALED_BUCKETS} buckets)"),
    ):
        step = steps.get(name)
        if step is None:
            if name == "rescale" and figures.get("rescale", "").startswith("not available"):  # a report saved
                out.append((label, "**not available in this build**", "-", None))  # before rescale existed
            continue
        rate = ""
        if name.startswith("sql") or name == "spark_read":
            rate = f"; {figures['keys'] / step['wall_s'] / cores:,.0f} rows/s/core"
        out.append((label, f"{step['wall_s']:.1f} s{rate}", memory_cell([step]), float(step["wall_s"])))
    return out


def render(results: list[dict[str, Any]], arguments: str, machine: list[str] | None = None) -> str:
    """The block; `machine`: the run's header lines (default: this machine, now)."""
    sizes = [r["keys"] for r in results]
    lines = [BEGIN, "", *(machine or bench_report.machine())]
    for figures in results:
        stats = figures["stats"]
        events = ", ".join(f"{s} {n:,}" for s, n in stats["events"].items())
        largest = figures["largest_uncompacted_bytes"] / 2**20
        lines.append(
            f"- {figures['keys']:,} keys (seed {stats['seed']}): {stats['events_total']:,} events ({events}); "
            f"{sum(stats['late'].values()):,} late, {sum(stats['duplicates'].values()):,} duplicates; "
            f"{START_BUCKETS} buckets, largest uncompacted file group {largest:,.0f} MiB"
            + (f"; Spark tasks one at a time ({figures['spark_conf']})" if figures["spark_conf"] else "")
        )
    lines += [
        f"- command: `python -m scripts.bench_scale {arguments}`".rstrip(),
        "- memory: peak resident MiB of each kind of process in the step's process tree (each process's own "
        "high-water mark, VmHWM, read from /proc every 0.25 s; a process with no children exactly, from wait4), "
        "and `tree` the peak of their current sizes summed",
        "",
    ]
    per_size = [rows_of(r) for r in results]
    header = "| figure | " + " | ".join(f"{k:,} keys: time | memory (MiB)" for k in sizes)
    if len(sizes) > 1:
        header += f" | growth, {sizes[-1] // sizes[0]:,}x the keys"
    lines += [header + " |", "|---|" + "---|---|" * len(sizes) + ("---|" if len(sizes) > 1 else "")]
    names = [row[0] for row in per_size[-1]]
    for index, name in enumerate(names):
        cells = []
        for rows in per_size:
            found = next((row for row in rows if row[0].split(" (")[0] == name.split(" (")[0]), None)
            cells += [found[1], found[2]] if found else ["-", "-"]
        line = f"| {name} | " + " | ".join(cells)
        if len(sizes) > 1:
            first = next((row for row in per_size[0] if row[0].split(" (")[0] == name.split(" (")[0]), None)
            last = per_size[-1][index]
            growth = f"{last[3] / first[3]:.1f}x" if first and first[3] and last[3] else "-"
            line += f" | {growth}"
        lines.append(line + " |")
    for figures in results:
        status = figures["steps"]["status_uncompacted"]["json"]
        if status["warnings"]:
            lines += ["", f"`stitch status` at {figures['keys']:,} keys, uncompacted: warning: {status['warnings'][0]}"]
    problems = [p for r in results for p in r["problems"]]
    verdict = (
        "**Every answer matched the ground truth** (the count and the sum to the cent of the acceptance query; "
        "every cell through the fingerprint)."
        if not problems
        else "**FAILURES** (answers against the ground truth, the acceptance query's memory against its limit):\n\n"
        + "\n".join(f"- {p}" for p in problems)
    )
    lines += ["", verdict, ""]
    for figures in results:
        memory = figures.get("acceptance_memory")
        if memory is None:  # a report saved before the limit was checked
            continue
        limit = memory["limit_mib"]
        checked = (
            f"{'over' if memory['peak_mib'] > limit else 'within'} the acceptance limit of {limit:,.0f} MiB (1.5 GB)"
            if limit is not None
            else f"not checked against the 1.5 GB limit, which applies up to {ACCEPTANCE_KEYS:,} keys"
        )
        lines.append(
            f'- `stitch sql "{ACCEPTANCE_SQL}"` at {figures["keys"]:,} keys, uncompacted: peak resident memory '
            f"{memory['peak_mib']:,.0f} MiB, {checked}"
        )
    lines += ["", END]
    return "\n".join(lines)


def publish(out: Path, block: str) -> None:
    """Replace the bench-scale block in `out`, or put it right after `make bench`'s figures the first time."""
    text = out.read_text(encoding="utf-8") if out.exists() else ""
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        out.write_text(before + block + rest.split(END, 1)[1], encoding="utf-8")
    elif bench_report.END in text:
        before, after = text.split(bench_report.END, 1)
        heading = "\n\n## Tables that grow (`make bench-scale`)\n\n"
        out.write_text(before + bench_report.END + heading + block + after, encoding="utf-8")
    else:
        out.write_text(text + "\n## Tables that grow (`make bench-scale`)\n\n" + block + "\n", encoding="utf-8")


def with_charts(block: str, results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The block with PNG charts of each step's time and memory per size (`--charts`, default bench/ beside
    `--out`) referenced before its end marker."""
    if args.no_charts:
        return block
    out = Path(args.out)
    folder = Path(args.charts) if args.charts else out.parent / "bench"
    return bench_charts.with_charts(block, END, bench_charts.scale(results, folder), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", default="30000000", help="key count, or several comma-separated")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--chunk-keys", type=int, default=workload.CHUNK_KEYS, help="keys generated at once")
    parser.add_argument("--workdir", default=str(ROOT / "bench-data" / "scale"), help="workloads and tables")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--keep-tables", action="store_true", help="keep each size's table (they are large)")
    parser.add_argument(
        "--engine", choices=sorted(ENGINES), default="spark", help="ingest, compaction, rescale: spark or in-process"
    )
    parser.add_argument("--no-spark-read", action="store_true", help="skip the Spark read of the uncompacted table")
    bench_charts.add_arguments(parser, "results.json")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = bench_charts.saved_report(args)
        if isinstance(saved, list):  # saved before the run's command and header were kept with it
            saved = {"results": saved, "command": " ".join(argv if argv is not None else sys.argv[1:])}
        runs = saved["results"]
        block = with_charts(render(runs, saved["command"], saved.get("header")), runs, args)
        publish(Path(args.out), block)
        print(block)
        return 0
    sizes = sorted(int(s.replace("_", "")) for s in args.keys.split(","))
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    needed = DISK_PER_KEY * max(sizes)
    free = shutil.disk_usage(workdir).free
    if free < needed:
        print(f"error: {workdir} has {free / 2**30:.1f} GiB free; {max(sizes):,} keys need ~{needed / 2**30:.1f} GiB")
        return 2
    cores = os.cpu_count() or 2
    started = time.perf_counter()
    results = [run_size(keys, args, cores) for keys in sizes]
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    header = bench_report.machine()
    saved = {"command": shown, "header": header, "results": results}
    (workdir / "results.json").write_text(json.dumps(saved, default=str), encoding="utf-8")
    block = with_charts(render(results, shown, header), results, args)
    publish(Path(args.out), block)
    print(block)
    say(f"done in {time.perf_counter() - started:.0f} s; figures written to {args.out}")
    if any(r["problems"] for r in results):
        print(
            "FAILED: an answer differs from the ground truth or the acceptance query is over its memory limit",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
