"""The command line: a storm, the finish and the check, or one worker (`_worker`)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.torture.actors import worker_main
from scripts.torture.common import MAX_SHOWN, Settings, load_settings, prepare
from scripts.torture.kafka_phase import kafka_phase
from scripts.torture.oracle import check
from scripts.torture.supervisor import Stats, Supervisor, finish

# ================================================================================================== main


#: The package docstring's first line: what `--help` says.
DESCRIPTION = (
    "Torture test: concurrent writers and table services on one table, killed and frozen at random, every read checked."
)


def collapse(violations: list[str]) -> list[str]:
    """One line per kind of read violation (the first read, and how many more) — one bug shows in many reads."""
    kinds: dict[str, list[str]] = {}
    for line in violations:
        kinds.setdefault(re.sub(r"^read \S+( \([^)]*\))?( as of \d+)?", "read", line), []).append(line)
    return [lines[0] + (f" (and {len(lines) - 1} more like it)" if len(lines) > 1 else "") for lines in kinds.values()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.torture", description=DESCRIPTION)
    parser.add_argument("--rounds", type=int, default=12, help="rounds; each lands one file per stream")
    parser.add_argument("--keys", type=int, default=2000, help="orders (record keys) in the generated data")
    parser.add_argument("--seed", type=int, default=7, help="seed of the data, the kills and the workers")
    parser.add_argument("--workdir", help="folder for landing files, logs, reads (default: a new temp folder)")
    parser.add_argument("--table", help="table location (default: WORKDIR/table)")
    parser.add_argument("--readers", type=int, default=2, help="reader processes")
    parser.add_argument(
        "--writers-per-stream", type=int, default=1, help="writer processes per stream (>1: cron overlap)"
    )
    parser.add_argument("--restorers", type=int, choices=(0, 1), default=1, help="savepoint+restore process (0/1)")
    parser.add_argument("--archivers", type=int, default=2, help="archive processes (2: they race each other)")
    parser.add_argument("--erasers", type=int, choices=(0, 1), default=1, help="key-erase process (0/1)")
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between random kills (0: none)")
    parser.add_argument(
        "--pause-every", type=float, default=6.0, help="mean seconds between SIGSTOP pauses of a worker (0: none)"
    )
    parser.add_argument("--fault-rate", type=float, default=0.5, help="share of worker starts armed with a fault")
    parser.add_argument("--round-seconds", type=float, default=2.5, help="minimum length of a round")
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=300.0,
        help="give a round up after this many seconds without progress (reported; not a violation)",
    )
    parser.add_argument("--buckets", type=int, default=2, help="file groups per partition")
    parser.add_argument("--log-format", choices=("parquet", "avro"), default="parquet")
    parser.add_argument("--retain", type=int, default=8, help="clean.retain (keep_latest_commits)")
    parser.add_argument("--heartbeat", type=float, nargs=2, default=(0.5, 4.0), metavar=("INTERVAL", "EXPIRE"))
    parser.add_argument("--lock-expire", type=float, default=2.0, help="lease of the table lock, seconds")
    parser.add_argument(
        "--mode",
        choices=("lock_free", "optimistic"),
        default="lock_free",
        help="concurrency.mode; optimistic lets the writers of a stream run at once (they conflict by file group)",
    )
    parser.add_argument(
        "--kafka-rounds",
        type=int,
        default=0,
        help="rounds of a Kafka-fed stream on a table of its own, against a broker this run starts (0: none)",
    )
    parser.add_argument("--check-only", action="store_true", help="only check an existing --workdir")
    parser.add_argument("--keep", action="store_true", help="keep the temp workdir even when all is well")
    parser.add_argument("--summary-json", help="also write the summary as JSON to this file")
    args = parser.parse_args(argv)
    if args.check_only and not args.workdir:
        parser.error("--check-only needs --workdir")
    if args.rounds < 1 or args.keys < 1:
        parser.error("--rounds and --keys must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        return worker_main(argv[1:])
    args = parse_args(argv)
    started = time.monotonic()

    def out(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    temporary = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="stitch-torture-")).resolve()
    summary: dict[str, Any] = {"workdir": str(work)}
    stats = Stats()
    if args.check_only:
        settings = load_settings(work)
    else:
        if work.exists() and any(work.iterdir()):
            print(f"error: workdir {work} is not empty", file=sys.stderr)
            return 2
        settings = Settings(
            workdir=str(work),
            table=(args.table if "://" in args.table else str(Path(args.table).resolve()))
            if args.table
            else str(work / "table"),
            rounds=args.rounds,
            keys=args.keys,
            seed=args.seed,
            readers=args.readers,
            writers_per_stream=args.writers_per_stream,
            kill_every=args.kill_every,
            pause_every=args.pause_every,
            fault_rate=args.fault_rate,
            round_seconds=args.round_seconds,
            round_timeout=args.round_timeout,
            buckets=args.buckets,
            log_format=args.log_format,
            retain=args.retain,
            heartbeat_interval=args.heartbeat[0],
            heartbeat_expire=args.heartbeat[1],
            lock_expire=args.lock_expire,
            restorers=args.restorers,
            archivers=args.archivers,
            erasers=args.erasers,
            mode=args.mode,
        )
        work.mkdir(parents=True, exist_ok=True)
        prepare(settings)
        out(f"workdir {work}: {args.keys} keys, {args.rounds} rounds, table {settings.table}")
        supervisor = Supervisor(settings, out)
        try:
            supervisor.run_rounds()
        finally:
            supervisor.stop()
        stats = supervisor.stats
        out(f"workers stopped; kills {dict(stats.kills)}; pauses {dict(stats.pauses)}; other exits {dict(stats.exits)}")
        finish_problems = finish(settings, out)
    report, commits, events = check(work, out)
    if not args.check_only:
        report.violations = finish_problems + report.violations
        if stats.rounds_timed_out:  # the machine was too slow, or stuck: reported, but no safety violation
            out(
                f"{stats.rounds_timed_out} round(s) timed out: no progress for {settings.round_timeout:.0f}s "
                "(--round-timeout); not a violation, but the run tortured less than asked"
            )
        if stats.owed:
            out(f"duties never done (the last round timed out first): {', '.join(stats.owed)}")
        if args.kafka_rounds:
            kafka = kafka_phase(work, args.kafka_rounds, args.seed, out)
            report.violations += kafka.violations
            summary["kafka"] = {k: v for k, v in kafka.__dict__.items() if k != "violations"}
    kills = sum(stats.kills.values())
    during = sum(n for cause, n in stats.kills.items() if not cause.startswith("at_stop"))
    summary.update(
        rounds=settings.rounds,
        seed=settings.seed,
        kills=kills,
        kills_during_rounds=during,
        kills_by_cause=dict(stats.kills),
        rounds_timed_out=stats.rounds_timed_out,
        duties_owed=stats.owed,
        pauses=dict(stats.pauses),
        commits=commits,
        reads_checked=report.reads_checked,
        reads_skipped=dict(report.reads_skipped),
        worker_events=dict(events),
        violations=len(report.violations),
        violation_messages=report.violations,
        seconds=round(time.monotonic() - started, 1),
    )
    shown = collapse(report.violations)
    for line in shown[:MAX_SHOWN]:
        print(f"VIOLATION: {line}")
    if len(shown) > MAX_SHOWN:
        print(f"... and {len(shown) - MAX_SHOWN} more kinds (all of them in --summary-json)")
    freezes = sum(stats.pauses.values())
    lease = sum(n for kind, n in stats.pauses.items() if kind.startswith("lease"))
    print(
        f"torture: rounds {settings.rounds}, kills {kills} ({during} during the rounds), freezes {freezes} "
        f"({lease} past the lock lease), commits {commits['deltacommits']} (+{commits['compactions']} compactions, "
        f"{commits['cleans']} cleans, {commits['rollbacks']} rollbacks, {commits['savepoints']} savepoints, "
        f"{commits['restores']} restores undoing {commits['undone']}, {commits['erases']} erases live, "
        f"{events.get('erase', 0)} made, {commits['archived']} archived), "
        f"reads checked {report.reads_checked} (skipped {sum(report.reads_skipped.values())}), "
        f"violations {len(report.violations)}, {summary['seconds']}s"
    )
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if temporary and not args.keep and not report.violations:
        shutil.rmtree(work, ignore_errors=True)
    elif temporary:
        print(f"workdir kept: {work}")
    return 1 if report.violations else 0
