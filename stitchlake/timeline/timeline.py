"""The active timeline: loading, filtering and state transitions of instants (design.md §4).

Loading lists one folder and parses names; metadata is read only when asked for, and cached, so commands
that show the newest instants stay fast however long the timeline is.

On an object store every read is a round trip, so the first metadata asked for brings its siblings along in
one parallel wave (`PARALLEL_READS` requests in flight): the first commit read reads every completed instant's
commit, the first plan every plan of the same state. Completed instants never change, so their files are also
kept in a process-wide cache (`_IMMUTABLE`): a command that loads the timeline several times, or a long-lived
process, reads each of them once. Reading the view of a 200-instant timeline is then two waves, not 200 round
trips (tests/integration/test_s3_round_trips.py counts them).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, cast

from stitchlake.checksums import seal, unseal
from stitchlake.errors import CorruptFileError, HistoryMoved, StitchError
from stitchlake.paths import TIMELINE_DIR
from stitchlake.storage import Storage
from stitchlake.storage.pools import PerProcessPool
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.clock import next_time
from stitchlake.timeline.instant import (
    ACTION_NAMES,
    Action,
    Instant,
    State,
    completed_file_name,
    parse_file_name,
    pending_file_name,
)
from stitchlake.timeline.metadata import (
    METADATA_VERSION,
    Commit,
    DeltaCommitPlan,
    InflightMark,
    Plan,
    commit_json,
    load,
    plan_json,
)

#: Requests in flight at once when an object store's instant files are read in a wave.
PARALLEL_READS = 32
#: Completed instants' files kept in the process-wide cache (oldest dropped first).
IMMUTABLE_CACHE_SIZE = 50_000

_IMMUTABLE: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_IMMUTABLE_LOCK = threading.Lock()


def timeline_path(name: str) -> str:
    return f"{TIMELINE_DIR}/{name}"


def _cache_key(storage: Storage, name: str) -> tuple[Any, ...]:
    options = getattr(storage, "options", None) or {}
    return (type(storage).__name__, storage.describe(timeline_path(name)), tuple(sorted(options.items())))


#: The threads that read a wave of instant files.
_reader_pool = PerProcessPool(PARALLEL_READS, "stitchlake-timeline")


#: How instant files (and table.json) began before they carried a checksum.
LEGACY_PREFIXES = (b'{\n "format_version": ',)


def encode_metadata(content: dict[str, Any]) -> bytes:
    """Keys keep their order: a stored schema lists streams and columns in the order reads show them. Sealed with
    its checksum (`stitchlake.checksums`): a flipped bit in a file list or a version must fail, not mislead."""
    return seal(json.dumps({"format_version": METADATA_VERSION, **content}, indent=1).encode())


def decode_metadata(data: bytes, where: str, *, completed: bool = False) -> dict[str, Any]:
    """Parse an instant file's JSON; garbage, an empty file or a future format is an error that names the file.

    Every instant file is written whole at once (a sealed JSON object, created atomically), so none is ever
    legitimately empty: an empty completed file read as "added nothing" would drop committed rows from every read,
    and an empty plan read as "nothing planned" would finish a crashed restore or rescale that did nothing, or stop
    fencing writers. A plan that is gone (its writer aborted) is a missing file, not an empty one.
    """
    if not data:
        kind = "completed instant" if completed else "pending instant"
        raise CorruptFileError(f"{where}: {kind} file is empty (damaged timeline)", file=where)
    try:
        content = json.loads(unseal(data, where, LEGACY_PREFIXES))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"{where}: timeline file is not valid JSON ({exc})", file=where) from None
    if not isinstance(content, dict):
        raise CorruptFileError(f"{where}: timeline file does not hold a JSON object", file=where)
    version = content.get("format_version", METADATA_VERSION)
    if version != METADATA_VERSION:
        raise CorruptFileError(f"{where}: metadata format version {version} is not supported", file=where)
    return content


def typed(cls: type[Any], content: dict[str, Any], where: str) -> Any:
    """A typed plan or commit from an instant file's JSON; a shape that does not fit is damage, named."""
    try:
        return load(cls, content)
    except ValueError as exc:
        raise CorruptFileError(f"{where}: {exc} (damaged timeline)", file=where) from None


