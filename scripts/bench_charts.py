"""PNG charts of the benchmark figures (issue 38), drawn with matplotlib's Agg backend (no display needed).

Each benchmark script draws from the figures it already collected (or from its saved `--json` report) into a
folder beside its Markdown (`docs/bench/` for docs/benchmarks.md) and puts `![...](bench/<name>.png)` lines into
its block, next to the tables:

- `make bench` (`bench.py`): time and peak memory against size per figure, and the ratios to the floor (a plain
  Parquet scan of the final rows).
- `make bench-scale` (`bench_scale.py`): each step's wall time and its process tree's peak memory, per size.
- `make bench-peers` (`bench_peers.py`): each figure's time as a ratio to stitchlake's per size, and ingest and
  read time and peak memory against size per system.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Colours of the systems and series, in order.
#: Distinct enough for the widest chart (bench-scale's 12 steps): no two series of one chart share a colour.
COLOURS = (
    "#2f6fb3",
    "#e07b24",
    "#2e9e5b",
    "#c0392b",
    "#8e5ea2",
    "#16a2b8",
    "#b8860b",
    "#d6589f",
    "#7f7f7f",
    "#17becf",
    "#9acd32",
    "#4b0082",
    "#ff69b4",
    "#8b4513",
)
DPI = 110


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def lines(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    log: bool = True,
) -> Path:
    """One line per series of (x, y) points; log-log by default (growth against size)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4.2), dpi=DPI)
    for index, (name, points) in enumerate(series.items()):
        shown = sorted(points)
        axes.plot(
            [x for x, _ in shown],
            [y for _, y in shown],
            marker="o",
            label=name,
            color=COLOURS[index % len(COLOURS)],
        )
    if log:
        axes.set_xscale("log")
        axes.set_yscale("log")
        _plain_ticks(axes.xaxis, "{:,.0f}")
        _plain_ticks(axes.yaxis, "{:g}")
    axes.set_title(title, fontsize=11)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    return _save(plt, figure, path)


