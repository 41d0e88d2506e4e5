"""The `make bench` report: the figures a run measured (`Results`), as the Markdown block between the markers of
docs/benchmarks.md, with its charts, and again from a saved `--json` report; and the settings of the measurements
that the report describes (targets, repetitions, the sizes of the special tables). scripts/bench.py measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts import bench_charts
from scripts.bench_workload import QUERY
from scripts.machine import machine as machine_info

BEGIN, END = "<!-- bench:figures:begin -->", "<!-- bench:figures:end -->"
TIMELINE_INSTANTS = 10_000
#: Targets at the smallest size (issue 6): figure name -> (comparison, bound).
TARGETS: dict[str, tuple[str, float]] = {
    "ingest_parquet_s": ("<=", 2.0),
    "snapshot_read_s": ("<=", 0.4),
    "read_optimized_vs_parquet": ("<=", 1.3),
    "spark_join_vs_stitched_query": (">=", 3.0),
    "timeline_show_s": ("<", 1.0),
}
#: A figure this short is the median of at least SHORT_RUNS runs: three runs of 20 ms measure the machine's noise.
SHORT_FIGURE_S = 0.1
SHORT_RUNS = 15
#: The 100-slice table: 25 partitions x 4 buckets, 20,000 rows.
SLICE_TABLE = {"partitions": 25, "buckets": 4, "rows": 20_000}
#: Active instants of the table whose `timeline show` is measured on S3 and locally.
S3_TIMELINE_INSTANTS = 200


def s3_rows(results: Results) -> list[str]:
    got = results.s3
    if "skipped" in got:
        return [f"S3 figures were skipped: {got['skipped']}."]
    keys = got["keys"]
    local = results.figures[keys]
    server = "Ceph RADOS Gateway 16 on 127.0.0.1 (scripts/rgw.py)"
    if os.environ.get("STITCH_S3_ENDPOINT"):
        server = "the S3 endpoint in $STITCH_S3_ENDPOINT"
    rows = [
        (
            "in-process ingest, 12 batches, Parquet logs",
            median(local["ingest_parquet"]["seconds"]),
            median(got["ingest"]["seconds"]),
        ),
        (
            "snapshot read, uncompacted (12 logs per slice)",
            median(local["snapshot"]["seconds"]),
            median(got["read"]["seconds"]),
        ),
        (
            f"`stitch timeline show`, {S3_TIMELINE_INSTANTS} active instants (a new process)",
            median(got["timeline"]["local"]),
            median(got["timeline"]["s3"]),
        ),
    ]
    lines = [
        f"The same {keys:,}-key workload with the table on S3 ({server}; every request a round trip to a "
        "local server, so these figures show stitchlake's own cost per request, not a WAN's latency):",
        "",
        "| figure | local disk | S3 | S3 / local |",
        "|---|---|---|---|",
    ]
    for name, on_disk, on_s3 in rows:
        lines.append(f"| {name} | {on_disk:.3f} s | {on_s3:.3f} s | {on_s3 / on_disk:.1f}x |")
    lines += [
        "",
        f"The first snapshot read in a new process (nothing cached) took {got['read']['cold']:.3f} s on S3. "
        "Round trips, not bytes, are what S3 adds: tests/integration/test_s3_round_trips.py bounds the waves of "
        'requests a command waits for (docs/operations.md, "Running on S3 and on a cluster").',
    ]
    return lines


@dataclass
class Results:
    sizes: list[int]
    runs: int
    figures: dict[int, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    spark: dict[str, Any] = field(default_factory=dict)
    s3: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    workloads: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The report's header lines (`machine()`), taken when the run ended: `--from-json` shows the run's own.
    header: list[str] = field(default_factory=list)


def median(values: list[float]) -> float:
    return statistics.median(values)


def figure_rows(results: Results) -> list[tuple[str, list[str], str]]:
    """(figure, one cell per size, target verdict) for the main table."""
    sizes = results.sizes
    small = results.figures[sizes[0]]

    def cell(keys: int, name: str, key: str = "seconds") -> str:
        got = results.figures[keys][name]
        return f"{median(got[key]):.3f} s ({got['peak_mib']:.0f} MiB)"

    def ratio(keys: int, top: str, bottom: str) -> float:
        figures = results.figures[keys]
        return median(figures[top]["seconds"]) / median(figures[bottom]["seconds"])

    rows = [
        (
            "in-process ingest, 12 batches, Parquet logs",
            [cell(k, "ingest_parquet") for k in sizes],
            verdict("ingest_parquet_s", median(small["ingest_parquet"]["seconds"])),
        ),
        ("in-process ingest, 12 batches, Avro logs", [cell(k, "ingest_avro") for k in sizes], ""),
        (
            "snapshot read, uncompacted (12 logs per slice)",
            [cell(k, "snapshot") for k in sizes],
            verdict("snapshot_read_s", median(small["snapshot"]["seconds"])),
        ),
        ("compaction", [cell(k, "compaction") for k in sizes], ""),
        ("compaction throughput", [f"{throughput(results.figures[k]['compaction']):,.0f} rows/s" for k in sizes], ""),
        ("read-optimized read after compaction", [cell(k, "read_optimized") for k in sizes], ""),
        ("plain `pyarrow.parquet.read_table` of the final rows", [cell(k, "parquet_scan") for k in sizes], ""),
        (
            "read-optimized / Parquet scan",
            [f"{ratio(k, 'read_optimized', 'parquet_scan'):.2f}x" for k in sizes],
            verdict("read_optimized_vs_parquet", ratio(sizes[0], "read_optimized", "parquet_scan")),
        ),
        ("snapshot (uncompacted) / Parquet scan", [f"{ratio(k, 'snapshot', 'parquet_scan'):.2f}x" for k in sizes], ""),
    ]
    return rows


def throughput(compaction: dict[str, Any]) -> float:
    return compaction["rows"] / median(compaction["seconds"])


def verdict(name: str, value: float) -> str:
    comparison, bound = TARGETS[name]
    met = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[comparison]
    return f"{comparison} {bound:g}: {'met' if met else '**not met**'}"


def scaling_rows(results: Results) -> list[str]:
    sizes = results.sizes
    if len(sizes) < 2:
        return []
    low, high = sizes[0], sizes[-1]
    lines = [f"From {low:,} to {high:,} keys ({high / low:.1f}x the keys; linear growth = the same ratio):", ""]
    for name, label in (
        ("ingest_parquet", "in-process ingest"),
        ("snapshot", "snapshot read"),
        ("compaction", "compaction"),
        ("read_optimized", "read-optimized read"),
    ):
        growth = median(results.figures[high][name]["seconds"]) / median(results.figures[low][name]["seconds"])
        lines.append(f"- {label}: {growth:.1f}x the time")
    return lines


def spark_rows(results: Results) -> list[str]:
    if not results.spark:
        return ["Spark figures were skipped (`--no-spark`)."]
    ingest = results.spark["ingest"]
    wall, job = median(ingest["wall"]), median(ingest["job"])
    queries: dict[int, dict[str, list[float]]] = results.spark["query"]
    sizes = sorted(queries)
    lines = [
        f"Spark `local[{os.cpu_count()}]`. One `stitch ingest --stream orders` (4 landing files, "
        f"{results.spark['ingest_keys']:,} keys) through spark-submit: {wall:.1f} s wall, of which the job itself "
        f"(after JVM start-up and session creation) {job:.1f} s and JVM start-up, session and `stitch` process "
        f"{wall - job:.1f} s.",
        "",
        "| query | " + " | ".join(f"{k:,} keys" for k in sizes) + " | target (smallest size) |",
        "|---|" + "---|" * len(sizes) + "---|",
        "| the Spark job a user writes: per-stream dedup by event time + full outer joins, then the query | "
        + " | ".join(f"{median(queries[k]['spark_join']):.2f} s" for k in sizes)
        + " | |",
    ]
    for name in ("stitched_uncompacted", "stitched_compacted"):
        cells = []
        for keys in sizes:
            took, join = median(queries[keys][name]), median(queries[keys]["spark_join"])
            cells.append(f"{took:.2f} s (join / stitched = {join / took:.1f}x)")
        first = median(queries[sizes[0]]["spark_join"]) / median(queries[sizes[0]][name])
        label = name.replace("stitched_", "")
        lines.append(
            f"| the same query on the stitched table ({label}), `spark.read.format('stitchlake')` | "
            + " | ".join(cells)
            + f" | {verdict('spark_join_vs_stitched_query', first)} |"
        )
    lines += ["", f"The query: `{QUERY.format(view='t')}`.", "", *spark_speed_rows(results)]
    return lines


def spark_speed_rows(results: Results) -> list[str]:
    """Issue 15's figures: Spark ingest and read as ratios to their floors, per-core rates, and scaling."""
    speeds: dict[int, dict[str, Any]] = results.spark.get("speed", {})
    if not speeds:
        return []
    sizes = sorted(speeds)
    cores = speeds[sizes[0]]["cores"]
    reader = speeds[sizes[0]].get("reader", "the Python data source")  # (runs saved before it was recorded)

    def took(keys: int, name: str) -> float:
        return median(speeds[keys]["seconds"][name])

    def per_core(keys: int, name: str, rows: str) -> str:
        return f"{speeds[keys][rows] / took(keys, name) / cores:,.0f}"

    def row(label: str, cells: list[str], target: str = "") -> str:
        return f"| {label} | " + " | ".join(cells) + f" | {target} |"

    top = sizes[-1]

    def against_floor(floor: str, floor_label: str, name: str, label: str, bound: float) -> list[str]:
        """Three rows: the floor, the stitched figure, and their ratio with its target at the largest size."""
        ratio = took(top, name) / took(top, floor)

        def tasks(keys: int) -> str:
            return f" ({speeds[keys]['read_partitions']} tasks)" if name == "spark_read" else ""

        return [
            row(floor_label, [f"{took(k, floor):.2f} s" for k in sizes]),
            row(label, [f"{took(k, name):.2f} s{tasks(k)}" for k in sizes]),
            row(
                f"{label.split(' of ')[0]} / floor",
                [f"{took(k, name) / took(k, floor):.2f}x" for k in sizes],
                f"<= {bound:g}: {'met' if ratio <= bound else '**not met**'}",
            ),
        ]

    reads = against_floor(
        "floor_read",
        "floor: `spark.read.parquet` of the final rows (all columns, `noop` sink)",
        "spark_read",
        f"Spark read of the uncompacted table (12 logs per slice), `format('stitchlake')`: {reader}",
        3.0,  # issue 25's bound for a Python data source; the JVM reader (issue 35) is held to it too
    )
    lines = [
        f"In one `local[{cores}]` session (`scripts/bench.py` `measure_spark_speed`), each stitched figure next to "
        "the plain Spark job that bounds it, run alternately after one unmeasured round:",
        "",
        "| figure | " + " | ".join(f"{k:,} keys" for k in sizes) + " | target (largest size) |",
        "|---|" + "---|" * len(sizes) + "---|",
        *against_floor(
            "floor_ingest",
            "floor: `spark.read.parquet` of the landing files, written as Parquet (3 streams)",
            "spark_ingest",
            "Spark ingest of the same files, 3 deltacommits (`SparkEngine`)",
            1.5,
        ),
        *reads[:1],
        row(
            "a Python data source that only reads those rows' files with pyarrow (no merge): Spark's cost of any "
            "Python reader",
            [
                f"{took(k, 'python_floor_read'):.2f} s ({took(k, 'python_floor_read') / took(k, 'floor_read'):.2f}x)"
                for k in sizes
            ],
        ),
        row(
            "the same, after each task reads its share of the uncompacted table's log files as the stitched reader "
            "does (no merge): the least any Python merge-on-read of these files costs",
            [
                f"{took(k, 'python_logs_floor_read'):.2f} s "
                f"({took(k, 'python_logs_floor_read') / took(k, 'floor_read'):.2f}x)"
                for k in sizes
            ],
        ),
        *reads[1:],
        row("ingest, events per second per core", [per_core(k, "spark_ingest", "events") for k in sizes]),
        row("read, rows per second per core", [per_core(k, "spark_read", "rows") for k in sizes]),
    ]
    if len(sizes) > 1:
        low = sizes[0]
        lines += [
            "",
            f"From {low:,} to {top:,} keys ({top / low:.1f}x the keys): Spark ingest "
            f"{took(top, 'spark_ingest') / took(low, 'spark_ingest'):.1f}x the time (floor "
            f"{took(top, 'floor_ingest') / took(low, 'floor_ingest'):.1f}x), Spark read "
            f"{took(top, 'spark_read') / took(low, 'spark_read'):.1f}x (floor "
            f"{took(top, 'floor_read') / took(low, 'floor_read'):.1f}x).",
        ]
    profile = speeds[top]["profile"]
    if profile:
        total = profile.get("total_s", 0.0)
        steps = ", ".join(
            f"{label} {profile.get(step, 0.0):.1f} s"
            for step, label in (
                ("read_task_s", "reading, casting and checking landing files"),
                ("route_task_s", "routing to file groups and encoding Arrow IPC"),
                ("shuffle_write_s", "handing buffers to the shuffle"),
                ("shuffle_read_s", "receiving them"),
                ("write_task_s", "precombining and writing logs"),
            )
        )
        lines += [
            "",
            f"Where the Spark ingest's time goes at {top:,} keys (the last run's 3 commits, their `timings`; task "
            f"steps are summed over tasks, which run {cores} at a time): {total:.1f} s in all, of which the Spark job "
            f"{profile.get('spark_job_s', 0.0):.1f} s wall; inside its tasks: {steps}. The rest of the commit time is "
            "the driver: listing landing files, claiming, and publishing.",
        ]
    sliced = results.spark.get("sliced")
    if sliced:
        warm = median(sliced["warm"])
        lines += [
            "",
            f"A table of {sliced['slices']} file slices ({SLICE_TABLE['partitions']} partitions x "
            f"{SLICE_TABLE['buckets']} buckets) holding {sliced['rows']:,} rows, read through "
            f"`spark.read.format('stitchlake')` in {sliced['partitions']} task(s): as the first query of a fresh "
            f"session {sliced['cold']:.2f} s (the session starting {reader} included); the first read of another "
            f"such table once it is up {sliced['first']:.2f} s (target <= 3 s: "
            f"{'met' if sliced['first'] <= 3 else '**not met**'}); read again {warm:.2f} s.",
        ]
    return lines


