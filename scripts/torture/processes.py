"""The supervisor's hands on the worker processes: start, kill, freeze and wake them, and the random storm of it."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts import ROOT, child_env, module_argv
from scripts.torture.common import FAULT_ENV, RUN_DIR_ENV, Settings
from scripts.torture.faults import FAULT_POINTS, REARMED


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

    @property
    def kind(self) -> str:
        return self.role.split(":")[0]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Stats:
    kills: Counter[str] = field(default_factory=Counter)
    pauses: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    rounds_timed_out: int = 0
    #: Duties (DUTIES) still undone when the last round gave up waiting for them.
    owed: list[str] = field(default_factory=list)


def draw_fault(slot: Slot, fault_rate: float, rng: random.Random) -> str | None:
    """The fault point a new process of the slot gets armed (`point:countdown`), if chance gives it one."""
    kind = slot.kind
    rate = fault_rate
    if kind in REARMED and rate > 0:  # few, long-lived processes: nearly always armed (the fault re-arms)
        rate = max(rate, 0.9)
    if not (slot.killable and rng.random() < rate):
        return None
    fault = f"{rng.choice(FAULT_POINTS[kind])}:{rng.randint(0, 2)}"
    return fault + "+" if kind in REARMED else fault


class Crew:
    """The worker processes, one per slot: started (maybe with a fault armed), killed, frozen, woken, restarted.

    Everything done to them is counted in `stats`, for the report: a run says how much it tortured.
    """

    def __init__(self, settings: Settings, rng: random.Random, slots: list[Slot], stats: Stats) -> None:
        self.settings = settings
        self.work = Path(settings.workdir)
        self.rng = rng
        self.slots = slots
        self.stats = stats
        self.stderr = open(self.work / "logs" / "workers.err", "ab")  # noqa: SIM115 - closed in close()

    def spawn(self, slot: Slot) -> None:
        env = child_env()
        env.pop(FAULT_ENV, None)
        slot.fault = draw_fault(slot, self.settings.fault_rate, self.rng)
        if slot.fault is not None:
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
        if not slot.alive():
            return
        assert slot.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.proc.pid, signal.SIGKILL)
        slot.killed_by_us = True
        self.stats.kills[f"{why}:{slot.kind}"] += 1

    def wake(self, slot: Slot) -> None:
        if slot.paused_until is not None and slot.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.proc.pid, signal.SIGCONT)
        slot.paused_until = None

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
            self.stats.pauses[f"{asked['kind']}-stall:{slot.kind}"] += 1

    def tend(self, now: float) -> None:
        """Wake what asked to be woken, count what died (and why), restart it a moment later."""
        for slot in self.slots:
            if slot.proc is not None and slot.paused_until is None:
                self.stall_request(slot, now)
            if slot.paused_until is not None and now >= slot.paused_until:
                self.wake(slot)
            if slot.proc is not None and slot.proc.poll() is not None:
                self.died(slot, now)
            if slot.proc is None and now >= slot.restart_at:
                self.spawn(slot)

    def died(self, slot: Slot, now: float) -> None:
        """Count a process that ended: a SIGKILL not ours is its fault point firing; any other end is an exit."""
        assert slot.proc is not None
        slot.paused_until = None
        code = slot.proc.returncode
        if code == -signal.SIGKILL and not slot.killed_by_us:
            point = (slot.fault or "?").split(":")[0]
            self.stats.kills[f"fault:{point}"] += 1
        elif code != -signal.SIGKILL:
            self.stats.exits[f"{slot.role} exit {code}"] += 1
        slot.proc = None
        slot.restart_at = now + self.rng.uniform(0.1, 0.8)

    def halt(self) -> None:
        """Wake every frozen process, and kill the killable ones wherever they are."""
        for slot in self.slots:
            self.wake(slot)
            if slot.killable and slot.alive():
                self.kill(slot, "at_stop")

    def collect(self, seconds: float) -> None:
        """Wait for every process to end (the readers finish their read); kill what is still there after."""
        deadline = time.monotonic() + seconds
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

    def close(self) -> None:
        self.stderr.close()


class Storm:
    """Random kills and freezes, each on its own clock (exponential: no rhythm a race could hide between)."""

    def __init__(self, settings: Settings, rng: random.Random, crew: Crew) -> None:
        self.settings = settings
        self.rng = rng
        self.crew = crew
        self.next_kill = self.draw_kill(time.monotonic())
        self.next_pause = self.draw_pause(time.monotonic())

    def draw_kill(self, now: float) -> float:
        if self.settings.kill_every <= 0:
            return float("inf")
        return now + self.rng.expovariate(1.0 / self.settings.kill_every)

    def draw_pause(self, now: float) -> float:
        if self.settings.pause_every <= 0:
            return float("inf")
        return now + self.rng.expovariate(1.0 / self.settings.pause_every)

    def strike(self, now: float) -> None:
        """Kill a working killable process, or freeze a working one, when its clock says so."""
        if now >= self.next_kill:
            victims = [s for s in self.crew.slots if s.killable and self.crew.working(s)]
            if victims:
                self.crew.kill(self.rng.choice(victims), "random")
            self.next_kill = self.draw_kill(now)
        if now >= self.next_pause:
            sleepers = [s for s in self.crew.slots if s.paused_until is None and self.crew.working(s)]
            if sleepers:
                self.pause(self.rng.choice(sleepers), now)
            self.next_pause = self.draw_pause(now)

    def pause(self, slot: Slot, now: float) -> None:
        """Freeze a process (a GC pause, a stalled VM): often past its heartbeat's expiry, so it becomes a
        "zombie" that others presume dead and roll back, and that wakes up later and carries on."""
        assert slot.proc is not None
        seconds = self.rng.uniform(0.5, 1.6 * self.settings.heartbeat_expire)
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.proc.pid, signal.SIGSTOP)
            slot.paused_until = now + seconds
            zombie = "zombie" if seconds > self.settings.heartbeat_expire else "short"
            self.crew.stats.pauses[f"{zombie}:{slot.kind}"] += 1