def bars(
    path: Path,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    reference: float | None = None,
    log: bool = False,
) -> Path:
    """Grouped bars: one group per label of `groups`, one bar per series; a dashed line at `reference`."""
    plt = _pyplot()
    width = 0.8 / max(1, len(series))
    figure, axes = plt.subplots(
        figsize=(min(12.0, max(7.5, 0.35 * len(groups) * max(1, len(series)) + 2)), 4.8), dpi=DPI
    )
    for index, (name, values) in enumerate(series.items()):
        xs = [g + (index - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in values]
        axes.bar(xs, heights, width=width * 0.95, label=name, color=COLOURS[index % len(COLOURS)])
    if reference is not None:
        axes.axhline(reference, color="#333", linestyle="--", linewidth=1)
    if log:
        axes.set_yscale("log")
        _plain_ticks(axes.yaxis, "{:g}")
    axes.set_xticks(range(len(groups)))
    axes.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
    axes.set_title(title, fontsize=11)
    axes.set_ylabel(ylabel)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    return _save(plt, figure, path)


def _plain_ticks(axis: Any, spec: str) -> None:
    """Ticks of a log axis as plain numbers (2, 0.5, 200,000), not powers of ten."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _position: spec.format(value)))
    axis.set_minor_formatter(FuncFormatter(lambda value, _position: spec.format(value)))


def _save(plt: Any, figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def markdown(charts: Sequence[tuple[str, Path]], out: Path) -> str:
    """`![alt](relative path)` lines for the charts, relative to the Markdown file `out`."""
    lines_out = []
    for alt, path in charts:
        try:
            shown = path.resolve().relative_to(out.resolve().parent)
        except ValueError:
            shown = path.resolve()
        lines_out.append(f"![{alt}]({shown.as_posix()})")
    return "\n\n".join(lines_out)


def with_charts(block: str, end: str, charts: Sequence[tuple[str, Path]], out: Path) -> str:
    """The figures block with the charts' images before its end marker."""
    if not charts:
        return block
    return block.replace(end, "Charts of the figures above:\n\n" + markdown(charts, out) + "\n\n" + end, 1)


# ------------------------------------------------------------------------------------------------ per script


#: bench.py's timed figures: (name in Results.figures, label).
BENCH_FIGURES = (
    ("ingest_parquet", "ingest, Parquet logs"),
    ("ingest_avro", "ingest, Avro logs"),
    ("snapshot", "snapshot read, uncompacted"),
    ("compaction", "compaction"),
    ("read_optimized", "read-optimized read"),
    ("parquet_scan", "Parquet scan (floor)"),
)


def add_arguments(parser: argparse.ArgumentParser, saved: str) -> None:
    """The options every benchmark with charts takes: re-render a saved report (`saved` names it), where the charts
    go, or none."""
    told = f"only write the Markdown and charts of a saved {saved} (no run)"
    parser.add_argument("--from-json", default=None, help=told)
    parser.add_argument("--charts", default=None, help="folder of the PNG charts (default: bench/ beside --out)")
    parser.add_argument("--no-charts", action="store_true", help="draw no PNG charts")


def saved_report(args: argparse.Namespace) -> Any:
    """The report `--from-json` names, as JSON."""
    return json.loads(Path(args.from_json).read_text(encoding="utf-8"))


def bench(figures: Mapping[int, Mapping[str, Any]], folder: Path, prefix: str = "bench") -> list[tuple[str, Path]]:
    """`make bench`: time and memory against size, and the ratios to the floor (the Parquet scan)."""
    import statistics

    sizes = sorted(figures)
    present = [(name, label) for name, label in BENCH_FIGURES if all(name in figures[k] for k in sizes)]
    seconds = {
        label: [(float(k), float(statistics.median(figures[k][name]["seconds"]))) for k in sizes]
        for name, label in present
    }
    memory = {label: [(float(k), float(figures[k][name]["peak_mib"])) for k in sizes] for name, label in present}
    out = [
        (
            "time against size",
            lines(folder / f"{prefix}-time.png", "In-process engine: time against size", "keys", "seconds", seconds),
        ),
        (
            "peak memory against size",
            lines(
                folder / f"{prefix}-memory.png",
                "In-process engine: peak resident memory against size",
                "keys",
                "MiB",
                memory,
            ),
        ),
    ]
    floor = "parquet_scan"
    if all(floor in figures[k] for k in sizes):
        ratios: dict[str, list[float | None]] = {}
        for name, label in present:
            if name == floor or name.startswith("ingest"):
                continue
            ratios[label] = [
                statistics.median(figures[k][name]["seconds"]) / statistics.median(figures[k][floor]["seconds"])
                for k in sizes
            ]
        out.append(
            (
                "ratios to the floor",
                bars(
                    folder / f"{prefix}-floor-ratios.png",
                    "Time as a multiple of a plain Parquet scan of the final rows (dashed: the floor)",
                    "x the floor",
                    [f"{k:,} keys" for k in sizes],
                    ratios,
                    reference=1.0,
                ),
            )
        )
    return out


def scale(results: Sequence[Mapping[str, Any]], folder: Path, prefix: str = "bench-scale") -> list[tuple[str, Path]]:
    """`make bench-scale`: each step's wall time and its process tree's peak memory, per size."""
    steps: dict[str, dict[int, tuple[float, float]]] = {}
    for result in results:
        keys = int(result["keys"])
        for name, step in result["steps"].items():
            for one in step if isinstance(step, list) else [step]:
                wall, peak = steps.setdefault(name, {}).get(keys, (0.0, 0.0))
                steps[name][keys] = (wall + float(one["wall_s"]), max(peak, float(one.get("tree_peak_mib", 0.0))))
    sizes = sorted(int(r["keys"]) for r in results)
    names = sorted(steps)
    groups = [f"{k:,} keys" for k in sizes]
    time_series = {n: [steps[n].get(k, (None, None))[0] for k in sizes] for n in names}
    memory_series = {n: [steps[n].get(k, (None, None))[1] for k in sizes] for n in names}
    return [
        (
            "time per step",
            bars(folder / f"{prefix}-time.png", "At scale: wall time per step", "seconds", groups, time_series),
        ),
        (
            "peak memory per step",
            bars(
                folder / f"{prefix}-memory.png",
                "At scale: peak resident memory of each step's process tree",
                "MiB",
                groups,
                memory_series,
            ),
        ),
    ]


def peers(
    report: Mapping[str, Any], figures: Sequence[tuple[str, str]], folder: Path, prefix: str = "bench-peers"
) -> list[tuple[str, Path]]:
    """`make bench-peers`: per size each figure as a ratio to stitchlake's, and time and memory against size."""
    sizes = [int(k) for k in report["sizes"] if str(k) in report["results"]]
    systems: list[str] = list(report["systems"])
    out: list[tuple[str, Path]] = []
    for keys in sizes:
        got = report["results"][str(keys)]["systems"]
        shown = [s for s in systems if s in got]
        if "stitchlake" not in got:
            continue
        mine = got["stitchlake"]["seconds"]
        ratios = {
            system: [got[system]["seconds"][name] / mine[name] if mine[name] else None for name, _ in figures]
            for system in shown
        }
        out.append(
            (
                f"ratios to stitchlake at {keys:,} keys",
                bars(
                    folder / f"{prefix}-ratios-{keys}.png",
                    f"{keys:,} keys: each system's time as a multiple of stitchlake's (dashed: stitchlake)",
                    "x stitchlake's time (log)",
                    [label for _, label in figures],
                    ratios,
                    reference=1.0,
                    log=True,
                ),
            )
        )
    if len(sizes) > 1:
        for name, label in (("ingest_s", "ingest"), ("read_uncompacted.noop_s", "snapshot read, uncompacted")):
            series = {
                s: [
                    (float(k), float(_path(report["results"][str(k)]["systems"][s]["seconds"], name)))
                    for k in sizes
                    if s in report["results"][str(k)]["systems"]
                ]
                for s in systems
            }
            slug = name.split(".")[0].replace("_s", "").replace("_", "-")
            out.append(
                (
                    f"{label} time against size",
                    lines(
                        folder / f"{prefix}-{slug}-time.png",
                        f"Peers on Spark: {label} time against size",
                        "keys",
                        "seconds",
                        series,
                    ),
                )
            )
        memory = {
            s: [
                (float(k), float(report["results"][str(k)]["systems"][s]["peak_rss_mib"]))
                for k in sizes
                if s in report["results"][str(k)]["systems"]
            ]
            for s in systems
        }
        out.append(
            (
                "peak memory against size",
                lines(
                    folder / f"{prefix}-memory.png",
                    "Peers on Spark: peak memory of the process tree against size",
                    "keys",
                    "MiB",
                    memory,
                ),
            )
        )
    return out


def _path(seconds: Mapping[str, Any], name: str) -> Any:
    """A figure by its name in `seconds` (flat names such as `read_uncompacted.noop_s`)."""
    return seconds[name]
