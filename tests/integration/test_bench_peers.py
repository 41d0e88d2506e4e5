"""`make bench-peers` (issue 25): the harness runs all five systems end to end at a small size, so it cannot rot.

Speed is never asserted (figures come from `make bench-peers`); this proves that every system ran its whole job in
its own Spark environment, that stitchlake's answers match the ground truth, that every peer's wrong cells were
counted, and that the JSON and the Markdown have their documented shape. The wrong-cell count itself is checked
on tables with known faults.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from scripts import bench_peers, bench_workload, child_env, module_argv

ROOT = Path(__file__).resolve().parents[2]
KEYS = 2000
#: One batch per stream still interleaves the streams (three commits, late and duplicate events inside each);
#: the figures' twelve batches come from `make bench-peers`, and the five Spark jobs here stay inside the suite's
#: time (Delta's MERGE takes seconds each).
BATCHES_PER_STREAM = 1


@pytest.mark.spark
def test_every_system_runs_the_same_job_and_reports_every_figure_and_its_wrong_cells(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    begin, end = bench_peers.BEGIN, bench_peers.END
    out.write_text(f"# Kept\n\n{begin}\nold figures\n{end}\n\n## Analysis kept\n", encoding="utf-8")
    report_path = tmp_path / "peers.json"
    argv = module_argv("bench_peers", "--sizes", str(KEYS), "--runs", "1")
    argv += ["--batches-per-stream", str(BATCHES_PER_STREAM), "--warm-reads", "1"]
    # a new session reads the uncompacted table only: every system's reader still starts, at half the cost
    argv += ["--fresh-reads", "uncompacted"]
    argv += ["--workdir", str(tmp_path / "work"), "--json", str(report_path), "--out", str(out)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=3600, check=False, stdin=subprocess.DEVNULL, env=child_env()
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    report = json.loads(report_path.read_text(encoding="utf-8"))
    systems = ["stitchlake", "hudi", "paimon", "delta", "iceberg"]
    assert report["sizes"] == [KEYS] and report["systems"] == systems and report["runs"] == 1
    assert set(report["versions"]["systems"]) == set(systems)
    assert report["versions"]["systems"]["hudi"]["spark"].startswith("3.5.")
    assert report["versions"]["systems"]["stitchlake"]["spark"].startswith("4.1.")
    size = report["results"][str(KEYS)]
    assert size["workload"]["keys"] == KEYS
    for system in systems:
        got = size["systems"][system]
        assert got["versions"]["spark"] == report["versions"]["systems"][system]["spark"], system
        for name, _label in bench_peers.FIGURES:
            if name.startswith("fresh_compacted."):  # left out by --fresh-reads
                assert name not in got["seconds"], (system, name)
                continue
            assert isinstance(got["seconds"][name], float) and got["seconds"][name] > 0, (system, name)
        assert len(got["batches_s"]) == BATCHES_PER_STREAM * len(bench_workload.STREAMS)
        assert got["bytes_uncompacted"] > 0 and got["bytes_compacted"] > 0
        assert got["peak_rss_mib"] > 100  # a JVM at least: the whole process tree was sampled
        assert got["reader_peak_rss_mib"] > 100  # the new session's reader: a process of its own, with its JVM
        for read in bench_peers.READS:
            assert isinstance(got["wrong_cells"][read], int) and got["wrong_cells"][read] >= 0, (system, read)
            assert isinstance(got["query_correct"][read], bool)
    stitched = size["systems"]["stitchlake"]
    assert stitched["wrong_cells"] == {"read_uncompacted": 0, "read_compacted": 0}
    assert stitched["query_correct"] == {"read_uncompacted": True, "read_compacted": True}
    # On the peers' Spark 4.1 the JVM reader served stitchlake's reads, the aggregation's three columns only.
    for read in bench_peers.READS:
        scan = " ".join(stitched["aggregation_scan"][read])
        assert "BatchScan stitchlake" in scan and "columns=[currency, paid_amount, ship_status]" in scan, scan

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Kept") and text.rstrip().endswith("## Analysis kept")
    assert "old figures" not in text
    block = text.split(begin, 1)[1].split(end, 1)[0]
    assert f"#### {KEYS:,} keys" in block
    assert "| figure | " + " | ".join(systems) + " |" in block
    assert "**wrong cells**, uncompacted read" in block
    assert "stitchlake, uncompacted: BatchScan stitchlake WORK/" in block, block
    # every read twice: the session's first and warm (here the median of 1 more, `--warm-reads 1`), for both reads,
    # before and after compaction
    assert report["warm_reads"] == 1 and "the median of 1 more runs" in block
    for row in ("snapshot read, uncompacted: all columns", "read after compaction: all columns"):
        assert re.search(re.escape(row) + r" \(first / warm\) \| [0-9.]+ / [0-9.]+ s \|", block), row
    # and a new session's first reads, in a process that read nothing before, with its own memory (after
    # compaction not measured here: a dash)
    row = "a new session's first reads, uncompacted: all columns / aggregation"
    assert re.search(re.escape(row) + r" \| [0-9.]+ / [0-9.]+ s \|", block), row
    assert "| a new session's first reads, after compaction: all columns / aggregation | - | - | - | - | - |" in block
    assert re.search(r"\| peak resident memory of the new session's reader \| [0-9,]+ MiB \|", block)


def test_the_saved_report_is_redrawn_as_png_charts_without_running_anything(tmp_path: Path) -> None:
    """`--from-json`: the Markdown and the charts of docs/benchmarks-peers.json (ratios to stitchlake per size; time
    and memory against size), the charts referenced from the block."""
    from tests.support.charts import assert_png

    out = tmp_path / "benchmarks.md"
    out.write_text(f"# Kept\n\n{bench_peers.BEGIN}\nold\n{bench_peers.END}\n", encoding="utf-8")
    argv = module_argv("bench_peers", "--from-json")
    argv += [str(ROOT / "docs" / "benchmarks-peers.json"), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=child_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    block = out.read_text(encoding="utf-8").split(bench_peers.BEGIN, 1)[1].split(bench_peers.END, 1)[0]
    charts = re.findall(r"!\[[^]]*\]\((bench/[^)]+\.png)\)", block)
    assert "bench/bench-peers-ratios-200000.png" in charts and "bench/bench-peers-memory.png" in charts, charts
    for chart in charts:
        assert_png(out.parent / chart)
    # docs/benchmarks.md references the same charts, drawn from the same report
    docs = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for chart in charts:
        assert f"]({chart})" in docs and (ROOT / "docs" / chart).is_file(), chart


def test_warm_reads_below_one_are_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        bench_peers.main(["--warm-reads", "0", "--workdir", str(tmp_path / "work"), "--out", "-"])
    assert exited.value.code == 2 and "--warm-reads 0: give 1 or more" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()
