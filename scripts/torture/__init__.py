"""Torture test: concurrent writers and table services on one table, killed and frozen at random, every read checked.

    python -m scripts.torture --rounds 50 --seed 7            # the long run by hand (`make torture`)
    python -m scripts.torture --rounds 7 --keys 600 --writers-per-stream 2    # CI-sized (test_torture.py)
    python -m scripts.torture --check-only --workdir DIR      # re-check the reads and the table of a kept run

What runs, each as its own OS process on one table (design.md §4-§7):

- three stream writers (orders, payments, shipments), each ingesting its stream's landing files over and over
  with the in-process engine (`stitchlake.ingest.ingest_local`, what `stitch ingest --engine local` runs);
  `--writers-per-stream 2` adds a second one per stream (cron overlap: the busy check must keep them apart);
- a compactor (runs pending plans, then schedules and runs a new one), a cleaner (`stitch clean`: rolls back
  failed writes, removes old slices and orphans) and readers (latest, time-travel and no-as_of reads);
- a restorer that creates savepoints now and then, deletes old ones and restores to one (sometimes `--force`,
  sometimes through the `stitch` CLI run in-process): a restore undoes history while writers write, and the
  landing files of the undone commits become pending again;
- two archivers (`services.archive.archive` and `stitch archive --keep K`, K drawn from 10..16 each run, so two
  of them race and the one with the smaller keep goes further);
- an eraser (`--erasers 1`, the default) that erases one to three keys of a landed orders file now and then
  (`stitch delete --keys` in-process, or the service) while the writers write those keys too: a restore may undo
  an erase, a compaction race it, a kill land inside it.

With `--kafka-rounds N` (the CI-sized run uses 3) a Kafka-fed stream follows, on a table of its own against a real
broker this run starts (`scripts/kafka_broker.py`): each round produces records (late and duplicate events, a
partition added halfway), runs two overlapping `stitch ingest` and SIGKILLs the one that claimed the stream at a
point of its progress (instant requested, or files being written), adding rounds until one was killed; its
checker holds the completed commits' offset ranges to tiling every partition exactly once and the table to the
produced records' merge (`kafka_phase`).

The landing data is `scripts/demo_data.py`'s seeded three-stream generator (late, out-of-order, duplicate
events, deletes). Each round lands the next file of every stream and waits until the writers took it, while
the supervisor SIGKILLs writers and services: at random moments, shortly after new files land (mid-ingest),
and at precise points through a fault hook that lives only in this harness (it wraps, never replaces, the
code under test: after a marker, during a data file write, holding the lock before or after publishing,
halfway through a clean's deletes, a rollback or a restore, between an archive's batch and its checkpoint).
Killed processes are restarted. It also freezes processes (SIGSTOP, then SIGCONT): at random, at `stall_*`
points for longer than the heartbeat expiry, so they are presumed dead and rolled back while they live on
("zombies", as after a GC pause or a stalled VM), and at `stall_locked_*` / `stall_archive_*` points *while
they hold the table lock*, for longer than its lease (`concurrency.lock.expire_s`), so others take the lock
over and the frozen one wakes up inside its critical section. The restorer and the archivers are nearly
always armed, and their freezes re-arm after firing: they are few and rarely killed, and their races (two
archives; a restore and the writers) need the freeze to come back.

The supervisor also watches the table's metadata all along (every ~0.1 s, as do the readers and archivers on
each run): every instant it ever sees completed, and every archive checkpoint horizon with the time window of
the observation, go to `logs/observed.jsonl` and `logs/horizons.jsonl`.

The last round is not waited for: everything is killed wherever it is, heartbeats expire, and the real CLI runs
`stitch clean`, re-runs the interrupted ingests, runs leftover compaction plans, compacts everything, cleans
and archives again. Then it checks (the timeline, archive and checkpoint are read from their files by this
harness, independently of stitchlake's own timeline code):

- every read taken during the run equals the reference merge (demo_data.ground_truth, pandas, independent of
  stitchlake) of exactly the landing files consumed by the instants completed at that read's snapshot (the
  archive checkpoint's consumed files plus the active deltacommits), less the events of the keys each erase of
  that snapshot took from the files of deltacommits completed before it (`erasures`); that set of instants is
  the one the final timeline has at that time except the ones a rollback or restore names as undone, and it is a
  state that existed: per stream, a prefix of the files in arrival order;
- the final table (snapshot, and read-optimized once compacted) equals the generator's ground truth (less the
  keys a live erase touched) and the reference merge of the live instants (active and archived, minus undone
  ones, less what their erases took); every landing file was
  consumed exactly once by them, and in arrival order;
- the timeline and checkpoint never lose an instant: every instant ever observed completed is still on the
  active timeline, or archived under the checkpoint's horizon, or named by a rollback or restore that undid it
  (or was a savepoint the restorer deleted); no archived instant lies beyond the horizon unless still active;
  the checkpoint's consumed files are those of the live instants it covers; the horizon never moved backwards;
- no pending instant, no orphan or missing data file, no leftover marker, and no worker failed other than
  "busy/conflict, retry" or a zombie's refusal to publish.

The run leaves nothing to chance that the check relies on: the last round lasts until every kind of actor did its
work at least once (DUTIES: a commit, a clean, a savepoint made and a restore tried, an archive, horizons seen,
an erase), the
restorer tries what it still owes first, a kill is forced if chance gave none during the rounds, and the finish
forces an archive when none ever archived anything (restores back to a savepoint of the first commit pin the whole
timeline: it deletes the savepoints, each logged first, and archives all but the newest instant). A round that
makes no progress for `--round-timeout` seconds is given up and reported (a machine too busy, or a hang): it says the
run tortured less than asked, not that the table broke, so it is not a violation.

It prints rounds, kills, freezes, commits, reads checked and violations; the exit code is 1 on any violation.

The modules, in the order they build on each other: `common` (names, logs, the run's setup), `tablefiles` (the
table's files as the checker reads them), `faults` (the fault hook: one spec per point), `worker` (what every
worker process shares), the roles (`writers`, `table_services`, `savepoints`, `readers`), `actors` (a worker of
any role, and its entry point), `processes` (the supervisor's hands on the workers and the random storm),
`accounting` (what a round waits for), `supervisor` (the rounds and the finish), `erasures` and `oracle` (the
checks), `kafka_phase`, and `cli` (`python -m scripts.torture`). What the tests use is re-exported here, imported
when first asked for: a worker process (`_worker`, started anew after every kill) imports only the actors, and
refuses pandas as the `stitch` command does (`stitchlake.cli.without_pandas`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each name re-exported here, and the module it lives in.
_EXPORTS = {
    "main": "cli",
    **dict.fromkeys(
        ("CONFIG_NAME", "HORIZONS_LOG", "STREAMS", "Settings", "land", "log_line", "open_torture_table", "prepare"),
        "common",
    ),
    **dict.fromkeys(("staged_files", "table_dir"), "common"),
    **dict.fromkeys(("FAULT_POINTS", "install_fault"), "faults"),
    "kafka_check": "kafka_phase",
    **dict.fromkeys(
        (
            "History",
            "Observations",
            "Reference",
            "Report",
            "check_history",
            "check_horizons",
            "check_reads",
            "check_table",
        ),
        "oracle",
    ),
    **dict.fromkeys(("finish", "run_cli"), "supervisor"),
    **dict.fromkeys(("ARCHIVE_DIR", "TIMELINE_DIR", "sources_of"), "tablefiles"),
}
_MODULES = ("actors", "cli", "common", "faults", "kafka_phase", "oracle", "supervisor", "tablefiles")

if TYPE_CHECKING:
    from scripts.torture import actors, cli, common, faults, kafka_phase, oracle, supervisor, tablefiles
    from scripts.torture.cli import main
    from scripts.torture.common import (
        CONFIG_NAME,
        HORIZONS_LOG,
        STREAMS,
        Settings,
        land,
        log_line,
        open_torture_table,
        prepare,
        staged_files,
        table_dir,
    )
    from scripts.torture.faults import FAULT_POINTS, install_fault
    from scripts.torture.kafka_phase import kafka_check
    from scripts.torture.oracle import (
        History,
        Observations,
        Reference,
        Report,
        check_history,
        check_horizons,
        check_reads,
        check_table,
    )
    from scripts.torture.supervisor import finish, run_cli
    from scripts.torture.tablefiles import ARCHIVE_DIR, TIMELINE_DIR, sources_of


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARCHIVE_DIR",
    "CONFIG_NAME",
    "FAULT_POINTS",
    "HORIZONS_LOG",
    "STREAMS",
    "TIMELINE_DIR",
    "History",
    "Observations",
    "Reference",
    "Report",
    "Settings",
    "actors",
    "check_history",
    "check_horizons",
    "check_reads",
    "check_table",
    "cli",
    "common",
    "faults",
    "finish",
    "install_fault",
    "kafka_check",
    "kafka_phase",
    "land",
    "log_line",
    "main",
    "open_torture_table",
    "oracle",
    "prepare",
    "run_cli",
    "sources_of",
    "staged_files",
    "supervisor",
    "table_dir",
    "tablefiles",
]
