"""Torture test: concurrent writers and table services on one table, killed and frozen at random, every read checked.

    python -m scripts.torture --rounds 50 --seed 7            # the long run by hand (`make torture`)
    python -m scripts.torture --rounds 7 --keys 600 --writers-per-stream 2    # CI-sized (tests/test_torture.py)
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
  of them race and the one with the smaller keep goes further).

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
  archive checkpoint's consumed files plus the active deltacommits), that set of instants is the one the final
  timeline has at that time except the ones a rollback or restore names as undone, and it is a state that
  existed: per stream, a prefix of the files in arrival order;
- the final table (snapshot, and read-optimized once compacted) equals the generator's ground truth and the
  reference merge of the live instants (active and archived, minus undone ones); every landing file was
  consumed exactly once by them, and in arrival order;
- the timeline and checkpoint never lose an instant: every instant ever observed completed is still on the
  active timeline, or archived under the checkpoint's horizon, or named by a rollback or restore that undid it
  (or was a savepoint the restorer deleted); no archived instant lies beyond the horizon unless still active;
  the checkpoint's consumed files are those of the live instants it covers; the horizon never moved backwards;
- no pending instant, no orphan or missing data file, no leftover marker, and no worker failed other than
  "busy/conflict, retry" or a zombie's refusal to publish.

The run leaves nothing to chance that the check relies on: the last round lasts until every kind of actor did its
work at least once (DUTIES: a commit, a clean, a savepoint made and a restore tried, an archive, horizons seen), the
restorer tries what it still owes first, and a kill is forced if chance gave none during the rounds. A round that
makes no progress for `--round-timeout` seconds is given up and reported (a machine too busy, or a hang): it says the
run tortured less than asked, not that the table broke, so it is not a violation.

It prints rounds, kills, freezes, commits, reads checked and violations; the exit code is 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from scripts import ROOT, child_env, demo_data, module_argv

STREAMS = demo_data.STREAMS
EXTENSION = demo_data.EXTENSION
CONFIG_NAME = "torture.yaml"
MAX_SHOWN = 25
STOP_FILE = "STOP"
FAULT_ENV = "STITCH_TORTURE_FAULT"
RUN_DIR_ENV = "STITCH_TORTURE_RUN_DIR"
OBSERVED_LOG = "observed.jsonl"
HORIZONS_LOG = "horizons.jsonl"
#: What `Transaction.complete` says to a writer that was presumed dead and rolled back while it ran: correct.
ZOMBIE_REFUSED = "while it ran; nothing was published"
#: Archive keeps drawn per run: the smallest is the config's minimum (`archive.keep_instants` >= 10).
ARCHIVE_KEEP = (10, 16)
#: Where the supervisor may kill each role on purpose (see `install_fault`).
#: `stall_*` points freeze the process (SIGSTOP) past its heartbeat's expiry instead: it becomes a zombie that
#: the others presume dead, and it carries on when the supervisor wakes it. `stall_locked_*` and
#: `stall_archive_*` freeze it while it holds the table lock, past the lock's lease.
LOCKED_STALLS = ("stall_locked_begin", "stall_locked_publish")
FAULT_POINTS: dict[str, tuple[str, ...]] = {
    "writer": (
        *("in_begin", "after_begin", "after_mark", "mid_write", "before_publish", "after_publish"),
        *("stall_after_mark", "stall_before_publish", *LOCKED_STALLS),
    ),
    "compactor": (
        *("in_begin", "after_begin", "after_mark", "mid_write", "before_publish", "after_publish"),
        *("stall_after_mark", "stall_before_publish", *LOCKED_STALLS),
    ),
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
#: What each kind of actor must have logged at least once before the storm may end (`Supervisor.owed`): a run in
#: which chance gave a kind nothing to do tortured less than it says. The restorer is steered towards what it
#: still owes (`Worker.restore`), and the last round lasts until every duty is done.
DUTIES: dict[str, tuple[str, ...]] = {
    "writer": ("commit",),
    "cleaner": ("clean",),
    "restorer": ("savepoint", "restoring"),
    "archiver": ("archive", "horizon"),
    "reader": ("horizon",),
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


# ================================================================================= the table's own files

# The checker reads the timeline, the archive and the checkpoint from their files (design.md §4), not through
# stitchlake's timeline classes: a checker that shared the code under test would share its bugs.

TIMELINE_DIR = ".stitch/timeline"
ARCHIVE_DIR = f"{TIMELINE_DIR}/archive"
LEGACY_CHECKPOINT = "checkpoint.json"
_PENDING_NAME = re.compile(r"^(\d{17})\.([a-z]+)\.(requested|inflight)$")
_COMPLETED_NAME = re.compile(r"^(\d{17})_(\d{17})\.([a-z]+)$")
_CHECKPOINT_NAME = re.compile(r"^checkpoint\.(\d{17})\.json$")
#: A completed compaction's file is `<requested>_<completed>.commit`, as in Hudi.
_COMPLETED_ACTION = {"commit": "compaction"}
DATA_ACTIONS = ("deltacommit", "compaction", "erase")


@dataclass(frozen=True, order=True)
class Seen:
    """A completed instant as its file name says: (requested, action, completed)."""

    requested: str
    action: str
    completed: str

    def key(self) -> list[str]:
        return [self.requested, self.action, self.completed]

    @property
    def file_name(self) -> str:
        suffix = {v: k for k, v in _COMPLETED_ACTION.items()}.get(self.action, self.action)
        return f"{self.requested}_{self.completed}.{suffix}"

    def __str__(self) -> str:
        return f"{self.action} {self.requested} (completed {self.completed})"


def parse_timeline(names: Iterable[str]) -> tuple[list[Seen], list[tuple[str, str, str]]]:
    """(completed instants by completion time, pending ones as (requested, action, state)) from file names."""
    completed: dict[str, Seen] = {}
    pending: dict[str, tuple[str, str, str]] = {}
    for name in names:
        match = _COMPLETED_NAME.match(name)
        if match:
            action = _COMPLETED_ACTION.get(match.group(3), match.group(3))
            completed[match.group(1)] = Seen(match.group(1), action, match.group(2))
            continue
        match = _PENDING_NAME.match(name)
        if match:
            known = pending.get(match.group(1))
            if known is None or match.group(3) == "inflight":
                pending[match.group(1)] = (match.group(1), match.group(2), match.group(3))
    out = sorted(completed.values(), key=lambda s: s.completed)
    return out, [p for r, p in sorted(pending.items()) if r not in completed]


class TableFiles:
    """The table's own files, on local disk or S3, as names and bytes: the one way the checker reaches them.

    It goes through stitchlake's `Storage` for the bytes (the object-store client), never through its timeline,
    archive or view classes."""

    def __init__(self, uri: str) -> None:
        from stitchlake.storage.registry import storage_for

        self.uri = uri
        self.storage = storage_for(uri)

    def names(self, folder: str) -> list[str]:
        """The names in `folder` (FileNotFoundError when it does not exist, as `os.listdir`)."""
        found = self.storage.list_names(folder)
        if not found and not self.storage.list_names(folder.rsplit("/", 1)[0] if "/" in folder else ""):
            raise FileNotFoundError(folder)
        return found

    def read_json(self, path: str) -> dict[str, Any]:
        """A metadata file's JSON object (FileNotFoundError when it is gone: archived, undone, tidied)."""
        content = json.loads(self.storage.read_bytes(path) or b"{}")
        return content if isinstance(content, dict) else {}

    def read_text(self, path: str) -> str:
        return self.storage.read_bytes(path).decode("utf-8")

    def __str__(self) -> str:
        return self.uri


