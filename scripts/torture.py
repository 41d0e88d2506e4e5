"""Torture test: concurrent writers and table services on one table, killed and frozen at random, every read checked.

    python scripts/torture.py --rounds 50 --seed 7            # the long run by hand (`make torture`)
    python scripts/torture.py --rounds 6 --keys 600 --writers-per-stream 2    # CI-sized (tests/test_torture.py)
    python scripts/torture.py --check-only --workdir DIR      # re-check the reads and the table of a kept run

What runs, each as its own OS process on one table (DESIGN §4-§7):

- three stream writers (orders, payments, shipments), each ingesting its stream's landing files over and over
  with the in-process engine (`stitchlake.ingest.ingest_local`, what `stitch ingest --engine local` runs);
  `--writers-per-stream 2` adds a second one per stream (cron overlap: the busy check must keep them apart);
- a compactor (runs pending plans, then schedules and runs a new one), a cleaner (`stitch clean`: rolls back
  failed writes, removes old slices and orphans) and readers (latest, time-travel and no-as_of reads).

The landing data is `scripts/demo_data.py`'s seeded three-stream generator (late, out-of-order, duplicate
events, deletes). Each round lands the next file of every stream and waits until the writers took it, while
the supervisor SIGKILLs writers and services: at random moments, shortly after new files land (mid-ingest),
and at precise points through a fault hook that lives only in this harness (it wraps, never replaces, the
code under test: after a marker, during a data file write, holding the lock before or after publishing,
halfway through a clean's deletes or a rollback). Killed processes are restarted. It also freezes processes
(SIGSTOP, then SIGCONT): at random, and at `stall_*` points for longer than the heartbeat expiry, so they are
presumed dead and rolled back while they live on ("zombies", as after a GC pause or a stalled VM).

The last round is not waited for: everything is killed wherever it is, heartbeats expire, and the real CLI runs
`stitch clean`, re-runs the interrupted ingests, runs leftover compaction plans, compacts everything and cleans
again. Then it checks:

- every read taken during the run equals the reference merge (demo_data.ground_truth, pandas, independent of
  stitchlake) of exactly the landing files consumed by the deltacommits completed at that read's snapshot,
  and that set of instants is the one the final timeline has at that time (no partial commit, no lost one);
  a read may fail only by a refusal for a time outside the clean retention;
- the final table (snapshot, and read-optimized once compacted) equals the generator's ground truth, and every
  landing file was consumed exactly once;
- no pending instant, no orphan or missing data file, no leftover marker, and no worker failed other than
  "busy, retry" or a zombie's refusal to publish.

It prints rounds, kills, commits, reads checked and violations; the exit code is 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import demo_data  # noqa: E402  (a sibling script, found through the path above)

STREAMS = demo_data.STREAMS
EXTENSION = demo_data.EXTENSION
CONFIG_NAME = "torture.yaml"
MAX_SHOWN = 25
STOP_FILE = "STOP"
FAULT_ENV = "STITCH_TORTURE_FAULT"
RUN_DIR_ENV = "STITCH_TORTURE_RUN_DIR"
#: What `Transaction.complete` says to a writer that was presumed dead and rolled back while it ran: correct.
ZOMBIE_REFUSED = "while it ran; nothing was published"
#: Where the supervisor may kill each role on purpose (see `install_fault`).
#: `stall_*` points freeze the process (SIGSTOP) past its heartbeat's expiry instead: it becomes a zombie that
#: the others presume dead, and it carries on when the supervisor wakes it.
FAULT_POINTS: dict[str, tuple[str, ...]] = {
    "writer": (
        *("in_begin", "after_begin", "after_mark", "mid_write", "before_publish", "after_publish"),
        *("stall_after_mark", "stall_before_publish"),
    ),
    "compactor": (
        *("in_begin", "after_begin", "after_mark", "mid_write", "before_publish", "after_publish"),
        *("stall_after_mark", "stall_before_publish"),
    ),
    "cleaner": ("in_begin", "mid_rollback", "mid_clean_delete", "before_publish", "after_publish", "stall_rollback"),
}


def log_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line; a SIGKILL can cut only the line being written, which readers skip."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"t": round(time.time(), 3), **record}) + "\n")
        handle.flush()


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


# ================================================================================================== setup


@dataclass
class Settings:
    """What the run was started with; saved in the workdir so `--check-only` can find everything again."""

    workdir: str
    table: str
    rounds: int
    keys: int
    seed: int
    readers: int
    writers_per_stream: int
    kill_every: float
    pause_every: float
    fault_rate: float
    round_seconds: float
    round_timeout: float
    buckets: int
    log_format: str
    retain: int
    heartbeat_interval: float
    heartbeat_expire: float
    lock_expire: float


def write_config(settings: Settings) -> Path:
    """The demo table's streams (what the ground truth models), with short heartbeats and lock leases."""
    work = Path(settings.workdir)
    document = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    # Paths relative to the config's folder where possible, so a copied workdir is a self-contained case.
    table = Path(settings.table)
    location = str(table.relative_to(work)) if table.is_relative_to(work) else str(table)
    document["table"].update(
        name="torture_wide", path=location, buckets=settings.buckets, log_format=settings.log_format
    )
    for stream in STREAMS:
        document["streams"][stream]["source"]["path"] = f"landing/{stream}"
    document["concurrency"] = {
        "mode": "lock_free",
        "lock": {"provider": "filesystem", "wait_s": 60, "expire_s": settings.lock_expire},
        "heartbeat": {"interval_s": settings.heartbeat_interval, "expire_s": settings.heartbeat_expire},
    }
    document["compaction"] = {"inline": False, "strategy": "all"}
    document["clean"] = {"policy": "keep_latest_commits", "retain": settings.retain}
    path = work / CONFIG_NAME
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def prepare(settings: Settings) -> None:
    """Generate the landing files (held back in staging/), the ground truth, the config and the table."""
    work = Path(settings.workdir)
    demo_data.generate(
        work / "staging", orders=settings.keys, days=2, seed=settings.seed, files_per_stream=settings.rounds
    )
    for folder in ("landing/orders", "landing/payments", "landing/shipments", "logs", "reads", "expected", "run"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    (work / "settings.json").write_text(json.dumps(settings.__dict__, indent=1), encoding="utf-8")
    config = write_config(settings)
    subprocess.run(stitch("init", "-c", str(config)), check=True, capture_output=True)


def staged_files(work: Path, stream: str) -> list[Path]:
    return sorted((work / "staging" / "landing" / stream).glob(f"part-*.{EXTENSION[stream]}"))


def land(work: Path, stream: str, source: Path) -> str:
    """A landing file arrives: copied under a hidden name, then renamed, so a writer never sees half of it."""
    folder = work / "landing" / stream
    hidden = folder / f".{source.name}.arriving"
    shutil.copyfile(source, hidden)
    os.replace(hidden, folder / source.name)
    return source.name


def stitch(*args: str) -> list[str]:
    """argv of this environment's `stitch` CLI (a list, never a shell string)."""
    return [sys.executable, "-m", "cli.app", *args]


def open_torture_table(work: Path) -> Any:
    from stitchlake.table import open_table

    return open_table(work / CONFIG_NAME)


# ============================================================================================ fault hook


def install_fault(spec: str, log: Callable[[dict[str, Any]], None], stall_s: float) -> None:
    """Arm one kill point in this worker: `point:countdown` dies on the (countdown+1)-th pass through it.

    The hook wraps functions of the code under test (it calls them unchanged) and SIGKILLs the process at
    the chosen moment, which no timer could hit reliably.
    """
    import stitchlake.services.clean as clean_module
    import stitchlake.services.compaction as compaction_module
    import stitchlake.services.rollback as rollback_module
    import stitchlake.transaction as txn_module
    import stitchlake.write as write_module

    point, _, count = spec.partition(":")
    left = [int(count or 0)]

    def due() -> bool:
        if left[0] <= 0:
            return True
        left[0] -= 1
        return False

    def die() -> None:
        log({"event": "fault", "point": point})
        os.kill(os.getpid(), signal.SIGKILL)

    def stall() -> None:
        """Ask the supervisor for a SIGCONT in `stall_s` seconds, then freeze (heartbeat thread included)."""
        log({"event": "stall", "point": point, "seconds": stall_s})
        Path(os.environ[RUN_DIR_ENV], f"{os.getpid()}.stall").write_text(str(stall_s), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGSTOP)
        log({"event": "woke", "point": point})

    if point == "in_begin":  # the requested instant exists, the heartbeat beats once, the lock is held
        requested = txn_module.write_requested

        def write_requested(*args: Any, **kwargs: Any) -> Any:
            out = requested(*args, **kwargs)
            if due():
                die()
            return out

        txn_module.write_requested = write_requested
    elif point == "after_begin":  # inflight, nothing written yet
        inflight = txn_module.write_inflight

        def write_inflight(*args: Any, **kwargs: Any) -> Any:
            out = inflight(*args, **kwargs)
            if due():
                die()
            return out

        txn_module.write_inflight = write_inflight
    elif point == "after_mark":  # a marker exists, its data file does not
        mark = txn_module.Transaction.mark

        def marked(self: Any, path: str) -> None:
            mark(self, path)
            if due():
                die()

        txn_module.Transaction.mark = marked  # type: ignore[method-assign]
    elif point == "mid_write":  # killed while Parquet/Avro bytes are being written
        for module in (write_module, compaction_module):
            original = module.write_table_file

            def write_file(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if due():
                    threading.Timer(random.uniform(0.0, 0.004), die).start()
                return _original(*args, **kwargs)

            module.write_table_file = write_file  # type: ignore[assignment]
    elif point in ("before_publish", "after_publish"):  # all files written; the table lock is held
        completed = txn_module.write_completed

        def write_completed(*args: Any, **kwargs: Any) -> Any:
            if point == "before_publish" and due():
                die()
            out = completed(*args, **kwargs)
            if point == "after_publish" and due():
                die()
            return out

        txn_module.write_completed = write_completed
    elif point in ("stall_after_mark", "stall_before_publish"):
        mark, complete = txn_module.Transaction.mark, txn_module.Transaction.complete

        def marked_then_stall(self: Any, path: str) -> None:
            mark(self, path)
            if due():
                stall()

        def stall_then_complete(self: Any, *args: Any, **kwargs: Any) -> Any:
            if due():
                stall()
            return complete(self, *args, **kwargs)

        if point == "stall_after_mark":
            txn_module.Transaction.mark = marked_then_stall  # type: ignore[method-assign]
        else:
            txn_module.Transaction.complete = stall_then_complete  # type: ignore[method-assign]
    elif point == "stall_rollback":  # targets chosen, nothing undone yet
        run_rollback = rollback_module._run

        def stall_then_run(*args: Any, **kwargs: Any) -> Any:
            if (args[2] or args[3]) and due():  # only when there is something to roll back or reset
                stall()
            return run_rollback(*args, **kwargs)

        rollback_module._run = stall_then_run
    elif point == "mid_rollback":  # a failed write's files are gone, its instant files not yet
        delete_instant = rollback_module.delete_instant

        def delete(*args: Any, **kwargs: Any) -> Any:
            if due():
                die()
            return delete_instant(*args, **kwargs)

        rollback_module.delete_instant = delete
    elif point == "mid_clean_delete":  # half of a clean plan's files deleted
        local_delete = clean_module.local_delete

        def deleter(table: Any) -> Callable[[list[str]], int]:
            run = local_delete(table)

            def delete_paths(paths: list[str]) -> int:
                if paths and due():
                    run(paths[: len(paths) // 2])
                    die()
                return run(paths)

            return delete_paths

        clean_module.local_delete = deleter
    else:
        raise SystemExit(f"unknown fault point {point!r}")


# =============================================================================================== workers


class Worker:
    """One role's loop in its own process; it stops at the STOP file or when killed."""

    def __init__(self, role: str, work: Path, seed: int) -> None:
        self.role = role
        self.work = work
        self.rng = random.Random(seed)
        self.log_path = work / "logs" / f"{role.replace(':', '-')}.jsonl"
        self.table = open_torture_table(work)
        self.done = 0
        expire = self.table.config.concurrency.heartbeat.expire_s
        self.stall_s = round(self.rng.uniform(1.2 * expire, 2.0 * expire), 2)

    def log(self, record: dict[str, Any]) -> None:
        log_line(self.log_path, {"role": self.role, "pid": os.getpid(), **record})

    def stopping(self) -> bool:
        return (self.work / STOP_FILE).exists()

    def nap(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high))

    def run(self) -> None:
        fault = os.environ.get(FAULT_ENV)
        if fault:
            install_fault(fault, self.log, self.stall_s)
        self.log({"event": "start", "fault": fault})
        (self.work / "run" / f"{os.getpid()}.ready").touch()  # the supervisor's random kills wait for this
        step = {"writer": self.ingest, "compactor": self.compact, "cleaner": self.clean, "reader": self.read}
        action = step[self.role.split(":")[0]]
        while not self.stopping():
            try:
                action()
            except Exception as exc:
                self.failed(exc)
        self.log({"event": "stop"})

    def failed(self, exc: Exception) -> None:
        from stitchlake.errors import BusyError, LockLost, StitchError

        if isinstance(exc, BusyError | LockLost):  # "retry later": exactly what cron would do
            self.log({"event": "busy", "error": type(exc).__name__, "message": str(exc)[:300]})
        else:
            kind = "error" if isinstance(exc, StitchError) else "unexpected"
            self.log({"event": kind, "error": type(exc).__name__, "message": str(exc), "trace": traceback.format_exc()})
        self.nap(0.1, 0.4)

    # -- roles ----------------------------------------------------------------------------------------------

    def ingest(self) -> None:
        from stitchlake.ingest import ingest_local

        stream = self.role.split(":")[1]
        result = ingest_local(self.table, stream)
        if result.instant:
            self.log({"event": "commit", "instant": result.instant, "files": result.source_files})
            self.nap(0.0, 0.15)
        else:
            self.nap(0.05, 0.25)

    def compact(self) -> None:
        from stitchlake.errors import BusyError
        from stitchlake.services import compaction

        for plan in compaction.pending_plans(self.table):
            try:
                result = compaction.run(self.table, plan.requested)
                self.log({"event": "compaction", "instant": result.instant, "resumed": True})
            except BusyError:
                pass
        result = compaction.compact(self.table)
        if result is not None:
            self.log({"event": "compaction", "instant": result.instant, "groups": result.file_groups})
        self.nap(0.3, 1.2)

    def clean(self) -> None:
        from stitchlake.services.clean import clean

        result = clean(self.table)
        self.log(
            {
                "event": "clean",
                "instant": result.instant,
                "deleted": len(result.deleted),
                "orphans": len(result.orphans),
                "rolled_back": result.rolled_back,
                "reset": result.reset_compactions,
            }
        )
        self.nap(0.5, 1.5)

    def read(self) -> None:
        """Read as of a completion time (usually the latest) and record the instants that snapshot has."""
        from stitchlake.timeline.instant import Action

        timeline = self.table.timeline()
        done = timeline.completed()
        if not done:
            self.nap(0.1, 0.3)
            return
        draw = self.rng.random()
        mode = "latest" if draw < 0.6 else "past" if draw < 0.8 else "current"
        as_of = None
        if mode == "latest":
            as_of = done[-1].completed
        elif mode == "past":
            as_of = self.rng.choice(done).completed
        until = as_of or done[-1].completed or ""
        visible = [
            {
                "requested": i.requested,
                "completed": i.completed,
                "stream": timeline.metadata(i).get("stream"),
                "sources": [s["name"] for s in timeline.metadata(i).get("sources", [])],
            }
            for i in timeline.completed([Action.DELTACOMMIT], until=until)
        ]
        self.done += 1
        name = f"{self.role.replace(':', '-')}-{os.getpid()}-{self.done:05d}"
        record: dict[str, Any] = {
            "name": name,
            "mode": mode,
            "as_of": as_of,
            "until": until,
            "visible": visible,
            "error": None,
        }
        try:
            data = self.table.read(as_of=as_of)
        except Exception as exc:
            record["error"] = {"type": type(exc).__name__, "message": str(exc)}
        else:
            if mode == "current":
                # No as_of: the snapshot is only known when no deltacommit completed during the read.
                after = self.table.timeline().completed([Action.DELTACOMMIT])
                if [i.requested for i in after] != [v["requested"] for v in visible]:
                    record["mode"] = "current-moved"
            pq.write_table(data, self.work / "reads" / f"{name}.parquet")
            record["rows"] = data.num_rows
        path = self.work / "reads" / f"{name}.json"
        path.with_suffix(".tmp").write_text(json.dumps(record), encoding="utf-8")
        os.replace(path.with_suffix(".tmp"), path)
        self.nap(0.05, 0.3)


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torture.py _worker")
    parser.add_argument("--role", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    Worker(args.role, Path(args.workdir), args.seed).run()
    return 0


# ============================================================================================ supervisor


@dataclass
class Slot:
    """One role's current process and its history."""

    role: str
    killable: bool
    proc: subprocess.Popen[bytes] | None = None
    fault: str | None = None
    restart_at: float = 0.0
    killed_by_us: bool = False
    starts: int = 0
    #: When a SIGSTOPped process gets its SIGCONT (None: not paused).
    paused_until: float | None = None


@dataclass
class Stats:
    kills: Counter[str] = field(default_factory=Counter)
    pauses: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    rounds_timed_out: int = 0


class Supervisor:
    """Starts the workers, kills and restarts them, and lands the files round by round."""

    def __init__(self, settings: Settings, out: Callable[[str], None]) -> None:
        self.settings = settings
        self.work = Path(settings.workdir)
        self.rng = random.Random(settings.seed * 7919 + 1)
        self.out = out
        self.stats = Stats()
        # More than one writer per stream is cron overlap: the busy check must keep them apart, and exactly-once
        # must hold when one of them is frozen long enough to be presumed dead.
        roles = [(f"writer:{s}", True) for s in STREAMS]
        roles += [(f"writer:{s}:{n}", True) for n in range(2, settings.writers_per_stream + 1) for s in STREAMS]
        roles += [("compactor", True), ("cleaner", True)]
        roles += [(f"reader:{n}", False) for n in range(1, settings.readers + 1)]
        self.slots = [Slot(role, killable) for role, killable in roles]
        self.stderr = open(self.work / "logs" / "workers.err", "ab")  # noqa: SIM115 - closed in stop()
        self.next_kill = self._draw_kill(time.monotonic())
        self.next_pause = self._draw_pause(time.monotonic())
        self.table = open_torture_table(self.work)

    def _draw_kill(self, now: float) -> float:
        if self.settings.kill_every <= 0:
            return float("inf")
        return now + self.rng.expovariate(1.0 / self.settings.kill_every)

    def _draw_pause(self, now: float) -> float:
        if self.settings.pause_every <= 0:
            return float("inf")
        return now + self.rng.expovariate(1.0 / self.settings.pause_every)

    def pause(self, slot: Slot, now: float) -> None:
        """Freeze a process (a GC pause, a stalled VM): often past its heartbeat's expiry, so it becomes a
        "zombie" that others presume dead and roll back, and that wakes up later and carries on."""
        assert slot.proc is not None
        seconds = self.rng.uniform(0.5, 1.6 * self.settings.heartbeat_expire)
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.proc.pid, signal.SIGSTOP)
            slot.paused_until = now + seconds
            zombie = "zombie" if seconds > self.settings.heartbeat_expire else "short"
            self.stats.pauses[f"{zombie}:{slot.role.split(':')[0]}"] += 1

    def wake(self, slot: Slot) -> None:
        if slot.paused_until is not None and slot.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.proc.pid, signal.SIGCONT)
        slot.paused_until = None

    def spawn(self, slot: Slot) -> None:
        env = dict(os.environ)
        env.pop(FAULT_ENV, None)
        slot.fault = None
        kind = slot.role.split(":")[0]
        if slot.killable and self.rng.random() < self.settings.fault_rate:
            slot.fault = f"{self.rng.choice(FAULT_POINTS[kind])}:{self.rng.randint(0, 2)}"
            env[FAULT_ENV] = slot.fault
        env[RUN_DIR_ENV] = str(self.work / "run")
        argv = [sys.executable, str(Path(__file__).resolve()), "_worker", "--role", slot.role]
        argv += ["--workdir", str(self.work), "--seed", str(self.rng.randrange(1 << 30))]
        slot.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.stderr)
        slot.killed_by_us = False
        slot.starts += 1

    def working(self, slot: Slot) -> bool:
        """Alive and past its imports: killing a process that is still starting up tests nothing."""
        if slot.proc is None or slot.proc.poll() is not None:
            return False
        return (self.work / "run" / f"{slot.proc.pid}.ready").exists()

    def kill(self, slot: Slot, why: str) -> None:
        if slot.proc is None or slot.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.proc.pid, signal.SIGKILL)
        slot.killed_by_us = True
        self.stats.kills[f"{why}:{slot.role.split(':')[0]}"] += 1

    def tick(self) -> None:
        """Restart what died, and kill something when the random kill clock says so."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is not None and slot.paused_until is None:
                request = self.work / "run" / f"{slot.proc.pid}.stall"
                if request.exists():  # a stall_* fault froze itself: wake it when it asked
                    with contextlib.suppress(ValueError, OSError):
                        slot.paused_until = now + float(request.read_text(encoding="utf-8"))
                        request.unlink()
                        self.stats.pauses[f"stall:{slot.role.split(':')[0]}"] += 1
            if slot.paused_until is not None and now >= slot.paused_until:
                self.wake(slot)
            if slot.proc is not None and slot.proc.poll() is not None:
                slot.paused_until = None
                code = slot.proc.returncode
                if code == -signal.SIGKILL and not slot.killed_by_us:
                    point = (slot.fault or "?").split(":")[0]
                    self.stats.kills[f"fault:{point}"] += 1
                elif code != -signal.SIGKILL:
                    self.stats.exits[f"{slot.role} exit {code}"] += 1
                slot.proc = None
                slot.restart_at = now + self.rng.uniform(0.1, 0.8)
            if slot.proc is None and now >= slot.restart_at:
                self.spawn(slot)
        if now >= self.next_kill:
            victims = [s for s in self.slots if s.killable and self.working(s)]
            if victims:
                self.kill(self.rng.choice(victims), "random")
            self.next_kill = self._draw_kill(now)
        if now >= self.next_pause:
            sleepers = [s for s in self.slots if s.paused_until is None and self.working(s)]
            if sleepers:
                self.pause(self.rng.choice(sleepers), now)
            self.next_pause = self._draw_pause(now)

    def consumed(self) -> dict[str, set[str]]:
        from stitchlake.ingest import consumed

        timeline = self.table.timeline()
        return {s: consumed(self.table, timeline, s) for s in STREAMS}

    def run_rounds(self) -> None:
        """Land one file per stream per round; wait for the writers, except in the last round.

        The last round's files land and the storm goes on for `round_seconds`, then everything is killed
        wherever it is: those ingests are the interrupted ones the final phase re-runs with the CLI.
        """
        staged = {s: staged_files(self.work, s) for s in STREAMS}
        landed: dict[str, set[str]] = {s: set() for s in STREAMS}
        for number in range(self.settings.rounds):
            last = number == self.settings.rounds - 1
            started = time.monotonic()
            for stream in STREAMS:
                if number < len(staged[stream]):
                    landed[stream].add(land(self.work, stream, staged[stream][number]))
            # Kill some writers shortly after their files land: that is when they are busy ingesting.
            mid_ingest = {
                slot.role: started + self.rng.uniform(0.05, 1.0)
                for slot in self.slots
                if slot.role.startswith("writer") and self.settings.kill_every > 0 and self.rng.random() < 0.35
            }
            while True:
                self.tick()
                now = time.monotonic()
                for slot in self.slots:
                    if slot.role in mid_ingest and now >= mid_ingest[slot.role]:
                        if self.working(slot):
                            self.kill(slot, "mid_ingest")
                        del mid_ingest[slot.role]
                elapsed = now - started
                if elapsed >= self.settings.round_seconds and not mid_ingest:
                    if last:
                        break
                    consumed = self.consumed()
                    if all(landed[s] <= consumed[s] for s in STREAMS):
                        break
                if elapsed >= self.settings.round_timeout:
                    self.stats.rounds_timed_out += 1
                    break
                time.sleep(0.05)
            self.out(
                f"round {number + 1}/{self.settings.rounds}: {time.monotonic() - started:.1f}s, "
                f"kills so far {sum(self.stats.kills.values())}"
            )

    def stop(self) -> None:
        """Kill writers and services wherever they are; let readers finish their read and stop."""
        self.tick()  # account for faults that fired since the last tick
        for slot in self.slots:
            self.wake(slot)
            if slot.killable and slot.proc is not None and slot.proc.poll() is None:
                self.kill(slot, "at_stop")
        (self.work / STOP_FILE).touch()
        deadline = time.monotonic() + 30
        for slot in self.slots:
            if slot.proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                slot.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            if slot.proc.poll() is None:
                os.kill(slot.proc.pid, signal.SIGKILL)
                slot.proc.wait()
                self.stats.exits[f"{slot.role} did not stop"] += 1
            elif slot.proc.returncode not in (0, -signal.SIGKILL):
                self.stats.exits[f"{slot.role} exit {slot.proc.returncode}"] += 1
        self.stderr.close()


# =============================================================================================== finish


def run_cli(work: Path, *args: str, attempts: int = 20) -> dict[str, Any]:
    """Run a `stitch ... --json` command, retrying "busy" (exit 4) as cron would; the last JSON or an error."""
    for _ in range(attempts):
        done = subprocess.run(stitch(*args, "--json"), cwd=work, capture_output=True, text=True, check=False)
        if done.returncode == 4:
            time.sleep(1.0)
            continue
        if done.returncode != 0:
            return {"exit": done.returncode, "stderr": done.stderr[-2000:], "stdout": done.stdout[-2000:]}
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        try:
            return {"exit": 0, **json.loads(lines[-1] if lines else "{}")}
        except json.JSONDecodeError:
            return {"exit": 0, "stdout": done.stdout}
    return {"exit": 4, "stderr": "still busy after retries"}


def finish(settings: Settings, out: Callable[[str], None]) -> list[str]:
    """After the storm: `stitch clean`, re-run the interrupted ingests, finish compactions, clean again."""
    from stitchlake.services.compaction import pending_plans

    work = Path(settings.workdir)
    config = str(work / CONFIG_NAME)
    problems: list[str] = []
    time.sleep(settings.heartbeat_expire + 0.5)  # every killed writer's heartbeat is now expired

    def cli(*args: str) -> dict[str, Any]:
        result = run_cli(work, *args)
        if result["exit"] != 0:
            problems.append(f"`stitch {' '.join(args)}` exited {result['exit']}: {result.get('stderr', '')[-500:]}")
        return result

    cleaned = cli("clean", "-c", config, "--engine", "local")
    out(
        f"final clean: rolled back {len(cleaned.get('rolled_back') or [])}, reset compactions "
        f"{len(cleaned.get('reset_compactions') or [])}, deleted {len(cleaned.get('deleted') or [])}, "
        f"orphans {len(cleaned.get('orphans') or [])}"
    )
    reruns = 0
    for stream in STREAMS:
        for _ in range(settings.rounds + 2):
            result = cli("ingest", "-c", config, "--stream", stream, "--engine", "local")
            if result["exit"] != 0 or not result.get("instant"):
                break
            reruns += 1
    out(f"re-ran interrupted ingests: {reruns} commit(s)")
    for _ in range(10):
        if not pending_plans(open_torture_table(work)):
            break
        cli("compact", "-c", config, "--run", "--engine", "local")  # plans a killed compactor left behind
    cli("compact", "-c", config, "--engine", "local")  # then everything, so read-optimized can be checked too
    cli("clean", "-c", config, "--engine", "local")
    return problems


# ================================================================================================ checks


def _from_text_dates(values: pd.Series) -> np.ndarray:
    return (pd.to_datetime(values, format="%Y-%m-%d").astype("int64") // 86_400_000_000_000).to_numpy()


def _from_text_stamps(values: pd.Series) -> np.ndarray:
    return (pd.to_datetime(values, utc=True, format="ISO8601").astype("int64") // 1000).to_numpy()


def load_events(path: Path, stream: str) -> pd.DataFrame:
    """One landing file's events as the ground truth wants them: dates in days, times in µs since the epoch."""
    if stream == "orders":
        table = pq.read_table(path)
        frame = table.drop_columns(["order_date", "order_ts"]).to_pandas()
        frame["order_date"] = table.column("order_date").cast(pa.int32()).to_numpy().astype(np.int64)
        frame["order_ts"] = table.column("order_ts").cast(pa.int64()).to_numpy()
        return frame
    if stream == "payments":
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        columns = ["order_id", "order_date", "pay_status", "paid_amount", "pay_ts"]
        frame = pd.DataFrame(records, columns=columns)
        frame["paid_amount"] = frame["paid_amount"].astype("float64")
        frame["pay_status"] = frame["pay_status"].astype(object)
        frame["order_id"] = frame["order_id"].astype("int64")
    else:
        frame = pd.read_csv(path, dtype={"order_id": "int64"}, keep_default_na=False, na_values=[""])
        for name in ("carrier", "ship_status"):
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    ordering = demo_data.ORDERING[stream]
    frame["order_date"] = _from_text_dates(frame["order_date"].astype(str))
    frame[ordering] = _from_text_stamps(frame[ordering].astype(str))
    return frame


