"""The fault hook: kills and freezes at precise points, wrapped around (never replacing) the code under test."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scripts.torture.common import RUN_DIR_ENV

#: Where the supervisor may kill each role on purpose (see `install_fault`).
#: `stall_*` points freeze the process (SIGSTOP) past its heartbeat's expiry instead: it becomes a zombie that
#: the others presume dead, and it carries on when the supervisor wakes it. `stall_locked_*` and
#: `stall_archive_*` freeze it while it holds the table lock, past the lock's lease.
LOCKED_STALLS = ("stall_locked_begin", "stall_locked_publish")
#: The points of a transaction's life (a deltacommit, a compaction, an erase).
TRANSACTION_POINTS = (
    *("in_begin", "after_begin", "after_mark", "mid_write", "before_publish", "after_publish"),
    *("stall_after_mark", "stall_before_publish", *LOCKED_STALLS),
)
FAULT_POINTS: dict[str, tuple[str, ...]] = {
    "writer": TRANSACTION_POINTS,
    "compactor": TRANSACTION_POINTS,
    "eraser": TRANSACTION_POINTS,  # an erase is a rewrite transaction as a compaction is
    "cleaner": (
        *("in_begin", "mid_rollback", "mid_clean_delete", "before_publish", "after_publish", "stall_rollback"),
        "stall_locked_publish",
    ),
    "restorer": (
        *("in_begin", "mid_restore", "before_publish", "after_publish"),
        *("stall_restore_undo", "stall_before_publish", *LOCKED_STALLS),
    ),
    "archiver": ("kill_archive_checkpoint", "kill_archive_delete", "stall_archive_checkpoint", "stall_archive_delete"),
}
#: Roles whose stall points re-arm after firing: they live long (rarely killed), and the races they are there
#: for (two archives, a restore and the writers) need the freeze to come back.
REARMED = ("restorer", "archiver")
#: Seconds a re-armed point stays quiet after it fired.
REARM_QUIET_S = 6.0

TRANSACTION = "stitchlake.table.transaction"
TRANSACTION_CLASS = f"{TRANSACTION}:Transaction"
WRITER = "stitchlake.writing.writer"
COMPACTION = "stitchlake.services.rewrites.compaction"
ERASE = "stitchlake.services.rewrites.erase"
ROLLBACK = "stitchlake.services.undo.rollback"
RESTORE = "stitchlake.services.undo.restore"
RECOVERY = "stitchlake.services.undo.recovery"
ARCHIVE = "stitchlake.services.upkeep.archive"
CLEAN = "stitchlake.services.upkeep.clean"
STORAGES = ("stitchlake.storage:LocalStorage", "stitchlake.storage.s3:S3Storage")  # the table may be on either
#: The code under test whose functions the points wrap, imported before any point is armed, as the hook always did:
#: one the code under test lost fails loudly, and the imports' cost falls before the worker says it is ready.
UNDER_TEST = (
    COMPACTION,
    ERASE,
    ROLLBACK,
    ARCHIVE,
    CLEAN,
    TRANSACTION,
    WRITER,
    "stitchlake.storage",
    "stitchlake.storage.s3",
)


# ================================================================================================ the hook

#: Set while a worker does something its fault must not hit (see `quiet_faults`).
_QUIET: list[bool] = [False]


@contextlib.contextmanager
def quiet_faults() -> Iterator[None]:
    """No fault fires inside: the restorer's first savepoint of a run, without which it has nothing to restore
    (on a loaded machine its faults, nearly always armed, could otherwise stop every first attempt)."""
    _QUIET[0] = True
    try:
        yield
    finally:
        _QUIET[0] = False


def optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def holders(*names: str) -> list[Any]:
    """The modules (or `module:Class`) named that the code under test has: its internals move between versions."""
    found = []
    for name in names:
        module_name, _, class_name = name.partition(":")
        module = optional_module(module_name)
        if module is not None:
            found.append(getattr(module, class_name) if class_name else module)
    return found


def wrap(holder: Any, name: str, make: Callable[[Any], Any]) -> bool:
    """Replace `holder.name` by `make(original)` when the code under test has it (its internals move)."""
    original = getattr(holder, name, None)
    if original is None:
        return False
    setattr(holder, name, make(original))
    return True


#: What a point does when it fires, given the armed fault: `Fault.die`, `Fault.stall`, ...
Action = Callable[["Fault"], None]


class Fault:
    """One armed point in this worker: when it is due (its countdown, its re-arming) and what firing does."""

    def __init__(self, spec: str, log: Callable[[dict[str, Any]], None], stall_s: float, lease_s: float) -> None:
        self.point, _, count = spec.partition(":")
        self.log = log
        self.stall_s = stall_s
        self.lease_s = lease_s
        self.rearm = count.endswith("+")
        self.left = int(count.rstrip("+") or 0)
        self.quiet_until = 0.0
        self.rng = random.Random(os.getpid())

    def due(self) -> bool:
        """Fire on the chosen pass; a re-armed point waits a while first (not every delete of one archive)."""
        if self.left < 0 or time.monotonic() < self.quiet_until or _QUIET[0]:
            return False
        if self.left == 0:
            self.left = self.rng.randint(1, 3) if self.rearm else -1
            self.quiet_until = time.monotonic() + REARM_QUIET_S
            return True
        self.left -= 1
        return False

    def die(self) -> None:
        self.log({"event": "fault", "point": self.point})
        os.kill(os.getpid(), signal.SIGKILL)

    def die_soon(self) -> None:
        """Die a few milliseconds on, wherever the write then is (inside Parquet/Avro bytes being written)."""
        threading.Timer(random.uniform(0.0, 0.004), self.die).start()

    def stall(self, locked: bool = False) -> None:
        """Ask the supervisor for a SIGCONT later, then freeze (heartbeat thread included).

        `locked`: the lock is held here, so the freeze outlives the lease (others take the lock over);
        otherwise it outlives the heartbeat (others presume this process dead).
        """
        seconds = self.lease_s if locked else self.stall_s
        self.log({"event": "stall", "point": self.point, "seconds": seconds, "locked": locked})
        request = {"seconds": seconds, "kind": "lease" if locked else "heartbeat"}
        Path(os.environ[RUN_DIR_ENV], f"{os.getpid()}.stall").write_text(json.dumps(request), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGSTOP)
        self.log({"event": "woke", "point": self.point})
        self.quiet_until = time.monotonic() + REARM_QUIET_S  # not again at once (the next undo or delete)

    def stall_locked(self) -> None:
        self.stall(locked=True)

    def bound(self, action: Action | None) -> Callable[[], None] | None:
        return None if action is None else functools.partial(action, self)


# ========================================================================================== the fault specs


class FaultSpec(Protocol):
    """How one point is armed: which functions of the code under test it wraps, and how."""

    def arm(self, fault: Fault) -> bool:
        """Wrap the point's targets; False when the code under test has none of them."""
        ...


