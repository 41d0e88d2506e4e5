"""What every actor process shares, whatever its role: its log, its stop, its naps, its loop, the in-process CLI."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.torture.common import (
    CONFIG_NAME,
    FAULT_ENV,
    STOP_FILE,
    STREAMS,
    log_line,
    open_torture_table,
    read_lines,
    stitch_in_process,
    table_dir,
)
from scripts.torture.faults import install_fault
from scripts.torture.tablefiles import TableFiles, instant_meta, list_timeline, read_checkpoint, sources_of


def consumed_on_disk(table: TableFiles) -> dict[str, set[str]] | None:
    """Landing files the table says it consumed (checkpoint + active deltacommits); None while they move."""
    try:
        completed, _pending = list_timeline(table)
        checkpoint = read_checkpoint(table)
        horizon = checkpoint.horizon if checkpoint else ""
        found = {s: set(checkpoint.consumed.get(s, [])) if checkpoint else set() for s in STREAMS}
        for seen in completed:
            if seen.action == "deltacommit" and seen.completed > horizon:
                meta = instant_meta(table, seen)
                found.setdefault(str(meta.get("stream")), set()).update(sources_of(meta))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return found


class Retry(Exception):
    """A CLI run in-process exited 3 or 4: conflict or busy, retry later (what cron would do)."""


class WorkerBase:
    """One role's loop in its own process; it stops at the STOP file or when killed.

    The roles' steps live in their own classes (`writers`, `table_services`, `savepoints`, `readers`); this is
    what they share, so that a role is only what it does on the table.
    """

    def __init__(self, role: str, work: Path, seed: int) -> None:
        self.role = role
        self.kind = role.split(":")[0]
        self.work = work
        self.rng = random.Random(seed)
        self.log_path = work / "logs" / f"{role.replace(':', '-')}.jsonl"
        self.table = open_torture_table(work)
        self.table_dir = table_dir(work)
        self.config = str(work / CONFIG_NAME)
        self.parent = os.getppid()
        self.done = 0
        expire = self.table.config.concurrency.heartbeat.expire_s
        lease = self.table.config.concurrency.lock.expire_s
        self.stall_s = round(self.rng.uniform(1.2 * expire, 2.0 * expire), 2)
        self.lease_s = round(self.rng.uniform(1.5 * lease, 3.0 * lease), 2)

    def log(self, record: dict[str, Any]) -> None:
        log_line(self.log_path, {"role": self.role, "pid": os.getpid(), **record})

    def stopping(self) -> bool:
        """The STOP file, or the supervisor gone (killed with its run): a worker never outlives the run."""
        return (self.work / STOP_FILE).exists() or os.getppid() != self.parent

    def owes(self, event: str) -> bool:
        """Whether no process of this role has logged `event` yet (its log outlives kills and restarts)."""
        return not any(record.get("event") == event for record in read_lines(self.log_path))

    def nap(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high))

    def role_step(self) -> Callable[[], None]:
        """One pass of this role's loop: chosen by the role's kind in the subclass's table (`actors.ROLE_STEPS`)."""
        raise NotImplementedError

    def run(self) -> None:
        fault = os.environ.get(FAULT_ENV)
        if fault and not install_fault(fault, self.log, self.stall_s, self.lease_s):
            message = f"fault point {fault} found nothing to wrap: the code under test moved; update install_fault"
            self.log({"event": "error", "error": "FaultNotArmed", "message": message})
        self.log({"event": "start", "fault": fault})
        (self.work / "run" / f"{os.getpid()}.ready").touch()  # the supervisor's random kills wait for this
        step = self.role_step()
        while not self.stopping():
            try:
                step()
            except Exception as exc:
                self.failed(exc)
        # Workers refuse pandas as `stitch` does (scripts/torture/__main__.py): the test checks it held.
        self.log({"event": "stop", "pandas": "pandas" in sys.modules})

    def failed(self, exc: Exception) -> None:
        from stitchlake.errors import BusyError, ConflictError, LockLost, StitchError

        if isinstance(exc, BusyError | LockLost | ConflictError | Retry):  # "retry later": what cron would do
            self.log({"event": "busy", "error": type(exc).__name__, "message": str(exc)[:300]})
        else:
            kind = "error" if isinstance(exc, StitchError) else "unexpected"
            self.log({"event": kind, "error": type(exc).__name__, "message": str(exc), "trace": traceback.format_exc()})
        self.nap(0.1, 0.4)

    def cli(self, *args: str) -> dict[str, Any]:
        """The real `stitch ... --json` in this process; its JSON summary, Retry on exit 3/4, error otherwise."""
        from stitchlake.errors import StitchError

        code, out, err = stitch_in_process(*args, "--json")
        lines = [line for line in out.splitlines() if line.strip()]
        try:
            summary = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            summary = {}
        if code in (3, 4):
            raise Retry(f"`stitch {args[0]}` exited {code}: {err.strip()[-300:]}")
        if code != 0:
            raise StitchError(f"`stitch {' '.join(args)}` exited {code}: {err.strip()} {out.strip()[-300:]}")
        return summary if isinstance(summary, dict) else {}

    def observe_horizon(self, t0: float, t1: float, horizon: str | None) -> None:
        """The checkpoint horizon as seen between t0 and t1 (the checker requires it to never move back)."""
        self.log({"event": "horizon", "t0": t0, "t1": t1, "horizon": horizon})
