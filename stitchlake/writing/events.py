"""From a landing file or a Kafka offset range to a stream's events: read, validate, and judge the whole input —
once, for every engine.

The in-process engine calls `read_input` in a thread per input; Spark tasks call it on the executors. Rows carry
their position (file ordinal and row, or partition and offset), so "a later row counts as the later arrival" holds
across the inputs of one ingest whichever engine reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import BadRows, StreamSpec
from stitchlake.errors import InputRejected, LandingVanished
from stitchlake.io import kafka
from stitchlake.io.json_records import Judged
from stitchlake.io.landing import LandingFile, describe, positions, read_landing_rows, refuse_redelivered
from stitchlake.storage import storage_for
from stitchlake.timeline.metadata import OffsetRange, QuarantinedFile
from stitchlake.vocabulary import SourceFormat
from stitchlake.writing.badrows import file_rejection, quarantine_file
from stitchlake.writing.batch import LINE, REASON, ROW, SOURCE, Batch, prepare, required_columns

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


#: What an ingest reads: landing files, or offset ranges of a Kafka topic's partitions.
Input = LandingFile | OffsetRange


@dataclass
class LandingEvents:
    """An input's events (good rows, and bad rows with their reasons), or why a whole landing file was set aside."""

    file: Input
    batch: Batch | None = None
    rejected: QuarantinedFile | None = None


def wanted_columns(table: TableHandle, stream: StreamSpec) -> list[str]:
    """What to read of a landing file: key, partition and stream columns, and the delete marker."""
    columns = [c.name for c in required_columns(table.config, stream)]
    if stream.deletes:
        columns.append(stream.deletes.column)
    return columns


def wanted_types(table: TableHandle, stream: StreamSpec) -> dict[str, pa.DataType | None]:
    """The table type of each column `wanted_columns` reads (the delete marker: None, any value, as text)."""
    from stitchlake.types import arrow_type

    types: dict[str, pa.DataType | None] = {c.name: arrow_type(c.type) for c in required_columns(table.config, stream)}
    if stream.deletes:
        types[stream.deletes.column] = None
    return types


def _show_written(bad: pa.Table, shown: Mapping[str, Mapping[int, str]]) -> pa.Table:
    """Bad rows with each value of the wrong JSON type as it was written (the reader left it null)."""
    rows = bad.column(ROW).to_pylist()
    for name, written in shown.items():
        if name not in bad.column_names or not any(row in written for row in rows):
            continue
        index = bad.schema.get_field_index(name)
        values = bad.column(index).to_pylist()
        text = [written.get(row, value) for row, value in zip(rows, values, strict=True)]
        bad = bad.set_column(index, name, pa.array(text, pa.string()))
    return bad


def _with_lines(bad: pa.Table, judged: Judged) -> pa.Table:
    """Bad rows with the line of the file each came from (1 for the first): what an editor shows."""
    if judged.lines is None:
        return bad
    lines = judged.lines()
    return bad.append_column(LINE, pa.array(lines[bad.column(ROW).to_numpy()], pa.int64()))


def from_landing(
    table: TableHandle, stream: StreamSpec, file: LandingFile, ordinal: int, instant: str, mark: Callable[[str], None]
) -> LandingEvents:
    """Read and validate one landing file. Under `bad_rows: quarantine` a file that cannot be read, or that lacks
    a column, is set aside whole (consumed, with its reason) instead of blocking its stream on every run."""
    assert stream.source is not None
    options = table.storage_options
    wanted = wanted_columns(table, stream)
    # A JSON line is one event, not a schema: a field missing from every line reads null. Columns `stitch alter`
    # added may be missing from any input, or any record: its events carry the column's default.
    late = table.late_columns(stream.name)
    fill = dict.fromkeys(wanted) if stream.source.format == SourceFormat.JSON else {}
    fill.update(late)
    defaults = _write_defaults(late)
    try:
        types = wanted_types(table, stream)
        read = read_landing_rows(stream.source, file, wanted, options, track=list(defaults), types=types)
        data = read.table
        judged = read.judged
        batch = prepare(
            table.config,
            stream,
            data,
            source=describe(file, options),
            pos=positions(ordinal, data.num_rows),
            fill=fill,
            judged=judged.reasons if judged else None,
        )
        batch = _carry_defaults(batch, read.absent, defaults)
        if judged is not None and batch.bad is not None and batch.bad.num_rows:
            batch.bad = _with_lines(_show_written(batch.bad, judged.shown), judged)
    except LandingVanished:
        raise
    except InputRejected as exc:
        if table.config.bad_rows != BadRows.QUARANTINE:
            raise file_rejection(exc) from None
        try:
            raw, version = storage_for(file.root, options).read_versioned(file.path)
            refuse_redelivered(file, version, describe(file, options))  # the copy set aside is the version judged
        except FileNotFoundError:  # gone before its copy: set aside with no copy, it would be consumed for good
            raise LandingVanished(
                f"{exc}; and the file vanished before it could be set aside (moved or deleted meanwhile); nothing "
                "was ingested: run again",
                file=exc.file,
            ) from None
        return LandingEvents(file, rejected=quarantine_file(table.storage, instant, file.name, raw, str(exc), mark))
    return LandingEvents(file, batch=batch)


