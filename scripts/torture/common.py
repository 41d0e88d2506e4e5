"""The run's shared names, its JSON-lines logs and its setup: the config, the landing files, the table."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scripts import ROOT, child_env, demo_data
from scripts.torture.tablefiles import TableFiles

STREAMS = demo_data.STREAMS
EXTENSION = demo_data.EXTENSION
CONFIG_NAME = "torture.yaml"
MAX_SHOWN = 25
STOP_FILE = "STOP"
FAULT_ENV = "STITCH_TORTURE_FAULT"
RUN_DIR_ENV = "STITCH_TORTURE_RUN_DIR"
OBSERVED_LOG = "observed.jsonl"
HORIZONS_LOG = "horizons.jsonl"
#: What the finish did that the checker must know of (a savepoint it deleted to force an archive).
FINISH_LOG = "finish.jsonl"
#: What `Transaction.complete` says to a writer that was presumed dead and rolled back while it ran: correct.
ZOMBIE_REFUSED = "while it ran; nothing was published"
#: Archive keeps drawn per run: the smallest is the config's minimum (`archive.keep_instants` >= 10).
ARCHIVE_KEEP = (10, 16)


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
    restorers: int = 0
    archivers: int = 0
    #: An eraser process (0/1): `stitch delete --keys` of a few keys now and then, the writers writing them too.
    erasers: int = 0
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
