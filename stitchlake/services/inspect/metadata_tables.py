"""Metadata tables (issue 38): the table's own metadata as Arrow tables, for `stitch sql`, Spark and `stitch report`.

Paimon names them `t$files`, Iceberg `t.files`; here they are `t$<name>` (and `<table name>$<name>`) in
`stitch sql`, and `stitchlake.spark.metadata.table(spark, path, name)` in Spark, with the same names and columns.
Each is built from metadata only (the timeline, the archive, the file-system view, savepoints, rescale history,
the offsets the commits recorded; for Kafka lag, the broker's end offsets) and never reads a data file. They are
snapshots: built when a query names them, from one timeline read, and nothing written to them reaches the table.

- `timeline`: every instant (active, and archived ones with `archived` true): action, state, times, stream, rows,
  files and bytes it added (`stitch timeline show`'s records).
- `files`: every live data file (named by a completed instant, not removed by clean): file group, bucket, kind, the
  slice it belongs to, whether that is the latest slice, stream, rows, bytes, its instant, the savepoints pinning it.
- `file_groups`: each file group's latest slice: base file, logs piled up on it in all and per stream, bytes.
- `streams`: each stream's last commit and totals; a Kafka-fed stream one row per topic partition with the next
  offset the table recorded, the topic's end and the lag (null, with a `note`, when the broker is not reachable).
- `savepoints`: each savepoint, the state it pins and the files and bytes it keeps from clean.
- `rescales`: the bucket counts in force over time: the table's initial count, then each completed rescale per
  partition it rewrote (from and to).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stitchlake.errors import UsageError
from stitchlake.services.inspect.history import record_of, summarize
from stitchlake.timeline.archive import archived_instants
from stitchlake.timeline.clock import to_datetime
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import Commit, DeltaCommit, Plan
from stitchlake.timeline.savepoints import savepoints

if TYPE_CHECKING:
    import datetime as dt

    import pyarrow as pa

    from stitchlake.layout.fsview import FileSystemView
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.instant import Instant
    from stitchlake.timeline.timeline import Timeline

#: The metadata tables, in the order documentation and reports list them.
NAMES = ("timeline", "files", "file_groups", "streams", "savepoints", "rescales")
#: `t$files`: what joins a table's name and a metadata table's in `stitch sql` (Paimon's spelling).
SEPARATOR = "$"
#: How long `streams` waits for a Kafka broker before giving up on the lag (it never fails for that).
KAFKA_TIMEOUT_S = 3.0


@dataclass
class Snapshot:
    """One read of the table's metadata that every metadata table of a query is built from (so they agree)."""

    table: TableHandle
    timeline: Timeline
    view: FileSystemView
    kafka_timeout_s: float = KAFKA_TIMEOUT_S
    built: dict[str, pa.Table] = field(default_factory=dict)

    @classmethod
    def take(cls, table: TableHandle, kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> Snapshot:
        table.require()
        timeline = table.timeline()
        return cls(table, timeline, table.view(timeline), kafka_timeout_s)

    def get(self, name: str) -> pa.Table:
        if name not in self.built:
            self.built[name] = BUILDERS[check_name(name)](self)
        return self.built[name]


def check_name(name: str) -> str:
    if name not in NAMES:
        raise UsageError(f"no metadata table {name!r}; there are: {', '.join(NAMES)}")
    return name


def build(table: TableHandle, name: str, kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> pa.Table:
    """One metadata table as Arrow (its schema is `schema(name)`, whatever the table holds)."""
    check_name(name)
    return Snapshot.take(table, kafka_timeout_s).get(name)


def sql_tables(table: TableHandle, kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> dict[str, Callable[[], pa.Table]]:
    """What `stitch sql` may register: `t$<name>` and `<table name>$<name>`, each built on first use from one shared
    snapshot of the metadata (`stitchlake.reading.sql` calls only those a query names)."""
    from stitchlake.reading.sql import SHORT_NAME

    snapshot = functools.cache(lambda: Snapshot.take(table, kafka_timeout_s))
    out: dict[str, Callable[[], pa.Table]] = {}
    for prefix in dict.fromkeys([SHORT_NAME, table.config.table.name]):
        for name in NAMES:
            out[f"{prefix}{SEPARATOR}{name}"] = functools.partial(lambda n: snapshot().get(n), name)
    return out


# ------------------------------------------------------------------------------------------------ schemas


def schema(name: str) -> pa.Schema:
    import pyarrow as pa

    text, i32, i64, f64, flag = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
    time = pa.timestamp("ms", tz="UTC")
    per_stream = pa.map_(pa.string(), pa.int64())
    fields: dict[str, list[tuple[str, pa.DataType]]] = {
        "timeline": [
            ("instant", text),
            ("action", text),
            ("state", text),
            ("requested_at", time),
            ("completed", text),
            ("completed_at", time),
            ("duration_s", f64),
            ("stream", text),
            ("rows", i64),
            ("files", i64),
            ("bytes", i64),
            ("archived", flag),
        ],
        "files": [
            ("path", text),
            ("partition", text),
            ("file_group", text),
            ("bucket", i32),
            ("buckets", i32),
            ("kind", text),
            ("stream", text),
            ("rows", i64),
            ("bytes", i64),
            ("instant", text),
            ("completed", text),
            ("completed_at", time),
            ("slice", text),
            ("latest", flag),
            ("schema_version", i32),
            ("savepoints", pa.list_(text)),
        ],
        "file_groups": [
            ("partition", text),
            ("file_group", text),
            ("bucket", i32),
            ("buckets", i32),
            ("slice", text),
            ("base_file", text),
            ("base_rows", i64),
            ("base_bytes", i64),
            ("log_files", i64),
            ("log_rows", i64),
            ("log_bytes", i64),
            ("log_files_per_stream", per_stream),
            ("log_bytes_per_stream", per_stream),
            ("bytes", i64),
            ("pending_rewrite", text),
        ],
        "streams": [
            ("stream", text),
            ("source", text),
            ("commits", i64),
            ("rows", i64),
            ("last_instant", text),
            ("last_completed", text),
            ("last_completed_at", time),
            ("last_rows", i64),
            ("last_files", i64),
            ("landing_files", i64),
            ("log_files", i64),
            ("log_bytes", i64),
            ("topic", text),
            ("partition", i32),
            ("next_offset", i64),
            ("end_offset", i64),
            ("lag", i64),
            ("note", text),
        ],
        "savepoints": [
            ("instant", text),
            ("name", text),
            ("savepoint_of", text),
            ("savepoint_of_at", time),
            ("of_instant", text),
            ("files", i64),
            ("bytes", i64),
        ],
        "rescales": [
            ("instant", text),
            ("completed", text),
            ("completed_at", time),
            ("partition", text),
            ("whole_table", flag),
            ("from_buckets", i32),
            ("to_buckets", i32),
        ],
    }
    return pa.schema(fields[check_name(name)])


def _arrow(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schema(name))


def _at(instant_time: str | None) -> dt.datetime | None:
    return to_datetime(instant_time) if instant_time else None


# ------------------------------------------------------------------------------------------------ builders


def timeline_rows(snap: Snapshot) -> pa.Table:
    rows: list[dict[str, Any]] = []
    archived = archived_instants(snap.table.storage)
    active = {i.requested for i in snap.timeline.instants}
    listed: list[tuple[Instant, Plan | Commit, bool]] = [
        (entry.instant, entry.commit, True) for entry in archived if entry.instant.requested not in active
    ]
    for instant in snap.timeline.instants:
        record = snap.timeline.commit(instant) if instant.is_completed else snap.timeline.plan(instant)
        listed.append((instant, record, False))
    listed.sort(key=lambda item: item[0].requested)
    for instant, content, was_archived in listed:
        shown = record_of(instant, summarize(content))
        added = content.added_files if isinstance(content, Commit) else ()
        rows.append(
            {
                "instant": shown.instant,
                "action": shown.action,
                "state": shown.state,
                "requested_at": _at(instant.requested),
                "completed": shown.completed,
                "completed_at": _at(instant.completed),
                "duration_s": shown.duration_s,
                "stream": shown.stream,
                "rows": shown.rows,
                "files": shown.files,
                "bytes": sum(f.bytes for f in added) if added else None,
                "archived": was_archived,
            }
        )
    return _arrow("timeline", rows)


def _pinned(snap: Snapshot) -> dict[str, list[str]]:
    """Data file path -> the savepoints (by name, else instant) that pin it."""
    out: dict[str, list[str]] = {}
    for instant, commit in savepoints(snap.timeline):
        for path in commit.files:
            out.setdefault(path, []).append(commit.name or instant.requested)
    return out


def files_rows(snap: Snapshot) -> pa.Table:
    view = snap.view
    pinned = _pinned(snap)
    rows: list[dict[str, Any]] = []
    for key in view.file_groups():
        slice_of: dict[str, str] = {}
        for fslice in view.slices(key, include_pending=False):
            for item in fslice.files:
                slice_of[item.path] = fslice.base_instant
        latest = view.latest_slice(key)
        latest_paths = {f.path for f in latest.files} if latest is not None else set()
        for item in view.groups[key]:
            if item.path in view.deleted:
                continue
            rows.append(
                {
                    "path": item.path,
                    "partition": item.partition,
                    "file_group": item.file_group,
                    "bucket": _bucket(item.file_group),
                    "buckets": view.buckets_of(item),
                    "kind": item.kind,
                    "stream": item.stream,
                    "rows": item.rows,
                    "bytes": item.bytes,
                    "instant": item.instant,
                    "completed": item.completed,
                    "completed_at": _at(item.completed),
                    "slice": slice_of.get(item.path) or None,
                    "latest": item.path in latest_paths,
                    "schema_version": item.schema_version,
                    "savepoints": pinned.get(item.path, []),
                }
            )
    return _arrow("files", rows)


def _bucket(file_group: str) -> int | None:
    return int(file_group) if file_group.isdigit() else None


def file_group_rows(snap: Snapshot) -> pa.Table:
    view = snap.view
    layout = view.layout()
    rows: list[dict[str, Any]] = []
    for key in view.file_groups():
        fslice = view.latest_slice(key)
        if fslice is None:
            continue  # a file group of an older bucket count, kept only for time travel until cleaned
        files: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for log in fslice.logs:
            stream = log.stream or ""
            files[stream] = files.get(stream, 0) + 1
            sizes[stream] = sizes.get(stream, 0) + log.bytes
        base = fslice.base
        rows.append(
            {
                "partition": key[0],
                "file_group": key[1],
                "bucket": _bucket(key[1]),
                "buckets": layout.buckets(key[0]),
                "slice": fslice.base_instant or None,
                "base_file": base.path if base else None,
                "base_rows": base.rows if base else 0,
                "base_bytes": base.bytes if base else 0,
                "log_files": len(fslice.logs),
                "log_rows": sum(f.rows for f in fslice.logs),
                "log_bytes": fslice.log_bytes,
                "log_files_per_stream": sorted(files.items()),
                "log_bytes_per_stream": sorted(sizes.items()),
                "bytes": fslice.bytes,
                "pending_rewrite": view.pending_rewrites.get(key),
            }
        )
    return _arrow("file_groups", rows)


def stream_rows(snap: Snapshot) -> pa.Table:
    from stitchlake.services.offsets import consumed_ranges, unrecorded_start
    from stitchlake.services.writes.ingest import consumed

    table, timeline = snap.table, snap.timeline
    totals: dict[str, dict[str, Any]] = {name: {"commits": 0, "rows": 0, "last": None} for name in table.config.streams}
    for instant in timeline.completed([Action.DELTACOMMIT]):
        commit = timeline.commit(instant)
        if not isinstance(commit, DeltaCommit) or commit.stream not in totals:
            continue
        entry = totals[commit.stream]
        entry["commits"] += 1
        entry["rows"] += commit.rows
        # Completion order: the last one seen completed last (what `stitch status` calls the latest).
        entry["last"] = (instant, commit)
    logs: dict[str, list[int]] = {name: [0, 0] for name in table.config.streams}
    for fslice in snap.view.latest_slices():
        for log in fslice.logs:
            if log.stream in logs:
                logs[log.stream][0] += 1
                logs[log.stream][1] += log.bytes
    rows: list[dict[str, Any]] = []
    for name, spec in table.config.streams.items():
        entry = totals[name]
        last = entry["last"]
        source = spec.source
        common: dict[str, Any] = {
            "stream": name,
            "source": str(source.format.value) if source is not None else None,
            "commits": entry["commits"],
            "rows": entry["rows"],
            "last_instant": last[0].requested if last else None,
            "last_completed": last[0].completed if last else None,
            "last_completed_at": _at(last[0].completed) if last else None,
            "last_rows": last[1].rows if last else None,
            "last_files": len(last[1].added) if last else None,
            "landing_files": None,
            "log_files": logs[name][0],
            "log_bytes": logs[name][1],
        }
        if source is None or not source.is_kafka:
            if source is not None:
                common["landing_files"] = len(consumed(table, timeline, name))
            rows.append(common)
            continue
        topic = str(source.topic)
        recorded = {p: r for (t, p), r in consumed_ranges(table, timeline, name).items() if t == topic}
        ends, note = _topic_ends(source, snap.kafka_timeout_s)
        partitions = sorted(set(recorded) | set(ends or {}))
        if not partitions:
            rows.append({**common, "topic": topic, "note": note})
            continue
        for partition in partitions:
            item = recorded.get(partition)
            held = (ends or {}).get(partition)
            next_offset = item.end if item is not None else None
            lag = None
            if held is not None:
                start = next_offset
                if start is None:
                    start = unrecorded_start(recorded, partition, held[0], held[1], source.starting_offsets)
                lag = max(0, held[1] - start)
            rows.append(
                {
                    **common,
                    "topic": topic,
                    "partition": partition,
                    "next_offset": next_offset,
                    "end_offset": held[1] if held is not None else None,
                    "lag": lag,
                    "note": note,
                }
            )
    return _arrow("streams", rows)


def _topic_ends(source: Any, timeout_s: float) -> tuple[dict[int, tuple[int, int]] | None, str | None]:
    """Per partition the topic's (earliest, end) offsets, or None and why when the broker does not answer in time."""
    from stitchlake.io import kafka

    quick = source.model_copy(update={"read_timeout_s": min(float(source.read_timeout_s), timeout_s)})
    try:
        return kafka.topic_state(quick).offsets, None
    except Exception as exc:  # never a failure: the lag is unknown, and the note says why
        return None, f"lag unknown: {exc}"


def savepoint_rows(snap: Snapshot) -> pa.Table:
    sizes = {f.path: f.bytes for items in snap.view.groups.values() for f in items}
    rows = [
        {
            "instant": instant.requested,
            "name": commit.name,
            "savepoint_of": commit.savepoint_of,
            "savepoint_of_at": _at(commit.savepoint_of),
            "of_instant": commit.instant,
            "files": len(commit.files),
            "bytes": sum(sizes.get(path, 0) for path in commit.files),
        }
        for instant, commit in savepoints(snap.timeline)
    ]
    return _arrow("savepoints", rows)


def rescale_rows(snap: Snapshot) -> pa.Table:
    rows: list[dict[str, Any]] = [
        {
            "instant": None,
            "completed": None,
            "completed_at": None,
            "partition": None,
            "whole_table": True,
            "from_buckets": None,
            "to_buckets": snap.table.base_buckets,
        }
    ]
    for record in snap.view.rescales:
        for partition, was in sorted(record.partitions.items()):
            rows.append(
                {
                    "instant": record.requested,
                    "completed": record.completed,
                    "completed_at": _at(record.completed),
                    "partition": partition,
                    "whole_table": record.whole_table,
                    "from_buckets": was,
                    "to_buckets": record.buckets,
                }
            )
        if not record.partitions:
            rows.append(
                {
                    "instant": record.requested,
                    "completed": record.completed,
                    "completed_at": _at(record.completed),
                    "partition": None,
                    "whole_table": record.whole_table,
                    "from_buckets": None,
                    "to_buckets": record.buckets,
                }
            )
    return _arrow("rescales", rows)


BUILDERS: Mapping[str, Callable[[Snapshot], pa.Table]] = {
    "timeline": timeline_rows,
    "files": files_rows,
    "file_groups": file_group_rows,
    "streams": stream_rows,
    "savepoints": savepoint_rows,
    "rescales": rescale_rows,
}