class Timeline:
    """A snapshot of the active timeline's instant files."""

    def __init__(self, storage: Storage, names: Iterable[str]) -> None:
        self.storage = storage
        self._names: set[str] = set()
        self._instants: dict[str, Instant] = {}
        self._metadata: dict[str, dict[str, Any]] = {}
        self._records: dict[str, Plan | Commit] = {}
        #: Files already asked for in a parallel wave (object stores), so a failed one is read alone once.
        self._waved: set[str] = set()
        for name in names:
            instant = parse_file_name(name)
            if instant is None:
                continue
            self._names.add(name)
            known = self._instants.get(instant.requested)
            if known is None or instant.state.rank > known.state.rank:
                self._instants[instant.requested] = instant

    @classmethod
    def load(cls, storage: Storage) -> Timeline:
        return cls(storage, storage.list_names(TIMELINE_DIR))

    @classmethod
    def load_cut(cls, storage: Storage, attempts: int = 5) -> Timeline:
        """The timeline as one cut of its history, for a reader (who takes no lock).

        A listing is no atomic cut: an object store lists page by page and a directory is read in several calls,
        so a listing can pass an instant's keys before it completes (or before it is even requested) and then find
        a later instant completed: a state the table never had (the later commit without the earlier). Every
        completion up to the latest one listed had landed before that one's time was drawn, so a second listing
        sees them all: the first is a cut if the second shows no completion up to its latest that it lacks."""
        listed = cls.load(storage)
        for _ in range(attempts):
            latest = listed.latest_completed()
            if latest is None:
                return listed
            end = latest.completed or ""
            again = cls.load(storage)
            seen = {i.requested for i in listed.completed()}
            if not [i for i in again.completed(until=end) if i.requested not in seen]:
                return listed
            listed = again
        raise HistoryMoved(
            "the timeline kept changing while it was listed (commits completing mid-listing); read again"
        )

    # ----------------------------------------------------------------------------------------- queries

    @property
    def instants(self) -> list[Instant]:
        """All instants, by requested time."""
        return [self._instants[key] for key in sorted(self._instants)]

    def get(self, requested: str) -> Instant | None:
        return self._instants.get(requested)

    def __len__(self) -> int:
        return len(self._instants)

    def completed(
        self,
        actions: Iterable[str] | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[Instant]:
        """Completed instants ordered by completion time, optionally in the range (since, until]."""
        wanted = set(actions) if actions is not None else None
        found = [
            i
            for i in self._instants.values()
            if i.is_completed
            and (wanted is None or i.action in wanted)
            and (since is None or (i.completed or "") > since)
            and (until is None or (i.completed or "") <= until)
        ]
        return sorted(found, key=lambda i: i.completed or "")

    def pending(self, actions: Iterable[str] | None = None) -> list[Instant]:
        """Requested or inflight instants, by requested time."""
        wanted = set(actions) if actions is not None else None
        return [i for i in self.instants if not i.is_completed and (wanted is None or i.action in wanted)]

    def filter(
        self,
        actions: Iterable[str] | None = None,
        states: Iterable[State] | None = None,
    ) -> list[Instant]:
        """Instants by requested time restricted to some actions and states."""
        wanted_actions = set(actions) if actions is not None else None
        wanted_states = set(states) if states is not None else None
        return [
            i
            for i in self.instants
            if (wanted_actions is None or i.action in wanted_actions)
            and (wanted_states is None or i.state in wanted_states)
        ]

    def latest_completed(self, actions: Iterable[str] | None = None) -> Instant | None:
        done = self.completed(actions)
        return done[-1] if done else None

    def latest_time(self) -> str | None:
        """The greatest requested or completion time on the timeline."""
        times = [t for i in self._instants.values() for t in (i.requested, i.completed) if t]
        return max(times, default=None)

    def all_times(self) -> list[str]:
        return [t for i in self._instants.values() for t in (i.requested, i.completed) if t]

    # ---------------------------------------------------------------------------------------- metadata

    def commit(self, instant: Instant) -> Commit:
        """A completed instant's typed commit record."""
        if not instant.is_completed:
            raise StitchError(f"{instant} is not completed; it has a plan, not a commit")
        name = instant.file_name
        cached = self._records.get(name)
        if cached is None:
            cached = typed(
                kind_of(instant.action).commit, self._content(instant, name), self.storage.describe(timeline_path(name))
            )
            self._records[name] = cached
        return cast(Commit, cached)

    def plan(self, instant: Instant) -> Plan:
        """What was written when the instant was requested (its writer, stream or plan); empty if it is gone."""
        name = pending_file_name(instant.requested, instant.action, State.REQUESTED)
        cached = self._records.get(name)
        if cached is None:
            content = self._content(instant, name) if name in self._names else {}
            cached = typed(kind_of(instant.action).plan, content, self.storage.describe(timeline_path(name)))
            self._records[name] = cached
        return cast(Plan, cached)

    def _content(self, instant: Instant, name: str) -> dict[str, Any]:
        """An instant file's JSON, read once. A pending instant may vanish after the listing (its writer aborted,
        or a rollback undid it; neither needs the lock): it no longer exists, so it has no content. A completed
        instant's file vanishing is an error (only archival or restore remove them, under the lock)."""
        cached = self._metadata.get(name)
        if cached is None and self.storage.remote and name not in self._waved:
            self._read_wave(instant, name)
            cached = self._metadata.get(name)
        if cached is None:
            try:
                cached = read_instant_file(self.storage, name)
            except TimelineFileVanished:
                if instant.is_completed:
                    raise
                return {}
            self._metadata[name] = cached
            if instant.is_completed:
                _remember(self.storage, name, cached)
        return cached

    def _read_wave(self, instant: Instant, name: str) -> None:
        """Read `name` and its siblings (every commit, or every plan of instants in the same state) at once.

        Completed instants' files come from the process cache when they are there. A file that fails to read
        or parse is left out: the caller reads it alone again and reports the error as it would have.
        """
        completed = instant.is_completed
        if completed and name == instant.file_name:
            wanted = [i.file_name for i in self._instants.values() if i.is_completed]
        else:
            wanted = [
                pending_file_name(i.requested, i.action, State.REQUESTED)
                for i in self._instants.values()
                if i.is_completed == completed
            ]
        wanted = [n for n in wanted if n in self._names and n not in self._metadata]
        self._waved.update(wanted)
        self._waved.add(name)
        missing = []
        for item in wanted:
            found = _recall(self.storage, item) if completed else None
            if found is None:
                missing.append(item)
            else:
                self._metadata[item] = found
        if not missing:
            return

        def read(item: str) -> dict[str, Any] | None:
            try:
                return read_instant_file(self.storage, item)
            except StitchError:
                return None

        results = list(_reader_pool().map(read, missing)) if len(missing) > 1 else [read(missing[0])]
        for item, content in zip(missing, results, strict=True):
            if content is not None:
                self._metadata[item] = content
                if completed:
                    _remember(self.storage, item, content)

    def stream_of(self, instant: Instant) -> str | None:
        plan = self.plan(instant)
        return plan.stream if isinstance(plan, DeltaCommitPlan) else None


def _recall(storage: Storage, name: str) -> dict[str, Any] | None:
    with _IMMUTABLE_LOCK:
        return _IMMUTABLE.get(_cache_key(storage, name))


def _remember(storage: Storage, name: str, content: dict[str, Any]) -> None:
    """Keep a completed instant's file (commit or plan) for the life of the process: it never changes."""
    if not storage.remote:
        return
    with _IMMUTABLE_LOCK:
        _IMMUTABLE[_cache_key(storage, name)] = content
        while len(_IMMUTABLE) > IMMUTABLE_CACHE_SIZE:
            _IMMUTABLE.popitem(last=False)


class TimelineFileVanished(HistoryMoved):
    """An instant file listed a moment ago is gone: its instant was aborted, rolled back or archived meanwhile."""


def read_instant_file(storage: Storage, name: str) -> dict[str, Any]:
    """An instant file's JSON; errors name the file's full location, so a cron log says which table."""
    path = timeline_path(name)
    where = storage.describe(path)
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise TimelineFileVanished(f"{where}: timeline file vanished while reading (a concurrent rollback?)") from None
    instant = parse_file_name(name)
    return decode_metadata(data, where, completed=instant is not None and instant.is_completed)


# ------------------------------------------------------------------------------------------ transitions


def draw_time(storage: Storage, now_ms: int | None = None) -> str:
    """Next instant time. Must be called under the table lock, together with the write that uses it."""
    return next_time(Timeline.load(storage).all_times(), now_ms)


def write_requested(
    storage: Storage,
    requested: str,
    action: Action | str,
    content: Plan,
    ready: Callable[[], None] | None = None,
) -> Instant:
    """Create `<requested>.<action>.requested`; a clash means two writers drew one time: a bug, not a race.

    `ready` runs right before the create (see `Storage.put_if_absent`): the lock fence, since a plan checked
    under the lock is only valid while the lease lasts.
    """
    if action not in ACTION_NAMES:
        raise ValueError(f"unknown action {action!r}")
    name = pending_file_name(requested, action, State.REQUESTED)
    if not storage.put_if_absent(timeline_path(name), encode_metadata(plan_json(content)), ready):
        raise StitchError(f"instant {requested} already exists on the timeline")
    return Instant(requested, Action(action), State.REQUESTED)


def write_inflight(
    storage: Storage,
    instant: Instant,
    mark: InflightMark | None = None,
    replace: bool = False,
    ready: Callable[[], None] | None = None,
) -> Instant:
    """Mark the instant inflight. `replace` rewrites an existing inflight file (a resumed run's new attempt);
    `ready` runs right before the file is written (see `Storage.put_if_absent`)."""
    name = pending_file_name(instant.requested, instant.action, State.INFLIGHT)
    content = encode_metadata((mark or InflightMark()).to_json())
    if replace:
        storage.write_atomic(timeline_path(name), content, ready)
    else:
        storage.put_if_absent(timeline_path(name), content, ready)
    return Instant(instant.requested, instant.action, State.INFLIGHT)


def read_inflight(storage: Storage, instant: Instant) -> InflightMark | None:
    """An instant's inflight mark; None when it has none (not inflight, or reset) or it cannot be read."""
    path = timeline_path(pending_file_name(instant.requested, instant.action, State.INFLIGHT))
    try:
        return InflightMark.from_json(decode_metadata(storage.read_bytes(path), storage.describe(path)))
    except (FileNotFoundError, CorruptFileError):
        return None


def write_completed(
    storage: Storage,
    instant: Instant,
    completed: str,
    metadata: Commit,
    ready: Callable[[], None] | None = None,
) -> Instant:
    """Publish the instant: one atomic create-if-absent of the completed file (design.md §4).

    `ready` runs right before the create (see `Storage.put_if_absent`); raising there publishes nothing.
    """
    name = completed_file_name(instant.requested, completed, instant.action)
    record = replace(metadata, action=instant.action, requested=instant.requested, completed=completed)
    content = commit_json(record)
    if not storage.put_if_absent(timeline_path(name), encode_metadata(content), ready):
        raise StitchError(f"instant {instant.requested} was already completed")
    return Instant(instant.requested, instant.action, State.COMPLETED, completed)


def delete_instant(storage: Storage, instant: Instant, *, completed_last: bool = False) -> None:
    """Remove an instant's files.

    Undoing it (rollback, restore, abort): the completed file first, so it stops being visible before anything else
    goes. Archiving it (`completed_last`): the completed file last, because an interruption must never leave its
    requested or inflight file alone — that would be a pending instant of a dead writer, which recovery rolls back,
    deleting the data files of a commit the archive still counts.
    """
    pending = [pending_file_name(instant.requested, instant.action, s) for s in (State.INFLIGHT, State.REQUESTED)]
    done = [completed_file_name(instant.requested, instant.completed, instant.action)] if instant.completed else []
    for name in [*pending, *done] if completed_last else [*done, *pending]:
        storage.delete(timeline_path(name))
