"""`python -m scripts.partitions` (`make partitions`): the rounds and their summary, and the in-host commands."""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scripts.partitions.checker import check, history
from scripts.partitions.hook import batch_main, hooked_main, kafka_main, spark_read_main
from scripts.partitions.rounds import play_round
from scripts.partitions.run import Run, Stats
from scripts.partitions.settings import PROVIDERS

# ================================================================================================ main


def play(
    rounds: int,
    seed: int,
    providers: Sequence[str] = PROVIDERS,
    workdir: Path | None = None,
    only: Sequence[int] = (),
    log: Callable[[str], None] = print,
    engine: str | None = None,
    follow: bool = False,
) -> Stats:
    """Run the rounds (or only the listed ones) and check each; the stats hold every violation with its history."""
    base = workdir or Path(tempfile.mkdtemp(prefix="partitions-"))
    base.mkdir(parents=True, exist_ok=True)
    log(f"partitions: seed {seed}, {rounds} rounds, providers {','.join(providers)}, workdir {base}")
    with Run(base, seed, log) as run:
        indices = list(only or range(rounds))
        for index in indices:
            started = time.monotonic()
            round_ = play_round(run, index, providers, engine, follow)
            run.stats.rounds += 1
            for op in round_.ops:
                if op.command in ("ingest", "stream"):
                    run.stats.outcomes[f"{op.phase}:{op.outcome}"] += 1
            found = check(run, round_, spark=index in indices[-len(providers) :])  # Spark reads the last rounds
            (round_.dir / "history.txt").write_text(history(run, round_) + "\n", encoding="utf-8")
            outcome = "ok" if not found else f"{len(found)} VIOLATION(S)"
            log(f"{round_.describe()}: {outcome} ({time.monotonic() - started:.0f}s)")
            summary = {"seed": seed, "done": run.stats.rounds, **run.stats.summary()}
            (base / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
            if found:
                replay = f"python -m scripts.partitions --seed {seed} --round {index} --providers {','.join(providers)}"
                replay += f" --engine {engine}" if engine else ""
                replay += " --stream" if follow else ""
                text = "\n".join([*(f"  ! {v}" for v in found), history(run, round_), f"  replay: {replay}"])
                log(text)
                run.stats.violations.append(text)
        return run.stats


def _interrupted(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hooked"]:
        hooked_main(args[2:] if args[1:2] == ["--"] else args[1:])
        return 0
    if args[:1] == ["batch"]:
        batch_main(args[1:])
        return 0
    if args[:1] == ["spark-read"]:
        spark_read_main(args[1:])
        return 0
    if args[:1] == ["kafka"]:
        kafka_main(args[1:])
        return 0
    # SIGTERM (and SIGINT, which a shell ignores in background jobs) unwind: hosts and servers are cleaned up.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: a new one, printed")
    parser.add_argument("--round", type=int, action="append", default=[], help="replay only this round (repeat)")
    parser.add_argument("--providers", default=",".join(PROVIDERS), help="filesystem (local disk), zookeeper, s3")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument(
        "--engine",
        choices=("local", "spark"),
        default=None,
        help="run every faulted ingest or compaction of landing files here (default: a quarter on Spark)",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="make every round's faulted command a long-running `stitch stream` (default: half the Spark ingests)",
    )
    options = parser.parse_args(args)
    seed = options.seed if options.seed is not None else random.randrange(1 << 20)
    providers = [p for p in options.providers.split(",") if p]
    unknown = set(providers) - set(PROVIDERS)
    if unknown:
        parser.error(f"unknown providers {sorted(unknown)}")
    stats = play(
        options.rounds, seed, providers, options.workdir, options.round, engine=options.engine, follow=options.stream
    )
    summary = {"seed": seed, **stats.summary()}
    print(json.dumps(summary, indent=1))
    if options.json:
        options.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 1 if stats.violations else 0


if __name__ == "__main__":
    from stitchlake.cli.app import end_process_after

    end_process_after(main)  # as `stitch` ends: a host's commands ran reads and writes in this process