def metadata_rows(results: Results) -> list[str]:
    got = results.metadata
    show, status = median(got["timeline_show"]), median(got["status"])
    return [
        f"On a table whose active timeline holds {TIMELINE_INSTANTS:,} completed deltacommits, measured as a user "
        "runs them (a new `stitch` process each time, `--json`):",
        "",
        f"- `stitch timeline show`: {show:.2f} s ({verdict('timeline_show_s', show)})",
        f"- `stitch status`: {status:.2f} s",
    ]


def machine() -> list[str]:
    """The report's header lines: `scripts.machine.machine()` and the library versions the figures depend on."""
    import numpy
    import pyarrow

    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    host = machine_info()
    java = host["java"] if host["java"] != "unknown" else "java unknown"
    return [
        f"- date: {host['date']}; stitchlake commit {host['commit']}",
        f"- machine: {host['cpu']}, {host['cores']} cores, {host['memory']} RAM, {host['os']}",
        f"- versions: Python {host['python']}, pyarrow {pyarrow.__version__}, numpy {numpy.__version__}, "
        f"pyspark {spark_version}, {java}",
    ]


def render(results: Results, arguments: str) -> str:
    sizes = results.sizes
    header = "| figure | " + " | ".join(f"{k:,} keys" for k in sizes) + " | target (smallest size) |"
    lines = [BEGIN, "", *(results.header or machine())]
    for keys in sizes:
        stats = results.workloads[keys]
        events = ", ".join(f"{s} {n:,}" for s, n in stats["events"].items())
        late = sum(stats["late"].values())
        duplicates = sum(stats["duplicates"].values())
        lines.append(
            f"- workload {keys:,} keys (seed {stats['seed']}): {stats['events_total']:,} events ({events}); "
            f"{late:,} late, {duplicates:,} duplicates; 12 batches"
        )
    lines += [
        f"- each figure: median of {results.runs} runs (of {SHORT_RUNS} for reads under {SHORT_FIGURE_S:g} s) in a "
        "fresh process; peak resident memory of that process "
        "(the workload it holds included) in brackets",
        f"- command: `python -m scripts.bench {arguments}`".rstrip(),
        "",
        "### In-process engine",
        "",
        header,
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    for name, cells, target in figure_rows(results):
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {target} |")
    lines += ["", "### Scaling", "", *scaling_rows(results), "", "### Spark", "", *spark_rows(results)]
    if results.metadata:
        lines += ["", "### Metadata commands", "", *metadata_rows(results)]
    if results.s3:
        lines += ["", "### S3", "", *s3_rows(results)]
    verdict_line = (
        "**Every result matched the ground truth.**"
        if not results.problems
        else "**GROUND-TRUTH FAILURES:**\n\n" + "\n".join(f"- {p}" for p in results.problems)
    )
    lines += ["", verdict_line, "", END]
    return "\n".join(lines)


def publish(out: Path, block: str) -> None:
    """Replace the figures block in `out`, keeping the hand-written text around it."""
    if out.exists() and BEGIN in (text := out.read_text(encoding="utf-8")) and END in text:
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        out.write_text(before + block + after, encoding="utf-8")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# Benchmarks\n\nRun `make bench` to reproduce.\n\n" + block + "\n", encoding="utf-8")


def results_from_json(saved: dict[str, Any]) -> Results:
    """`--json`'s results read back (JSON keys are text: the sizes become numbers again)."""

    def by_size(found: dict[str, Any]) -> dict[int, Any]:
        return {int(k): v for k, v in found.items()}

    return Results(
        sizes=[int(k) for k in saved["sizes"]],
        runs=int(saved["runs"]),
        figures=by_size(saved["figures"]),
        metadata=saved["metadata"],
        spark={k: by_size(v) if k in ("query", "speed") else v for k, v in saved["spark"].items()},
        s3=saved["s3"],
        problems=list(saved["problems"]),
        workloads=by_size(saved["workloads"]),
        header=list(saved.get("header", [])),
    )


def with_charts(block: str, results: Results, args: argparse.Namespace) -> str:
    """The block with PNG charts of the in-process figures (time and memory against size, ratios to the floor) in
    `--charts` (default: bench/ beside `--out`), referenced before its end marker."""
    if args.no_charts:
        return block
    out = Path(args.out)
    folder = Path(args.charts) if args.charts else out.parent / "bench"
    return bench_charts.with_charts(block, END, bench_charts.bench(results.figures, folder), out)