def list_timeline(table: TableFiles) -> tuple[list[Seen], list[tuple[str, str, str]]]:
    return parse_timeline(table.names(TIMELINE_DIR))


def instant_meta(table: TableFiles, seen: Seen) -> dict[str, Any]:
    return table.read_json(f"{TIMELINE_DIR}/{seen.file_name}")


def plan_of(table: TableFiles, requested: str, action: str) -> dict[str, Any]:
    """A (pending or completed) instant's requested file, or {} once it is gone (archived)."""
    try:
        return table.read_json(f"{TIMELINE_DIR}/{requested}.{action}.requested")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def sources_of(meta: dict[str, Any]) -> list[str]:
    """Landing files a deltacommit consumed (sources, and whole files it quarantined)."""
    names = [s["name"] if isinstance(s, dict) else str(s) for s in meta.get("sources") or []]
    names += [q["name"] for q in meta.get("quarantined_files") or [] if isinstance(q, dict) and q.get("name")]
    return names


@dataclass(frozen=True)
class CheckpointState:
    """The effective archive checkpoint: the newest immutable `checkpoint.<horizon>.json`, else the legacy one."""

    horizon: str
    consumed: dict[str, list[str]]
    files: list[str]


def checkpoint_horizon(table: TableFiles) -> str | None:
    """The effective horizon from the archive folder (reads the legacy checkpoint only when it is the one)."""
    folder = ARCHIVE_DIR
    try:
        names = table.names(folder)
    except FileNotFoundError:
        return None
    horizons = sorted(m.group(1) for m in map(_CHECKPOINT_NAME.match, names) if m)
    if horizons:
        return horizons[-1]
    if LEGACY_CHECKPOINT in names:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            return str(table.read_json(f"{folder}/{LEGACY_CHECKPOINT}").get("completed") or "") or None
    return None


def read_checkpoint(table: TableFiles) -> CheckpointState | None:
    """The effective checkpoint's horizon, consumed landing files and files (None: nothing archived)."""
    folder = ARCHIVE_DIR
    for _attempt in range(5):  # a newer archive may tidy the listed checkpoint away between listing and reading
        try:
            names = table.names(folder)
        except FileNotFoundError:
            return None
        horizons = sorted(m.group(1) for m in map(_CHECKPOINT_NAME.match, names) if m)
        path = f"{folder}/" + (f"checkpoint.{horizons[-1]}.json" if horizons else LEGACY_CHECKPOINT)
        if not horizons and LEGACY_CHECKPOINT not in names:
            return None
        try:
            content = table.read_json(path)
        except FileNotFoundError:
            continue
        consumed = {
            stream: [item["name"] if isinstance(item, dict) else str(item) for item in items]
            for stream, items in (content.get("consumed") or {}).items()
        }
        files = [f["path"] for f in content.get("files") or [] if isinstance(f, dict)]
        return CheckpointState(str(content.get("completed") or ""), consumed, files)
    raise FileNotFoundError(f"{folder}: the newest checkpoint keeps vanishing")


def archived_entries(table: TableFiles) -> dict[str, tuple[Seen, dict[str, Any], str]]:
    """Archived instants: requested -> (instant, its commit metadata, the batch file holding it)."""
    found: dict[str, tuple[Seen, dict[str, Any], str]] = {}
    try:
        names = table.names(ARCHIVE_DIR)
    except FileNotFoundError:
        return found
    for name in sorted(n for n in names if n.endswith(".archive.jsonl")):
        for line in table.read_text(f"{ARCHIVE_DIR}/{name}").splitlines():
            with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                entry = json.loads(line)
                seen = Seen(entry["requested"], entry["action"], entry["completed"])
                found[seen.requested] = (seen, entry.get("metadata") or {}, name)
    return found


def undone_by(meta: dict[str, Any]) -> list[str]:
    """The instants a rollback's or restore's commit (or plan) names as undone."""
    names = [str(r) for r in meta.get("undone") or []] + [str(r) for r in meta.get("rolled_back") or []]
    names += [str(t["requested"]) for t in meta.get("targets") or [] if isinstance(t, dict) and "requested" in t]
    return names


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
    restorers: int = 0
    archivers: int = 0
    #: concurrency.mode: lock_free (one live writer per stream) or optimistic (writers of a stream run at once)
    mode: str = "lock_free"


