"""Archival (design.md §4): keep the active timeline short with a checkpoint of the file-system view.

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

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stitchlake.checksums import seal
from stitchlake.errors import BusyError
from stitchlake.paths import ARCHIVE_DIR
from stitchlake.services.offsets import OFFSET_ACTIONS, offsets_until
from stitchlake.table.guards import refuse_while_undoing
from stitchlake.timeline.actions import WRITES_DATA
from stitchlake.timeline.archive import (
    BATCH_SUFFIX,
    LEGACY_CHECKPOINT,
    Checkpoint,
    archived_instants,
    batches,
    checkpoint_names,
    checkpoint_path,
    horizon_of,
    load_checkpoint,
    newest_batches,
)
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import (
    Commit,
    DeltaCommit,
    LandingRecord,
    SavepointPlan,
    StreamBatch,
    commit_json,
    dump,
)
from stitchlake.timeline.savepoints import pinned_since, unfinished_purges
from stitchlake.timeline.timeline import Timeline, delete_instant

if TYPE_CHECKING:
    from stitchlake.storage.base import Storage
    from stitchlake.table.handle import TableHandle

#: Older checkpoints kept besides the newest (a reader that listed just before a new one appeared).
KEEP_OLD_CHECKPOINTS = 1


@dataclass
class ArchiveResult:
    archived: int
    horizon: str | None
    kept: int
    message: str


def candidates(timeline: Timeline, keep: int) -> list[Instant]:
    """Completed instants that may leave the active timeline.

    Never the newest `keep`, nothing at or after the oldest pending instant (its writer may still need the
    history) or a savepoint being made, nothing from the oldest savepoint's snapshot on (reads as of it must stay
    possible), nothing from an erase whose purge did not finish, and never the latest commit that wrote data.
    The savepoint and latest-data limits keep a data commit on the active timeline whatever a restore undoes: a
    savepoint needs one to pin, and archiving the savepointed commit and then restoring to it left a table full
    of rows that refused every new savepoint ("no completed commit to savepoint yet").
    """
    done = timeline.completed()
    older = done[: max(0, len(done) - keep)]
    limits = [i.requested for i in timeline.pending()]
    latest_data = timeline.latest_completed(list(WRITES_DATA))
    pinned = pinned_since(timeline)
    # A savepoint being made pins its state too: archived under it, it would complete pinning nothing readable.
    being_pinned = [
        plan.savepoint_of
        for plan in (timeline.plan(i) for i in timeline.pending([Action.SAVEPOINT]))
        if isinstance(plan, SavepointPlan) and plan.savepoint_of
    ]
    # An erase whose purge did not finish stays: archived, nothing would find it to finish it.
    unpurged = {i.requested for i in unfinished_purges(timeline)}
    limit = min([*limits, *([pinned] if pinned else []), *being_pinned], default=None)
    out = []
    for instant in older:
        if instant.action == Action.SAVEPOINT or instant == latest_data or instant.requested in unpurged:
            break
        if limit is not None and (instant.completed or "") >= limit:
            break
        out.append(instant)
    return out


@dataclass(frozen=True)
class ArchivePlan:
    chosen: list[Instant]
    horizon: str
    checkpoint: Checkpoint
    lines: list[str]


def plan_archive(table: TableHandle, timeline: Timeline, keep: int) -> ArchivePlan | None:
    """What to archive and the checkpoint it leaves (reads metadata: done outside the lock)."""
    chosen = candidates(timeline, keep)
    if not chosen:
        return None
    horizon = chosen[-1].completed or ""
    view = table.view(timeline)
    files = [f for f in view.live_files() if f.completed <= horizon]
    files += [
        f
        for items in view.groups.values()
        for f in items
        if f.path in view.deleted and f.completed <= horizon and view.deleted[f.path] > horizon
    ]
    previous = load_checkpoint(table.storage)
    streams = recorded_streams(table, timeline, previous, horizon)
    consumed: dict[str, tuple[LandingRecord | str, ...]] = {}
    for name in streams:
        records = consumed_until(previous, timeline, name, horizon)
        consumed[name] = tuple(records[key] for key in sorted(records))
    lines = [
        seal(
            json.dumps(
                {
                    "requested": i.requested,
                    "action": i.action,
                    "completed": i.completed,
                    "metadata": commit_json(timeline.commit(i)),
                }
            ).encode()
        ).decode()
        for i in chosen
    ]
    schemas = tuple(v for v in table.schema_history(timeline) if v.version and v.since <= horizon)
    # The bucket layout and which files at the horizon left their slices: rescales outlive their instants.
    rescales = tuple(r for r in view.rescales if r.completed <= horizon)
    offsets = {name: offsets_until(previous, timeline, name, horizon) for name in streams}
    commits = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT]) if (i.completed or "") <= horizon]
    if previous is not None and not previous.batches_kept:  # a checkpoint from before it kept them: read once
        commits += [entry.commit for entry in archived_instants(table.storage)]
    batches = newest_batches(previous, _stream_batches(commits))
    checkpoint = Checkpoint(
        horizon,
        tuple(files),
        consumed,
        schemas,
        rescales,
        offsets={k: v for k, v in offsets.items() if v},
        stream_batches=batches,
        batches_kept=True,
    )
    return ArchivePlan(chosen, horizon, checkpoint, lines)


def recorded_streams(table: TableHandle, timeline: Timeline, previous: Checkpoint | None, horizon: str) -> list[str]:
    """Every stream whose position the checkpoint must keep: the config's, and any the previous checkpoint or a
    commit up to the horizon names. A stream dropped from the config comes back with a restore to a savepoint from
    before the drop (an alter refuses a dropped name) and must go on where it stopped: its commits leaving the
    active timeline with nothing kept of them, it read its landing files or its topic again from the start, or
    skipped to the topic's end."""
    names = dict.fromkeys(table.config.streams)
    if previous is not None:
        names.update(dict.fromkeys(previous.consumed))
        names.update(dict.fromkeys(previous.offsets))
    for instant in timeline.completed(OFFSET_ACTIONS, until=horizon):
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream is not None:
            names[commit.stream] = None
        names.update(dict.fromkeys(getattr(commit, "positions", {})))
    return list(names)


