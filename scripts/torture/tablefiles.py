"""The table's own files (timeline, archive, checkpoint) as the checker reads them."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