def write_config(settings: Settings) -> Path:
    """The demo table's streams (what the ground truth models), with short heartbeats and lock leases."""
    work = Path(settings.workdir)
    document = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    # Paths relative to the config's folder where possible, so a copied workdir is a self-contained case.
    table = Path(settings.table)
    if "://" in settings.table:  # an object store: the table is where it is
        location = settings.table
    else:
        location = str(table.relative_to(work)) if table.is_relative_to(work) else str(table)
    document["table"].update(
        name="torture_wide", path=location, buckets=settings.buckets, log_format=settings.log_format
    )
    for stream in STREAMS:
        document["streams"][stream]["source"]["path"] = f"landing/{stream}"
    document["concurrency"] = {
        "mode": settings.mode,
        "lock": {"provider": "filesystem", "wait_s": 60, "expire_s": settings.lock_expire},
        "heartbeat": {"interval_s": settings.heartbeat_interval, "expire_s": settings.heartbeat_expire},
    }
    document["compaction"] = {"inline": False, "strategy": "all"}
    document["clean"] = {"policy": "keep_latest_commits", "retain": settings.retain}
    document["archive"] = {"keep_instants": ARCHIVE_KEEP[0]}
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
    subprocess.run(stitch("init", "-c", str(config)), check=True, capture_output=True, env=child_env())


def load_settings(work: Path) -> Settings:
    return Settings(**json.loads((work / "settings.json").read_text(encoding="utf-8")))


def table_dir(work: Path) -> TableFiles:
    """The table's files; a table folder inside the workdir moves with it (a copied workdir is a self-contained
    case); an `s3://` table is where it is."""
    settings = load_settings(work)
    if "://" in settings.table:
        return TableFiles(settings.table)
    table, origin = Path(settings.table), Path(settings.workdir)
    return TableFiles(str(work / table.relative_to(origin) if table.is_relative_to(origin) else table))


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
    return [sys.executable, "-m", "stitchlake", *args]


def stitch_in_process(*args: str) -> tuple[int, str, str]:
    """Run the real `stitch` CLI inside this process (so the fault hook and the freezes reach it too):
    (exit code, stdout, stderr)."""
    from stitchlake.cli.app import app  # type: ignore[attr-defined, unused-ignore]

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = app(args=list(args), prog_name="stitch", standalone_mode=False)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # click's (or typer's own copy's) usage error: the console script exits 2
            if not hasattr(exc, "format_message"):
                raise
            code = getattr(exc, "exit_code", 2)
            print(f"error: {exc.format_message()}", file=sys.stderr)
    return (code if isinstance(code, int) else 0), out.getvalue(), err.getvalue()


def open_torture_table(work: Path) -> Any:
    """The table through the public API (`stitchlake.open`: read, write, and what services take)."""
    import stitchlake

    return stitchlake.open(work / CONFIG_NAME)


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


def _optional_module(name: str) -> Any:
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
        for module in (write_module, compaction_module):

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

        for module in (rollback_module, _optional_module("stitchlake.services.undo.recovery")):
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
        for module in (rollback_module, _optional_module("stitchlake.services.undo.restore")):
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


# =============================================================================================== workers


def restore_function() -> Callable[..., Any]:
    """`restore(table, which, force)`: in `services.restore`, or `services.savepoint` in older versions."""
    module = _optional_module("stitchlake.services.undo.restore")
    if module is not None and hasattr(module, "restore"):
        return module.restore
    from stitchlake.services.upkeep import savepoint

    return savepoint.restore  # type: ignore[attr-defined]


def ingest_local(table: Any, stream: str) -> Any:
    """One in-process ingest of the stream (`stitch ingest --engine local`), wherever this version keeps it."""
    module = _optional_module("stitchlake.ingest")
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
        }[self.kind]
        while not self.stopping():
            try:
                step()
            except Exception as exc:
                self.failed(exc)
        self.log({"event": "stop"})

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
        from stitchlake.errors import BusyError, NotFoundError
        from stitchlake.services.rewrites import compaction

        for plan in compaction.pending_plans(self.table):
            try:
                result = compaction.run(self.table, plan.requested)
                self.log({"event": "compaction", "instant": result.instant, "resumed": True})
            except BusyError:
                pass
            except NotFoundError:
                # Listed a moment ago, gone now: a restore or rollback undid the plan meanwhile (what the
                # message says). Still pending, it is a real failure.
                if plan.requested in {p.requested for p in compaction.pending_plans(self.table)}:
                    raise
                self.log({"event": "busy", "error": "PlanGone", "message": f"{plan.requested} undone meanwhile"})
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

            recovery = _optional_module("stitchlake.services.undo.recovery")  # else clean() itself recovers first
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
        before = [s for s in snap["completed"] if s.action == "deltacommit" and (as_of is None or s.completed <= as_of)]
        now = {s.requested for s in after["completed"] if s.action == "deltacommit"}
        if any(s.completed > after["horizon"] and s.requested not in now for s in before):
            return "undone during the read"
        if as_of is None and now - {s.requested for s in snap["completed"]}:
            return "current-moved"
        return None


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
    Watcher(work, table_dir(work)).poll(0.0)  # one more look (its lines only add observations)
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


