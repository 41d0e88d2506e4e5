"""`make bench` (issue 6): the script runs end to end at a tiny size, and its ground-truth check can fail.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_bench.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts import bench, bench_report, bench_workload, child_env, module_argv
from tests.support.charts import assert_png


@pytest.mark.s3
def test_bench_runs_end_to_end_and_publishes_its_figures_between_the_markers(tmp_path: Path, s3_server: Any) -> None:
    out = tmp_path / "benchmarks.md"
    begin, end = bench_report.BEGIN, bench_report.END
    out.write_text(f"# Notes kept\n\n{begin}\nold figures\n{end}\n\n## Analysis kept\n", encoding="utf-8")
    argv = module_argv("bench", "--sizes", "2000,4000", "--runs", "1")
    argv += ["--no-spark", "--no-metadata", "--workdir", str(tmp_path / "work"), "--out", str(out)]
    argv += ["--json", str(tmp_path / "figures.json")]
    server = {  # the session's S3 server, not a second one
        "STITCH_S3_ENDPOINT": s3_server.endpoint,
        "STITCH_S3_ACCESS_KEY": s3_server.access_key,
        "STITCH_S3_SECRET_KEY": s3_server.secret_key,
    }
    env = child_env({**os.environ, **server})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Notes kept") and text.rstrip().endswith("## Analysis kept")
    assert "old figures" not in text
    assert "**Every result matched the ground truth.**" in text
    for figure in ("in-process ingest, 12 batches, Parquet logs", "snapshot read", "read-optimized / Parquet scan"):
        assert figure in text
    assert "From 2,000 to 4,000 keys" in text
    assert "### S3" in text and "200 active instants" in text  # next to the local figures of the same run
    charts = re.findall(r"!\[[^]]*\]\((bench/[^)]+\.png)\)", text.split(begin, 1)[1].split(end, 1)[0])
    assert charts == ["bench/bench-time.png", "bench/bench-memory.png", "bench/bench-floor-ratios.png"], charts
    for chart in charts:
        assert_png(out.parent / chart)
    # `--from-json` writes the run's own block again: its date, commit and command, not the re-render's.
    again = tmp_path / "again.md"
    again.write_text(f"{begin}\n{end}\n", encoding="utf-8")
    argv = [*module_argv("bench", "--from-json", str(tmp_path / "figures.json")), "--out", str(again)]
    assert subprocess.run(argv, capture_output=True, timeout=300, check=False, env=env).returncode == 0
    block = text.split(begin, 1)[1].split(end, 1)[0]
    assert again.read_text(encoding="utf-8").split(begin, 1)[1].split(end, 1)[0] == block


def test_the_replayed_timeline_is_a_valid_table_for_the_metadata_figures(tmp_path: Path) -> None:
    path = bench.timeline_table(tmp_path, 60)
    stitch = str(Path(sys.executable).parent / "stitch")
    status = subprocess.run([stitch, "status", "--table", str(path), "--json"], capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    assert '"active_instants":60' in status.stdout.replace(" ", "")
    shown = subprocess.run(
        [stitch, "timeline", "show", "--table", str(path), "-n", "0"], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    table = bench.open_table(path)
    assert len(table.timeline().completed()) == 60
    # The replayed commits re-add the first three commits' rows: the answer is theirs alone.
    fresh = bench.new_table(tmp_path / "fresh")
    for stream, batch in bench_workload.generate(300, seed=1).batches[:3]:
        fresh.write(stream, batch.slice(0, 20))
    expected = fresh.read().sort_by("order_id")
    assert expected.num_rows > 0 and table.read().sort_by("order_id").equals(expected)
