"""The reader: one entry for every kind of read (`scan` streams it, `read` gathers it).

It checks the arguments, resolves the times and sends the read to the snapshot reader (`read.snapshot`) or the change
feed (`read.changes`); both stream through a `read.scan.Scan`, so memory is bounded by the largest file slices, not
by the table. Gathering a scan into one Arrow table (`read`) is the caller's choice.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from stitchlake.errors import DataFileMissing, HistoryMoved, UsageError
from stitchlake.reading.changes import (
    CHANGE_COLUMNS,
    change_parts,
    change_scan,
    refuse_change_columns,
    split_change_filter,
)
from stitchlake.reading.filters import prune
from stitchlake.reading.options import ReadOptions, refuse_mixed_choices
from stitchlake.reading.scan import Scan
from stitchlake.reading.snapshot import (
    read_mode,
    refuse_reversed_range,
    resolve_time,
    resolve_until,
    snapshot_scan,
    wanted_columns,
)
from stitchlake.table.guards import undoes_history
from stitchlake.timeline.actions import UNDOES_HISTORY
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    from collections.abc import Iterator

    from stitchlake.table.handle import TableHandle

log = logging.getLogger(__name__)


def scan(table: TableHandle, options: ReadOptions = ReadOptions()) -> Scan:
    """Plan a read and return it as a stream of record batches, one file slice (one file group for changes) at a
    time: memory bounded by the largest slices, not the table (design.md §7). Planning happens now (a bad argument
    or time is refused here); rows are read when the scan is iterated, and every pass reads the same planned files.
    See design.md §7 for the modes; `since`/`until` give the incremental view (with `before_images`, an update is a
    `-U` row, the key as of `since`, then a `+U` row, and a delete keeps the deleted values)."""
    options = replace(options, mode=read_mode(options.mode))
    table.require()
    refuse_mixed_choices(ReadMode(options.mode), options.as_of, options.since, options.until, options.before_images)
    try:
        return _plan(table, options)
    except (DataFileMissing, HistoryMoved):
        # An archive or restore removed the instants we listed (or a clean a file planning reads): plan again.
        return _plan(table, options)


def read(table: TableHandle, options: ReadOptions = ReadOptions()) -> pa.Table:
    """The rows `scan` streams, gathered into one Arrow table: whole in memory, which is the caller's choice."""
    try:
        return scan(table, options).read_all(resume=False)
    except (DataFileMissing, HistoryMoved):
        # A clean may remove a slice between our planning and our reading (a compaction replaced it), an archive
        # or restore the instants we listed: plan the whole read again from the new timeline, so the rows are one
        # state of the table. A file still missing then is damage, and the second error says so.
        return scan(table, options).read_all(resume=False)


def _plan(table: TableHandle, options: ReadOptions) -> Scan:
    mode, as_of, since, until = read_mode(options.mode), options.as_of, options.since, options.until
    columns, filter, before_images = options.columns, options.filter, options.before_images
    if columns is not None and not list(columns):  # a table of no column has no rows either: a count read 0
        raise UsageError("columns: none named; name at least one (a key column is enough to count rows)")
    timeline = table.read_timeline()
    view = table.view(timeline)
    _warn_if_undoing(timeline)
    if since is not None or until is not None:
        end = resolve_until(table, timeline, until)
        table = table.at_time(end)  # changes are shown with the columns of their end
        table_filter, on_changes = split_change_filter(filter)
        asked = None if columns is None or not set(columns) & set(CHANGE_COLUMNS) else list(columns)
        start = resolve_time(table, timeline, since, since=True)
        if until is not None:
            refuse_reversed_range(start, end)
        wanted = wanted_columns(table.config, [c for c in columns if c not in CHANGE_COLUMNS] if columns else columns)
        pruning = prune(table.config, table_filter)
        ended = table

        def changes() -> Iterator[pa.Table]:
            return change_parts(ended, timeline, view, start, end, wanted, pruning, before_images)

        return change_scan(table.config, wanted, changes, on_changes, asked)
    refuse_change_columns(columns, filter, as_of)
    at = resolve_time(table, timeline, as_of)
    table = table.at_time(at)  # time travel shows the columns of its time
    latest = timeline.latest_completed()
    planned = (latest.completed or "") if latest is not None else ""
    return snapshot_scan(table, view, at, wanted_columns(table.config, columns), mode, filter, planned)


def _warn_if_undoing(timeline: Timeline) -> None:
    """Say so when a restore (or a rollback of commits) is pending: the rows read are a state partway through it,
    and the next read after it finishes will differ. A read never finishes it; its own process, or `stitch
    rollback --failed` after a crash, does."""
    for instant in timeline.pending(UNDOES_HISTORY):
        if undoes_history(timeline, instant):
            log.warning(
                "%s %s is undoing commits and has not finished: this read shows the table partway through it "
                "(if its process died, `stitch rollback --failed` finishes it)",
                instant.action,
                instant.requested,
            )
