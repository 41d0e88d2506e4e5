"""The supervisor: lands files round by round, kills, freezes and restarts the workers, then finishes the table.

Its parts: `processes` (the workers' processes and the random storm on them), `accounting` (what a round waits
for), the `Watcher` below (what existed, for the checker), and the rounds themselves (`Supervisor`).
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts import child_env
from scripts.torture.accounting import DUTIES, Ledger
from scripts.torture.common import (
    ARCHIVE_KEEP,
    CONFIG_NAME,
    FINISH_LOG,
    HORIZONS_LOG,
    OBSERVED_LOG,
    STOP_FILE,
    STREAMS,
    Settings,
    land,
    log_line,
    open_torture_table,
    staged_files,
    stitch,
    table_dir,
)
from scripts.torture.processes import Crew, Slot, Stats, Storm
from scripts.torture.tablefiles import Seen, TableFiles, checkpoint_horizon, instant_meta, list_timeline

# ============================================================================================ supervisor


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


def run_roles(settings: Settings) -> list[tuple[str, bool]]:
    """Every role of the run, and whether the storm may kill it (every role but the readers).

    More than one writer per stream is cron overlap: the busy check must keep them apart, and exactly-once must hold
    when one of them is frozen long enough to be presumed dead."""
    roles = [(f"writer:{s}", True) for s in STREAMS]
    roles += [(f"writer:{s}:{n}", True) for n in range(2, settings.writers_per_stream + 1) for s in STREAMS]
    roles += [("compactor", True), ("cleaner", True)]
    roles += [("restorer", True)] * min(settings.restorers, 1)
    roles += [(f"archiver:{n}", True) for n in range(1, settings.archivers + 1)]
    roles += [("eraser", True)] * min(settings.erasers, 1)
    roles += [(f"reader:{n}", False) for n in range(1, settings.readers + 1)]
    return roles


class Supervisor:
    """Starts the workers, kills and restarts them, and lands the files round by round."""

    def __init__(self, settings: Settings, out: Callable[[str], None]) -> None:
        self.settings = settings
        self.work = Path(settings.workdir)
        self.rng = random.Random(settings.seed * 7919 + 1)
        self.out = out
        self.stats = Stats()
        self.slots = [Slot(role, killable) for role, killable in run_roles(settings)]
        self.crew = Crew(settings, self.rng, self.slots, self.stats)
        self.storm = Storm(settings, self.rng, self.crew)
        self.watcher = Watcher(self.work, table_dir(self.work))
        self.ledger = Ledger(self.work, self.slots)

    def tick(self) -> None:
        """Restart what died, and kill something when the random kill clock says so."""
        now = time.monotonic()
        self.watcher.poll(now)
        self.crew.tend(now)
        self.storm.strike(now)

    def kill_one_if_none_yet(self) -> bool:
        """Make "processes were killed during the rounds" certain: kill a working process if chance killed none.
        True once some kill during the rounds has happened."""
        if any(not cause.startswith("at_stop") for cause in self.stats.kills):
            return True
        victims = [s for s in self.slots if s.killable and s.paused_until is None and self.crew.working(s)]
        if victims and self.settings.kill_every > 0:
            self.crew.kill(self.rng.choice(victims), "forced")
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
            self.wait_round(started, last, landed, mid_ingest)
            self.out(
                f"round {number + 1}/{self.settings.rounds}: {time.monotonic() - started:.1f}s, "
                f"kills so far {sum(self.stats.kills.values())}, freezes {sum(self.stats.pauses.values())}"
            )

    def wait_round(self, started: float, last: bool, landed: dict[str, set[str]], mid_ingest: dict[str, float]) -> None:
        """Run the storm until the round is done (`round_done`), or makes no progress for `round_timeout`.

        The timeout counts from the last progress, not from the round's start: a busy machine makes a round slow,
        not stuck. It only turns a hang into a report (a timed-out round is no violation)."""
        seen, moved_at, looked_at = self.ledger.progress(last), started, started
        while True:
            self.tick()
            now = time.monotonic()
            self.kill_mid_ingest(mid_ingest, now)
            if now - started >= self.settings.round_seconds and not mid_ingest and self.round_done(last, landed):
                break
            if now - looked_at >= 1.0:  # (a look parses the timeline: once a second is enough)
                looked_at = now
                if (now_seen := self.ledger.progress(last)) != seen:
                    seen, moved_at = now_seen, now
            if now - moved_at >= self.settings.round_timeout:
                self.stats.rounds_timed_out += 1
                if last:
                    self.stats.owed = self.ledger.owed()
                break
            time.sleep(0.05)

    def kill_mid_ingest(self, mid_ingest: dict[str, float], now: float) -> None:
        """Kill each writer drawn for it once its moment came (if it is working then); the draw is used up."""
        for slot in self.slots:
            if slot.role in mid_ingest and now >= mid_ingest[slot.role]:
                if self.crew.working(slot):
                    self.crew.kill(slot, "mid_ingest")
                del mid_ingest[slot.role]

    def round_done(self, last: bool, landed: dict[str, set[str]]) -> bool:
        """The last round: some kill happened and no duty is owed. Any other: the writers took every landed file."""
        if last:
            return self.kill_one_if_none_yet() and not self.ledger.owed()
        consumed = self.ledger.consumed()
        return consumed is not None and all(landed[s] <= consumed[s] for s in STREAMS)

    def stop(self) -> None:
        """Kill writers and services wherever they are; let readers finish their read and stop."""
        self.tick()  # account for faults that fired since the last tick
        self.crew.halt()
        (self.work / STOP_FILE).touch()
        self.crew.collect(30)
        self.watcher.poll(float("inf"))
        self.crew.close()


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


__all__ = ["DUTIES", "Slot", "Stats", "Supervisor", "Watcher", "finish", "force_an_archive", "run_cli"]
