"""`make bench-scale` (issue 27 point 4): the script runs end to end in its small mode and reports wrong answers.

The benchmark itself (30M keys on Spark) takes about 20 minutes on the 2-core machine (19.9 in the run
docs/benchmarks.md records, before the rescale step); this runs every step of it at a few thousand keys with ingest
and compaction in-process (`--engine local`), the Spark read of the uncompacted table on a real Spark, so the script
cannot rot between real runs. Speed is never asserted (figures come from `make bench-scale`); the acceptance query's
memory is checked against its limit, as the real run checks it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from scripts import bench, bench_scale, bench_workload, child_env, module_argv

ROOT = Path(__file__).resolve().parents[2]


def test_bench_scale_runs_end_to_end_checks_the_truth_and_publishes_between_its_markers(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    kept = f"# Kept\n\n{bench.BEGIN}\nbench figures\n{bench.END}\n\n## Analysis kept\n"
    out.write_text(kept, encoding="utf-8")
    work = tmp_path / "work"
    argv = module_argv("bench_scale", "--keys", "1500,3000", "--chunk-keys", "1000")
    argv += ["--engine", "local", "--workdir", str(work), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, env=child_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Kept") and "bench figures" in text and text.rstrip().endswith("## Analysis kept")
    block = text.split(bench_scale.BEGIN, 1)[1].split(bench_scale.END, 1)[0]
    assert "**Every answer matched the ground truth**" in block
    for figure in (
        "workload generated in chunks of 1,000 keys",
        "ingest in-process, 12 deltacommits",
        f'`stitch sql "{bench_scale.ACCEPTANCE_SQL}"`, uncompacted',
        "Spark read of the uncompacted table",
        "compaction in-process",
        "`stitch sql --mode read_optimized`",
        "growth, 2x the keys",
    ):
        assert figure in block, figure
    assert f"`stitch rescale --buckets {bench_scale.RESCALED_BUCKETS}`" in block
    assert f"`stitch sql` fingerprint after the rescale ({bench_scale.RESCALED_BUCKETS} buckets)" in block

    from tests.unit.test_bench import assert_png

    charts = re.findall(r"!\[[^]]*\]\((bench/[^)]+\.png)\)", block)
    assert charts == ["bench/bench-scale-time.png", "bench/bench-scale-memory.png"], charts
    for chart in charts:
        assert_png(out.parent / chart)

    results = json.loads((work / "results.json").read_text(encoding="utf-8"))
    assert [r["keys"] for r in results] == [1500, 3000]
    for figures in results:
        assert figures["stats"]["chunks"] == -(-figures["keys"] // 1000)  # generated in chunks
        assert figures["problems"] == []
        spark = figures["steps"]["spark_read"]["roles"]
        assert spark["JVM"]["peak_mib"] > 0 and "Python worker" in spark  # every process of the tree watched
        assert figures["steps"]["sql_acceptance"]["json"]["records"][0]["count_star()"] == figures["keys"]
        # The acceptance query's peak was measured and checked against the 1.5 GB limit (these sizes are under 10M).
        memory = figures["acceptance_memory"]
        assert memory["limit_mib"] == bench_scale.ACCEPTANCE_PEAK_MIB and 0 < memory["peak_mib"] < memory["limit_mib"]
        shown = f"at {figures['keys']:,} keys, uncompacted: peak resident memory {memory['peak_mib']:,.0f} MiB"
        assert f"{shown}, within the acceptance limit of 1,430 MiB (1.5 GB)" in block
    # The generated workload is reused by the next run; publishing again replaces the block, nothing else.
    assert bench_scale.generate(work / "keys-1500-seed-6", 1500, 6, 1000)["reused"] is True
    bench_scale.publish(out, f"{bench_scale.BEGIN}\nnew figures\n{bench_scale.END}")
    text = out.read_text(encoding="utf-8")
    assert text.count(bench_scale.BEGIN) == 1 and "new figures" in text and "3,000 keys" not in text
    assert "bench figures" in text and text.rstrip().endswith("## Analysis kept")


def _sql_step(count: int, amount: float, peak_mib: float = 600.0) -> dict[str, Any]:
    """A `stitch sql --json` step as `bench_scale.run` records it: its answer and its process's peak."""
    return {
        "json": {"records": [{"count_star()": count, "sum(amount)": amount}]},
        "roles": {"stitch CLI": {"peak_mib": peak_mib, "processes": 1}},
        "tree_peak_mib": peak_mib,
    }


def test_a_wrong_answer_or_the_acceptance_query_over_its_memory_limit_is_reported() -> None:
    truth = bench_workload.generate(400, seed=3).truth
    expected = bench_workload.fingerprint(truth)
    rows = truth.num_rows
    amount = sum(round(v * 100) for v in truth.column("amount").to_pylist() if v is not None) / 100
    limit = bench_scale.ACCEPTANCE_PEAK_MIB
    assert limit == 1430 and limit * 2**20 <= 1.5e9  # 1.5 GB, as issue 27's acceptance says
    assert bench_scale.check_acceptance(_sql_step(rows, amount), expected, "sql", limit) == []
    off_by_a_cent = _sql_step(rows, amount + 0.01)
    assert bench_scale.check_acceptance(off_by_a_cent, expected, "sql", limit)
    one_row_short = _sql_step(rows - 1, amount)
    assert bench_scale.check_acceptance(one_row_short, expected, "sql", limit)
    # Exact but over 1.5 GB: a failure where the limit applies (up to 10M keys), reported only past that size.
    heavy = _sql_step(rows, amount, peak_mib=1500.0)
    [problem] = bench_scale.check_acceptance(heavy, expected, "stitch sql (uncompacted)", limit)
    assert "peak resident memory 1,500 MiB, over the limit of 1,430 MiB" in problem
    assert bench_scale.check_acceptance(heavy, expected, "sql", None) == []
    # The step's peak is its processes' largest, or their sizes summed when a tree's sum is larger.
    tree = {**_sql_step(rows, amount, peak_mib=900.0), "tree_peak_mib": 1450.0}
    assert bench_scale.check_acceptance(tree, expected, "sql", limit)

    rows_of_truth = truth.to_pylist()
    first, second = next(
        (i, j)
        for i in range(len(rows_of_truth))
        for j in range(i + 1, len(rows_of_truth))
        if None not in (rows_of_truth[i]["carrier"], rows_of_truth[j]["carrier"])
        and rows_of_truth[i]["carrier"] != rows_of_truth[j]["carrier"]
    )
    rows_of_truth[first]["carrier"], rows_of_truth[second]["carrier"] = (
        rows_of_truth[second]["carrier"],
        rows_of_truth[first]["carrier"],
    )
    swapped = bench_workload.fingerprint(truth.from_pylist(rows_of_truth, schema=truth.schema))
    assert swapped["carrier_sum"] == expected["carrier_sum"]  # a plain sum would not notice values moved
    assert bench_scale.check_sql({"json": {"records": [expected]}}, expected, "sql") == []
    problems = bench_scale.check_sql({"json": {"records": [swapped]}}, expected, "sql")
    assert problems and "carrier_weighted" in problems[0]  # the weighted sum ties each value to its key
