"""`stitch delete --purge`: after an erase, every other copy of the erased keys under the table goes too.

An erase hides the keys from reads; GDPR wants the bytes gone. Besides older file slices and the savepoints that
pin them (the data files), the table holds copies in three more places, each handled here:

- **quarantined rows** (`.stitch/quarantine/<instant>/rows-*.parquet`): bad rows are kept as text; a row whose key
  (cast as ingest casts it) is an erased key is removed, and a file left empty is deleted. A row whose key is not
  known (a Kafka value that did not decode has no key column, only its raw `_value`; a null or unparsable key) is
  removed when its values hold the keys' text, as a quarantined text file is: the purge errs on removal there.
- **quarantined landing files** (`.../files/<name>`): copies of whole files an ingest could not take. A copy that
  reads (a file set aside for a missing column) is checked for the keys; one that does not read cannot be shown
  free of them, so a text copy is searched for the keys' text and a binary one is deleted. Their names and reasons
  stay on the timeline.
- **Spark job logs** (`.stitch/logs/`): a failed job's log may quote bad rows, so logs of jobs started before the
  erase are deleted.

The erase's own record keeps the keys themselves (not their values), so that change-feed readers learn of the
deletion. Published tables are recreated by the republish that follows a purge (`services.publish`).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.concurrency.heartbeat import Heartbeat, is_expired
from stitchlake.errors import ConflictError, InputRejected, NotFoundError
from stitchlake.io import kafka
from stitchlake.io.datafiles import read_parquet, write_parquet
from stitchlake.io.landing import LandingFile, decompressed, read_landing
from stitchlake.layout.placement import KeyPlacement
from stitchlake.paths import LOGS_DIR, QUARANTINE_DIR, purged_marker
from stitchlake.services.publish import publish_after
from stitchlake.services.upkeep.clean import purge_files
from stitchlake.services.upkeep.savepoint import delete as delete_savepoint
from stitchlake.table.guards import undone_by
from stitchlake.timeline.archive import archived_instants
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.metadata import DeltaCommit, EraseCommit
from stitchlake.timeline.savepoints import savepoints, unfinished_purges
from stitchlake.writing.batch import REASON, ROW, SOURCE, cast_column

if TYPE_CHECKING:
    from stitchlake.config import StreamSpec
    from stitchlake.layout.fsview import FileSystemView
    from stitchlake.table.handle import TableHandle

#: Landing formats whose bytes hold values as text (a copy that does not read can still be searched).
TEXT_FORMATS = ("json", "csv")


@dataclass
class PurgeResult:
    """What a purge removed besides the erase itself."""

    savepoints: list[str] = field(default_factory=list)
    #: Older file slices' files deleted.
    files: int = 0
    #: Quarantine files rewritten without the keys, or deleted.
    quarantine: list[str] = field(default_factory=list)
    #: Spark job logs deleted.
    logs: list[str] = field(default_factory=list)


def purge(table: TableHandle, erase_instant: str, keys: pa.Table) -> PurgeResult:
    """Remove every other copy of `keys` (cast to the key types) that the completed erase left under the table."""
    timeline = table.timeline()
    done = timeline.get(erase_instant)
    commit = timeline.commit(done) if done is not None and done.is_completed else None
    if done is None or not isinstance(commit, EraseCommit):
        raise NotFoundError(f"erase {erase_instant} is not a completed erase on the timeline")
    result = PurgeResult()
    placement = KeyPlacement(keys, table.config.table.key_names, table.config.table.partition_names)
    # Only what came before the erase: a purge run again later must not take savepoints and slices made since.
    before = done.completed or erase_instant
    beat = table.config.concurrency.heartbeat
    with Heartbeat(table.storage, purge_beat(erase_instant), interval_s=beat.interval_s, expire_s=beat.expire_s):
        older = older_copies(table.view(timeline), placement, erase_instant)
        for savepoint, pinned in savepoints(timeline):
            if pinned.savepoint_of < before and set(pinned.files) & older:
                with contextlib.suppress(NotFoundError):  # a purge finished elsewhere took it first
                    delete_savepoint(table, savepoint.requested)
                result.savepoints.append(savepoint.requested)
        result.files = len(purge_files(table, lambda view: older_copies(view, placement, erase_instant)).deleted)
        result.quarantine = _purge_quarantine(table, keys)
        result.logs = _purge_job_logs(table, before)
        _refuse_undone(table, erase_instant)
        table.storage.write_bytes(purged_marker(erase_instant), b"")  # from here on, older states read again
    return result


def _refuse_undone(table: TableHandle, erase_instant: str) -> None:
    """A restore planned before this purge began (a restore refuses to plan while a purge runs) may have taken the
    erase back meanwhile: its keys read again, so the purge must not say it is done (exit 3, the erase to run
    again)."""
    timeline = table.timeline()
    now = timeline.get(erase_instant)
    undoing = undone_by(timeline, erase_instant)
    if now is None or not now.is_completed or undoing is not None:
        by = f" by {undoing}" if undoing is not None else ""
        raise ConflictError(
            f"erase {erase_instant} was undone{by} while its purge ran: its keys read again. Run the erase again "
            "once that is done"
        )


def purge_beat(erase_instant: str) -> str:
    """The heartbeat a running purge keeps: a recovery finishes only purges whose process is gone."""
    return f"{erase_instant}-purge"


def finish_purges(table: TableHandle) -> list[str]:
    """Run again the purges of completed `--purge` erases that failed or were killed after their commit
    (`"purge of erase <instant>"` each): until then their savepoints and older slices still hold the keys."""
    finished = []
    timeline = table.timeline()
    expire = table.config.concurrency.heartbeat.expire_s
    for instant in unfinished_purges(timeline):
        if not is_expired(table.storage, purge_beat(instant.requested), expire):
            continue  # still running: its erase finishes it
        commit = timeline.commit(instant)
        assert isinstance(commit, EraseCommit)
        if commit.keys_file is None:  # no erase records none: nothing to purge by
            table.storage.write_bytes(purged_marker(instant.requested), b"")
            continue
        purge(table, instant.requested, read_parquet(table.storage, commit.keys_file))
        finished.append(f"purge of erase {instant.requested}")
    if finished:  # the erase's own publish never ran: published tables still hold the keys
        publish_after(table, finished[-1], wait_busy=True)
    return finished


def older_copies(view: FileSystemView, placement: KeyPlacement, erase: str) -> set[str]:
    """Data files outside the latest slices, committed before the erase was requested (`erase`), that may hold one
    of the keys: a file is laid out by the bucket count in force when it was written, so each is judged by its own
    count. Before a rescale a key lived in another file group than it does now, and an erase rewrites only the
    groups of today's count. A log committed while the erase ran is in the slice its base starts (the state right
    after the erase reads it), and holds none of the keys: the erase refuses to publish over one that does."""
    latest = {f.path for key in view.groups for s in [view.latest_slice(key)] if s is not None for f in s.files}
    return {
        f.path
        for f in view.live_files()
        if f.path not in latest
        and f.completed < erase
        and f.file_group in placement.file_groups(f.partition, view.buckets_of(f))
    }


def _purge_quarantine(table: TableHandle, keys: pa.Table) -> list[str]:
    storage = table.storage
    streams = _copy_streams(table)
    changed = []
    for path in _walk(table, QUARANTINE_DIR):
        name = posixpath.basename(path)
        if "/files/" in path:
            if _copy_may_hold(table, streams.get(path), path, keys):
                storage.delete(path)
                changed.append(path)
        elif name.startswith("rows-") and name.endswith(".parquet"):
            rows = read_parquet(storage, path)
            hit = _rows_hit(table, rows, keys)
            if not hit.any():
                continue
            kept = rows.filter(pa.array(~hit))
            if kept.num_rows:
                write_parquet(storage, path, kept)
            else:
                storage.delete(path)
            changed.append(path)
    return changed


def _walk(table: TableHandle, folder: str) -> Iterator[str]:
    """Files under a folder of the table; one removed meanwhile (a rollback of its write) is simply gone."""
    try:
        yield from table.storage.walk_files(folder)
    except FileNotFoundError:
        return


def _copy_streams(table: TableHandle) -> dict[str, StreamSpec]:
    """Quarantined landing-file copies by the stream whose commit set them aside (active and archived)."""
    timeline = table.timeline()
    commits = [timeline.commit(i) for i in timeline.completed()]
    commits += [entry.commit for entry in archived_instants(table.storage)]
    out = {}
    for commit in commits:
        if isinstance(commit, DeltaCommit) and commit.stream in table.config.streams:
            for item in commit.quarantined_files:
                if item.copy:
                    out[item.copy] = table.config.streams[commit.stream]
    return out


#: Columns stitch adds to a quarantined row to say why and where it came from: never the row's own values.
ROW_ORIGIN = (REASON, SOURCE, ROW, kafka.TOPIC, kafka.PARTITION, kafka.OFFSET)


def _typed_keys(table: TableHandle, rows: pa.Table, keys: pa.Table) -> pa.Table | None:
    """`rows`' columns that `keys` has, cast as ingest casts them (unparsable values become null)."""
    columns = {}
    for spec in table.config.common_columns:
        if spec.name not in keys.column_names:
            continue
        if spec.name not in rows.column_names:
            return None
        column = rows.column(spec.name).combine_chunks()
        columns[spec.name], _failed = cast_column(column, spec, "quarantine")
    return pa.table(columns)


