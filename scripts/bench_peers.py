"""`make bench-peers`: stitchlake next to Hudi, Paimon, Delta and Iceberg on Spark, the same job for each (issue 25).

    python -m scripts.bench_peers [--sizes 200000,1000000] [--runs 1] [--systems stitchlake,hudi,...]
                                  [--json PATH] [--out docs/benchmarks.md] [--workdir bench-data/peers]

The workload is `make bench`'s (scripts/bench_workload.py: three streams, per-stream event-time ordering, 10% late,
2% duplicates, 2% null cells, `nulls: ignore` on payments, 12 batches), generated once per size. Each system runs
in a fresh process of its own under its Spark environment (scripts/spark_envs.py; scripts/peer_job.py says what is
measured, scripts/peer_<system>.py how each system is set up). This process samples the resident memory of each
run's whole process tree (Python driver, JVM, Python workers) and counts the wrong cells of every read against the
ground truth. A system whose answer is wrong is reported with its figures and its count, never dropped. With
`--runs N` the systems take turns N times (the order rotating each round) and every figure is the median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scripts import ROOT, bench_charts, module_argv, spark_envs
from scripts import bench_workload as workload
from scripts.bench_workload import QUERY
from scripts.machine import machine
from scripts.peer_job import FRESH_READ, FRESH_STATES, SYSTEMS, WARM_READS, process_tree

BEGIN, END = "<!-- bench:peers:begin -->", "<!-- bench:peers:end -->"
#: The Spark environment each system runs in (docs/benchmarks.md says why two).
ENVIRONMENTS = {
    "stitchlake": spark_envs.SPARK_4_1,
    "delta": spark_envs.SPARK_4_1,
    "iceberg": spark_envs.SPARK_4_1,
    "hudi": spark_envs.SPARK_3_5,
    "paimon": spark_envs.SPARK_3_5,
}
READS = ("read_uncompacted", "read_compacted")
#: Figures in seconds, as (name in the JSON, label in the table). A read's `noop_s`/`query_s` is the first run in
#: the session (what reports before the warm figures measured), its `*_warm_s` the median of `--warm-reads` (3)
#: runs after it.
FIGURES = (
    ("session_s", "session start (JVM, jars)"),
    ("ingest_s", "ingest, every batch"),
    ("read_uncompacted.noop_s", "snapshot read, uncompacted: all columns, first"),
    ("read_uncompacted.noop_warm_s", "snapshot read, uncompacted: all columns, warm"),
    ("read_uncompacted.query_s", "snapshot read, uncompacted: aggregation, first"),
    ("read_uncompacted.query_warm_s", "snapshot read, uncompacted: aggregation, warm"),
    ("compaction_s", "compaction"),
    ("read_compacted.noop_s", "read after compaction: all columns, first"),
    ("read_compacted.noop_warm_s", "read after compaction: all columns, warm"),
    ("read_compacted.query_s", "read after compaction: aggregation, first"),
    ("read_compacted.query_warm_s", "read after compaction: aggregation, warm"),
    ("fresh_uncompacted.session_s", "a new session's start, to read"),
    ("fresh_uncompacted.noop_s", "a new session's first read, uncompacted: all columns"),
    ("fresh_uncompacted.query_s", "a new session's first read, uncompacted: aggregation"),
    ("fresh_compacted.noop_s", "a new session's first read after compaction: all columns"),
    ("fresh_compacted.query_s", "a new session's first read after compaction: aggregation"),
)
#: The table's rows: a first and a warm figure shown in one row, as (first, warm, label).
ROWS = (
    ("session_s", None, "session start (JVM, jars)"),
    ("ingest_s", None, "ingest, every batch"),
    (
        "read_uncompacted.noop_s",
        "read_uncompacted.noop_warm_s",
        "snapshot read, uncompacted: all columns (first / warm)",
    ),
    ("read_uncompacted.query_s", "read_uncompacted.query_warm_s", "the same: one aggregation (first / warm)"),
    ("compaction_s", None, "compaction"),
    ("read_compacted.noop_s", "read_compacted.noop_warm_s", "read after compaction: all columns (first / warm)"),
    ("read_compacted.query_s", "read_compacted.query_warm_s", "the same: one aggregation (first / warm)"),
    ("fresh_uncompacted.session_s", None, "a new session's start, to read (JVM, jars)"),
    (
        "fresh_uncompacted.noop_s",
        "fresh_uncompacted.query_s",
        "a new session's first reads, uncompacted: all columns / aggregation",
    ),
    (
        "fresh_compacted.noop_s",
        "fresh_compacted.query_s",
        "a new session's first reads, after compaction: all columns / aggregation",
    ),
)
#: A new session's reads (`peer_job --fresh-read`), before and after compaction: each reports its own peak memory.
FRESH = tuple(f"fresh_{state}" for state in FRESH_STATES)
JOB_TIMEOUT_S = 4 * 3600.0
SAMPLE_EVERY_S = 0.25


def say(message: str) -> None:
    print(f"[bench-peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- memory of a tree


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of a process and all its descendants but a new session's reader, whose peak is its own figure
    (`peer_job --fresh-read`); vanished processes count 0."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in process_tree(root, leave_out=FRESH_READ):
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
                total += int(statm.read().split()[1]) * page
        except (OSError, ValueError):
            continue
    return total


class PeakSampler:
    """Samples a process tree's resident memory until stopped; `peak` is the largest sum seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(SAMPLE_EVERY_S):
            self.peak = max(self.peak, tree_rss_bytes(self.pid))

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


