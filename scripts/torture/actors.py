"""The actors: one `Worker` process per role (writer, compactor, cleaner, reader, restorer, archiver, eraser)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from scripts.torture.common import (
    ARCHIVE_KEEP,
    CONFIG_NAME,
    FAULT_ENV,
    STOP_FILE,
    STREAMS,
    log_line,
    open_torture_table,
    read_lines,
    staged_files,
    stitch_in_process,
    table_dir,
)
from scripts.torture.faults import install_fault, optional_module, quiet_faults
from scripts.torture.tablefiles import (
    Seen,
    TableFiles,
    checkpoint_horizon,
    instant_meta,
    list_timeline,
    read_checkpoint,
    sources_of,
)

# =============================================================================================== workers


def restore_function() -> Callable[..., Any]:
    """`restore(table, which, force)`: in `services.restore`, or `services.savepoint` in older versions."""
    module = optional_module("stitchlake.services.undo.restore")
    if module is not None and hasattr(module, "restore"):
        return module.restore
    from stitchlake.services.upkeep import savepoint

    return savepoint.restore  # type: ignore[attr-defined]


def ingest_local(table: Any, stream: str) -> Any:
    """One in-process ingest of the stream (`stitch ingest --engine local`), wherever this version keeps it."""
    module = optional_module("stitchlake.ingest")
    if module is not None and hasattr(module, "ingest_local"):
        return module.ingest_local(table, stream)
    from stitchlake.engine import LocalEngine  # type: ignore[import-not-found, unused-ignore]
    from stitchlake.services.writes.ingest import ingest  # type: ignore[import-not-found, unused-ignore]

    return ingest(table, LocalEngine(), stream)


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


class Worker:
    """One role's loop in its own process; it stops at the STOP file or when killed."""

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

    def run(self) -> None:
        fault = os.environ.get(FAULT_ENV)
        if fault and not install_fault(fault, self.log, self.stall_s, self.lease_s):
            message = f"fault point {fault} found nothing to wrap: the code under test moved; update install_fault"
            self.log({"event": "error", "error": "FaultNotArmed", "message": message})
        self.log({"event": "start", "fault": fault})
        (self.work / "run" / f"{os.getpid()}.ready").touch()  # the supervisor's random kills wait for this
        step = {
            "writer": self.ingest,
            "compactor": self.compact,
            "cleaner": self.clean,
            "reader": self.read,
            "restorer": self.restore,
            "archiver": self.archive,
            "eraser": self.erase,
        }[self.kind]
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

    def savepoint_cli(self, verb: str, which: str, *extra: str) -> dict[str, Any]:
        """`stitch savepoint delete|restore --name WHICH`."""
        return self.cli("savepoint", verb, "--name", which, "-c", self.config, "--engine", "local", *extra)

    def observe_horizon(self, t0: float, t1: float, horizon: str | None) -> None:
        """The checkpoint horizon as seen between t0 and t1 (the checker requires it to never move back)."""
        self.log({"event": "horizon", "t0": t0, "t1": t1, "horizon": horizon})

    # -- roles ----------------------------------------------------------------------------------------------

    def ingest(self) -> None:
        stream = self.role.split(":")[1]
        result = ingest_local(self.table, stream)
        if result.instant:
            self.log({"event": "commit", "instant": result.instant, "files": result.source_files})
            self.nap(0.0, 0.15)
        else:
            self.nap(0.05, 0.25)

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

    def savepoints(self) -> list[tuple[Seen, dict[str, Any]]]:
        completed, _pending = list_timeline(self.table_dir)
        found = []
        for seen in completed:
            if seen.action == "savepoint":
                with contextlib.suppress(FileNotFoundError):
                    found.append((seen, instant_meta(self.table_dir, seen)))
        return found

    def make_savepoint(self, name: str, via_cli: bool) -> tuple[Any, Any]:
        """Create savepoint `name` (through the CLI or the API); its instant and the time it pins."""
        if via_cli:
            made = self.cli("savepoint", "create", "-c", self.config, "--name", name, "--engine", "local")
            return made.get("instant"), made.get("savepoint_of")
        from stitchlake.services.upkeep.savepoint import create

        point = create(self.table, None, name)
        return point.instant, point.savepoint_of

    @contextlib.contextmanager
    def unless_gone(self, seen: Seen) -> Iterator[None]:
        """A "no savepoint" answer about a savepoint listed a moment ago is right when it is gone now: a crashed
        restore to an older savepoint, finished meanwhile by a cleaner, undid it (the history check still
        requires a restore, a rollback or a logged delete to name it). Still on the timeline, it is a failure."""
        from stitchlake.errors import NotFoundError, StitchError

        try:
            yield
        except StitchError as exc:
            not_found = isinstance(exc, NotFoundError) or "no savepoint" in str(exc) or "deleted meanwhile" in str(exc)
            if not not_found or any(other == seen for other, _meta in self.savepoints()):
                raise
            self.log({"event": "busy", "error": "SavepointGone", "message": f"{seen.requested} gone meanwhile: {exc}"})

    def restore(self) -> None:
        """Now and then: pin a savepoint, restore to one (undoing whatever came after it), unpin old ones.

        Logs what it deletes before deleting it: a savepoint that vanishes must have a reason on record.
        """
        points = self.savepoints()
        via_cli = self.rng.random() < 0.3
        draw = self.rng.random()
        if points and self.owes("restoring"):
            draw = 0.6  # a restore is owed (DUTIES): try one now rather than hope a later draw gives it
        elif not points or self.owes("savepoint"):
            draw = 0.0
        if len(points) > 2 and not (0.45 <= draw < 0.8):
            seen, meta = points[0]
            which = str(meta.get("name") or seen.requested)
            self.log({"event": "savepoint_delete", "instant": seen.requested, "name": which})
            with self.unless_gone(seen):
                if via_cli:
                    self.savepoint_cli("delete", which)
                else:
                    from stitchlake.services.upkeep.savepoint import delete

                    delete(self.table, which)
        elif draw < 0.45 or not points:
            completed, _pending = list_timeline(self.table_dir)
            if any(s.action == "deltacommit" for s in completed):
                self.done += 1
                name = f"sp{os.getpid()}n{self.done}"
                first = contextlib.nullcontext() if points else quiet_faults()
                with first:
                    instant, of = self.make_savepoint(name, via_cli)
                self.log({"event": "savepoint", "name": name, "instant": instant, "savepoint_of": of})
        elif draw < 0.8:
            seen, meta = self.rng.choice(points)
            which = str(meta.get("name") or seen.requested)
            force = self.rng.random() < 0.5
            self.log({"event": "restoring", "savepoint": which, "of": meta.get("savepoint_of"), "force": force})
            with self.unless_gone(seen):
                if via_cli:
                    done = self.savepoint_cli("restore", which, *(["--force"] if force else []))
                    instant, undone = done.get("instant"), done.get("undone")
                else:
                    result = restore_function()(self.table, which, force)
                    instant, undone = result.instant, result.undone
                self.log({"event": "restore", "instant": instant, "savepoint": which, "undone": undone})
        if points:
            self.nap(0.8, 2.0)
        else:
            self.nap(0.1, 0.3)  # keep trying for a first savepoint: a loaded machine leaves few chances per round

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

    def erase(self) -> None:
        """Erase one to three keys of a landed orders file (`stitch delete --keys` a third of the time, in-process,
        else the service), while the writers may be writing them: the oracle drops their events committed before
        the erase and keeps those committed after it. Logs the keys before and the instant after."""
        import pyarrow as pa

        landed = [self.work / "landing" / "orders" / p.name for p in staged_files(self.work, "orders")]
        landed = [p for p in landed if p.exists()]  # landed so far: keys the table may hold
        if not landed:
            self.nap(0.2, 0.5)
            return
        # Keys of a file the table took already, when there is one: it holds them, so a read right after the erase
        # sees them gone (a file not taken yet is ingested after the erase, and its keys come back at once).
        taken = (consumed_on_disk(self.table_dir) or {}).get("orders", set())
        landed = [p for p in landed if p.name in taken] or landed
        ids = pq.read_table(self.rng.choice(landed), columns=["order_id"]).column("order_id").to_pylist()
        keys = sorted(set(self.rng.sample(ids, min(len(ids), self.rng.randint(1, 3)))))
        self.done += 1
        path = self.work / "erase-keys" / f"{os.getpid()}-{self.done}.parquet"
        path.parent.mkdir(exist_ok=True)
        wanted = pa.table({"order_id": pa.array(keys, pa.int64())})
        pq.write_table(wanted, path)
        self.log({"event": "erasing", "keys": keys, "file": path.name})
        if self.rng.random() < 0.3:
            done = self.cli("delete", "-c", self.config, "--keys", str(path), "--engine", "local")
            instant, erased = done.get("instant"), done.get("erased_keys")
        else:
            from stitchlake.services.rewrites.erase import erase

            result = erase(self.table, wanted)
            instant, erased = result.instant, result.erased_keys
        self.log({"event": "erase", "instant": instant, "keys": keys, "erased": erased})
        self.nap(0.5, 1.5)

    def snapshot(self) -> dict[str, Any] | None:
        """The completed instants, the checkpoint, and the active deltacommits past it, as one state.

        Listing first, then the checkpoint: an archive in between only moves instants from the listing into
        the checkpoint (its consumed files are a superset). A metadata file that vanished (archived, undone)
        means the state moved on: look again.
        """
        for _attempt in range(8):
            t0 = time.time()
            try:
                completed, _pending = list_timeline(self.table_dir)
                checkpoint = read_checkpoint(self.table_dir)
                horizon = checkpoint.horizon if checkpoint else ""
                metas = {
                    s.requested: instant_meta(self.table_dir, s)
                    for s in completed
                    if s.action == "deltacommit" and s.completed > horizon
                }
            except FileNotFoundError:
                continue
            return {
                "t0": t0,
                "t1": time.time(),
                "completed": completed,
                "horizon": horizon,
                "checkpoint_consumed": checkpoint.consumed if checkpoint else {},
                "metas": metas,
            }
        return None

    def read(self) -> None:
        """Read as of a completion time (usually the latest) and record the state that snapshot has."""
        snap = self.snapshot()
        done = [s for s in snap["completed"] if s.completed > snap["horizon"]] if snap else []
        if snap is None or not done:
            self.nap(0.1, 0.3)
            return
        self.observe_horizon(snap["t0"], snap["t1"], snap["horizon"] or None)
        draw = self.rng.random()
        mode = "latest" if draw < 0.6 else "past" if draw < 0.8 else "current"
        as_of = None
        if mode == "latest":
            as_of = done[-1].completed
        elif mode == "past":
            as_of = self.rng.choice(done).completed
        until = as_of or done[-1].completed
        visible = [
            {
                "requested": requested,
                "completed": seen.completed,
                "stream": meta.get("stream"),
                "sources": sources_of(meta),
            }
            for seen in done
            if seen.action == "deltacommit" and seen.completed <= until
            for requested, meta in [(seen.requested, snap["metas"][seen.requested])]
        ]
        self.done += 1
        name = f"{self.role.replace(':', '-')}-{os.getpid()}-{self.done:05d}"
        record: dict[str, Any] = {
            "name": name,
            "mode": mode,
            "as_of": as_of,
            "until": until,
            "horizon": snap["horizon"],
            "checkpoint_consumed": snap["checkpoint_consumed"],
            "visible": visible,
            "snapshot": [s.key() for s in snap["completed"]],
            "t0": snap["t0"],
            "t1": snap["t1"],
            "error": None,
        }
        try:
            data = self.table.read(as_of=as_of)
        except Exception as exc:
            record["error"] = {"type": type(exc).__name__, "message": str(exc)}
        else:
            moved = self.moved(snap, as_of)
            if moved == "current-moved":
                record["mode"] = moved
            record["moved"] = moved
            pq.write_table(data, self.work / "reads" / f"{name}.parquet")
            record["rows"] = data.num_rows
        path = self.work / "reads" / f"{name}.json"
        path.with_suffix(".tmp").write_text(json.dumps(record), encoding="utf-8")
        os.replace(path.with_suffix(".tmp"), path)
        self.nap(0.05, 0.3)

    def moved(self, snap: dict[str, Any], as_of: str | None) -> str | None:
        """Whether the state read may differ from the recorded one, and why (None: it is the recorded one).

        A restore undoes completed deltacommits "in the past", so even a read as of a fixed time may see fewer
        of them than the listing before it did; without as_of, a deltacommit completed meanwhile counts too.
        Archiving moves instants into the checkpoint and changes nothing.
        """
        after = self.snapshot()
        if after is None:
            return "undone during the read"
        changes = ("deltacommit", "erase")
        before = [s for s in snap["completed"] if s.action in changes and (as_of is None or s.completed <= as_of)]
        now = {s.requested for s in after["completed"] if s.action in changes}
        if any(s.completed > after["horizon"] and s.requested not in now for s in before):
            return "undone during the read"
        if as_of is None and now - {s.requested for s in snap["completed"]}:
            return "current-moved"
        return None


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.torture _worker")
    parser.add_argument("--role", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    Worker(args.role, Path(args.workdir), args.seed).run()
    return 0