def _rows_hit(table: TableHandle, rows: pa.Table, keys: pa.Table) -> np.ndarray:
    """Rows of an erased key. A row whose key is not known (no key column: a Kafka value that did not decode;
    a null or unparsable key) cannot be shown free of the keys, so its values are searched for the keys' text, as
    a quarantined text file is: the purge errs on the side of removing it. Only the key columns decide: a keys
    file may name partitions too, but a quarantined row is often there for its partition value (null, unparsable),
    and the person's values are in it whatever partition it was bound for."""
    mask = np.zeros(rows.num_rows, dtype=bool)
    names = [name for name in keys.column_names if name in table.config.table.key_names]
    keys = keys.select(names).group_by(names).aggregate([])
    typed = _typed_keys(table, rows, keys)
    if typed is None:
        unknown = np.ones(rows.num_rows, dtype=bool)
    else:
        indexed = typed.append_column("_row", pa.array(np.arange(typed.num_rows)))
        mask[indexed.join(keys, keys=keys.column_names, join_type="left semi").column("_row").to_numpy()] = True
        unknown = np.zeros(rows.num_rows, dtype=bool)
        for column in typed.itercolumns():
            unknown |= pc.is_null(column).to_numpy(zero_copy_only=False)
    if unknown.any():
        wanted = [_key_texts(row) for row in keys.to_pylist()]
        values = rows.drop_columns([name for name in ROW_ORIGIN if name in rows.column_names])
        where = np.flatnonzero(unknown)
        for index, row in zip(where, values.take(pa.array(where)).to_pylist(), strict=True):
            if _binary(row.get(kafka.VALUE)):
                mask[index] = True  # an Avro value: its numbers are not text, nothing short of removal is safe
                continue
            text = b"\0".join(_text(value) for value in row.values() if value is not None)
            mask[index] = any(all(part in text for part in texts) for texts in wanted)
    return mask


