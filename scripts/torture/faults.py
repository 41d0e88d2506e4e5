"""The fault hook: kills and freezes at precise points, wrapped around (never replacing) the code under test."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


# ============================================================================================ fault hook


#: Whether each `_wrap` of the fault being installed found its target (see `install_fault`).
_ARMED: list[bool] = []
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


def _wrap(module: Any, name: str, make: Callable[[Any], Any]) -> bool:
    """Replace `module.name` by `make(original)` when the code under test has it (its internals move)."""
    original = getattr(module, name, None)
    _ARMED.append(original is not None)
    if original is None:
        return False
    setattr(module, name, make(original))
    return True


def optional_module(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def install_fault(spec: str, log: Callable[[dict[str, Any]], None], stall_s: float, lease_s: float = 0.0) -> bool:
    """Arm one kill (or freeze) point in this worker: `point:countdown` fires on the (countdown+1)-th pass.

    The hook wraps functions of the code under test (it calls them unchanged) and SIGKILLs or SIGSTOPs the
    process at the chosen moment, which no timer could hit reliably. `stall_s` is a freeze past the heartbeat's
    expiry, `lease_s` one past the lock's lease (for points inside a critical section). With `+` after the
    countdown (`point:1+`) a freeze re-arms itself once it has fired. False when nothing could be wrapped: the
    code under test moved, and the point would silently test nothing.
    """
    import stitchlake.services.rewrites.compaction as compaction_module
    import stitchlake.services.rewrites.erase as erase_module
    import stitchlake.services.undo.rollback as rollback_module
    import stitchlake.services.upkeep.archive as archive_module
    import stitchlake.services.upkeep.clean as clean_module
    import stitchlake.table.transaction as txn_module
    import stitchlake.writing.writer as write_module
    from stitchlake.storage import LocalStorage
    from stitchlake.storage.s3 import S3Storage

    _ARMED.clear()
    point, _, count = spec.partition(":")
    rearm = count.endswith("+")
    left = [int(count.rstrip("+") or 0)]
    quiet_until = [0.0]
    rng = random.Random(os.getpid())

    def due() -> bool:
        """Fire on the chosen pass; a re-armed point waits a while first (not every delete of one archive)."""
        if left[0] < 0 or time.monotonic() < quiet_until[0] or _QUIET[0]:
            return False
        if left[0] == 0:
            left[0] = rng.randint(1, 3) if rearm else -1
            quiet_until[0] = time.monotonic() + REARM_QUIET_S
            return True
        left[0] -= 1
        return False

    def die() -> None:
        log({"event": "fault", "point": point})
        os.kill(os.getpid(), signal.SIGKILL)

    def stall(locked: bool = False) -> None:
        """Ask the supervisor for a SIGCONT later, then freeze (heartbeat thread included).

        `locked`: the lock is held here, so the freeze outlives the lease (others take the lock over);
        otherwise it outlives the heartbeat (others presume this process dead).
        """
        seconds = lease_s if locked else stall_s
        log({"event": "stall", "point": point, "seconds": seconds, "locked": locked})
        request = {"seconds": seconds, "kind": "lease" if locked else "heartbeat"}
        Path(os.environ[RUN_DIR_ENV], f"{os.getpid()}.stall").write_text(json.dumps(request), encoding="utf-8")
        os.kill(os.getpid(), signal.SIGSTOP)
        log({"event": "woke", "point": point})
        quiet_until[0] = time.monotonic() + REARM_QUIET_S  # not again at once (the next undo or delete)

    def around(before: Callable[[], None] | None = None, after: Callable[[], None] | None = None) -> Any:
        def make(original: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if before is not None and due():
                    before()
                out = original(*args, **kwargs)
                if after is not None and due():
                    after()
                return out

            return wrapped

        return make

    def checkpoint_write(action: Callable[[], None]) -> None:
        """Before the archive checkpoint is written (the batch is; the lock is held): act."""
        for name in ("put_if_absent", "write_atomic"):

            def make(original: Any) -> Any:
                def wrapped(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
                    if "archive/checkpoint" in str(path) and due():
                        action()
                    return original(self, path, *args, **kwargs)

                return wrapped

            for storage_class in (LocalStorage, S3Storage):  # the table may be on either
                _wrap(storage_class, name, make)

    if point == "in_begin":  # the requested instant exists, the heartbeat beats once, the lock is held
        _wrap(txn_module, "write_requested", around(after=die))
    elif point == "after_begin":  # inflight, nothing written yet
        _wrap(txn_module, "write_inflight", around(after=die))
    elif point == "after_mark":  # a marker exists, its data file does not
        _wrap(txn_module.Transaction, "mark", around(after=die))
    elif point == "mid_write":  # killed while Parquet/Avro bytes are being written
        for module in (write_module, compaction_module, erase_module):

            def late_death() -> None:
                threading.Timer(random.uniform(0.0, 0.004), die).start()

            _wrap(module, "write_table_file", around(before=late_death))
    elif point in ("before_publish", "after_publish"):  # all files written; the table lock is held
        hook = around(before=die) if point == "before_publish" else around(after=die)
        _wrap(txn_module, "write_completed", hook)
    elif point == "stall_after_mark":
        _wrap(txn_module.Transaction, "mark", around(after=stall))
    elif point == "stall_before_publish":  # about to publish, the lock not taken yet
        _wrap(txn_module.Transaction, "complete", around(before=stall))
    elif point == "stall_locked_begin":  # the lock is held, the requested instant not created yet
        _wrap(txn_module, "write_requested", around(before=lambda: stall(locked=True)))
    elif point == "stall_locked_publish":  # the lock is held, checks done, the completed file not created yet
        _wrap(txn_module, "write_completed", around(before=lambda: stall(locked=True)))
    elif point == "stall_rollback":  # targets chosen, nothing undone yet

        def make_run(original: Any) -> Any:
            def stall_then_run(*args: Any, **kwargs: Any) -> Any:
                if (args[2] or args[3]) and due():  # only when there is something to roll back or reset
                    stall()
                return original(*args, **kwargs)

            return stall_then_run

        for module in (rollback_module, optional_module("stitchlake.services.undo.recovery")):
            if module is not None and not _wrap(module, "run_rollback", make_run):
                _wrap(module, "_run", make_run)
    elif point == "mid_rollback":  # a failed write's files are gone, its instant files not yet
        _wrap(rollback_module, "delete_instant", around(before=die))
    elif point == "mid_clean_delete":  # half of a clean plan's files deleted

        def make_deleter(local_delete: Any) -> Any:
            def deleter(table: Any) -> Callable[[list[str]], int]:
                run = local_delete(table)

                def delete_paths(paths: list[str]) -> int:
                    if paths and due():
                        run(paths[: len(paths) // 2])
                        die()
                    return run(paths)

                return delete_paths

            return deleter

        _wrap(clean_module, "local_delete", make_deleter)
    elif point in ("stall_restore_undo", "mid_restore"):
        # A restore's plan is recorded; it undoes its targets one by one (in this process only a restore
        # undoes). Frozen before the first (past the heartbeat: finished by another process while writers
        # go on), or killed after the first (half undone).
        hook = around(before=stall) if point == "stall_restore_undo" else around(after=die)
        for module in (rollback_module, optional_module("stitchlake.services.undo.restore")):
            if module is not None:
                _wrap(module, "undo", hook)
    elif point == "kill_archive_checkpoint":  # the archive batch is written, the checkpoint not
        checkpoint_write(die)
    elif point == "stall_archive_checkpoint":  # the same, frozen past the lease with the lock held
        checkpoint_write(lambda: stall(locked=True))
    elif point == "kill_archive_delete":  # the checkpoint is written, one archived instant deleted, the rest not
        _wrap(archive_module, "delete_instant", around(after=die))
    elif point == "stall_archive_delete":  # the checkpoint is written, the lock held, nothing deleted yet
        _wrap(archive_module, "delete_instant", around(before=lambda: stall(locked=True)))
    else:
        raise SystemExit(f"unknown fault point {point!r}")
    return any(_ARMED)