# --------------------------------------------------------------------------------------------- wrong cells


def wrong_cells(actual: Any, truth: Any) -> dict[str, int]:
    """Cells of the wide table (key x column) that differ from the ground truth. A key missing from `actual`, or
    present only in it, counts every one of its cells (the key's included); so does a key read more than once,
    for each extra copy. Returns the count per column (`rows` for whole rows) and its `total`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [f.name for f in workload.TRUTH_SCHEMA]
    width = len(names)
    keys = actual.column("order_id").to_numpy(zero_copy_only=False) if actual.num_rows else np.array([], np.int64)
    unique, first = np.unique(keys, return_index=True)
    duplicates = len(keys) - len(unique)
    expected_keys = truth.column("order_id").to_numpy()
    both = np.intersect1d(unique, expected_keys, assume_unique=True)
    counts = {"rows": (len(unique) - len(both) + len(expected_keys) - len(both) + duplicates) * width}
    mine = actual.take(pa.array(first[np.searchsorted(unique, both)]))
    theirs = truth.take(pa.array(np.searchsorted(expected_keys, both)))
    for name in names[1:]:
        kind = workload.TRUTH_SCHEMA.field(name).type
        left = mine.column(name)
        left = left if left.type == kind else left.cast(kind)
        right = theirs.column(name)
        same = pc.fill_null(pc.equal(left, right), False).to_numpy(zero_copy_only=False)
        both_null = pc.is_null(left).to_numpy(zero_copy_only=False) & pc.is_null(right).to_numpy(zero_copy_only=False)
        counts[name] = int((~(same | both_null)).sum())
    return {**{k: v for k, v in counts.items() if v}, "total": sum(counts.values())}


def expected_query(truth: Any) -> list[tuple[Any, ...]]:
    from scripts import bench

    result: list[tuple[Any, ...]] = bench.expected_answer(truth)
    return result


def canonical_query(rows: list[list[Any]]) -> list[tuple[Any, ...]]:
    from scripts import bench

    result: list[tuple[Any, ...]] = bench._canonical(tuple(r) for r in rows)
    return result


# ------------------------------------------------------------------------------------------------- running


def run_system(
    system: str,
    data: Path,
    work: Path,
    installed: spark_envs.Installed,
    warm_reads: int = WARM_READS,
    fresh: Sequence[str] = FRESH_STATES,
) -> dict[str, Any]:
    """One system's whole job in a fresh process under its environment; its figures and its peak memory."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    out = work / "result.json"
    log = work / "job.log"
    argv = module_argv("peer_job", system, str(data), str(work), str(out), str(warm_reads), ",".join(fresh))
    started = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen(argv, env=installed.environ(), stdout=sink, stderr=subprocess.STDOUT)
        sampler = PeakSampler(process.pid)
        try:
            code = process.wait(timeout=JOB_TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            peak = sampler.stop()
    wall = time.perf_counter() - started
    if code != 0 or not out.exists():
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise RuntimeError(f"{system} failed (exit {code}); the end of {log}:\n{tail}")
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result["process_s"] = wall
    result["peak_rss_mib"] = peak / 2**20
    return result


def check_answers(result: dict[str, Any], work: Path, truth: Any, want: list[tuple[Any, ...]]) -> None:
    """Wrong cells of each read's rows, and whether its aggregation matched."""
    import pyarrow.parquet as pq

    for read in READS:
        actual = pq.read_table(work / "answers" / read.removeprefix("read_"))
        cells = wrong_cells(actual, truth)
        result[read]["wrong_cells"] = cells["total"]
        result[read]["wrong_by_column"] = cells
        result[read]["query_correct"] = canonical_query(result[read]["query_rows"]) == want
        del result[read]["query_rows"]
    shutil.rmtree(work / "answers")


def figure(result: dict[str, Any], name: str) -> float:
    value: Any = result
    for part in name.split("."):
        value = value[part]
    return float(value)


def has_seconds(result: dict[str, Any], name: str) -> bool:
    """Whether a run measured the figure."""
    try:
        figure(result, name)
    except (KeyError, TypeError):
        return False
    return True


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure the median over runs (a figure no run measured, as a new session's read left out with
    `--fresh-reads`, is absent); wrong cells the largest count seen; the rest from the first run."""
    first = runs[0]
    measured = [name for name, _ in FIGURES if all(has_seconds(r, name) for r in runs)]
    out: dict[str, Any] = {
        "runs": len(runs),
        "versions": first["versions"],
        "seconds": {name: statistics.median(figure(r, name) for r in runs) for name in measured},
        "all_seconds": {name: [round(figure(r, name), 3) for r in runs] for name in measured},
        "process_s": statistics.median(r["process_s"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "reader_peak_rss_mib": max((r[f]["peak_rss_mib"] for r in runs for f in FRESH if f in r), default=0.0),
        "bytes_uncompacted": first["bytes_uncompacted"],
        "bytes_compacted": first["bytes_compacted"],
        "batches_s": first["batches_s"],
        "wrong_cells": {read: max(r[read]["wrong_cells"] for r in runs) for read in READS},
        "query_correct": {read: all(r[read]["query_correct"] for r in runs) for read in READS},
        "wrong_by_column": {
            read: max((r[read]["wrong_by_column"] for r in runs), key=lambda c: c["total"]) for read in READS
        },
        "aggregation_scan": {read: first[read].get("aggregation_scan", []) for read in READS},
    }
    return out


def combined(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """One system's figures at one size from two reports' rounds: medians over all their runs, the largest wrong-cell
    counts and peak memory, bytes from the earlier."""
    out = dict(earlier)
    out["runs"] = earlier["runs"] + later["runs"]
    every = {name: earlier["all_seconds"].get(name, []) + later["all_seconds"].get(name, []) for name, _ in FIGURES}
    out["all_seconds"] = {name: seconds for name, seconds in every.items() if seconds}
    out["seconds"] = {name: statistics.median(seconds) for name, seconds in out["all_seconds"].items()}
    out["process_s"] = statistics.median([earlier["process_s"], later["process_s"]])
    out["peak_rss_mib"] = max(earlier["peak_rss_mib"], later["peak_rss_mib"])
    out["reader_peak_rss_mib"] = max(earlier.get("reader_peak_rss_mib", 0.0), later.get("reader_peak_rss_mib", 0.0))
    out["wrong_cells"] = {r: max(earlier["wrong_cells"][r], later["wrong_cells"][r]) for r in READS}
    out["query_correct"] = {r: earlier["query_correct"][r] and later["query_correct"][r] for r in READS}
    out["wrong_by_column"] = {
        r: max((earlier["wrong_by_column"][r], later["wrong_by_column"][r]), key=lambda c: c["total"]) for r in READS
    }
    return out


def merge_reports(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """`later`'s rounds added to `earlier`'s (`--also`), size by size and system by system."""
    out = dict(later)
    out["runs"] = earlier["runs"] + later["runs"]
    out["load_before"] = f"{earlier['load_before']} (first round), {later['load_before']} (last round)"
    out["arguments"] = f"{earlier.get('arguments', '')} ; then {later.get('arguments', '')}"
    out["results"] = {}
    for size, got in later["results"].items():
        before = earlier["results"].get(size, {"systems": {}})["systems"]
        systems = got["systems"]
        out["results"][size] = {
            "workload": got["workload"],
            "systems": {s: combined(before[s], v) if s in before else v for s, v in systems.items()},
        }
    return out


def run_size(
    keys: int,
    seed: int,
    systems: Sequence[str],
    runs: int,
    workdir: Path,
    saved: Callable[[dict[str, Any]], None],
    first_round: int = 0,
    batches_per_stream: int = workload.BATCHES_PER_STREAM,
    warm_reads: int = WARM_READS,
    fresh: Sequence[str] = FRESH_STATES,
) -> dict[str, Any]:
    """Every system at one size, `runs` rounds; `saved` is called with the figures so far after each run."""
    folder = workdir / f"keys-{keys}"
    data = folder / "data"
    marker = data / f".complete-{seed}-{batches_per_stream}"
    if not marker.exists():
        say(f"generating the workload: {keys:,} keys, {batches_per_stream} batch(es) per stream")
        shutil.rmtree(data, ignore_errors=True)
        generated = workload.generate(keys, seed, batches_per_stream)
        workload.save(generated, data)
        stats = {**generated.stats, "batches": len(generated.batches)}
        (data / "stats.json").write_text(json.dumps(stats), encoding="utf-8")
        marker.write_text("ok", encoding="utf-8")
    stats = json.loads((data / "stats.json").read_text(encoding="utf-8"))
    truth = workload.load_truth(data)
    want = expected_query(truth)
    installed = {name: spark_envs.install(env) for name, env in {e.name: e for e in ENVIRONMENTS.values()}.items()}
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for round_number in range(runs):
        turn = (first_round + round_number) % len(systems)
        order = list(systems[turn:]) + list(systems[:turn])
        for system in order:
            say(f"{keys:,} keys, run {round_number + 1}/{runs}: {system}")
            work = folder / system
            result = run_system(system, data, work, installed[ENVIRONMENTS[system].name], warm_reads, fresh)
            check_answers(result, work, truth, want)
            say(
                f"  {system}: ingest {result['ingest_s']:.1f} s, read {result['read_uncompacted']['noop_s']:.1f} s, "
                f"compaction {result['compaction_s']:.1f} s, wrong cells "
                f"{result['read_uncompacted']['wrong_by_column']} / {result['read_compacted']['wrong_cells']:,}"
            )
            results[system].append(result)
            saved({"workload": stats, "systems": {s: median_of(r) for s, r in results.items() if r}})
    return {"workload": stats, "systems": {s: median_of(r) for s, r in results.items()}}


# ------------------------------------------------------------------------------------------------ reporting


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])
    except OSError:
        return "unknown"


def versions() -> dict[str, Any]:
    """What ran: each system's Spark and connector, and the environments' pinned packages and jars."""
    return {
        "environments": {
            env.name: {"packages": list(env.packages), "jars": list(env.jars)}
            for env in {e.name: e for e in ENVIRONMENTS.values()}.values()
        },
        "systems": {
            "stitchlake": {"spark": spark_envs.SPARK_4_1.spark_version},
            "delta": {"spark": spark_envs.SPARK_4_1.spark_version, "delta": spark_envs.DELTA_VERSION},
            "iceberg": {"spark": spark_envs.SPARK_4_1.spark_version, "iceberg": spark_envs.ICEBERG_VERSION},
            "hudi": {"spark": spark_envs.SPARK_3_5.spark_version, "hudi": spark_envs.HUDI_VERSION},
            "paimon": {"spark": spark_envs.SPARK_3_5.spark_version, "paimon": spark_envs.PAIMON_VERSION},
        },
    }


def seconds_cell(seconds: dict[str, float], first: str, warm: str | None) -> str:
    """One figure, or a read's first and warm figures (`first / warm s`); a figure not measured (a report saved
    before warm reads were, a new session's read left out with `--fresh-reads`) shows `-`."""
    if first not in seconds:
        return "-"
    if warm is None:
        return f"{seconds[first]:.1f} s"
    warm_text = f"{seconds[warm]:.1f}" if warm in seconds else "-"
    return f"{seconds[first]:.1f} / {warm_text} s"


def render(report: dict[str, Any], arguments: str) -> str:
    sizes = [k for k in report["sizes"] if str(k) in report["results"]]
    systems: list[str] = report["systems"]
    host = report["machine"]
    lines = [
        BEGIN,
        "",
        f"- date: {host['date']}; stitchlake commit {host['commit']}",
        f"- machine: {host['cpu']}, {host['cores']} cores, {host['memory']} RAM, {host['os']}; {host['java']}; "
        f"load average {report['load_before']} before the run, {report['load_after']} after (the run's own two "
        "busy cores included)",
        "- Spark: " + ", ".join(f"{s} on PySpark {report['versions']['systems'][s]['spark']}" for s in systems),
        f"- each system in a fresh process, `local[2]`, driver memory 4g, 4 shuffle partitions; median of "
        f"{report['runs']} run(s), the systems taking turns; command: `python -m scripts.bench_peers {arguments}`",
    ]
    for keys in sizes:
        stats = report["results"][str(keys)]["workload"]
        lines.append(
            f"- workload {keys:,} keys: {stats['events_total']:,} events, {sum(stats['late'].values()):,} late, "
            f"{sum(stats['duplicates'].values()):,} duplicates, "
            f"{stats.get('batches', workload.BATCHES_PER_STREAM * len(workload.STREAMS))} batches"
        )
    for keys in sizes:
        got = report["results"][str(keys)]["systems"]
        shown = [s for s in systems if s in got]
        lines += [
            "",
            f"#### {keys:,} keys",
            "",
            "| figure | " + " | ".join(shown) + " |",
            "|---|" + "---|" * len(shown),
        ]
        for first, warm, label in ROWS:
            lines.append(
                f"| {label} | " + " | ".join(seconds_cell(got[s]["seconds"], first, warm) for s in shown) + " |"
            )
        lines.append(
            "| bytes on disk, uncompacted / compacted | "
            + " | ".join(
                f"{got[s]['bytes_uncompacted'] / 2**20:.0f} / {got[s]['bytes_compacted'] / 2**20:.0f} MiB"
                for s in shown
            )
            + " |"
        )
        lines.append(
            "| peak resident memory of the process tree | "
            + " | ".join(f"{got[s]['peak_rss_mib']:,.0f} MiB" for s in shown)
            + " |"
        )
        lines.append(
            "| peak resident memory of the new session's reader | "
            + " | ".join(
                f"{got[s]['reader_peak_rss_mib']:,.0f} MiB" if got[s].get("reader_peak_rss_mib") else "-" for s in shown
            )
            + " |"
        )
        for read, label in (("read_uncompacted", "uncompacted"), ("read_compacted", "after compaction")):
            lines.append(
                f"| **wrong cells**, {label} read (aggregation right?) | "
                + " | ".join(
                    f"**{got[s]['wrong_cells'][read]:,}** ({'yes' if got[s]['query_correct'][read] else 'no'})"
                    for s in shown
                )
                + " |"
            )
        lines += ["", f"The aggregation's scan at {keys:,} keys (its physical plan; WORK: the run's work folder):"]
        lines += ["", "```"]
        for system in shown:
            for read, label in (("read_uncompacted", "uncompacted"), ("read_compacted", "compacted")):
                for line in got[system].get("aggregation_scan", {}).get(read, []):
                    lines.append(f"{system}, {label}: {line}")
        lines.append("```")
    lines += [
        "",
        f"The aggregation: `{QUERY.format(view='t')}`. Each read is timed twice: its first run (before compaction "
        "the session's first read of the table; after it, the first read after the compaction) and warm, the median "
        f"of {report.get('warm_reads', WARM_READS)} more runs, each a new DataFrame of the table; the wrong cells are "
        "counted on one more read. A new session's first reads are those of another process started after the "
        "ingest and again after the compaction, whose session has read nothing before (a `MERGE INTO` ingest reads "
        "the table it merges into, so the ingesting session's first read is not a cold one for every system); its "
        "memory is its own row. "
        "Delta's all-column read hashes every column into one value "
        "instead of the `noop` sink, which refuses Delta scans over deletion vectors (`peer_delta.py`). Bytes on disk "
        "are the table's whole folder: after compaction, the files it replaced stay unless the system removed them on "
        "its own (none was asked to clean). The ground truth has 11 cells per key.",
        "",
        END,
    ]
    return "\n".join(lines)


def publish(out: Path, block: str) -> None:
    """Replace the peers block in `out`, keeping the hand-written text around it (appended when absent)."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        text = before + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Peers on Spark\n\n" + block + "\n"
    out.write_text(text, encoding="utf-8")


def has_figure(report: dict[str, Any], name: str) -> bool:
    """Whether every system at every size has the figure (a report saved before the warm reads has not)."""
    return all(name in got["seconds"] for size in report["results"].values() for got in size["systems"].values())


def with_charts(block: str, report: dict[str, Any], args: argparse.Namespace) -> str:
    """The block with PNG charts of its figures (ratios to stitchlake; time and memory against size) drawn into
    `--charts` (default: bench/ beside `--out`) and referenced before its end marker; none with `--no-charts` or
    `--out -` without `--charts`."""
    if args.no_charts or (args.out == "-" and args.charts is None):
        return block
    out = Path(args.out) if args.out != "-" else Path(args.charts) / "charts.md"
    folder = Path(args.charts) if args.charts else out.parent / "bench"
    charted = [(name, label) for name, label in FIGURES if has_figure(report, name)]
    return bench_charts.with_charts(block, END, bench_charts.peers(report, charted, folder), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="200000,1000000", help="comma-separated key counts")
    parser.add_argument("--runs", type=int, default=1, help="rounds of all systems (figures are medians)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of: " + ", ".join(SYSTEMS))
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--workdir", default=str(ROOT / "bench-data" / "peers"))
    parser.add_argument("--json", default=None, help="write the figures as one JSON object to this path")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="'-' to write no Markdown")
    parser.add_argument(
        "--from-json", default=None, help="only write the Markdown (and charts) of a saved --json report"
    )
    parser.add_argument("--charts", default=None, help="folder of the PNG charts (default: bench/ beside --out)")
    parser.add_argument("--no-charts", action="store_true", help="draw no PNG charts")
    parser.add_argument("--also", default=None, help="a saved --json report whose rounds this run's are added to")
    parser.add_argument("--first-round", type=int, default=0, help="rotate the systems' order as in this round")
    parser.add_argument(
        "--batches-per-stream",
        type=int,
        default=workload.BATCHES_PER_STREAM,
        help="landing files per stream (the figures in docs use the default; fewer only for smoke runs)",
    )
    parser.add_argument(
        "--warm-reads",
        type=int,
        default=WARM_READS,
        help=f"reads after each first one, their median the warm figure (default {WARM_READS}; fewer for smoke runs)",
    )
    parser.add_argument(
        "--fresh-reads",
        default=",".join(FRESH_STATES),
        help="the tables a new session reads: uncompacted, compacted, both (the default) or '' for none",
    )
    args = parser.parse_args(argv)
    fresh = [s for s in args.fresh_reads.split(",") if s]
    if set(fresh) - set(FRESH_STATES):
        parser.error(f"--fresh-reads {args.fresh_reads}: give a comma-separated subset of {', '.join(FRESH_STATES)}")
    if args.warm_reads < 1:
        parser.error(f"--warm-reads {args.warm_reads}: give 1 or more (the warm figure is their median)")
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    if args.from_json:
        saved_report = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        block = with_charts(render(saved_report, saved_report.get("arguments", shown)), saved_report, args)
        if args.out != "-":
            publish(Path(args.out), block)
        print(block)
        return 0
    sizes = sorted(int(s.replace("_", "")) for s in args.sizes.split(","))
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown system(s): {', '.join(unknown)}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "sizes": sizes,
        "systems": systems,
        "runs": max(1, args.runs),
        "machine": machine(),
        "load_before": load_average(),
        "versions": versions(),
        "arguments": shown,
        "warm_reads": args.warm_reads,
        "results": {},
    }
    started = time.perf_counter()

    def save(keys: int) -> Callable[[dict[str, Any]], None]:
        def saved(so_far: dict[str, Any]) -> None:
            report["results"][str(keys)] = so_far
            report["load_after"] = load_average()
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")

        return saved

    for keys in sizes:
        report["results"][str(keys)] = run_size(
            keys,
            args.seed,
            systems,
            report["runs"],
            workdir,
            save(keys),
            args.first_round,
            args.batches_per_stream,
            args.warm_reads,
            fresh,
        )
    report["load_after"] = load_average()
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.also:
        report = merge_reports(json.loads(Path(args.also).read_text(encoding="utf-8")), report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    block = with_charts(render(report, report["arguments"]), report, args)
    if args.out != "-":
        publish(Path(args.out), block)
    print(block)
    say(f"done in {report['seconds']:.0f} s")
    wrong = [
        f"stitchlake at {keys:,} keys: {report['results'][str(keys)]['systems']['stitchlake']['wrong_cells']}"
        for keys in sizes
        if "stitchlake" in systems
        and any(report["results"][str(keys)]["systems"]["stitchlake"]["wrong_cells"].values())
    ]
    if wrong:
        print("FAILED: stitchlake's answers differ from the ground truth: " + "; ".join(wrong), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