@dataclass
class History:
    """The final timeline, archive and checkpoint as their files say, and which instants were undone."""

    table: TableFiles
    active: dict[str, Seen]
    active_meta: dict[str, dict[str, Any]]
    pending: list[tuple[str, str, str]]
    archived: dict[str, tuple[Seen, dict[str, Any], str]]
    checkpoint: CheckpointState | None
    #: requested -> the rollback or restore (completed, or pending with its plan) that names it undone.
    undone: dict[str, str]

    @classmethod
    def load(cls, table: TableFiles) -> History:
        completed, pending = list_timeline(table)
        active = {s.requested: s for s in completed}
        metas = {s.requested: instant_meta(table, s) for s in completed}
        archived = archived_entries(table)
        undone: dict[str, str] = {}
        for seen, meta in [*((active[r], m) for r, m in metas.items()), *((s, m) for s, m, _b in archived.values())]:
            if seen.action in ("rollback", "restore"):
                undone.update(dict.fromkeys(undone_by(meta), str(seen)))
        for requested, action, state in pending:
            if action in ("rollback", "restore"):
                undone.update(
                    dict.fromkeys(undone_by(plan_of(table, requested, action)), f"{action} {requested} ({state})")
                )
        return cls(table, active, metas, pending, archived, read_checkpoint(table), undone)

    @property
    def horizon(self) -> str:
        return self.checkpoint.horizon if self.checkpoint else ""

    def meta(self, requested: str) -> dict[str, Any]:
        if requested in self.active_meta:
            return self.active_meta[requested]
        return self.archived[requested][1] if requested in self.archived else {}

    def live(self) -> dict[str, Seen]:
        """Completed instants on the active timeline or in the archive that nothing undid."""
        found = {r: entry[0] for r, entry in self.archived.items()}
        found.update(self.active)
        return {r: s for r, s in found.items() if r not in self.undone}

    def live_deltacommits(self) -> list[tuple[Seen, dict[str, Any]]]:
        chosen = [s for s in self.live().values() if s.action == "deltacommit"]
        return [(s, self.meta(s.requested)) for s in sorted(chosen, key=lambda s: s.completed)]

    def consumed(self) -> dict[str, list[str]]:
        """Landing files the live deltacommits consumed, per stream (a name twice means ingested twice)."""
        out: dict[str, list[str]] = {s: [] for s in STREAMS}
        for _seen, meta in self.live_deltacommits():
            out.setdefault(str(meta.get("stream")), []).extend(sources_of(meta))
        return out