def _binary(value: object) -> bool:
    """Whether a quarantined raw value is binary (an undecodable Avro record), not text a key can be searched in:
    it has bytes that are not UTF-8 (kept as U+FFFD) or control characters that JSON text never holds raw."""
    if not isinstance(value, str):
        return False
    return "\ufffd" in value or any(ord(c) < 32 and c not in "\t\n\r" for c in value)


def _key_texts(key: dict[str, object]) -> list[bytes]:
    return [_text(value) for value in key.values()]


def _copy_may_hold(table: TableHandle, stream: StreamSpec | None, path: str, keys: pa.Table) -> bool:
    """Whether a quarantined landing file copy may hold an erased key: it does, or it cannot be shown not to."""
    source = stream.source if stream is not None else None
    if source is not None:
        info = table.storage.stat(path)
        copy = LandingFile(table.path, path, path, info.size, info.version)
        try:
            rows = read_landing(source, copy, [c.name for c in table.config.common_columns], table.storage_options)
        except InputRejected:
            rows = None
        if rows is not None and _typed_keys(table, rows, keys) is not None:
            return bool(_rows_hit(table, rows, keys).any())
    if source is None or source.format not in TEXT_FORMATS:
        return True  # binary and unreadable: nothing short of deleting it proves the keys gone
    try:
        text = decompressed(table.storage.read_bytes(path), path, path)
    except InputRejected:
        return True
    return any(all(part in text for part in _key_texts(row)) for row in keys.to_pylist())


def _text(value: object) -> bytes:
    """A value as a text file would spell it."""
    if isinstance(value, bytes):
        return value
    isoformat = getattr(value, "isoformat", None)
    return (isoformat() if callable(isoformat) else str(value)).encode()


def _purge_job_logs(table: TableHandle, before: str) -> list[str]:
    """Spark job logs (`<job>-<start time>-<pid>.log`) of jobs that started before the erase completed."""
    removed = []
    for path in _walk(table, LOGS_DIR):
        parts = posixpath.basename(path).rsplit("-", 2)
        if len(parts) == 3 and is_time(parts[1]) and parts[1] < before and table.storage.delete(path):
            removed.append(path)
    return removed
