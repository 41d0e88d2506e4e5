"""The table services' roles: the compactor, the cleaner and the archivers, each what cron would run on a table."""

from __future__ import annotations

import contextlib
import time

from scripts.torture.common import ARCHIVE_KEEP
from scripts.torture.faults import optional_module
from scripts.torture.tablefiles import checkpoint_horizon
from scripts.torture.worker import WorkerBase


class Compactor(WorkerBase):
    """`compactor`: runs the pending plans (other compactors' too), then schedules and runs a new one."""

    def compact(self) -> None:
        from stitchlake.errors import BusyError, ConflictError, NotFoundError
        from stitchlake.services.rewrites import compaction

        # Where the code under test has it, its own guard (a plan undone meanwhile is PlanUndone, exit 3).
        guard = getattr(optional_module("stitchlake.services.rewrites.pending"), "undone_meanwhile", None)
        for plan in compaction.pending_plans(self.table):  # plans other compactors run too: theirs refuse as busy
            try:
                with guard(self.table, plan.requested) if guard else contextlib.nullcontext():
                    result = compaction.run(self.table, plan.requested)
                self.log({"event": "compaction", "instant": result.instant, "resumed": True})
            except BusyError:
                pass
            except (ConflictError, NotFoundError) as exc:
                # Listed a moment ago, gone now: a restore or rollback undid the plan meanwhile. Still pending, it
                # is a real failure.
                if plan.requested in {p.requested for p in compaction.pending_plans(self.table)}:
                    raise
                self.log({"event": "busy", "error": type(exc).__name__, "message": str(exc)[:300]})
        made = compaction.compact(self.table)
        if made is not None:
            self.log({"event": "compaction", "instant": made.instant, "groups": made.file_groups})
        self.nap(0.3, 1.2)


class Cleaner(WorkerBase):
    """`cleaner`: `stitch clean`, the one that finishes what killed processes left."""

    def clean(self) -> None:
        """What `stitch clean` does: roll back failed writes, finish crashed rollbacks and restores, then clean
        (a third of the runs through the real CLI in-process)."""
        if self.rng.random() < 0.3:
            done = self.cli("clean", "-c", self.config, "--engine", "local")
            self.log({"event": "clean", "via": "cli", **{k: done.get(k) for k in ("instant", "rolled_back")}})
        else:
            from stitchlake.services.upkeep.clean import clean

            recovery = optional_module("stitchlake.services.undo.recovery")  # else clean() itself recovers first
            rolled = recovery.rollback_failed(self.table) if recovery is not None else None
            result = clean(self.table)
            self.log(
                {
                    "event": "clean",
                    "instant": result.instant,
                    "deleted": len(result.deleted),
                    "orphans": len(result.orphans),
                    "rolled_back": getattr(rolled or result, "rolled_back", None),
                    "reset": getattr(rolled or result, "reset_compactions", None),
                }
            )
        self.nap(0.5, 1.5)


class Archiver(WorkerBase):
    """`archiver:N`: archives with a keep drawn per run, racing the other archivers; it watches the horizon."""

    def archive(self) -> None:
        """Archive with a keep drawn per run; the even-numbered archivers go through `stitch archive`."""
        keep = self.rng.randint(*ARCHIVE_KEEP)
        t0 = time.time()
        before = checkpoint_horizon(self.table_dir)
        self.observe_horizon(t0, time.time(), before)
        if int(self.role.split(":")[1]) % 2 == 0:
            result = self.cli("archive", "-c", self.config, "--keep", str(keep))
            archived, horizon = result.get("archived"), result.get("horizon")
        else:
            from stitchlake.services.upkeep.archive import archive

            done = archive(self.table, keep)
            archived, horizon = done.archived, done.horizon
        t1 = time.time()
        after = checkpoint_horizon(self.table_dir)
        self.observe_horizon(t1, time.time(), after)
        self.log({"event": "archive", "keep": keep, "archived": archived, "horizon": horizon})
        self.nap(0.3, 1.5)
