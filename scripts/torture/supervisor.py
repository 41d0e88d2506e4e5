"""The supervisor: lands files round by round, kills, freezes and restarts the workers, then finishes the table."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts import ROOT, child_env, module_argv
from scripts.torture.actors import consumed_on_disk
from scripts.torture.common import (
    ARCHIVE_KEEP,
    CONFIG_NAME,
    FAULT_ENV,
    FINISH_LOG,
    HORIZONS_LOG,
    OBSERVED_LOG,
    RUN_DIR_ENV,
    STOP_FILE,
    STREAMS,
    Settings,
    land,
    log_line,
    open_torture_table,
    read_lines,
    staged_files,
    stitch,
    table_dir,
)
from scripts.torture.faults import FAULT_POINTS, REARMED
from scripts.torture.tablefiles import Seen, TableFiles, checkpoint_horizon, instant_meta, list_timeline

#: What each kind of actor must have logged at least once before the storm may end (`Supervisor.owed`): a run in
#: which chance gave a kind nothing to do tortured less than it says. The restorer is steered towards what it
#: still owes (`Worker.restore`), and the last round lasts until every duty is done.
DUTIES: dict[str, tuple[str, ...]] = {
    "writer": ("commit",),
    "cleaner": ("clean",),
    "restorer": ("savepoint", "restoring"),
    "archiver": ("archive", "horizon"),
    "eraser": ("erase",),
    "reader": ("horizon",),
}


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
    #: Duties (DUTIES) still undone when the last round gave up waiting for them.
    owed: list[str] = field(default_factory=list)


class Watcher:
    """The supervisor's eye on the metadata: every instant ever seen completed, every checkpoint horizon.

    The supervisor is never killed or frozen, so this record of what existed is what the checker holds the
    final timeline, archive and checkpoint to (nothing seen may vanish without a reason; no horizon goes back).
    """

    def __init__(self, work: Path, table: TableFiles, every: float = 0.1) -> None:
        self.table = table
        self.observed = work / "logs" / OBSERVED_LOG
        self.horizons = work / "logs" / HORIZONS_LOG
        self.every = every
        self.seen: set[Seen] = set()
        self.horizon: str | None = None
        self.next_at = 0.0

    def poll(self, now: float) -> None:
        if now < self.next_at:
            return
        self.next_at = now + self.every
        t0 = time.time()
        with contextlib.suppress(FileNotFoundError):
            completed, _pending = list_timeline(self.table)
            new = [s for s in completed if s not in self.seen]
            if new:
                log_line(self.observed, {"t0": t0, "t1": time.time(), "instants": [s.key() for s in new]})
                self.seen.update(new)
        t0 = time.time()
        horizon = checkpoint_horizon(self.table)
        if horizon != self.horizon:
            log_line(self.horizons, {"t0": t0, "t1": time.time(), "horizon": horizon})
            self.horizon = horizon


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
        roles += [("restorer", True)] * min(settings.restorers, 1)
        roles += [(f"archiver:{n}", True) for n in range(1, settings.archivers + 1)]
        roles += [("eraser", True)] * min(settings.erasers, 1)
        roles += [(f"reader:{n}", False) for n in range(1, settings.readers + 1)]
        self.slots = [Slot(role, killable) for role, killable in roles]
        self.stderr = open(self.work / "logs" / "workers.err", "ab")  # noqa: SIM115 - closed in stop()
        self.next_kill = self._draw_kill(time.monotonic())
        self.next_pause = self._draw_pause(time.monotonic())
        self.watcher = Watcher(self.work, table_dir(self.work))
        self.duties_done: set[str] = set()
        self.duties_read_at = 0.0

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
        env = child_env()
        env.pop(FAULT_ENV, None)
        slot.fault = None
        kind = slot.role.split(":")[0]
        rate = self.settings.fault_rate
        if kind in REARMED and rate > 0:  # few, long-lived processes: nearly always armed (the fault re-arms)
            rate = max(rate, 0.9)
        if slot.killable and self.rng.random() < rate:
            slot.fault = f"{self.rng.choice(FAULT_POINTS[kind])}:{self.rng.randint(0, 2)}"
            if kind in REARMED:
                slot.fault += "+"
            env[FAULT_ENV] = slot.fault
        env[RUN_DIR_ENV] = str(self.work / "run")
        argv = module_argv("torture", "_worker", "--role", slot.role)
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

    def stall_request(self, slot: Slot, now: float) -> None:
        """A `stall_*` fault froze its own process: wake it when it asked."""
        assert slot.proc is not None
        request = self.work / "run" / f"{slot.proc.pid}.stall"
        if not request.exists():
            return
        with contextlib.suppress(ValueError, OSError):
            text = request.read_text(encoding="utf-8")
            asked: dict[str, Any] = (
                json.loads(text) if text.startswith("{") else {"seconds": float(text), "kind": "heartbeat"}
            )
            slot.paused_until = now + float(asked["seconds"])
            request.unlink()
            self.stats.pauses[f"{asked['kind']}-stall:{slot.role.split(':')[0]}"] += 1

    def tick(self) -> None:
        """Restart what died, and kill something when the random kill clock says so."""
        now = time.monotonic()
        self.watcher.poll(now)
        for slot in self.slots:
            if slot.proc is not None and slot.paused_until is None:
                self.stall_request(slot, now)
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

    def consumed(self) -> dict[str, set[str]] | None:
        """What the table says it consumed (None while a restore or archive moves things under the look)."""
        return consumed_on_disk(table_dir(self.work))

    def owed(self) -> list[str]:
        """The duties (DUTIES) that no process of a kind has done yet, as `kind: event` (a second writer of a
        stream may never win its stream: one of the kind doing it is the duty). Logs are read at most twice a
        second, and a duty once done stays done."""
        now = time.monotonic()
        if now >= self.duties_read_at:
            self.duties_read_at = now + 0.5
            for slot in self.slots:
                kind = slot.role.split(":")[0]
                if any(f"{kind}: {event}" not in self.duties_done for event in DUTIES.get(kind, ())):
                    log = self.work / "logs" / f"{slot.role.replace(':', '-')}.jsonl"
                    events = {record.get("event") for record in read_lines(log)}
                    self.duties_done |= {f"{kind}: {event}" for event in DUTIES[kind] if event in events}
        kinds = dict.fromkeys(slot.role.split(":")[0] for slot in self.slots)
        return [f"{k}: {e}" for k in kinds for e in DUTIES.get(k, ()) if f"{k}: {e}" not in self.duties_done]

    def progress(self, last: bool) -> tuple[int, int]:
        """What a round waits for, as a value that changes while the run gets there: the landing files the table
        consumed (a restore may lower it: that is movement too) and, in the last round, the duties left."""
        consumed = self.consumed()
        return sum(len(files) for files in consumed.values()) if consumed else -1, len(self.owed()) if last else 0

    def kill_one_if_none_yet(self) -> bool:
        """Make "processes were killed during the rounds" certain: kill a working process if chance killed none.
        True once some kill during the rounds has happened."""
        if any(not cause.startswith("at_stop") for cause in self.stats.kills):
            return True
        victims = [s for s in self.slots if s.killable and s.paused_until is None and self.working(s)]
        if victims and self.settings.kill_every > 0:
            self.kill(self.rng.choice(victims), "forced")
            return True
        return self.settings.kill_every <= 0

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
            # The timeout counts from the last progress, not from the round's start: a busy machine makes a
            # round slow, not stuck. It only turns a hang into a report (a timed-out round is no violation).
            seen, moved_at, looked_at = self.progress(last), started, started
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
                        if self.kill_one_if_none_yet() and not self.owed():
                            break
                    else:
                        consumed = self.consumed()
                        if consumed is not None and all(landed[s] <= consumed[s] for s in STREAMS):
                            break
                if now - looked_at >= 1.0:  # (a look parses the timeline: once a second is enough)
                    looked_at = now
                    if (now_seen := self.progress(last)) != seen:
                        seen, moved_at = now_seen, now
                if now - moved_at >= self.settings.round_timeout:
                    self.stats.rounds_timed_out += 1
                    if last:
                        self.stats.owed = self.owed()
                    break
                time.sleep(0.05)
            self.out(
                f"round {number + 1}/{self.settings.rounds}: {time.monotonic() - started:.1f}s, "
                f"kills so far {sum(self.stats.kills.values())}, freezes {sum(self.stats.pauses.values())}"
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
        self.watcher.poll(float("inf"))
        self.stderr.close()


# =============================================================================================== finish


def run_cli(work: Path, *args: str, attempts: int = 20) -> dict[str, Any]:
    """Run a `stitch ... --json` command, retrying "busy" (exit 4) as cron would; the last JSON or an error."""
    for _ in range(attempts):
        done = subprocess.run(
            stitch(*args, "--json"), cwd=work, capture_output=True, text=True, check=False, env=child_env()
        )
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


def force_an_archive(work: Path, config: str, cli: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """Nothing was ever archived: forced, as a kill is when chance gave none. A run whose restores kept going back
    to a savepoint of its first commit leaves the archive nothing it may take (it never archives from the oldest
    savepoint on). So every savepoint is deleted (each logged first, as the restorer logs its deletes: the checker
    accepts a vanished savepoint only with a reason on record), then all but the newest instant are archived."""
    table = table_dir(work)
    completed, _pending = list_timeline(table)
    for seen in (s for s in completed if s.action == "savepoint"):
        with contextlib.suppress(FileNotFoundError):
            name = str(instant_meta(table, seen).get("name") or seen.requested)
            deleting = {"role": "finish", "event": "savepoint_delete", "instant": seen.requested}
            log_line(work / "logs" / FINISH_LOG, deleting)
            cli("savepoint", "delete", "--name", name, "-c", config, "--engine", "local")
    return cli("archive", "-c", config, "--keep", "1")


def finish(settings: Settings, out: Callable[[str], None]) -> list[str]:
    """After the storm: `stitch clean`, re-run the interrupted ingests, finish compactions, clean, archive."""
    from stitchlake.services.rewrites.compaction import pending_plans

    work = Path(settings.workdir)
    config = str(work / CONFIG_NAME)
    problems: list[str] = []
    time.sleep(settings.heartbeat_expire + 0.5)  # every killed writer's heartbeat is now expired

    def cli(*args: str) -> dict[str, Any]:
        result = run_cli(work, *args)
        if result["exit"] != 0:
            said = (result.get("stdout", "") + result.get("stderr", ""))[-800:]
            problems.append(f"exit {result['exit']} from `stitch {' '.join(args)}`: {said}")
        return result

    cleaned = cli("clean", "-c", config, "--engine", "local")
    out(
        f"final clean: rolled back {len(cleaned.get('rolled_back') or [])}, reset compactions "
        f"{len(cleaned.get('reset_compactions') or [])}, deleted {len(cleaned.get('deleted') or [])}, "
        f"orphans {len(cleaned.get('orphans') or [])}"
    )
    # Plans a killed compactor left behind run first: in optimistic mode a write over a file group a pending plan
    # will rewrite stops (exit 3, as documented), so the ingests below would meet them.
    for _ in range(10):
        if not pending_plans(open_torture_table(work)):
            break
        cli("compact", "-c", config, "--run", "--engine", "local")
    reruns = 0
    for stream in STREAMS:
        for _ in range(settings.rounds + 2):
            result = cli("ingest", "-c", config, "--stream", stream, "--engine", "local")
            if result["exit"] != 0 or not result.get("instant"):
                break
            reruns += 1
    out(f"re-ran interrupted ingests: {reruns} commit(s)")
    cli("compact", "-c", config, "--engine", "local")  # then everything, so read-optimized can be checked too
    cli("clean", "-c", config, "--engine", "local")
    if settings.archivers:
        archived = cli("archive", "-c", config, "--keep", str(ARCHIVE_KEEP[0]))
        out(f"final archive: {archived.get('archived')} instant(s), horizon {archived.get('horizon')}")
        if archived.get("exit") == 0 and not archived.get("horizon"):
            archived = force_an_archive(work, config, cli)
            out(f"forced archive: {archived.get('archived')} instant(s), horizon {archived.get('horizon')}")
    Watcher(work, table_dir(work)).poll(0.0)  # one more look (its lines only add observations)
    return problems
