"""Savepoints and restore (DESIGN §4).

A savepoint pins the files a read as of one completed instant needs, so cleaning leaves them alone and
`as_of=<savepoint name>` keeps working. Restore brings the table back to that state: every data-changing
instant completed after it (and every pending one) is undone, newest first, under one `restore` instant
whose plan is recorded first so a crashed restore is finished, never left half-way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stitchlake.errors import BusyError, NotFoundError, UsageError
from stitchlake.layout.fsview import FileSystemView
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import Timeline, delete_instant
from stitchlake.transaction import Transaction

if TYPE_CHECKING:
    from stitchlake.table import Table

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")
#: Instants a restore undoes: they change data (or pin states that will no longer exist).
UNDONE_BY_RESTORE = (Action.DELTACOMMIT, Action.COMPACTION, Action.ERASE, Action.SAVEPOINT)


@dataclass
class Savepoint:
    instant: str
    name: str | None
    savepoint_of: str
    of_instant: str
    files: int

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class RestoreResult:
    instant: str
    savepoint_of: str
    undone: list[str] = field(default_factory=list)
    deleted_files: int = 0
    message: str = ""


def savepoint_time(table: Table, timeline: Timeline, name: str) -> str | None:
    """The completion time a savepoint name pins, or None if `name` names no savepoint."""
    if is_time(str(name)):
        return None
    for instant in reversed(timeline.completed([Action.SAVEPOINT])):
        meta = timeline.metadata(instant)
        if meta.get("name") == name:
            return str(meta["savepoint_of"])
    return None


def list_savepoints(table: Table, timeline: Timeline | None = None) -> list[Savepoint]:
    timeline = timeline or table.timeline()
    out = []
    for instant in timeline.completed([Action.SAVEPOINT]):
        meta = timeline.metadata(instant)
        out.append(
            Savepoint(
                instant.requested,
                meta.get("name"),
                str(meta["savepoint_of"]),
                str(meta.get("instant")),
                len(meta.get("files", [])),
            )
        )
    return out


def find(table: Table, timeline: Timeline, which: str) -> tuple[Instant, dict[str, Any]]:
    """A savepoint by name, by its own instant time, or by the instant it pins."""
    for instant in timeline.completed([Action.SAVEPOINT]):
        meta = timeline.metadata(instant)
        if which in (meta.get("name"), instant.requested, meta.get("instant"), meta.get("savepoint_of")):
            return instant, meta
    known = ", ".join(s.name or s.instant for s in list_savepoints(table, timeline)) or "none"
    raise NotFoundError(f"no savepoint {which!r} (savepoints: {known})")


def create(table: Table, instant_time: str | None = None, name: str | None = None) -> Savepoint:
    """Pin the state as of a completed instant (default: the latest data-changing one)."""
    from stitchlake.services.archive import load_checkpoint
    from stitchlake.services.clean import needed_as_of

    table.require()
    if name is not None and (not NAME.match(name) or is_time(name)):
        raise UsageError(f"savepoint name {name!r}: use letters, digits, _ . - (not a bare instant time)")

    def plan(timeline: Timeline, _requested: str) -> dict[str, Any]:
        if name is not None and any(s.name == name for s in list_savepoints(table, timeline)):
            raise UsageError(f"a savepoint named {name!r} already exists; delete it first or pick another name")
        if timeline.pending([Action.CLEAN]):
            raise BusyError("a clean is running; create the savepoint after it finishes")
        if instant_time is None:
            target = timeline.latest_completed([Action.DELTACOMMIT, Action.COMPACTION, Action.ERASE])
            if target is None:
                raise UsageError("the table has no completed commit to savepoint yet")
        else:
            target = timeline.get(instant_time)
            if target is None or not target.is_completed:
                raise NotFoundError(f"{instant_time} is not a completed instant on the active timeline")
        view = FileSystemView.build(timeline, load_checkpoint(table.storage))
        at = target.completed or ""
        view.latest_slices(at)  # raises if files that state needs were already cleaned
        return {"savepoint_of": at, "instant": target.requested, "name": name, "files": sorted(needed_as_of(view, at))}

    txn = Transaction.begin_planned(table, Action.SAVEPOINT, plan=plan)
    assert txn is not None
    content = txn.plan
    done = txn.complete({k: content[k] for k in ("savepoint_of", "instant", "name", "files")})
    return Savepoint(done.requested, name, content["savepoint_of"], content["instant"], len(content["files"]))


def delete(table: Table, which: str) -> Savepoint:
    """Unpin a savepoint (its files become cleanable)."""
    table.require()
    timeline = table.timeline()
    instant, meta = find(table, timeline, which)
    with table.lock():
        delete_instant(table.storage, instant)
    return Savepoint(
        instant.requested,
        meta.get("name"),
        str(meta["savepoint_of"]),
        str(meta.get("instant")),
        len(meta.get("files", [])),
    )


def restore(table: Table, which: str, force: bool = False) -> RestoreResult:
    """Bring the table back to a savepoint's state."""
    txn = begin_restore(table, which, force)
    return _execute(table, txn, txn.plan)


def begin_restore(table: Table, which: str, force: bool = False) -> Transaction:
    """Check, plan and request the restore (its whole plan is recorded before anything is undone)."""
    from stitchlake.services.rollback import _target_json, expired

    table.require()
    timeline = table.timeline()
    savepoint, meta = find(table, timeline, which)
    at = str(meta["savepoint_of"])
    view = table.view(timeline)
    if view.horizon is not None and at < view.horizon:
        raise UsageError(f"savepoint {which} is older than the archived timeline ({view.horizon}); cannot restore")
    live = [i for i in timeline.pending() if not expired(table, i)]
    if live and not force:
        shown = ", ".join(f"{i.action} {i.requested}" for i in live)
        raise BusyError(f"live writers are running ({shown}); stop them or wait, or pass --force to roll them back too")

    def plan(fresh: Timeline, _requested: str) -> dict[str, Any]:
        undone = [i for i in fresh.completed(UNDONE_BY_RESTORE, since=at) if i.requested != savepoint.requested] + [
            i for i in fresh.pending() if i.action != Action.RESTORE
        ]
        undone.sort(key=lambda i: i.completed or i.requested, reverse=True)
        return {"savepoint": which, "savepoint_of": at, "targets": [_target_json(table, fresh, i) for i in undone]}

    txn = Transaction.begin_planned(table, Action.RESTORE, plan=plan)
    assert txn is not None
    return txn


def _execute(table: Table, txn: Transaction, content: dict[str, Any]) -> RestoreResult:
    from stitchlake.services.rollback import undo

    deleted = sum(undo(table, target) for target in content["targets"])
    undone = [t["requested"] for t in content["targets"]]
    done = txn.complete({"savepoint": content["savepoint"], "savepoint_of": content["savepoint_of"], "undone": undone})
    return RestoreResult(
        done.requested,
        content["savepoint_of"],
        undone,
        deleted,
        f"restored to {content['savepoint_of']}: undid {len(undone)} instant(s)",
    )


def finish_restore(table: Table, timeline: Timeline, instant: Instant) -> RestoreResult:
    """Finish a crashed restore from its recorded plan."""
    return _execute(table, Transaction.resume(table, instant, "restore"), timeline.requested_content(instant))