@dataclass(frozen=True)
class Around:
    """Act before a function of the code under test runs, or after it returned (it runs unchanged)."""

    targets: tuple[str, ...]
    name: str
    before: Action | None = None
    after: Action | None = None

    def arm(self, fault: Fault) -> bool:
        before, after = fault.bound(self.before), fault.bound(self.after)

        def make(original: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if before is not None and fault.due():
                    before()
                out = original(*args, **kwargs)
                if after is not None and fault.due():
                    after()
                return out

            return wrapped

        return any([wrap(holder, self.name, make) for holder in holders(*self.targets)])


@dataclass(frozen=True)
class CheckpointWrite:
    """Act before the archive checkpoint is written (the batch is; the lock is held), on either storage."""

    action: Action

    def arm(self, fault: Fault) -> bool:
        act = functools.partial(self.action, fault)

        def make(original: Any) -> Any:
            def wrapped(storage: Any, path: str, *args: Any, **kwargs: Any) -> Any:
                if "archive/checkpoint" in str(path) and fault.due():
                    act()
                return original(storage, path, *args, **kwargs)

            return wrapped

        storages = holders(*STORAGES)
        return any([wrap(storage, name, make) for name in ("put_if_absent", "write_atomic") for storage in storages])


@dataclass(frozen=True)
class StallRollback:
    """Freeze a rollback with its targets chosen and nothing undone yet, when it has something to roll back or
    reset (wherever this version runs it: `run_rollback`, or `_run` in older ones)."""

    def arm(self, fault: Fault) -> bool:
        def make(original: Any) -> Any:
            def stall_then_run(*args: Any, **kwargs: Any) -> Any:
                if (args[2] or args[3]) and fault.due():
                    fault.stall()
                return original(*args, **kwargs)

            return stall_then_run

        armed = []
        for module in holders(ROLLBACK, RECOVERY):
            armed.append(wrap(module, "run_rollback", make))
            if not armed[-1]:
                armed.append(wrap(module, "_run", make))
        return any(armed)


@dataclass(frozen=True)
class HalfCleanDelete:
    """Kill a clean once half of its plan's files are deleted."""

    def arm(self, fault: Fault) -> bool:
        def make_deleter(local_delete: Any) -> Any:
            def deleter(table: Any) -> Callable[[list[str]], int]:
                run = local_delete(table)

                def delete_paths(paths: list[str]) -> int:
                    if paths and fault.due():
                        run(paths[: len(paths) // 2])
                        fault.die()
                    return run(paths)

                return delete_paths

            return deleter

        return any([wrap(module, "local_delete", make_deleter) for module in holders(CLEAN)])


#: Every point, and how it is armed.
FAULT_SPECS: dict[str, FaultSpec] = {
    # the requested instant exists, the heartbeat beats once, the lock is held
    "in_begin": Around((TRANSACTION,), "write_requested", after=Fault.die),
    "after_begin": Around((TRANSACTION,), "write_inflight", after=Fault.die),  # inflight, nothing written yet
    "after_mark": Around((TRANSACTION_CLASS,), "mark", after=Fault.die),  # a marker exists, its data file does not
    # killed while Parquet/Avro bytes are being written
    "mid_write": Around((WRITER, COMPACTION, ERASE), "write_table_file", before=Fault.die_soon),
    # all files written; the table lock is held
    "before_publish": Around((TRANSACTION,), "write_completed", before=Fault.die),
    "after_publish": Around((TRANSACTION,), "write_completed", after=Fault.die),
    "stall_after_mark": Around((TRANSACTION_CLASS,), "mark", after=Fault.stall),
    # about to publish, the lock not taken yet
    "stall_before_publish": Around((TRANSACTION_CLASS,), "complete", before=Fault.stall),
    # the lock is held, the requested instant not created yet
    "stall_locked_begin": Around((TRANSACTION,), "write_requested", before=Fault.stall_locked),
    # the lock is held, checks done, the completed file not created yet
    "stall_locked_publish": Around((TRANSACTION,), "write_completed", before=Fault.stall_locked),
    "stall_rollback": StallRollback(),  # targets chosen, nothing undone yet
    # a failed write's files are gone, its instant files not yet
    "mid_rollback": Around((ROLLBACK,), "delete_instant", before=Fault.die),
    "mid_clean_delete": HalfCleanDelete(),  # half of a clean plan's files deleted
    # A restore's plan is recorded; it undoes its targets one by one (in this process only a restore undoes).
    # Frozen before the first (past the heartbeat: finished by another process while writers go on), or killed
    # after the first (half undone).
    "stall_restore_undo": Around((ROLLBACK, RESTORE), "undo", before=Fault.stall),
    "mid_restore": Around((ROLLBACK, RESTORE), "undo", after=Fault.die),
    "kill_archive_checkpoint": CheckpointWrite(Fault.die),  # the archive batch is written, the checkpoint not
    "stall_archive_checkpoint": CheckpointWrite(Fault.stall_locked),  # the same, frozen past the lease
    # the checkpoint is written, one archived instant deleted, the rest not
    "kill_archive_delete": Around((ARCHIVE,), "delete_instant", after=Fault.die),
    # the checkpoint is written, the lock held, nothing deleted yet
    "stall_archive_delete": Around((ARCHIVE,), "delete_instant", before=Fault.stall_locked),
}


def install_fault(spec: str, log: Callable[[dict[str, Any]], None], stall_s: float, lease_s: float = 0.0) -> bool:
    """Arm one kill (or freeze) point in this worker: `point:countdown` fires on the (countdown+1)-th pass.

    The hook wraps functions of the code under test (it calls them unchanged) and SIGKILLs or SIGSTOPs the
    process at the chosen moment, which no timer could hit reliably. `stall_s` is a freeze past the heartbeat's
    expiry, `lease_s` one past the lock's lease (for points inside a critical section). With `+` after the
    countdown (`point:1+`) a freeze re-arms itself once it has fired. False when nothing could be wrapped: the
    code under test moved, and the point would silently test nothing.
    """
    for name in UNDER_TEST:
        importlib.import_module(name)
    fault = Fault(spec, log, stall_s, lease_s)
    if fault.point not in FAULT_SPECS:
        raise SystemExit(f"unknown fault point {fault.point!r}")
    return FAULT_SPECS[fault.point].arm(fault)
