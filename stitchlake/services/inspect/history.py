"""What `stitch timeline show` lists: instants newest first, filtered, each with its stream, rows and files.

Content is read lazily, so showing the newest 20 of 10,000 instants reads 20 files (with a stream filter, only
until 20 matches are found); the action and state filters need no file reads at all.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.timeline.clock import seconds_between, to_datetime
from stitchlake.timeline.metadata import Commit, DeltaCommit, DeltaCommitPlan, Plan, PublishCommit
from stitchlake.vocabulary import Action, State

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.instant import Instant
    from stitchlake.timeline.timeline import Timeline


@dataclass(frozen=True)
class InstantSummary:
    """What a listing says of an instant beyond its name: its stream, rows and files (when it has them)."""

    stream: str | None = None
    rows: int | None = None
    files: int | None = None


@dataclass(frozen=True)
class InstantRecord:
    """One listed instant."""

    instant: str
    action: Action
    state: State
    requested_at: str
    completed: str | None
    completed_at: str | None
    duration_s: float | None
    stream: str | None
    rows: int | None
    files: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class InstantListing:
    """The instants picked, how many matched (None when older ones were not searched), and whether more exist."""

    records: list[InstantRecord]
    matched: int | None
    more: bool


def iso_time(instant_time: str) -> str:
    """An instant time as ISO 8601 in UTC, with milliseconds."""
    return to_datetime(instant_time).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instant_datetime(instant_time: str) -> dt.datetime:
    """An instant time (`yyyyMMddHHmmssSSS`, UTC) as an aware datetime."""
    return to_datetime(instant_time)


def summarize(record: Plan | Commit) -> InstantSummary:
    if isinstance(record, DeltaCommit):
        return InstantSummary(record.stream, record.rows, len(record.added))
    if isinstance(record, PublishCommit):
        return InstantSummary(None, record.rows)
    if isinstance(record, DeltaCommitPlan):
        return InstantSummary(record.stream)
    if isinstance(record, Commit) and record.added_files:
        return InstantSummary(None, sum(f.rows for f in record.added_files), len(record.added_files))
    return InstantSummary()


def _summary(timeline: Timeline, instant: Instant) -> InstantSummary:
    """From its commit once completed, from its plan before."""
    return summarize(timeline.commit(instant) if instant.is_completed else timeline.plan(instant))


def select_instants(
    newest_first: Iterable[Instant], limit: int, stream: str | None, content: Callable[[Instant], InstantSummary]
) -> tuple[list[tuple[Instant, InstantSummary]], bool]:
    """The first `limit` instants (0: all) of `stream`, reading each one's content only when it is examined; and
    whether candidates were left unexamined."""
    picked: list[tuple[Instant, InstantSummary]] = []
    for instant in newest_first:
        if limit and len(picked) >= limit:
            return picked, True
        found = content(instant)
        if stream is None or found.stream == stream:
            picked.append((instant, found))
    return picked, False


def record_of(instant: Instant, summary: InstantSummary) -> InstantRecord:
    return InstantRecord(
        instant=instant.requested,
        action=instant.action,
        state=instant.state,
        requested_at=iso_time(instant.requested),
        completed=instant.completed,
        completed_at=iso_time(instant.completed) if instant.completed else None,
        duration_s=seconds_between(instant.requested, instant.completed) if instant.completed else None,
        stream=summary.stream,
        rows=summary.rows,
        files=summary.files,
    )


def list_instants(
    table: TableHandle,
    limit: int = 20,
    action: Action | None = None,
    state: State | None = None,
    stream: str | None = None,
    archived: bool = False,
) -> InstantListing:
    """The newest `limit` instants (0: all) of the active timeline, or of the archive, matching the filters."""
    from stitchlake.timeline.archive import archived_instants

    if stream is not None:
        table.config.stream(stream)  # an unknown stream is a usage error that lists the streams
    content: Callable[[Instant], InstantSummary]
    if archived:
        found = {entry.instant: entry.commit for entry in archived_instants(table.storage)}
        instants = sorted(found, key=lambda instant: instant.requested)
        content = lambda instant: summarize(found[instant])  # noqa: E731 - a lookup, named by its use
    else:
        timeline = table.timeline()
        instants = timeline.instants
        content = functools.partial(_summary, timeline)
    candidates = [
        instant
        for instant in reversed(instants)
        if (action is None or instant.action == action) and (state is None or instant.state == state)
    ]
    picked, stopped = select_instants(candidates, limit, stream, content)
    # Without a stream filter the filters need no file reads, so the number of matches is known.
    matched = len(candidates) if stream is None else (None if stopped else len(picked))
    return InstantListing([record_of(instant, summary) for instant, summary in picked], matched, stopped)