def read_input(
    table: TableHandle, stream: StreamSpec, item: Input, ordinal: int, instant: str, mark: Callable[[str], None]
) -> LandingEvents:
    """One input of an ingest, whichever kind it is."""
    if isinstance(item, OffsetRange):
        return from_kafka(table, stream, item)
    return from_landing(table, stream, item, ordinal, instant, mark)


def from_kafka(table: TableHandle, stream: StreamSpec, chunk: OffsetRange) -> LandingEvents:
    """Read and validate one partition's offset range. A value that does not decode is a bad row (its raw value,
    topic, partition and offset kept), so `bad_rows` decides, as for any row; a range the topic no longer holds
    is refused whole (InputRejected), whatever the policy: skipping it is `--reset-offsets`, said out loud."""
    source = stream.source
    assert source is not None and source.is_kafka
    late = table.late_columns(stream.name)
    defaults = _write_defaults(late)
    decoded = kafka.decode(
        source, chunk, kafka.read_range(source, chunk), track=list(defaults), types=wanted_types(table, stream)
    )
    data, undecodable, absent = decoded.rows, decoded.undecodable, decoded.absent
    fill = dict.fromkeys(wanted_columns(table, stream)) if source.value_format == "json" else {}
    fill.update(late)
    origin = f"Kafka topic {chunk.topic} partition {chunk.partition}"
    if data.num_rows:
        positions_ = kafka.positions(chunk, data.column(kafka.OFFSET))
        batch = prepare(table.config, stream, data, source=origin, pos=positions_, fill=fill, judged=decoded.reasons)
        batch = _carry_defaults(batch, absent, defaults)
        if decoded.shown and batch.bad is not None and batch.bad.num_rows:
            batch.bad = _show_written(batch.bad, decoded.shown)
    else:  # nothing, or only values that did not decode
        batch = Batch(rows=_empty(table, stream), pos=np.zeros(0, np.int64), deleted=np.zeros(0, bool))
    bad = batch.bad
    if bad is not None and bad.num_rows:  # a bad row is named by its offset, not by its place in this read
        bad = bad.set_column(bad.schema.get_field_index(ROW), ROW, pc.cast(bad.column(kafka.OFFSET), pa.int64()))
    if undecodable.num_rows:
        rows = pa.table(
            {
                kafka.TOPIC: undecodable.column(kafka.TOPIC),
                kafka.PARTITION: pc.cast(undecodable.column(kafka.PARTITION), pa.string()),
                kafka.OFFSET: pc.cast(undecodable.column(kafka.OFFSET), pa.string()),
                kafka.VALUE: undecodable.column(kafka.VALUE),
                REASON: undecodable.column("reason"),
                SOURCE: pa.array([origin] * undecodable.num_rows, pa.string()),
                ROW: undecodable.column(kafka.OFFSET),
            }
        )
        bad = rows if bad is None or not bad.num_rows else pa.concat_tables([bad, rows], promote_options="permissive")
    batch.bad = bad
    return LandingEvents(chunk, batch=batch)


def _write_defaults(late: Mapping[str, Any]) -> dict[str, Any]:
    """Added columns that have a default: the ones a record without the field reads differently from null."""
    return {name: value for name, value in late.items() if value is not None}


def _carry_defaults(batch: Batch, absent: Mapping[str, np.ndarray], defaults: Mapping[str, Any]) -> Batch:
    """Records that lack an added column's field carry its default, record by record (Iceberg's write-default);
    a record that says null keeps null. `absent` masks the input's rows (`io.landing`, `io.kafka` tell which
    records lack the field where others have it); bad rows, named by their row in the input, are not in `batch`."""
    if not absent:
        return batch
    good = np.ones(len(next(iter(absent.values()))), dtype=bool)
    if batch.bad is not None and batch.bad.num_rows:
        good[batch.bad.column(ROW).to_numpy()] = False
    rows = batch.rows
    for name, mask in absent.items():
        index = rows.schema.get_field_index(name)
        column = rows.column(index)
        value = pa.scalar(defaults[name], column.type)
        rows = rows.set_column(index, name, pc.if_else(pa.array(mask[good]), value, column))
    batch.rows = rows
    return batch


def _empty(table: TableHandle, stream: StreamSpec) -> pa.Table:
    """No rows, in the stream's table types (a range whose records were all undecodable)."""
    from stitchlake.types import arrow_type

    columns = required_columns(table.config, stream)
    return pa.table({c.name: pa.array([], arrow_type(c.type)) for c in columns})
