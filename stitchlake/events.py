"""From a landing file to a stream's events: read, validate, and judge the whole file — once, for every engine.

The in-process engine calls `from_landing` in a thread per file; Spark tasks call it on the executors. Rows carry
their position (file ordinal, row), so "a later row counts as the later arrival" holds across the files of one
ingest whichever engine reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stitchlake.badrows import QUARANTINE, file_rejection, quarantine_file
from stitchlake.batch import Batch, prepare, required_columns
from stitchlake.config import SourceFormat, StreamSpec
from stitchlake.errors import InputRejected
from stitchlake.io.landing import LandingFile, describe, positions, read_landing
from stitchlake.storage import storage_for
from stitchlake.timeline.metadata import QuarantinedFile

if TYPE_CHECKING:
    from stitchlake.table import Table


@dataclass
class LandingEvents:
    """A landing file's events (good rows, and bad rows with their reasons), or why the whole file was set aside."""

    file: LandingFile
    batch: Batch | None = None
    rejected: QuarantinedFile | None = None


def wanted_columns(table: Table, stream: StreamSpec) -> list[str]:
    """What to read of a landing file: key, partition and stream columns, and the delete marker."""
    columns = [c.name for c in required_columns(table.config, stream)]
    if stream.deletes:
        columns.append(stream.deletes.column)
    return columns


def from_landing(
    table: Table, stream: StreamSpec, file: LandingFile, ordinal: int, instant: str, mark: Callable[[str], None]
) -> LandingEvents:
    """Read and validate one landing file. Under `bad_rows: quarantine` a file that cannot be read, or that lacks
    a column, is set aside whole (consumed, with its reason) instead of blocking its stream on every run."""
    assert stream.source is not None
    options = table.storage_options
    wanted = wanted_columns(table, stream)
    # A JSON line is one event, not a schema: a field missing from every line reads null. Columns `stitch alter`
    # added may be missing from any input: its events carry the column's default.
    fill = dict.fromkeys(wanted) if stream.source.format == SourceFormat.JSON else {}
    fill.update(table.late_columns(stream.name))
    try:
        data = read_landing(stream.source, file, wanted, options)
        batch = prepare(
            table.config,
            stream,
            data,
            source=describe(file, options),
            pos=positions(ordinal, data.num_rows),
            fill=fill,
        )
    except InputRejected as exc:
        if table.config.bad_rows != QUARANTINE:
            raise file_rejection(exc) from None
        try:
            raw: bytes | None = storage_for(file.root, options).read_bytes(file.path)
        except FileNotFoundError:
            raw = None
        return LandingEvents(file, rejected=quarantine_file(table.storage, instant, file.name, raw, str(exc), mark))
    return LandingEvents(file, batch=batch)
