"""Archival (DESIGN §4): keep the active timeline short with a checkpoint of the file-system view.

Old completed instants move into `timeline/archive/` (one JSON-lines batch per run) and a checkpoint records
what they leave behind: the files still live at the archive horizon, and the source files each stream has
consumed (exactly-once ingest must keep knowing them). Order makes it crash-safe: batch first, checkpoint
second (from then on the view ignores active instants at or before the horizon), deletion of the active files
last — a re-run finishes the job.

Checkpoints are immutable, one file per horizon (`checkpoint.<horizon>.json`, created if absent), and readers
take the newest: an archive frozen past its lease that wakes up after another one went further can add only an
older checkpoint nobody reads, never move the horizon back. It is also fenced on the lock before every write,
and plans outside the lock (reading metadata of many instants may take longer than a lease), re-checking
under the lock that the timeline still offers exactly what it planned.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.errors import BusyError, CorruptFileError
from stitchlake.storage import Storage
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import Timeline, delete_instant
from stitchlake.transaction import refuse_while_undoing

if TYPE_CHECKING:
    from stitchlake.table import Table

ARCHIVE_DIR = ".stitch/timeline/archive"
#: The single, rewritten checkpoint of versions before checkpoints became immutable (still read).
LEGACY_CHECKPOINT = f"{ARCHIVE_DIR}/checkpoint.json"
_CHECKPOINT_NAME = re.compile(r"^checkpoint\.(\d{17})\.json$")
BATCH_SUFFIX = ".archive.jsonl"
#: Older checkpoints kept besides the newest (a reader that listed just before a new one appeared).
KEEP_OLD_CHECKPOINTS = 1


@dataclass
class ArchiveResult:
    archived: int
    horizon: str | None
    kept: int
    message: str


def checkpoint_path(horizon: str) -> str:
    return f"{ARCHIVE_DIR}/checkpoint.{horizon}.json"


def _checkpoint_names(storage: Storage) -> list[tuple[str, str]]:
    """(horizon, path) of every immutable checkpoint, oldest first."""
    found = []
    for name in storage.list_names(ARCHIVE_DIR):
        match = _CHECKPOINT_NAME.match(name)
        if match:
            found.append((match.group(1), f"{ARCHIVE_DIR}/{name}"))
    return sorted(found)


def _read_checkpoint(storage: Storage, path: str) -> dict[str, Any]:
    data = storage.read_bytes(path)
    try:
        content = json.loads(data)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(f"{storage.abspath(path)}: not valid JSON ({exc})") from None
    if not isinstance(content, dict) or not isinstance(content.get("completed"), str):
        raise CorruptFileError(f"{storage.abspath(path)}: not a checkpoint (no horizon)")
    return content


def load_checkpoint(storage: Storage) -> dict[str, Any] | None:
    """The newest file-system-view checkpoint (greatest horizon), or None if nothing was archived yet."""
    for _attempt in range(3):  # a newer archive may tidy the listed ones away between listing and reading
        listed = _checkpoint_names(storage)
        if listed:
            with contextlib.suppress(FileNotFoundError):
                return _read_checkpoint(storage, listed[-1][1])
            continue
        try:
            return _read_checkpoint(storage, LEGACY_CHECKPOINT)
        except FileNotFoundError:
            return None
    raise CorruptFileError(f"{storage.abspath(ARCHIVE_DIR)}: the newest checkpoint keeps vanishing while read")


def horizon_of(storage: Storage) -> str | None:
    """The newest checkpoint's horizon, from the listing alone."""
    names = _checkpoint_names(storage)
    if names:
        return names[-1][0]
    checkpoint = load_checkpoint(storage)
    return checkpoint.get("completed") if checkpoint else None


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


@dataclass(frozen=True)
class ArchivePlan:
    chosen: list[Instant]
    horizon: str
    checkpoint: dict[str, Any]
    lines: list[str]


def plan_archive(table: Table, timeline: Timeline, keep: int) -> ArchivePlan | None:
    """What to archive and the checkpoint it leaves (reads metadata: done outside the lock)."""
    chosen = candidates(timeline, keep)
    if not chosen:
        return None
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
            {"requested": i.requested, "action": i.action, "completed": i.completed, "metadata": timeline.metadata(i)},
            sort_keys=True,
        )
        for i in chosen
    ]
    checkpoint = {"format_version": 1, "completed": horizon, "files": files, "consumed": streams}
    return ArchivePlan(chosen, horizon, checkpoint, lines)


def archive(table: Table, keep: int | None = None) -> ArchiveResult:
    """Archive all but the newest `keep` completed instants (default `archive.keep_instants`)."""
    table.require()
    storage = table.storage
    kept = keep if keep is not None else table.config.archive.keep_instants
    timeline = table.timeline()
    plan = plan_archive(table, timeline, kept)
    if plan is None:
        return ArchiveResult(0, horizon_of(storage), len(timeline), "nothing to archive")
    with table.lock() as lock:
        fresh = table.timeline()
        refuse_while_undoing(fresh, "archive")
        newest = horizon_of(storage)
        if newest is not None and newest >= plan.horizon:
            return ArchiveResult(0, newest, len(fresh), f"nothing to archive (another archive reached {newest})")
        if [i.requested for i in candidates(fresh, kept)][: len(plan.chosen)] != [i.requested for i in plan.chosen]:
            raise BusyError("the timeline changed while the archive was planned (a restore or savepoint?); run again")
        storage.makedirs(ARCHIVE_DIR)
        batch = f"{ARCHIVE_DIR}/{plan.chosen[0].requested}_{plan.horizon}{BATCH_SUFFIX}"
        storage.put_if_absent(batch, ("\n".join(plan.lines) + "\n").encode(), lock.fence)
        # Immutable and fenced: from here on the view starts at the new horizon.
        storage.put_if_absent(checkpoint_path(plan.horizon), json.dumps(plan.checkpoint).encode(), lock.fence)
        lock.fence()
        for instant in plan.chosen:
            delete_instant(storage, instant)
        for _horizon, old in _checkpoint_names(storage)[: -1 - KEEP_OLD_CHECKPOINTS]:
            storage.delete(old)
        if storage.exists(LEGACY_CHECKPOINT):
            storage.delete(LEGACY_CHECKPOINT)
    active = len(timeline) - len(plan.chosen)
    return ArchiveResult(
        len(plan.chosen), plan.horizon, active, f"archived {len(plan.chosen)} instant(s) up to {plan.horizon}"
    )


def consumed_until(table: Table, timeline: Timeline, stream: str, horizon: str) -> set[str]:
    """Source files of `stream` consumed by instants completed at or before the horizon (and before)."""
    names = set((load_checkpoint(table.storage) or {}).get("consumed", {}).get(stream, []))
    for instant in timeline.completed([Action.DELTACOMMIT], until=horizon):
        meta = timeline.metadata(instant)
        if meta.get("stream") == stream:
            names.update(item["name"] for item in meta.get("sources", []))
    return names