@dataclass
class Observations:
    """What the supervisor, the readers and the archivers saw while the run went on."""

    #: instant -> when it was first seen completed (epoch seconds) and by whom.
    instants: dict[Seen, tuple[float, str]] = field(default_factory=dict)
    #: (t0, t1, horizon or "", who): the effective checkpoint horizon somewhere in [t0, t1].
    horizons: list[tuple[float, float, str, str]] = field(default_factory=list)
    #: Savepoints the restorer set out to delete (they may vanish with no instant naming them).
    deleted_savepoints: set[str] = field(default_factory=set)

    def saw(self, key: list[str], t: float, who: str) -> None:
        seen = Seen(*key)
        if seen not in self.instants or t < self.instants[seen][0]:
            self.instants[seen] = (t, who)

    @classmethod
    def load(cls, work: Path) -> Observations:
        found = cls()
        for record in read_lines(work / "logs" / OBSERVED_LOG):
            for key in record.get("instants", []):
                found.saw(key, record["t1"], "supervisor")
        for record in read_lines(work / "logs" / HORIZONS_LOG):
            found.horizons.append((record["t0"], record["t1"], record.get("horizon") or "", "supervisor"))
        for path in sorted((work / "logs").glob("*.jsonl")):
            if path.name in (OBSERVED_LOG, HORIZONS_LOG):
                continue
            for record in read_lines(path):
                who = f"{record.get('role')} (pid {record.get('pid')})"
                if record.get("event") == "horizon":
                    found.horizons.append((record["t0"], record["t1"], record.get("horizon") or "", who))
                elif record.get("event") == "savepoint_delete":
                    found.deleted_savepoints.add(str(record.get("instant")))
        for path in sorted((work / "reads").glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            for key in record.get("snapshot", []):
                found.saw(key, record.get("t1", 0.0), f"read {record['name']}")
        return found

    def latest_horizon(self) -> str:
        return max((h for _t0, _t1, h, _who in self.horizons), default="")


def check_history(work: Path, history: History, seen: Observations, report: Report) -> None:
    """The timeline and the checkpoint never lose an instant, and the horizon never moves backwards."""
    horizon = history.horizon

    def excused(instant: Seen) -> bool:
        """Undone by a rollback or restore that names it, or a savepoint the restorer set out to delete."""
        deleted = instant.action == "savepoint" and instant.requested in seen.deleted_savepoints
        return instant.requested in history.undone or deleted

    for instant, (when, who) in sorted(seen.instants.items(), key=lambda item: item[1][0]):
        first = f"seen completed at {time.strftime('%H:%M:%S', time.localtime(when))} by {who}"
        now = history.active.get(instant.requested)
        archived = history.archived.get(instant.requested)
        if now is not None:
            if now != instant:
                report.violations.append(f"{instant}, {first}, is on the final timeline as {now}")
        elif archived is not None:
            if archived[0] != instant:
                report.violations.append(f"{instant}, {first}, is archived as {archived[0]}")
        elif not excused(instant):
            report.violations.append(
                f"{instant}, {first}, vanished: it is neither on the active timeline nor archived, and no "
                f"rollback or restore names it (archive horizon {horizon or '-'})"
            )
    for requested, (instant, _meta, batch) in sorted(history.archived.items()):
        if requested in history.active or requested in history.undone or instant.completed <= horizon:
            continue
        report.violations.append(
            f"{instant} is archived (in {batch}) beyond the checkpoint horizon {horizon or '-'} and is not on the "
            "active timeline: the view no longer sees it (lost)"
        )
    if history.checkpoint is not None:
        covered: dict[str, set[str]] = {s: set() for s in STREAMS}
        for instant, meta in history.live_deltacommits():
            if instant.completed <= horizon:
                covered.setdefault(str(meta.get("stream")), set()).update(sources_of(meta))
        for stream in STREAMS:
            says = set(history.checkpoint.consumed.get(stream, []))
            if says != covered[stream]:
                report.violations.append(
                    f"checkpoint at {horizon}: stream {stream} consumed {len(says)} landing file(s), but the live "
                    f"instants it covers consumed {len(covered[stream])}: it lacks "
                    f"{sorted(covered[stream] - says)[:5]}, and has {sorted(says - covered[stream])[:5]} extra"
                )
    check_horizons([*seen.horizons, (float("inf"), float("inf"), horizon, "the final checkpoint")], report)


def check_horizons(observed: list[tuple[float, float, str, str]], report: Report) -> None:
    """An observation that began after another ended must not see an older horizon."""
    by_end = sorted(observed, key=lambda o: o[1])
    best: tuple[float, float, str, str] | None = None
    index = 0
    shown: set[tuple[str, str]] = set()
    for observation in sorted(observed, key=lambda o: o[0]):
        while index < len(by_end) and by_end[index][1] < observation[0]:
            if best is None or by_end[index][2] > best[2]:
                best = by_end[index]
            index += 1
        if best is not None and observation[2] < best[2] and (best[2], observation[2]) not in shown:
            shown.add((best[2], observation[2]))
            when = "at the end" if observation[0] == float("inf") else f"at {observation[0]:.3f}"
            report.violations.append(
                f"the archive checkpoint horizon moved backwards: {best[3]} saw {best[2]} (by {best[1]:.3f}), "
                f"then {observation[3]} saw {observation[2] or 'no checkpoint'} {when}"
            )


def cleaned_files(work: Path, history: History, seen: Observations, retain: int) -> dict[str, str | None]:
    """Path -> the retention start of the clean that deleted it (None: that clean should have kept it).

    A clean plans under the lock at its requested time; with keep_latest_commits it may only delete files no
    read as of the `retain`-th latest data commit completed by then (or later) needs. Data commits a restore
    undid later still counted then, so they count here too.
    """
    data = {s.completed for s in history.live().values() if s.action in DATA_ACTIONS}
    data |= {s.completed for s in seen.instants if s.action in DATA_ACTIONS}
    ordered = sorted(data)
    out: dict[str, str | None] = {}
    for instant in sorted(history.live().values(), key=lambda s: s.completed):
        if instant.action != "clean":
            continue
        plan = plan_of(history.table, instant.requested, "clean")
        keep = int(plan.get("retain") or retain)
        before = [c for c in ordered if c < instant.requested]
        cut = before[-keep] if keep and len(before) > keep else None
        for path in history.meta(instant.requested).get("deleted") or []:
            out[path] = cut
    return out


def never_existed(consumed: Mapping[str, Iterable[str]], order: dict[str, list[str]]) -> list[str]:
    """Streams whose consumed files are not a prefix of their arrival order: a state that never existed."""
    out = []
    for stream in STREAMS:
        names = set(consumed.get(stream, []))
        prefix = order[stream][: len(names)]
        if names != set(prefix):
            skipped = sorted(set(prefix) - names)
            out.append(f"{stream} had {sorted(names - set(prefix))[:3]} but not the earlier {skipped[:3]}")
    return out


def check_reads(work: Path, reference: Reference, report: Report, history: History | None = None) -> None:
    """Every recorded read against the reference merge of exactly the instants its snapshot had."""
    settings = load_settings(work)
    history = history or History.load(table_dir(work))
    seen = Observations.load(work)
    final = {s.requested: s.completed for s, _meta in history.live_deltacommits()}
    cleaned = cleaned_files(work, history, seen, settings.retain)
    latest_horizon = max(seen.latest_horizon(), history.horizon)
    order = {s: [p.name for p in staged_files(work, s)] for s in STREAMS}
    for path in sorted((work / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        name = record["name"]
        until = record["until"]
        horizon = record.get("horizon") or ""
        snapshot = {key[0] for key in record.get("snapshot", [])}
        undone = sorted(snapshot & set(history.undone))
        if record["mode"] != "current-moved":
            # The snapshot's instants (past its checkpoint) must be the final timeline's instants completed by
            # then: none vanished later (a committed write lost) unless a rollback or restore names it, and
            # none completed "in the past" (a partial commit shown).
            now = {r: c for r, c in final.items() if horizon < c <= until}
            then = {v["requested"]: v["completed"] for v in record["visible"]}
            lost = sorted(set(then) - set(now) - set(history.undone))
            late = sorted(set(now) - set(then))
            if lost or late or any(then[r] != now[r] for r in set(then) & set(now)):
                report.violations.append(
                    f"read {name} as of {until}: its snapshot had instants {lost} the final timeline lacks (and "
                    f"no rollback or restore names), and lacked {late} the final timeline has completed by then"
                )
                continue
        error = record.get("error")
        if error is not None:
            message = error["type"] + ": " + error["message"]
            refused = error["type"] == "UsageError" and "clean removed" in message
            missing = "data file is missing" in message or "FileNotFoundError" in message
            vanished = "vanished" in message  # a completed instant's file, gone between listing and reading
            cuts = [cut for path, cut in cleaned.items() if path in message]
            if (refused or missing) and cuts and all(cut is not None and until < cut for cut in cuts):
                # A clean removed the file legitimately: this time was outside its retention when it ran.
                report.reads_skipped["outside retention" if refused else "file cleaned during the read"] += 1
            elif (missing or vanished or refused) and undone:
                # A restore was taking this snapshot apart (newest first): its intermediate states may need
                # files cleaned long ago, or find instants and files gone. Reading during a restore may fail.
                report.reads_skipped["restored away during the read"] += 1
            elif "older than the archived timeline" in message and until < latest_horizon:
                report.reads_skipped["archived during the read"] += 1
            else:
                report.violations.append(f"read {name} as of {until} failed: {message[:300]}")
            continue
        if record["mode"] == "current-moved":
            report.reads_skipped["snapshot moved during a read without as_of"] += 1
            continue
        moved = record.get("moved")
        if horizon and until < horizon:
            report.violations.append(
                f"read {name} as of {until} succeeded though the archive horizon was already {horizon}"
            )
            continue
        consumed: dict[str, list[str]] = {s: list(record.get("checkpoint_consumed", {}).get(s, [])) for s in STREAMS}
        for instant in record["visible"]:
            consumed[instant["stream"]].extend(instant["sources"])
        duplicated = {s: sorted(n for n, c in Counter(v).items() if c > 1) for s, v in consumed.items()}
        if any(duplicated.values()):
            report.violations.append(f"read {name}: a landing file was consumed twice: {duplicated}")
        strange = never_existed(consumed, order)
        if strange:
            report.violations.append(
                f"read {name} as of {until} saw a state that never existed (landing files out of arrival order): "
                + "; ".join(strange)
            )
        if moved:  # the listing was a real state, but the read may have seen a later one
            report.reads_skipped[f"snapshot {moved}"] += 1
            continue
        actual = pq.read_table(work / "reads" / f"{name}.parquet")
        problems = table_differences(actual, reference.expected(consumed), work)
        report.reads_checked += 1
        if problems:
            report.violations.append(f"read {name} ({record['mode']}, as of {until}): " + "; ".join(problems[:4]))


def check_table(
    work: Path, reference: Reference, report: Report, history: History | None = None
) -> dict[str, int | str | None]:
    """The final table: ground truth, exactly-once ingest in arrival order, no pending instant, no orphan."""
    from stitchlake.concurrency.markers import instants_with_markers
    from stitchlake.layout.names import parse_name

    table = open_torture_table(work)
    history = history or History.load(table_dir(work))
    storage = table.storage
    for requested, action, state in history.pending:
        report.violations.append(f"instant {requested} {action} ({state}) is still pending after the final clean")
    consumed = history.consumed()
    for stream in STREAMS:
        landed = sorted(p.name for p in staged_files(work, stream))
        twice = sorted(n for n, c in Counter(consumed[stream]).items() if c > 1)
        if twice:
            report.violations.append(f"{stream}: landing files ingested more than once: {twice}")
        never = sorted(set(landed) - set(consumed[stream]))
        if never:
            report.violations.append(f"{stream}: landing files never ingested: {never}")
    newest: dict[str, tuple[str, Seen]] = {}
    for instant, meta in history.live_deltacommits():
        stream = str(meta.get("stream"))
        names = sources_of(meta)
        earlier = newest.get(stream)
        if earlier is not None and names and min(names) < earlier[0]:
            report.violations.append(
                f"{stream}: {instant} consumed {min(names)} after {earlier[1]} had consumed {earlier[0]}: landing "
                "files were taken out of arrival order (the table went through a state that never existed)"
            )
        if names and (earlier is None or max(names) > earlier[0]):
            newest[stream] = (max(names), instant)

    view = table.view()
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
        stitch("read", "-c", str(work / CONFIG_NAME), "--out", str(final_path)),
        capture_output=True,
        text=True,
        env=child_env(),
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
    counts = Counter(s.action for s in history.live().values())
    return {
        "deltacommits": counts["deltacommit"],
        "compactions": counts["compaction"],
        "cleans": counts["clean"],
        "rollbacks": counts["rollback"],
        "savepoints": counts["savepoint"],
        "restores": counts["restore"],
        "undone": len(history.undone),
        "archived": len(history.archived),
        "horizon": history.horizon or None,
        "rows": rows,
    }


def check_workers(work: Path, report: Report) -> Counter[str]:
    """Worker logs: a failure that is not "busy, retry later" is a bug the run must not hide."""
    events: Counter[str] = Counter()
    for path in sorted((work / "logs").glob("*.jsonl")):
        if path.name in (OBSERVED_LOG, HORIZONS_LOG):
            continue
        for record in read_lines(path):
            events[record.get("event", "?")] += 1
            if record.get("event") == "error" and ZOMBIE_REFUSED in record.get("message", ""):
                events["zombie refused"] += 1
            elif record.get("event") in ("error", "unexpected"):
                report.violations.append(
                    f"{record['role']} (pid {record['pid']}) failed: {record['error']}: {record['message'][:300]}"
                )
    return events


def check(work: Path, out: Callable[[str], None]) -> tuple[Report, dict[str, Any], Counter[str]]:
    report = Report()
    reference = Reference(work)
    started = time.monotonic()
    history = History.load(table_dir(work))
    check_history(work, history, Observations.load(work), report)
    check_reads(work, reference, report, history)
    commits = check_table(work, reference, report, history)
    events = check_workers(work, report)
    out(f"checked {report.reads_checked} reads, the history and the final table in {time.monotonic() - started:.1f}s")
    return report, commits, events


# ============================================================================================ the Kafka phase


@dataclass
class KafkaPhase:
    """What the Kafka-fed stream's rounds did, for the summary."""

    rounds: int = 0
    #: Rounds added after the last one because none of the rounds had killed an ingest inside its instant.
    extra_rounds: int = 0
    produced: int = 0
    #: Ingests SIGKILLed inside their instant (requested, or writing files), never completed.
    kills: int = 0
    commits: int = 0
    violations: list[str] = field(default_factory=list)


def kafka_phase(work: Path, rounds: int, seed: int, out: Callable[[str], None]) -> KafkaPhase:
    """A stream fed from a real Kafka topic (a broker this run starts, scripts/kafka_broker.py) on a table of its
    own: each round produces records (late and duplicate events, three partitions, a fourth added halfway), starts
    two overlapping `stitch ingest` runs and SIGKILLs the one that claimed the stream at a point chosen by its
    progress (its instant just requested, or its files being written); a round is added until a kill happened.
    At the end the runs go on until nothing is left. Checked (`_kafka_check`): the completed commits' offset ranges
    tile every partition from 0 to its end (no gap, no overlap), their rows add up to what was produced, the table
    equals a merge of the produced records, and nothing is left pending. The produced records are kept in
    `kafka/produced.jsonl` for the checker's own tests."""
    from scripts import kafka_broker

    rng = random.Random(seed)
    phase = KafkaPhase()
    folder = work / "kafka"
    folder.mkdir(exist_ok=True)
    broker = kafka_broker.start(folder / "broker", watch_pid=os.getpid())
    try:
        bootstrap = broker.bootstrap
        topic = f"torture-{seed}"
        kafka_broker.create_topic(bootstrap, topic, 3)
        config = _kafka_table(folder, bootstrap, topic)
        produced: list[dict[str, Any]] = []
        partitions = 3
        number = 0
        while number < rounds or (phase.kills == 0 and phase.extra_rounds < 5):
            if number == rounds // 2:
                partitions = 4
                kafka_broker.add_partitions(bootstrap, topic, partitions)
            batch = _kafka_events(rng, number, 120)
            kafka_broker.produce(bootstrap, topic, [(e["id"] % partitions, json.dumps(e).encode()) for e in batch])
            produced += [{**e, "partition": e["id"] % partitions} for e in batch]
            phase.kills += _kafka_round(config, folder / "table", rng)
            if number < rounds:
                phase.rounds += 1
            else:
                phase.extra_rounds += 1
            number += 1
        with open(folder / "produced.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(event) + "\n" for event in produced)
        deadline = time.monotonic() + 300
        while not _kafka_ingest_done(config):
            if time.monotonic() > deadline:
                phase.violations.append("kafka: the ingest did not catch up within 300s after the rounds")
                break
            time.sleep(0.5)
        rolled = _stitch(["rollback", "-c", str(config), "--failed"])
        if rolled.returncode != 0:
            phase.violations.append(
                f"kafka: stitch rollback --failed exited {rolled.returncode}: {rolled.stderr[-300:]}"
            )
        phase.produced = len(produced)
        phase.commits = _kafka_check(config, produced, phase.violations)
    finally:
        kafka_broker.stop(folder / "broker")
    out(
        f"kafka: {phase.rounds} rounds (+{phase.extra_rounds} until a kill), {phase.produced} records, {phase.kills} "
        f"ingests killed inside their instant, {phase.commits} "
        f"commits, violations {len(phase.violations)}"
    )
    return phase


def _kafka_table(folder: Path, bootstrap: str, topic: str) -> Path:
    document = {
        "table": {"name": "kafka_torture", "path": str(folder / "table"), "key": {"id": "long"}, "buckets": 2},
        "streams": {
            "events": {
                "columns": {"v": "long", "seq": "long"},
                "ordering": "seq",
                "source": {"format": "kafka", "topic": topic, "bootstrap_servers": bootstrap},
            }
        },
        "bad_rows": "fail",
        "concurrency": {"heartbeat": {"interval_s": 0.5, "expire_s": 3}},
    }
    config = folder / "kafka.yaml"
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    done = _stitch(["init", "-c", str(config)])
    if done.returncode != 0:
        raise RuntimeError(f"stitch init of the Kafka table failed: {done.stderr}")
    return config


def _kafka_events(rng: random.Random, number: int, count: int) -> list[dict[str, Any]]:
    """Events over 50 keys: `seq` orders them (late ones carry a smaller seq); some are sent twice."""
    events = []
    for index in range(count):
        key = rng.randrange(50)
        seq = number * 1000 + index - (rng.randrange(500) if rng.random() < 0.2 else 0)
        events.append({"id": key, "v": number * 1000 + index, "seq": seq * 1000 + index})
        if rng.random() < 0.1:
            events.append(dict(events[-1]))
    return events


def _stitch(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stitchlake", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def _kafka_round(config: Path, table: Path, rng: random.Random) -> int:
    """Two overlapping ingests (cron overlap: one exits 4); the one that claims the stream is SIGKILLed by its
    progress, not by the clock: as soon as its instant is requested, or once it marks its first data file. Returns
    1 if it was killed inside its instant (which then never completed), else 0 (it finished first)."""
    argv = [
        sys.executable,
        "-m",
        "stitchlake",
        "ingest",
        "-c",
        str(config),
        "--stream",
        "events",
        "--max-records",
        "90",
    ]
    timeline, markers = table / TIMELINE_DIR, table / ".stitch" / "markers"
    before, marked = set(_names(timeline)), set(_names(markers))
    point = rng.choice(["requested", "writing"])
    jobs = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(2)
    ]
    by_pid = {job.pid: job for job in jobs}
    victim: subprocess.Popen[bytes] | None = None
    requested = ""
    deadline = time.monotonic() + 300
    while victim is None and any(job.poll() is None for job in jobs) and time.monotonic() < deadline:
        if point == "requested":
            started = [n.split(".")[0] for n in set(_names(timeline)) - before if n.endswith(".deltacommit.requested")]
        else:
            started = [n for n in set(_names(markers)) - marked]
        for name in started:
            pid = _writer_pid(timeline, name)
            if pid is not None and pid in by_pid:
                victim, requested = by_pid[pid], name
                break
        time.sleep(0.002)
    killed = 0
    if victim is not None and victim.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=60)
        killed = 0 if any(n.startswith(f"{requested}_") for n in _names(timeline)) else 1
    for job in jobs:
        try:
            job.wait(timeout=300)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    # The next cron run, retried while the killed one still looks alive (exit 4): it goes on from the table's
    # offsets with the killed instant still pending.
    deadline = time.monotonic() + 120
    while _stitch(argv[3:]).returncode in (3, 4) and time.monotonic() < deadline:
        time.sleep(0.5)
    return killed


def _names(folder: Path) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if not n.startswith(".")]
    except FileNotFoundError:
        return []


def _writer_pid(timeline: Path, requested: str) -> int | None:
    """The pid of the process that requested an instant (its plan's writer), or None if unreadable yet."""
    try:
        plan = json.loads((timeline / f"{requested}.deltacommit.requested").read_text(encoding="utf-8"))
        return int(plan["writer"]["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _kafka_ingest_done(config: Path) -> bool:
    done = _stitch(["ingest", "-c", str(config), "--stream", "events", "--json"])
    if done.returncode in (3, 4):  # a killed run's heartbeat is still fresh, or a conflict: try again
        return False
    if done.returncode != 0:
        raise RuntimeError(f"stitch ingest of the Kafka stream exited {done.returncode}: {done.stdout}{done.stderr}")
    return bool(json.loads(done.stdout)["message"].startswith("nothing to ingest"))


def _kafka_check(config: Path, produced: list[dict[str, Any]], violations: list[str]) -> int:
    """The checker of the Kafka phase (reads the completed commit files and the table; see `kafka_phase`)."""
    import stitchlake
    from stitchlake.api import open as open_table
    from stitchlake.timeline.instant import Action
    from stitchlake.timeline.metadata import DeltaCommit

    table = open_table(str(config))
    timeline = table.timeline()
    if timeline.pending():
        violations.append(
            f"kafka: pending instants after the final rollback: {[i.requested for i in timeline.pending()]}"
        )
    commits = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])]
    ranges: dict[int, list[tuple[int, int]]] = {}
    rows = 0
    for commit in commits:
        if isinstance(commit, DeltaCommit):
            rows += commit.rows
            for item in commit.offsets:
                ranges.setdefault(item.partition, []).append((item.start, item.end))
    ends = Counter(e["partition"] for e in produced)
    for partition in sorted(set(ends) | set(ranges)):
        at = 0
        for start, end in sorted(ranges.get(partition, [])):
            if start != at:
                violations.append(f"kafka: partition {partition}: offsets recorded from {start}, expected {at}")
            at = end
        if at != ends.get(partition, 0):
            violations.append(f"kafka: partition {partition}: recorded up to {at}, produced {ends.get(partition, 0)}")
    if rows != len(produced):
        violations.append(f"kafka: {rows} rows committed for {len(produced)} records produced (lost or repeated)")
    want: dict[int, tuple[int, int]] = {}
    for event in produced:
        if event["id"] not in want or event["seq"] > want[event["id"]][1]:
            want[event["id"]] = (event["v"], event["seq"])
    got = {r["id"]: (r["v"], r["seq"]) for r in stitchlake.read(str(config)).to_pylist()}
    if got != want:
        wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        violations.append(f"kafka: the table differs from the produced records' merge for keys {wrong[:5]}")
    return len(commits)


# ================================================================================================== main


def collapse(violations: list[str]) -> list[str]:
    """One line per kind of read violation (the first read, and how many more) — one bug shows in many reads."""
    kinds: dict[str, list[str]] = {}
    for line in violations:
        kinds.setdefault(re.sub(r"^read \S+( \([^)]*\))?( as of \d+)?", "read", line), []).append(line)
    return [lines[0] + (f" (and {len(lines) - 1} more like it)" if len(lines) > 1 else "") for lines in kinds.values()]


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
    parser.add_argument("--restorers", type=int, choices=(0, 1), default=1, help="savepoint+restore process (0/1)")
    parser.add_argument("--archivers", type=int, default=2, help="archive processes (2: they race each other)")
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between random kills (0: none)")
    parser.add_argument(
        "--pause-every", type=float, default=6.0, help="mean seconds between SIGSTOP pauses of a worker (0: none)"
    )
    parser.add_argument("--fault-rate", type=float, default=0.5, help="share of worker starts armed with a fault")
    parser.add_argument("--round-seconds", type=float, default=2.5, help="minimum length of a round")
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=300.0,
        help="give a round up after this many seconds without progress (reported; not a violation)",
    )
    parser.add_argument("--buckets", type=int, default=2, help="file groups per partition")
    parser.add_argument("--log-format", choices=("parquet", "avro"), default="parquet")
    parser.add_argument("--retain", type=int, default=8, help="clean.retain (keep_latest_commits)")
    parser.add_argument("--heartbeat", type=float, nargs=2, default=(0.5, 4.0), metavar=("INTERVAL", "EXPIRE"))
    parser.add_argument("--lock-expire", type=float, default=2.0, help="lease of the table lock, seconds")
    parser.add_argument(
        "--mode",
        choices=("lock_free", "optimistic"),
        default="lock_free",
        help="concurrency.mode; optimistic lets the writers of a stream run at once (they conflict by file group)",
    )
    parser.add_argument(
        "--kafka-rounds",
        type=int,
        default=0,
        help="rounds of a Kafka-fed stream on a table of its own, against a broker this run starts (0: none)",
    )
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
        settings = load_settings(work)
    else:
        if work.exists() and any(work.iterdir()):
            print(f"error: workdir {work} is not empty", file=sys.stderr)
            return 2
        settings = Settings(
            workdir=str(work),
            table=(args.table if "://" in args.table else str(Path(args.table).resolve()))
            if args.table
            else str(work / "table"),
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
            restorers=args.restorers,
            archivers=args.archivers,
            mode=args.mode,
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
        if stats.rounds_timed_out:  # the machine was too slow, or stuck: reported, but no safety violation
            out(
                f"{stats.rounds_timed_out} round(s) timed out: no progress for {settings.round_timeout:.0f}s "
                "(--round-timeout); not a violation, but the run tortured less than asked"
            )
        if stats.owed:
            out(f"duties never done (the last round timed out first): {', '.join(stats.owed)}")
        if args.kafka_rounds:
            kafka = kafka_phase(work, args.kafka_rounds, args.seed, out)
            report.violations += kafka.violations
            summary["kafka"] = {k: v for k, v in kafka.__dict__.items() if k != "violations"}
    kills = sum(stats.kills.values())
    during = sum(n for cause, n in stats.kills.items() if not cause.startswith("at_stop"))
    summary.update(
        rounds=settings.rounds,
        seed=settings.seed,
        kills=kills,
        kills_during_rounds=during,
        kills_by_cause=dict(stats.kills),
        rounds_timed_out=stats.rounds_timed_out,
        duties_owed=stats.owed,
        pauses=dict(stats.pauses),
        commits=commits,
        reads_checked=report.reads_checked,
        reads_skipped=dict(report.reads_skipped),
        worker_events=dict(events),
        violations=len(report.violations),
        violation_messages=report.violations,
        seconds=round(time.monotonic() - started, 1),
    )
    shown = collapse(report.violations)
    for line in shown[:MAX_SHOWN]:
        print(f"VIOLATION: {line}")
    if len(shown) > MAX_SHOWN:
        print(f"... and {len(shown) - MAX_SHOWN} more kinds (all of them in --summary-json)")
    freezes = sum(stats.pauses.values())
    lease = sum(n for kind, n in stats.pauses.items() if kind.startswith("lease"))
    print(
        f"torture: rounds {settings.rounds}, kills {kills} ({during} during the rounds), freezes {freezes} "
        f"({lease} past the lock lease), commits {commits['deltacommits']} (+{commits['compactions']} compactions, "
        f"{commits['cleans']} cleans, {commits['rollbacks']} rollbacks, {commits['savepoints']} savepoints, "
        f"{commits['restores']} restores undoing {commits['undone']}, {commits['archived']} archived), "
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
