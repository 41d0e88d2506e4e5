"""Steady-state reads: stitchlake's and Iceberg's tables read in turns by one Spark session (after `make bench-peers`).

    python -m scripts.peer_steady [--sizes 200000,1000000] [--rounds 15] [--workdir bench-data/peers] [--json PATH]

`make bench-peers` times each system's reads in the session that ingested the table: the first read, then warm as
the median of the three after it. Those reads also time how far each system's code has been compiled by then, and
the two sessions differ there: Iceberg's twelve `MERGE INTO`s ran its scan before its first read, stitchlake's ingest
never reads. This reads the tables the last `make bench-peers` run left (stitchlake's and Iceberg's, both compacted by
then) from one session that has both systems' jars: each round reads, in a rotating order, each table before its
compaction (stitchlake `as_of` its last deltacommit, Iceberg `versionAsOf` its last snapshot before the rewrite) and
after it, every column into Spark's `noop` sink and then the benchmark's aggregation. Both systems' code warms up in
the same JVM, on the same cores, at the same time; the steady figure of a read is the median of its rounds after the
first third. Every round's seconds are printed (and written to `--json`) so the warm-up is visible too.

It runs itself under the Spark environment `make bench-peers` gives both systems (`spark_envs.SPARK_4_1`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts import ROOT, module_argv, spark_envs
from scripts.bench_workload import QUERY

INNER = "--inner"
#: The four tables a round reads, in the order of its first round.
TABLES = ("stitchlake uncompacted", "iceberg uncompacted", "stitchlake compacted", "iceberg compacted")
KINDS = ("all columns", "aggregation")


def steady(series: list[float]) -> float:
    """The median of the rounds after the first third: the warm-up left out."""
    return statistics.median(series[len(series) // 3 :])


def stitchlake_before_compaction(path: Path) -> str:
    """The completion time of the last deltacommit before the table's last compaction (its `as_of`)."""
    import stitchlake
    from stitchlake.vocabulary import Action

    timeline = stitchlake.open(path).timeline()
    compaction = timeline.latest_completed([Action.COMPACTION])
    if compaction is None:
        raise SystemExit(f"{path}: no compaction on the timeline; run `make bench-peers` first")
    before = timeline.completed([Action.DELTACOMMIT], until=compaction.completed)
    if not before or before[-1].completed is None:
        raise SystemExit(f"{path}: no deltacommit before the compaction")
    return before[-1].completed


def session() -> Any:
    """One `local[2]` session with both systems' settings and jars (the reader's and the environment's)."""
    from scripts import peer_iceberg, peer_job, peer_stitchlake

    conf = {**peer_iceberg.CONF, **peer_stitchlake.CONF}
    jars = [j for j in (conf.get("spark.jars", ""), os.environ.get("STITCH_SPARK_JARS", "")) if j]
    conf["spark.jars"] = ",".join(jars)
    return peer_job.session(conf, "peer-steady")


def measure(folder: Path, rounds: int) -> dict[str, Any]:
    """Every round's seconds of each table's two reads, in one session."""
    from scripts import peer_iceberg, peer_job
    from stitchlake.spark.session import register

    table = folder / "stitchlake" / "stitchlake"
    warehouse = folder / "iceberg" / "iceberg"
    if not table.is_dir() or not warehouse.is_dir():
        raise SystemExit(f"{folder}: no stitchlake and Iceberg tables; run `make bench-peers` at this size first")
    as_of = stitchlake_before_compaction(table)
    spark = register(session())
    peer_iceberg.Job(spark, folder / "iceberg", folder / "data", existing=True)  # its catalog's warehouse set
    history = f"SELECT snapshot_id, operation FROM {peer_iceberg.TABLE}.snapshots ORDER BY committed_at"
    snapshots = spark.sql(history).collect()
    written = [s.snapshot_id for s in snapshots if s.operation != "replace"]
    if len(written) == len(snapshots):
        raise SystemExit(f"{warehouse}: no rewrite on Iceberg's table; run `make bench-peers` first")
    frames: dict[str, Callable[[], Any]] = {
        TABLES[0]: lambda: spark.read.format("stitchlake").option("as_of", as_of).load(str(table)),
        TABLES[1]: lambda: spark.read.option("versionAsOf", written[-1]).table(peer_iceberg.TABLE),
        TABLES[2]: lambda: spark.read.format("stitchlake").load(str(table)),
        TABLES[3]: lambda: spark.table(peer_iceberg.TABLE),
    }

    def read(name: str, kind: str) -> float:
        frame = frames[name]().select(*peer_job.WIDE)
        started = time.perf_counter()
        if kind == KINDS[0]:
            peer_job.drain(frame)
        else:
            frame.createOrReplaceTempView("t")
            spark.sql(QUERY.format(view="t")).collect()
        return time.perf_counter() - started

    series: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in KINDS} for name in TABLES}
    for number in range(rounds):
        order = TABLES[number % len(TABLES) :] + TABLES[: number % len(TABLES)]
        for name in order:
            for kind in KINDS:
                series[name][kind].append(read(name, kind))
        print(f"round {number + 1}/{rounds} done", file=sys.stderr, flush=True)
    spark.stop()
    return {"as_of": as_of, "iceberg_snapshot": written[-1], "seconds": series}


def report(results: dict[str, dict[str, Any]], rounds: int) -> str:
    lines = [
        f"{rounds} rounds, one `local[2]` session with both systems; steady = the median of the rounds after the "
        f"first {rounds // 3}; seconds, stitchlake / Iceberg (the ratio)",
        "",
        "| read | " + " | ".join(f"{int(k):,} keys: first round | steady" for k in results) + " |",
        "|---|" + "---|---|" * len(results),
    ]
    for state in ("uncompacted", "compacted"):
        for kind in KINDS:
            cells = []
            for result in results.values():
                ours, theirs = (result["seconds"][f"{s} {state}"][kind] for s in ("stitchlake", "iceberg"))
                cells.append(f"{ours[0]:.2f} / {theirs[0]:.2f}")
                cells.append(f"{steady(ours):.3f} / {steady(theirs):.3f} ({steady(ours) / steady(theirs):.2f}x)")
            lines.append(f"| {state}, {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.peer_steady", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200000,1000000", help="the keys of the `make bench-peers` runs to read")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the four tables' reads (at least 3)")
    parser.add_argument("--workdir", default=str(ROOT / "bench-data" / "peers"), help="bench_peers.py's --workdir")
    parser.add_argument("--json", default=None, help="also write every round's seconds here")
    parser.add_argument(INNER, nargs=2, metavar=("FOLDER", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the steady figure leaves the first third out)")
    if args.inner:
        folder, out = args.inner
        Path(out).write_text(json.dumps(measure(Path(folder), args.rounds)), encoding="utf-8")
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    installed = spark_envs.install(spark_envs.SPARK_4_1)
    results: dict[str, dict[str, Any]] = {}
    for keys in sizes:
        out = Path(args.workdir) / f"keys-{keys}" / "steady.json"
        folder = Path(args.workdir) / f"keys-{keys}"
        argv = module_argv("peer_steady", "--rounds", str(args.rounds), INNER, str(folder), str(out))
        subprocess.run(argv, env=installed.environ(), check=True)
        results[str(keys)] = json.loads(out.read_text(encoding="utf-8"))
    print(report(results, args.rounds))
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "results": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
