"""The archived part of the timeline (design.md §4): archived instants and the file-system-view checkpoint.

Reading them belongs with the timeline: the file-system view, exactly-once ingest and time travel all start from
the newest checkpoint. Checkpoints are immutable, one file per horizon (`checkpoint.<horizon>.json`, created if
absent), and readers take the newest, so a checkpoint can never move backwards (`services.archive` writes them).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stitchlake.checksums import unseal
from stitchlake.config.stored import SchemaRecord
from stitchlake.errors import CorruptFileError
from stitchlake.paths import ARCHIVE_DIR
from stitchlake.storage import Storage
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import Instant, State
from stitchlake.timeline.metadata import Commit, DataFile, LandingRecord, OffsetRange, StreamBatch, load

#: The single, rewritten checkpoint of versions before checkpoints became immutable (still read).
LEGACY_CHECKPOINT = f"{ARCHIVE_DIR}/checkpoint.json"
_CHECKPOINT_NAME = re.compile(r"^checkpoint\.(\d{17})\.json$")
BATCH_SUFFIX = ".archive.jsonl"


@dataclass(frozen=True)
class SchemaVersion:
    """One version of the table's stored schema, and when its alter completed (version 0: `table.json`)."""

    version: int
    since: str
    #: The schema (named as archives store it).
    properties: SchemaRecord


@dataclass(frozen=True)
class RescaleRecord:
    """A completed rescale (design.md §3): from `completed` on, the `partitions` it rewrote have `buckets` file groups
    and their files older than `requested` are out of their slices; `whole_table` changed the table's count."""

    requested: str
    completed: str
    buckets: int
    partitions: dict[str, int] = field(default_factory=dict)
    whole_table: bool = False


@dataclass(frozen=True)
class Checkpoint:
    """The file-system view at the archive horizon: live files, and what each stream had consumed by then."""

    completed: str
    files: tuple[DataFile, ...] = ()
    #: stream -> landing files consumed up to the horizon (plain names in checkpoints written before versions).
    consumed: dict[str, tuple[LandingRecord | str, ...]] = field(default_factory=dict)
    #: Schema versions made by archived alters (files at the horizon may have been written under any of them).
    schemas: tuple[SchemaVersion, ...] = ()
    #: Rescales archived by then (the bucket layout, and which files at the horizon left their slices).
    rescales: tuple[RescaleRecord, ...] = ()
    format_version: int = 1
    #: stream -> per Kafka topic partition, the last offset range consumed up to the horizon (its `end` is the
    #: stream's next offset there).
    offsets: dict[str, tuple[OffsetRange, ...]] = field(default_factory=dict)
    #: stream -> the newest Structured Streaming micro-batch of each query committed up to the horizon: a batch
    #: Spark replays after its commit was archived must still be known as committed.
    stream_batches: dict[str, tuple[StreamBatch, ...]] = field(default_factory=dict)
    #: Whether `stream_batches` was kept (checkpoints before it have none, and the archive reads them once).
    batches_kept: bool = False

    @property
    def horizon(self) -> str:
        return self.completed

    def landing(self, stream: str) -> dict[str, LandingRecord]:
        out = {}
        for item in self.consumed.get(stream, ()):
            record = LandingRecord(item) if isinstance(item, str) else item
            out[record.name] = record
        return out


@dataclass(frozen=True)
class ArchivedInstant:
    """An instant moved out of the active timeline, with its commit record."""

    instant: Instant
    commit: Commit


def checkpoint_path(horizon: str) -> str:
    return f"{ARCHIVE_DIR}/checkpoint.{horizon}.json"


def checkpoint_names(storage: Storage, listing: list[str] | None = None) -> list[tuple[str, str]]:
    """(horizon, path) of every immutable checkpoint, oldest first (from `listing` of the archive if given)."""
    found = []
    for name in storage.list_names(ARCHIVE_DIR) if listing is None else listing:
        match = _CHECKPOINT_NAME.match(name)
        if match:
            found.append((match.group(1), f"{ARCHIVE_DIR}/{name}"))
    return sorted(found)


#: How checkpoints and archived instants (one JSON line each) began before they carried a checksum.
LEGACY_CHECKPOINT_PREFIXES = (b'{"completed": ', b'{"horizon": ')
LEGACY_LINE_PREFIXES = (b'{"requested": ',)

#: Immutable checkpoints already read from object stores, by location (a table reads its newest one per load).
_CHECKPOINTS: dict[str, Checkpoint] = {}


def _read_checkpoint(storage: Storage, path: str, immutable: bool = True) -> Checkpoint:
    where = storage.describe(path)
    cached = _CHECKPOINTS.get(where) if immutable and storage.remote else None
    if cached is not None:
        return cached
    data = storage.read_bytes(path)
    try:
        found = load(Checkpoint, json.loads(unseal(data, where, LEGACY_CHECKPOINT_PREFIXES)))
    except (json.JSONDecodeError, ValueError) as exc:
        raise CorruptFileError(f"{where}: not a valid checkpoint ({exc})", file=where) from None
    if immutable and storage.remote:
        if len(_CHECKPOINTS) > 64:
            _CHECKPOINTS.clear()
        _CHECKPOINTS[where] = found
    return found


