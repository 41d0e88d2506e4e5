"""Where stitchlake's Spark read time goes, next to the floors that bound it (issue 25, item 5).

    python -m scripts.peer_profile [--keys 200000] [--workdir bench-data/peers]

Runs itself again under the Spark 4.1 environment `bench_peers` uses for stitchlake, in one `local[2]` session with
the same settings: ingests the workload's 12 batches (`peer_stitchlake.Job`), then measures, printing each line as
it goes: a trivial Python data source read twice (Spark's own start-up of Python data sources), the stitched read
three times (the first pays our share of the start-up), a pyarrow-only Python data source over the final rows and
`spark.read.parquet` of them (the floors), `stitchlake.read` in this process (the merge alone), and after
compaction the stitched read against Spark's Parquet reader over the same base files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scripts import ROOT, module_argv


def show(label: str, seconds: float) -> None:
    print(f"{label:<70} {seconds:7.2f} s", flush=True)


def profile(data: Path, work: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import stitchlake
    from scripts import peer_job, peer_stitchlake
    from scripts.bench import arrow_file_source

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark = peer_job.session(peer_stitchlake.CONF, "peer-profile")
    job = peer_stitchlake.Job(spark, work, data)
    for stream, file in peer_job.landing_batches(data):
        show(f"ingest {stream} {file.name}", peer_job.timed(lambda s=stream, f=file: job.ingest_batch(s, f)))  # type: ignore[misc]
    spark.dataSource.register(arrow_file_source())
    tiny = work / "tiny.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), tiny)
    trivial = spark.read.format("bench_arrow_files").option("path", str(tiny))
    for n in range(2):
        show(
            f"a trivial Python data source (3 rows), read {n + 1}",
            peer_job.timed(lambda: peer_job.drain(trivial.load())),
        )
    for n in range(3):
        show(f"stitched read, uncompacted, read {n + 1}", peer_job.timed(lambda: peer_job.drain(job.frame())))
    final = work / "final-rows"
    job.frame().repartition(2).write.parquet(str(final))
    parts = ",".join(str(p) for p in sorted(final.glob("*.parquet")))
    floor = spark.read.format("bench_arrow_files").option("path", parts)
    for n in range(2):
        show(
            f"pyarrow-only Python data source of the final rows, read {n + 1}",
            peer_job.timed(lambda: peer_job.drain(floor.load())),
        )
        show(
            f"spark.read.parquet of the final rows, read {n + 1}",
            peer_job.timed(lambda: peer_job.drain(spark.read.parquet(str(final)))),
        )
        show(f"stitched read, uncompacted, read {n + 4}", peer_job.timed(lambda: peer_job.drain(job.frame())))
    table = stitchlake.open(str(job.path()))
    for n in range(2):
        show(f"stitchlake.read in this process (the merge alone), read {n + 1}", peer_job.timed(table.read))
    show("compaction", peer_job.timed(job.compact))
    table = stitchlake.open(str(job.path()))
    bases = [str(job.path() / s.base.path) for s in table.view().latest_slices(None) if s.base]
    plain = spark.read.parquet(*bases).select(*peer_job.WIDE)
    for n in range(3):
        show(f"stitched read, compacted, read {n + 1}", peer_job.timed(lambda: peer_job.drain(job.frame())))
        show(
            f"spark.read.parquet of the same {len(bases)} base files, read {n + 1}",
            peer_job.timed(lambda: peer_job.drain(plain)),
        )
    spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--workdir", default=str(ROOT / "bench-data" / "peers"))
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(args.workdir) / f"keys-{args.keys}"
    if args.inside:
        profile(folder / "data", folder / "profile")
        return 0
    from scripts import bench_workload as workload
    from scripts import spark_envs

    data = folder / "data"
    if not (data / f".complete-{args.seed}").exists():  # the same workload folder as bench_peers.py
        shutil.rmtree(data, ignore_errors=True)
        generated = workload.generate(args.keys, args.seed)
        workload.save(generated, data)
        (data / "stats.json").write_text(json.dumps(generated.stats), encoding="utf-8")
        (data / f".complete-{args.seed}").write_text("ok", encoding="utf-8")
    env = spark_envs.install(spark_envs.SPARK_4_1).environ()
    argv = module_argv("peer_profile", "--keys", str(args.keys), "--workdir", args.workdir, "--inside")
    print(f"load average before: {os.getloadavg()}", flush=True)
    code = subprocess.run(argv, env=env, check=False).returncode
    print(f"load average after: {os.getloadavg()}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
