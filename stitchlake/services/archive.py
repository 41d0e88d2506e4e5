"""Archival (DESIGN §4): keep the active timeline short with a checkpoint of the file-system view.

Old completed instants move into `timeline/archive/` (one JSON-lines batch per run) and a checkpoint records
what they leave behind: the files still live at the archive horizon, and the source files each stream has
consumed (exactly-once ingest must keep knowing them). Order makes it crash-safe: batch first, checkpoint
second (from then on the view ignores active instants at or before the horizon), deletion of the active files
last — a re-run finishes the job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.errors import CorruptFileError
from stitchlake.storage import Storage
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import Timeline, delete_instant

if TYPE_CHECKING:
    from stitchlake.table import Table

ARCHIVE_DIR = ".stitch/timeline/archive"
CHECKPOINT = f"{ARCHIVE_DIR}/checkpoint.json"
BATCH_SUFFIX = ".archive.jsonl"


@dataclass
class ArchiveResult:
    archived: int
    horizon: str | None
    kept: int
    message: str


def load_checkpoint(storage: Storage) -> dict[str, Any] | None:
    """The latest file-system-view checkpoint, or None if nothing was archived yet."""
    try:
        data = storage.read_bytes(CHECKPOINT)
    except FileNotFoundError:
        return None
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(f"{CHECKPOINT}: not valid JSON ({exc})") from None


def load_archived_instants(storage: Storage) -> list[dict[str, Any]]:
    """Archived instants (requested, action, completed, metadata), oldest completion first."""
    found: dict[str, dict[str, Any]] = {}
    for name in sorted(storage.list_names(ARCHIVE_DIR)):
        if not name.endswith(BATCH_SUFFIX):
            continue
        path = f"{ARCHIVE_DIR}/{name}"
        for number, line in enumerate(storage.read_bytes(path).decode().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorruptFileError(f"{path}: line {number} is not valid JSON ({exc})") from None
            found[entry["requested"]] = entry
    return sorted(found.values(), key=lambda e: e["completed"])


def candidates(timeline: Timeline, keep: int) -> list[Instant]:
    """Completed instants that may leave the active timeline.

    Never the newest `keep`, nothing at or after the oldest pending instant (its writer may still need the
    history), and nothing after the oldest savepoint's snapshot (reads as of it must stay possible).
    """
    done = timeline.completed()
    older = done[: max(0, len(done) - keep)]
    limits = [i.requested for i in timeline.pending()]
    limits += [str(timeline.metadata(s).get("savepoint_of")) for s in timeline.completed([Action.SAVEPOINT])]
    limit = min(limits, default=None)
    out = []
    for instant in older:
        if instant.action == Action.SAVEPOINT or (limit is not None and (instant.completed or "") > limit):
            break
        out.append(instant)
    return out


def archive(table: Table, keep: int | None = None) -> ArchiveResult:
    """Archive all but the newest `keep` completed instants (default `archive.keep_instants`)."""
    table.require()
    storage = table.storage
    kept = keep if keep is not None else table.config.archive.keep_instants
    with table.lock():
        timeline = table.timeline()
        chosen = candidates(timeline, kept)
        if not chosen:
            return ArchiveResult(
                0, (load_checkpoint(storage) or {}).get("completed"), len(timeline), "nothing to archive"
            )
        horizon = chosen[-1].completed or ""
        view = table.view(timeline)
        files = [f.to_json() for f in view.live_files() if f.completed <= horizon]
        files += [
            f.to_json()
            for items in view.groups.values()
            for f in items
            if f.path in view.deleted and f.completed <= horizon and view.deleted[f.path] > horizon
        ]
        streams = {name: sorted(consumed_until(table, timeline, name, horizon)) for name in table.config.streams}
        lines = [
            json.dumps(
                {
                    "requested": i.requested,
                    "action": i.action,
                    "completed": i.completed,
                    "metadata": timeline.metadata(i),
                },
                sort_keys=True,
            )
            for i in chosen
        ]
        batch = f"{ARCHIVE_DIR}/{chosen[0].requested}_{horizon}{BATCH_SUFFIX}"
        storage.makedirs(ARCHIVE_DIR)
        storage.put_if_absent(batch, ("\n".join(lines) + "\n").encode())
        checkpoint = {"format_version": 1, "completed": horizon, "files": files, "consumed": streams}
        storage.write_atomic(CHECKPOINT, json.dumps(checkpoint).encode())
        for instant in chosen:
            delete_instant(storage, instant)
    return ArchiveResult(
        len(chosen), horizon, len(timeline) - len(chosen), f"archived {len(chosen)} instant(s) up to {horizon}"
    )


def consumed_until(table: Table, timeline: Timeline, stream: str, horizon: str) -> set[str]:
    """Source files of `stream` consumed by instants completed at or before the horizon (and before)."""
    names = set((load_checkpoint(table.storage) or {}).get("consumed", {}).get(stream, []))
    for instant in timeline.completed([Action.DELTACOMMIT], until=horizon):
        meta = timeline.metadata(instant)
        if meta.get("stream") == stream:
            names.update(item["name"] for item in meta.get("sources", []))
    return names