def load_checkpoint(storage: Storage) -> Checkpoint | None:
    """The newest file-system-view checkpoint (greatest horizon), or None if nothing was archived yet."""
    for _attempt in range(3):  # a newer archive may tidy the listed ones away between listing and reading
        names = storage.list_names(ARCHIVE_DIR)
        listed = checkpoint_names(storage, names)
        if listed:
            with contextlib.suppress(FileNotFoundError):
                return _read_checkpoint(storage, listed[-1][1])
            continue
        if LEGACY_CHECKPOINT.rsplit("/", 1)[-1] not in names:
            return None  # one listing answers it: no round trip for a file that is not there
        try:
            return _read_checkpoint(storage, LEGACY_CHECKPOINT, immutable=False)
        except FileNotFoundError:
            return None
    raise CorruptFileError(f"{storage.describe(ARCHIVE_DIR)}: the newest checkpoint keeps vanishing while read")


def newest_batches(
    previous: Checkpoint | None, commits: Iterator[tuple[str, StreamBatch]]
) -> dict[str, tuple[StreamBatch, ...]]:
    """stream -> the newest micro-batch of each query, from a checkpoint's and the `(stream, batch)` of commits."""
    newest: dict[str, dict[str, int]] = {}
    known = previous.stream_batches.items() if previous is not None else ()
    for stream, batch in [(s, b) for s, batches in known for b in batches] + list(commits):
        queries = newest.setdefault(stream, {})
        queries[batch.query_id] = max(batch.batch_id, queries.get(batch.query_id, batch.batch_id))
    return {
        stream: tuple(StreamBatch(query, number) for query, number in sorted(queries.items()))
        for stream, queries in newest.items()
    }


def horizon_of(storage: Storage) -> str | None:
    """The newest checkpoint's horizon, from the listing alone."""
    names = checkpoint_names(storage)
    if names:
        return names[-1][0]
    checkpoint = load_checkpoint(storage)
    return checkpoint.horizon if checkpoint else None


def batches(storage: Storage) -> tuple[list[tuple[str, str]], list[str]]:
    """(horizon, path) of every archive batch a checkpoint stands behind, oldest first; and the paths of those none
    does. An archive that lost its lease between its batch and its checkpoint left a batch whose instants stay on the
    active timeline (a rollback may take them back later): they are not archived, and reading them as archived
    showed history that is not. The next archive deletes them under the lock before its own checkpoint passes them."""
    names = storage.list_names(ARCHIVE_DIR)
    checkpoints = checkpoint_names(storage, names)
    if checkpoints:
        newest: str | None = checkpoints[-1][0]
    else:
        legacy = load_checkpoint(storage) if LEGACY_CHECKPOINT.rsplit("/", 1)[-1] in names else None
        newest = legacy.horizon if legacy is not None else None
    standing, orphans = [], []
    for name in names:
        if not name.endswith(BATCH_SUFFIX):
            continue
        horizon = name.removesuffix(BATCH_SUFFIX).rpartition("_")[2]
        if is_time(horizon) and (newest is None or horizon > newest):
            orphans.append(f"{ARCHIVE_DIR}/{name}")
        else:
            standing.append((horizon, f"{ARCHIVE_DIR}/{name}"))
    return sorted(standing), sorted(orphans)


def archived_instants(storage: Storage) -> list[ArchivedInstant]:
    """Archived instants with their commits, oldest completion first."""
    found: dict[str, ArchivedInstant] = {}
    for _horizon, path in batches(storage)[0]:
        for entry in _read_batch(storage, path):
            found[entry.instant.requested] = entry
    return sorted(found.values(), key=lambda e: e.instant.completed or "")


def archived_batches_newest_first(storage: Storage) -> Iterator[tuple[str, list[ArchivedInstant]]]:
    """(horizon, its instants newest first) of each archive batch, the newest horizon first, read one by one.

    A batch holds the instants that completed after the previous batch's horizon, up to its own, so a caller
    looking for the latest archived instant of some kind stops at the first batch that has one.
    """
    for horizon, path in reversed(batches(storage)[0]):
        entries = _read_batch(storage, path)
        yield horizon, sorted(entries, key=lambda e: e.instant.completed or "", reverse=True)


def _read_batch(storage: Storage, path: str) -> list[ArchivedInstant]:
    found = []
    for number, line in enumerate(storage.read_bytes(path).decode().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry: dict[str, Any] = json.loads(
                unseal(line.encode(), f"{storage.describe(path)} line {number}", LEGACY_LINE_PREFIXES)
            )
            instant = Instant(entry["requested"], entry["action"], State.COMPLETED, entry["completed"])
            commit = load(kind_of(instant.action).commit, entry.get("metadata") or {})
        except (json.JSONDecodeError, KeyError, ValueError) as exc:
            raise CorruptFileError(f"{storage.describe(path)}: line {number} is damaged ({exc})") from None
        found.append(ArchivedInstant(instant, commit))
    return found
