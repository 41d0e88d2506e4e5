"""Savepoint lookup: which state a savepoint name pins (time travel and restore resolve names here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stitchlake.errors import NotFoundError, UsageError
from stitchlake.paths import purged_marker
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import EraseCommit, SavepointCommit
from stitchlake.timeline.timeline import Timeline


@dataclass(frozen=True)
class Savepoint:
    instant: str
    name: str | None
    savepoint_of: str
    of_instant: str
    files: int

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def savepoints(timeline: Timeline) -> list[tuple[Instant, SavepointCommit]]:
    out = []
    for instant in timeline.completed([Action.SAVEPOINT]):
        commit = timeline.commit(instant)
        assert isinstance(commit, SavepointCommit)
        out.append((instant, commit))
    return out


def summary(instant: Instant, commit: SavepointCommit) -> Savepoint:
    return Savepoint(instant.requested, commit.name, commit.savepoint_of, commit.instant, len(commit.files))


def savepoint_time(timeline: Timeline, name: str) -> str | None:
    """The completion time a savepoint name pins, or None if `name` names no savepoint."""
    if is_time(str(name)):
        return None
    named = _named(savepoints(timeline), name)
    return named[0][1].savepoint_of if named else None


def _named(found: list[tuple[Instant, SavepointCommit]], name: str) -> list[tuple[Instant, SavepointCommit]]:
    """The savepoints named `name`: one, or none; two (made by overlapping creates before they refused that) are
    refused (exit 2), since a read and a restore could each take another."""
    named = [(instant, commit) for instant, commit in found if commit.name == name]
    if len(named) > 1:
        instants = ", ".join(instant.requested for instant, _commit in named)
        raise UsageError(
            f"{len(named)} savepoints are named {name!r} ({instants}): name one by its own instant, and delete the "
            "other (`stitch savepoint delete --name <instant>`)"
        )
    return named


def find(timeline: Timeline, which: str) -> tuple[Instant, SavepointCommit]:
    """A savepoint by name, by its own instant time, or by the instant it pins."""
    found = savepoints(timeline)
    for instant, commit in found:
        if which == instant.requested:
            return instant, commit
    by_name = _named(found, which)
    if by_name:
        return by_name[0]
    pinning = [(instant, commit) for instant, commit in found if which in (commit.instant, commit.savepoint_of)]
    if len(pinning) > 1:  # two daily savepoints of a quiet table pin one state: which one is meant is not said
        named = ", ".join(commit.name or instant.requested for instant, commit in pinning)
        raise UsageError(f"{len(pinning)} savepoints pin {which} ({named}): name one by its name or its own instant")
    if pinning:
        return pinning[0]
    known = ", ".join(commit.name or instant.requested for instant, commit in found) or "none"
    raise NotFoundError(f"no savepoint {which!r} (savepoints: {known})")


def pinned_since(timeline: Timeline) -> str | None:
    """The oldest state any savepoint pins (archive must keep history from there)."""
    return min((commit.savepoint_of for _i, commit in savepoints(timeline)), default=None)


def unfinished_purges(timeline: Timeline, after: str = "") -> list[Instant]:
    """Completed erases with `--purge` (completed after the state `after`) whose purge has not finished.

    The erase commits before its purge deletes the older copies; a purge that failed or was killed leaves them,
    and the savepoints pinning them, until `stitch rollback --failed` finishes it."""
    out = []
    for instant in timeline.completed([Action.ERASE]):
        if (instant.completed or "") > after:
            commit = timeline.commit(instant)
            marked = isinstance(commit, EraseCommit) and commit.purge and commit.purge_marked
            if marked and not timeline.storage.exists(purged_marker(instant.requested)):
                out.append(instant)
    return out


def refuse_unfinished_purge(timeline: Timeline, at: str) -> None:
    """A state from before an erase whose purge did not finish may still hold its keys: refused (exit 2)."""
    unfinished = unfinished_purges(timeline, at)
    if unfinished:
        raise UsageError(
            f"the state of {at} is older than erase {unfinished[0].requested} (--purge), whose purge did not finish: "
            "its older copies may still hold the erased keys. `stitch rollback --failed` finishes the purge"
        )


def purge_after(timeline: Timeline, at: str) -> Instant | None:
    """The first erase with `--purge` completed after the state `at` (a completion time), or None.

    A purge removes the erased keys from every older state, so a state from before it can no longer be pinned
    (a savepoint made while the purge ran would keep the copies it deletes)."""
    for instant in timeline.completed([Action.ERASE]):
        if (instant.completed or "") > at:
            commit = timeline.commit(instant)
            if isinstance(commit, EraseCommit) and commit.purge:
                return instant
    return None