def _stream_batches(commits: list[Commit]) -> Iterator[tuple[str, StreamBatch]]:
    """The micro-batches of these commits' deltacommits, with their streams."""
    for commit in commits:
        if isinstance(commit, DeltaCommit) and commit.stream is not None and commit.stream_batch is not None:
            yield commit.stream, commit.stream_batch


def archive(table: TableHandle, keep: int | None = None) -> ArchiveResult:
    """Archive all but the newest `keep` completed instants (default `archive.keep_instants`)."""
    table.require()
    storage = table.storage
    kept = keep if keep is not None else table.config.archive.keep_instants
    timeline = table.timeline()
    plan = plan_archive(table, timeline, kept)
    if plan is None:
        return _finish_leftovers(table, timeline)
    with table.lock() as lock:
        fresh = table.timeline()
        refuse_while_undoing(fresh, "archive")
        newest = horizon_of(storage)
        if newest is not None and newest >= plan.horizon:
            finished = _finish_archived(storage, fresh.completed(), newest, lock.fence)
            done = f"; removed {finished} archived instant(s) left on the active timeline" if finished else ""
            return ArchiveResult(
                0, newest, len(fresh) - finished, f"nothing to archive (an archive reached {newest}){done}"
            )
        if [i.requested for i in candidates(fresh, kept)][: len(plan.chosen)] != [i.requested for i in plan.chosen]:
            raise BusyError("the timeline changed while the archive was planned (a restore or savepoint?); run again")
        storage.makedirs(ARCHIVE_DIR)
        for orphan in batches(storage)[1]:  # an archive's that lost its lease before its checkpoint
            lock.fence()
            storage.delete(orphan)
        batch = f"{ARCHIVE_DIR}/{plan.chosen[0].requested}_{plan.horizon}{BATCH_SUFFIX}"
        storage.put_if_absent(batch, ("\n".join(plan.lines) + "\n").encode(), lock.fence)
        # Immutable and fenced: from here on the view starts at the new horizon.
        storage.put_if_absent(
            checkpoint_path(plan.horizon), seal(json.dumps(dump(plan.checkpoint)).encode()), lock.fence
        )
        lock.fence()
        for instant in plan.chosen:
            delete_instant(storage, instant, completed_last=True)
        for _horizon, old in checkpoint_names(storage)[: -1 - KEEP_OLD_CHECKPOINTS]:
            storage.delete(old)
        if storage.exists(LEGACY_CHECKPOINT):
            storage.delete(LEGACY_CHECKPOINT)
    active = len(timeline) - len(plan.chosen)
    return ArchiveResult(
        len(plan.chosen), plan.horizon, active, f"archived {len(plan.chosen)} instant(s) up to {plan.horizon}"
    )


def _finish_leftovers(table: TableHandle, timeline: Timeline) -> ArchiveResult:
    """Nothing new to archive: still remove what an archive that stopped part-way left of the instants it archived
    (at or before the horizon), which would otherwise stay on the active timeline until the horizon moves."""
    storage = table.storage
    horizon = horizon_of(storage)
    if horizon is None or not any((i.completed or "") <= horizon for i in timeline.completed()):
        return ArchiveResult(0, horizon, len(timeline), "nothing to archive")
    with table.lock() as lock:
        fresh = table.timeline()
        refuse_while_undoing(fresh, "archive")
        finished = _finish_archived(storage, fresh.completed(), horizon, lock.fence)
    done = f"; removed {finished} archived instant(s) left on the active timeline" if finished else ""
    return ArchiveResult(0, horizon, len(fresh) - finished, f"nothing to archive{done}")


def _finish_archived(storage: Storage, completed: list[Instant], horizon: str, fence: Callable[[], None]) -> int:
    """Delete the active files of instants an earlier archive already holds in a batch and its checkpoint covers:
    what an archive that died before its last step leaves. The next archive finds the horizon already there;
    without this they would stay on the active timeline until the horizon moves, which a savepoint can hold back
    for good. All of them, not only those this run would choose: the commit a savepoint pinned after the crash is
    archived already (the savepoint reads it as of the checkpoint), and a copy left active would be archived twice."""
    archived = {entry.instant.requested for entry in archived_instants(storage)}
    leftovers = [i for i in completed if i.requested in archived and (i.completed or "") <= horizon]
    if leftovers:
        fence()
    for instant in leftovers:
        delete_instant(storage, instant, completed_last=True)
    return len(leftovers)


def consumed_until(
    previous: Checkpoint | None, timeline: Timeline, stream: str, horizon: str
) -> dict[str, LandingRecord]:
    """Landing files of `stream` consumed by instants completed at or before the horizon (and before: `previous`,
    the newest checkpoint)."""
    found = previous.landing(stream) if previous else {}
    for instant in timeline.completed([Action.DELTACOMMIT], until=horizon):
        commit = timeline.commit(instant)
        if isinstance(commit, DeltaCommit) and commit.stream == stream:
            found.update(commit.consumed())
    return found