class Reference:
    """Expected tables for sets of consumed landing files, from demo_data's pandas ground truth."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.events: dict[str, dict[str, pd.DataFrame]] = {}
        for stream in STREAMS:
            frames: dict[str, pd.DataFrame] = {}
            position = 0
            for path in staged_files(work, stream):  # sorted name = arrival order, as in the generator
                frame = load_events(path, stream)
                frame["pos"] = np.arange(position, position + len(frame), dtype=np.int64)
                position += len(frame)
                frames[path.name] = frame
            self.events[stream] = frames
        self.cache: dict[str, pa.Table] = {}

    def expected(self, consumed: dict[str, list[str]]) -> pa.Table:
        key = json.dumps({s: sorted(consumed.get(s, [])) for s in STREAMS})
        if key not in self.cache:
            parts = []
            for stream in STREAMS:
                frames = self.events[stream]
                empty = next(iter(frames.values())).iloc[0:0]
                chosen = [frames[name] for name in sorted(consumed.get(stream, []))]
                parts.append(pd.concat(chosen, ignore_index=True) if chosen else empty)
            self.cache[key] = demo_data.ground_truth(*parts)
        return self.cache[key]


def table_differences(actual: pa.Table, expected: pa.Table, work: Path) -> list[str]:
    """Why `actual` is not `expected` (demo_data.compare's cell-by-cell report); empty when equal."""
    digest = hashlib.sha1(expected.to_pandas().to_json().encode()).hexdigest()[:16]
    path = work / "expected" / f"{digest}.parquet"
    if not path.exists():
        pq.write_table(expected, path)
    problems = demo_data.compare(actual, path)
    if not problems and actual.num_rows != expected.num_rows:
        problems.append(f"{actual.num_rows} rows, expected {expected.num_rows}")
    return problems


@dataclass
class Report:
    reads_checked: int = 0
    reads_skipped: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cleaned_files(timeline: Any) -> dict[str, str | None]:
    """Path -> the retention start of the clean that deleted it (None: that clean should have kept it).

    A clean plans under the lock at its requested time; with keep_latest_commits it may only delete files no
    read as of the `retain`-th latest data commit completed by then (or later) needs.
    """
    from stitchlake.timeline.instant import Action

    data = [i for i in timeline.completed([Action.DELTACOMMIT, Action.COMPACTION, Action.ERASE])]
    out: dict[str, str | None] = {}
    for instant in timeline.completed([Action.CLEAN]):
        plan = timeline.requested_content(instant)
        retain = int(plan.get("retain", 0))
        before = [i.completed for i in data if (i.completed or "") < instant.requested]
        cut = before[-retain] if retain and len(before) > retain else None
        for path in timeline.metadata(instant).get("deleted", []):
            out[path] = cut
    return out


def check_reads(work: Path, reference: Reference, report: Report) -> None:
    """Every recorded read against the reference merge of exactly the instants its snapshot had."""
    from stitchlake.timeline.instant import Action

    table = open_torture_table(work)
    timeline = table.timeline()
    final = {i.requested: i.completed for i in timeline.completed([Action.DELTACOMMIT])}
    cleaned = cleaned_files(timeline)
    for path in sorted((work / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        name = record["name"]
        until = record["until"]
        if record["mode"] != "current-moved":
            # The snapshot's instants must be the final timeline's instants completed by then: none vanished
            # later (a committed write lost) and none completed "in the past" (a partial commit shown).
            now = {r: c for r, c in final.items() if c <= until}
            then = {v["requested"]: v["completed"] for v in record["visible"]}
            if now != then:
                lost = sorted(set(then) - set(now))
                late = sorted(set(now) - set(then))
                report.violations.append(
                    f"read {name} as of {until}: its snapshot had instants {lost} the final timeline lacks, and "
                    f"lacked {late} the final timeline has completed by then"
                )
                continue
        error = record.get("error")
        if error is not None:
            message = error["message"]
            refused = error["type"] == "UsageError" and "clean removed" in message
            missing = error["type"] == "CorruptFileError" and "data file is missing" in message
            cuts = [cut for path, cut in cleaned.items() if path in message]
            if (refused or missing) and cuts and all(cut is not None and until < cut for cut in cuts):
                # A clean removed the file legitimately: this time was outside its retention when it ran.
                report.reads_skipped["outside retention" if refused else "file cleaned during the read"] += 1
            else:
                report.violations.append(f"read {name} as of {until} failed: {error['type']}: {message[:300]}")
            continue
        if record["mode"] == "current-moved":
            report.reads_skipped["snapshot moved during a read without as_of"] += 1
            continue
        consumed: dict[str, list[str]] = {s: [] for s in STREAMS}
        for instant in record["visible"]:
            consumed[instant["stream"]].extend(instant["sources"])
        duplicated = {s: sorted(n for n, c in Counter(v).items() if c > 1) for s, v in consumed.items()}
        if any(duplicated.values()):
            report.violations.append(f"read {name}: a landing file was consumed twice: {duplicated}")
        actual = pq.read_table(work / "reads" / f"{name}.parquet")
        problems = table_differences(actual, reference.expected(consumed), work)
        report.reads_checked += 1
        if problems:
            report.violations.append(f"read {name} ({record['mode']}, as of {until}): " + "; ".join(problems[:4]))


def check_table(work: Path, reference: Reference, report: Report) -> dict[str, int]:
    """The final table: ground truth, exactly-once ingest, no pending instant, no orphan, no leftovers."""
    from stitchlake.concurrency.markers import instants_with_markers
    from stitchlake.layout.names import parse_name
    from stitchlake.timeline.instant import Action

    table = open_torture_table(work)
    timeline = table.timeline()
    storage = table.storage
    for instant in timeline.pending():
        report.violations.append(f"instant {instant} is still pending after the final clean")
    consumed: dict[str, list[str]] = {s: [] for s in STREAMS}
    for instant in timeline.completed([Action.DELTACOMMIT]):
        meta = timeline.metadata(instant)
        consumed[meta["stream"]].extend(s["name"] for s in meta.get("sources", []))
    for stream in STREAMS:
        landed = sorted(p.name for p in staged_files(work, stream))
        twice = sorted(n for n, c in Counter(consumed[stream]).items() if c > 1)
        if twice:
            report.violations.append(f"{stream}: landing files ingested more than once: {twice}")
        never = sorted(set(landed) - set(consumed[stream]))
        if never:
            report.violations.append(f"{stream}: landing files never ingested: {never}")

    view = table.view(timeline)
    live = {f.path for f in view.live_files()}
    on_disk = set()
    strays = []
    for path in storage.walk_files():
        if path.startswith(".stitch/"):
            continue
        if parse_name(path.rsplit("/", 1)[-1]):
            on_disk.add(path)
        else:
            strays.append(path)
    orphans = sorted(on_disk - live)
    missing = sorted(live - on_disk)
    if orphans:
        report.violations.append(f"{len(orphans)} orphan data file(s) remain, e.g. {orphans[:3]}")
    if missing:
        report.violations.append(f"{len(missing)} data file(s) named by the timeline are missing, e.g. {missing[:3]}")
    if strays:
        report.violations.append(f"{len(strays)} stray file(s) in the data folders, e.g. {strays[:3]}")
    markers = instants_with_markers(storage)
    if markers:
        report.violations.append(f"markers left behind for instant(s) {markers[:5]}")

    truth = pq.read_table(work / "staging" / "truth.parquet")
    final_path = work / "final.parquet"
    done = subprocess.run(
        stitch("read", "-c", str(work / CONFIG_NAME), "--out", str(final_path)), capture_output=True, text=True
    )
    if done.returncode != 0:
        report.violations.append(f"`stitch read` of the final table exited {done.returncode}: {done.stderr[-300:]}")
    else:
        problems = demo_data.compare(pq.read_table(final_path), work / "staging" / "truth.parquet")
        if not problems and pq.read_table(final_path).num_rows != truth.num_rows:
            problems = [f"{pq.read_table(final_path).num_rows} rows, expected {truth.num_rows}"]
        report.violations += [f"final table vs ground truth: {p}" for p in problems]
    rows = 0
    try:
        in_process = table.read()
    except Exception as exc:
        report.violations.append(f"reading the final table failed: {type(exc).__name__}: {exc}")
    else:
        rows = in_process.num_rows
        problems = table_differences(in_process, reference.expected(consumed), work)
        report.violations += [f"final table vs the reference merge of its instants: {p}" for p in problems]
        if all(not s.logs for s in view.latest_slices()):  # fully compacted: base files alone must say the same
            try:
                optimized = table.read(mode="read_optimized")
            except Exception as exc:
                report.violations.append(f"reading the final table read-optimized failed: {exc}")
            else:
                problems = table_differences(optimized, reference.expected(consumed), work)
                report.violations += [f"final table read-optimized: {p}" for p in problems]
    counts = Counter(i.action for i in timeline.completed())
    return {
        "deltacommits": counts[Action.DELTACOMMIT],
        "compactions": counts[Action.COMPACTION],
        "cleans": counts[Action.CLEAN],
        "rollbacks": counts[Action.ROLLBACK],
        "rows": rows,
    }


def check_workers(work: Path, report: Report) -> Counter[str]:
    """Worker logs: a failure that is not "busy, retry later" is a bug the run must not hide."""
    events: Counter[str] = Counter()
    for path in sorted((work / "logs").glob("*.jsonl")):
        for record in read_lines(path):
            events[record.get("event", "?")] += 1
            if record.get("event") == "error" and ZOMBIE_REFUSED in record.get("message", ""):
                events["zombie refused"] += 1
            elif record.get("event") in ("error", "unexpected"):
                report.violations.append(
                    f"{record['role']} (pid {record['pid']}) failed: {record['error']}: {record['message'][:300]}"
                )
    return events


def check(work: Path, out: Callable[[str], None]) -> tuple[Report, dict[str, int], Counter[str]]:
    report = Report()
    reference = Reference(work)
    started = time.monotonic()
    check_reads(work, reference, report)
    commits = check_table(work, reference, report)
    events = check_workers(work, report)
    out(f"checked {report.reads_checked} reads and the final table in {time.monotonic() - started:.1f}s")
    return report, commits, events


# ================================================================================================== main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds; each lands one file per stream")
    parser.add_argument("--keys", type=int, default=2000, help="orders (record keys) in the generated data")
    parser.add_argument("--seed", type=int, default=7, help="seed of the data, the kills and the workers")
    parser.add_argument("--workdir", help="folder for landing files, logs, reads (default: a new temp folder)")
    parser.add_argument("--table", help="table location (default: WORKDIR/table)")
    parser.add_argument("--readers", type=int, default=2, help="reader processes")
    parser.add_argument(
        "--writers-per-stream", type=int, default=1, help="writer processes per stream (>1: cron overlap)"
    )
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between random kills (0: none)")
    parser.add_argument(
        "--pause-every", type=float, default=6.0, help="mean seconds between SIGSTOP pauses of a worker (0: none)"
    )
    parser.add_argument("--fault-rate", type=float, default=0.5, help="share of worker starts armed with a fault")
    parser.add_argument("--round-seconds", type=float, default=2.5, help="minimum length of a round")
    parser.add_argument("--round-timeout", type=float, default=60.0, help="maximum length of a round")
    parser.add_argument("--buckets", type=int, default=2, help="file groups per partition")
    parser.add_argument("--log-format", choices=("parquet", "avro"), default="parquet")
    parser.add_argument("--retain", type=int, default=8, help="clean.retain (keep_latest_commits)")
    parser.add_argument("--heartbeat", type=float, nargs=2, default=(0.5, 4.0), metavar=("INTERVAL", "EXPIRE"))
    parser.add_argument("--lock-expire", type=float, default=2.0, help="lease of the table lock, seconds")
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
        settings = Settings(**json.loads((work / "settings.json").read_text(encoding="utf-8")))
    else:
        if work.exists() and any(work.iterdir()):
            print(f"error: workdir {work} is not empty", file=sys.stderr)
            return 2
        settings = Settings(
            workdir=str(work),
            table=str(Path(args.table).resolve()) if args.table else str(work / "table"),
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
        if stats.rounds_timed_out:
            report.violations.append(f"{stats.rounds_timed_out} round(s) timed out before the writers caught up")
    kills = sum(stats.kills.values())
    during = sum(n for cause, n in stats.kills.items() if not cause.startswith("at_stop"))
    summary.update(
        rounds=settings.rounds,
        kills=kills,
        kills_during_rounds=during,
        kills_by_cause=dict(stats.kills),
        pauses=dict(stats.pauses),
        commits=commits,
        reads_checked=report.reads_checked,
        reads_skipped=dict(report.reads_skipped),
        worker_events=dict(events),
        violations=len(report.violations),
        violation_messages=report.violations,
        seconds=round(time.monotonic() - started, 1),
    )
    for line in report.violations[:MAX_SHOWN]:
        print(f"VIOLATION: {line}")
    if len(report.violations) > MAX_SHOWN:
        print(f"... and {len(report.violations) - MAX_SHOWN} more (all of them in --summary-json)")
    print(
        f"torture: rounds {settings.rounds}, kills {kills} ({during} during the rounds, "
        f"{sum(stats.pauses.values())} freezes), commits {commits['deltacommits']} "
        f"(+{commits['compactions']} compactions, {commits['cleans']} cleans, {commits['rollbacks']} rollbacks), "
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


if __name__ == "__main__":
    sys.exit(main())
