"""`make demo`: the main job end to end on the embedded default (local disk, Spark local, file lock).

1. generate a realistic three-stream dataset (orders, payments, shipments; late, out-of-order and duplicate
   events, deletes, keys seen by one stream only) and its ground truth, independently of stitchlake;
2. `stitch init`, then the three `stitch ingest` jobs *concurrently*, each its own spark-submit;
3. `stitch timeline show` and `stitch read --limit 10`;
4. read the stitched table and compare it with the ground truth, cell by cell.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time

from scripts import ROOT

CONFIG = ROOT / "configs" / "demo.yaml"
DEMO = ROOT / "demo"
STREAMS = ("orders", "payments", "shipments")


def stitch(*args: str) -> list[str]:
    """argv for the `stitch` CLI of this environment (a list: never a shell string)."""
    return [sys.executable, "-m", "stitchlake", *args]


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def run(*args: str) -> None:
    completed = subprocess.run(stitch(*args), cwd=ROOT, check=False)
    if completed.returncode != 0:
        sys.exit(f"demo failed: `stitch {' '.join(args)}` exited {completed.returncode}")


def ingest_concurrently() -> None:
    """The three streams' ingests as three spark-submit jobs at once: lock-free writers, no coordination."""
    started = time.time()
    logs = {s: open(DEMO / f"ingest-{s}.out", "w+", encoding="utf-8") for s in STREAMS}  # noqa: SIM115
    jobs = {
        s: subprocess.Popen(
            stitch("ingest", "-c", str(CONFIG), "--stream", s, "--engine", "spark"),
            cwd=ROOT,
            stdout=logs[s],
            stderr=subprocess.STDOUT,
        )
        for s in STREAMS
    }
    while any(job.poll() is None for job in jobs.values()):
        running = [s for s, job in jobs.items() if job.poll() is None]
        print(f"\r   running: {', '.join(running):<30} {time.time() - started:5.0f}s", end="", flush=True)
        time.sleep(1)
    print(f"\r   all three ingests finished in {time.time() - started:.0f}s{' ' * 30}")
    failed = []
    for s in STREAMS:
        logs[s].seek(0)
        text = logs[s].read()
        logs[s].close()
        print(f"-- {s} (exit {jobs[s].returncode})")
        print("\n".join(line for line in text.splitlines() if not line.startswith("ingest: ")))
        if jobs[s].returncode != 0:
            failed.append(s)
    if failed:
        sys.exit(f"demo failed: ingest of {', '.join(failed)} did not succeed (see above)")


def check() -> int:
    import stitchlake
    from scripts.demo_data import compare

    table = stitchlake.read(str(CONFIG))
    problems = compare(table, DEMO / "truth.parquet")
    if problems:
        print("MISMATCH against the ground truth:")
        for line in problems:
            print(f"   {line}")
        return 1
    print(f"MATCH: all {table.num_rows:,} stitched rows equal the generator's ground truth, cell by cell")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=300_000, help="orders to generate (~3.6 events each)")
    parser.add_argument("--keep", action="store_true", help="keep an existing demo/ folder (re-run the jobs)")
    args = parser.parse_args()
    started = time.time()
    from scripts.demo_data import generate

    if not args.keep:
        shutil.rmtree(DEMO, ignore_errors=True)
    step(f"generating {args.orders:,} orders of events into {DEMO.relative_to(ROOT)}/landing")
    if not (DEMO / "truth.parquet").exists():
        summary = generate(DEMO, orders=args.orders)
        events = ", ".join(f"{count:,} {stream}" for stream, count in summary["events"].items())
        late = sum(summary["late"].values())
        print(
            f"   {summary['events_total']:,} events ({events}); {late:,} late, "
            f"{sum(summary['duplicates'].values()):,} duplicates, {summary['deletes']['delete_events']:,} deletes; "
            f"{summary['keys']['truth']:,} keys in the ground truth"
        )
    step("stitch init")
    run("init", "-c", str(CONFIG))
    step("stitch ingest --engine spark --stream orders | payments | shipments  (three concurrent spark-submit jobs)")
    ingest_concurrently()
    step("stitch timeline show")
    run("timeline", "show", "-c", str(CONFIG))
    step("stitch read --limit 10")
    run("read", "-c", str(CONFIG), "--limit", "10")
    step("checking the stitched table against the ground truth")
    code = check()
    print(f"\ndemo finished in {time.time() - started:.0f}s")
    sys.exit(code)


if __name__ == "__main__":
    main()
