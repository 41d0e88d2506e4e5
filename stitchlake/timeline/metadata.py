"""Typed instant metadata: one frozen record per action's plan (the requested file) and commit (the completed file).

The timeline hands these out instead of dicts, so the shape of a commit is written down once, here, and every
module reads it the same way. JSON stays the on-disk form (`format_version` 1, the shape tables already hold);
unknown keys are ignored so a newer writer's additions never break an older reader's view of what it knows.
Names are typed by the vocabulary (actions, states, formats): a word outside it is damage, named, as any field of
the wrong type is. A new word can come only with a new `format_version`, which an older reader refuses first.
Each action also says which files it owns (`owned_files`), so rollback and clean ask the record instead of
knowing other actions' private files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from stitchlake.config.stored import SchemaRecord
from stitchlake.vocabulary import Action, CompactionStrategy, PublishFormat, State

if TYPE_CHECKING:
    from pydantic import TypeAdapter

METADATA_VERSION = 1

BASE = "base"
LOG = "log"


# ------------------------------------------------------------------------------------------------ parts


@dataclass(frozen=True)
class DataFile:
    """A base or log file a commit wrote. `instant`/`completed` are its commit's, filled in by the view."""

    path: str
    partition: str
    file_group: str
    kind: str
    stream: str | None
    rows: int
    bytes: int
    #: Its digest (`stitchlake.checksums`), checked on every read; empty for files written before digests.
    checksum: str = ""
    instant: str = ""
    completed: str = ""
    #: The table schema version it was written under (its columns and types); the view fills it in.
    schema_version: int = 0
    #: The bucket count its partition was routed with (0: not recorded, before rescales existed). A deltacommit
    #: publishes only while it is still the partition's count (design.md §6, rescale).
    buckets: int = 0

    @property
    def group(self) -> tuple[str, str]:
        return (self.partition, self.file_group)

    def at(self, instant: str, completed: str, schema_version: int = 0) -> DataFile:
        return replace(self, instant=instant, completed=completed, schema_version=schema_version)

    def to_json(self, times: bool = True) -> dict[str, Any]:
        out = dump(self)
        if not times:
            for name in ("instant", "completed", "schema_version"):
                out.pop(name)
        return out


@dataclass(frozen=True)
class FileGroupRef:
    """A file group named by a rewrite (which groups it touched)."""

    partition: str
    file_group: str

    @property
    def group(self) -> tuple[str, str]:
        return (self.partition, self.file_group)


@dataclass(frozen=True)
class FileSlice:
    """A base file (or none) and the log files that belong to it, logs in completion order (design.md §5).

    Also what a compaction or erase plan lists per file group: exactly the files it merges.
    """

    partition: str
    file_group: str
    base_instant: str = ""
    base: DataFile | None = None
    logs: tuple[DataFile, ...] = ()

    def __post_init__(self) -> None:
        if not self.base_instant and self.base is not None:  # plans written before the field existed
            object.__setattr__(self, "base_instant", self.base.instant)

    @property
    def group(self) -> tuple[str, str]:
        return (self.partition, self.file_group)

    @property
    def files(self) -> list[DataFile]:
        return ([self.base] if self.base else []) + list(self.logs)

    @property
    def log_bytes(self) -> int:
        return sum(f.bytes for f in self.logs)

    @property
    def bytes(self) -> int:
        """Every file's bytes: what merging the slice reads (its memory grows with it: docs/operations.md)."""
        return sum(f.bytes for f in self.files)


@dataclass(frozen=True)
class WriterInfo:
    """Who requested an instant (shown by `stitch status`, named in busy errors)."""

    host: str = "?"
    pid: int | None = None
    started: float | None = None


@dataclass(frozen=True)
class LandingRecord:
    """A landing file an ingest consumed: its name (identity within the stream) and what it held then."""

    name: str
    size: int | None = None
    version: str | None = None


@dataclass(frozen=True)
class OffsetRange:
    """Records of one Kafka topic partition a deltacommit consumed: offsets `start` (first) to `end` (exclusive).

    The Kafka analogue of a landing file (design.md §6): the stream's next offset per partition is the `end` of the
    range the latest completed commit recorded for it. An empty range (`start == end`) records a position
    without records: a `--reset-offsets` skip, a `starting_offsets: latest` start, or where an undo rewound to.
    `topic_id` is the topic's id when it was read (Kafka 2.8+; None from older brokers and older commits): offsets
    of a topic deleted and created again under the same name mean nothing in the new one. `topic_partitions` is how
    many partitions the topic had then (None in older commits): every ingest records each partition no commit
    recorded yet (an empty range where it read nothing), so a partition numbered past it was added since, and
    must still hold its records from offset 0.
    """

    topic: str
    partition: int
    start: int
    end: int
    topic_id: str | None = None
    topic_partitions: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        """Records in the range (an engine balances its tasks by it)."""
        return self.end - self.start

    def overlaps(self, other: OffsetRange) -> bool:
        return self.key == other.key and self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class OffsetReset:
    """A `--reset-offsets` a deltacommit made: the partition's recorded next offset, and where it went instead."""

    topic: str
    partition: int
    recorded: int
    to: int
    reason: str = ""


@dataclass(frozen=True)
class QuarantinedFile:
    """A landing file set aside whole (unreadable, or lacking a column): consumed, with why."""

    name: str
    reason: str
    copy: str | None = None


@dataclass(frozen=True)
class UndoTarget:
    """An instant a rollback or restore takes back, with every file it wrote (recorded before anything goes)."""

    requested: str
    action: Action
    state: State
    completed: str | None = None
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class StreamBatch:
    """A Structured Streaming micro-batch a deltacommit holds (exactly once across restarts)."""

    query_id: str
    batch_id: int


@dataclass(frozen=True)
class InflightMark:
    """What an inflight file holds: the token of the run (attempt) that marked the instant inflight, so a run that
    froze past its heartbeat finds that another took its instant over (None: a mark without one)."""

    attempt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt} if self.attempt is not None else {}

    @classmethod
    def from_json(cls, data: Any) -> InflightMark:
        attempt = data.get("attempt") if isinstance(data, dict) else None
        return cls(attempt if isinstance(attempt, str) else None)


# ------------------------------------------------------------------------------------------------ plans


@dataclass(frozen=True)
class Plan:
    """What an instant's requested file holds. Subclasses add each action's plan."""

    writer: WriterInfo = field(default_factory=WriterInfo)


@dataclass(frozen=True)
class DeltaCommitPlan(Plan):
    stream: str | None = None
    #: The Structured Streaming micro-batch this write is (its tasks find the instant by it).
    stream_batch: StreamBatch | None = None
    #: Begun as the stream's one writer (an ingest's claim, a stream's micro-batch): in lock-free mode a later claim
    #: of the stream that completes, or lives, while this one is pending took it over (`guards.taken_over`).
    claimed: bool = False


@dataclass(frozen=True)
class RewritePlan(Plan):
    """Compaction and erase plans: the file slices to rewrite, exactly as they were when planned."""

    operations: tuple[FileSlice, ...] = ()

    @property
    def groups(self) -> set[tuple[str, str]]:
        return {op.group for op in self.operations}

    @property
    def planned_files(self) -> set[str]:
        return {f.path for op in self.operations for f in op.files}


@dataclass(frozen=True)
class CompactionPlan(RewritePlan):
    strategy: CompactionStrategy = CompactionStrategy.ALL


@dataclass(frozen=True)
class ErasePlan(RewritePlan):
    keys_file: str | None = None


@dataclass(frozen=True)
class RescalePlan(RewritePlan):
    """Rewrite every file group of some partitions into `buckets` new ones (`operations`: their latest slices)."""

    buckets: int = 0
    #: The partitions rewritten, each with the bucket count it had.
    partitions: dict[str, int] = field(default_factory=dict)
    #: Every partition: the count partitions created from now on get changes too (the table's count).
    whole_table: bool = False


@dataclass(frozen=True)
class CleanPlan(Plan):
    policy: str | None = None
    retain: int | None = None
    delete: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()


@dataclass(frozen=True)
class UndoPlan(Plan):
    """Rollback and restore plans: everything they undo, recorded before the first file is deleted."""

    targets: tuple[UndoTarget, ...] = ()
    #: Per Kafka-fed stream, where the undone commits began reading the partitions no remaining commit records
    #: (empty ranges; `services.offsets.rewound`): recorded before their commits go, kept in the commit.
    positions: dict[str, tuple[OffsetRange, ...]] = field(default_factory=dict)

    @property
    def undoes_commits(self) -> bool:
        return any(t.completed for t in self.targets)

    def covers(self, requested: str) -> bool:
        return any(t.requested == requested for t in self.targets)


@dataclass(frozen=True)
class RollbackPlan(UndoPlan):
    reason: str = ""
    reset_compactions: tuple[str, ...] = ()

    def covers(self, requested: str) -> bool:
        return super().covers(requested) or requested in self.reset_compactions


@dataclass(frozen=True)
class RestorePlan(UndoPlan):
    savepoint: str = ""
    savepoint_of: str = ""

    @property
    def undoes_commits(self) -> bool:
        return True


@dataclass(frozen=True)
class AlterPlan(Plan):
    """A new schema version: the whole stored schema and the changes, in words."""

    schema_version: int = 0
    #: The whole new schema (None only in a damaged record).
    properties: SchemaRecord | None = None
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishPlan(Plan):
    """Publish the table as of `source` (read-optimized) as a new version of a Delta or Iceberg table."""

    #: None only in the placeholder a transaction holds until the plan is made under the lock.
    format: PublishFormat | None = None
    location: str = ""
    source: str = ""


@dataclass(frozen=True)
class SavepointPlan(Plan):
    savepoint_of: str = ""
    instant: str = ""
    name: str | None = None
    files: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Commit:
    """What a completed instant's file holds. Subclasses add each action's record."""

    #: Stamped from the instant when the timeline completes it (`Timeline.complete`); None only before that.
    action: Action | None = None
    requested: str = ""
    completed: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    #: What the writer asked to record with the commit (`write(..., metadata=...)`), as Hudi's extra metadata.
    extra: dict[str, Any] = field(default_factory=dict)

    #: Private files (besides data files) this action writes under `.stitch/`, by field name.
    OWN_FIELDS: ClassVar[tuple[str, ...]] = ()

    @property
    def added_files(self) -> tuple[DataFile, ...]:
        return ()

    @property
    def written_under(self) -> int:
        """The schema version its data files were written under."""
        return 0

    def owned_files(self) -> set[str]:
        """Every file this commit made: data files and its own bookkeeping (rollback deletes them)."""
        out = {f.path for f in self.added_files}
        out |= {str(getattr(self, name)) for name in self.OWN_FIELDS if getattr(self, name)}
        return out


@dataclass(frozen=True)
class DeltaCommit(Commit):
    stream: str | None = None
    added: tuple[DataFile, ...] = ()
    rows: int = 0
    bad_rows: int = 0
    #: The quarantine folder of this commit (or, in older tables, its one file), and the files in it.
    quarantine: str | None = None
    quarantine_files: tuple[str, ...] = ()
    quarantined_files: tuple[QuarantinedFile, ...] = ()
    sources: tuple[LandingRecord, ...] = ()
    #: Kafka records consumed (a stream with a `format: kafka` source), per topic partition.
    offsets: tuple[OffsetRange, ...] = ()
    #: Partitions whose recorded offset the topic no longer held, moved on by `--reset-offsets`.
    offset_resets: tuple[OffsetReset, ...] = ()
    engine: str | None = None
    stream_batch: StreamBatch | None = None
    schema_version: int | None = None

    OWN_FIELDS: ClassVar[tuple[str, ...]] = ("quarantine",)

    @property
    def written_under(self) -> int:
        return self.schema_version or 0

    @property
    def added_files(self) -> tuple[DataFile, ...]:
        return self.added

    def owned_files(self) -> set[str]:
        copies = {q.copy for q in self.quarantined_files if q.copy}
        return super().owned_files() | set(self.quarantine_files) | copies

    def consumed(self) -> dict[str, LandingRecord]:
        """Landing files this commit consumed (quarantined whole ones included), by name."""
        found = {item.name: item for item in self.sources}
        for item in self.quarantined_files:
            found.setdefault(item.name, LandingRecord(item.name))
        return found


@dataclass(frozen=True)
class RewriteCommit(Commit):
    added: tuple[DataFile, ...] = ()
    operations: tuple[FileGroupRef, ...] = ()
    schema_version: int = 0

    @property
    def written_under(self) -> int:
        return self.schema_version

    @property
    def added_files(self) -> tuple[DataFile, ...]:
        return self.added

    @property
    def groups(self) -> set[tuple[str, str]]:
        return {op.group for op in self.operations} | {f.group for f in self.added}


@dataclass(frozen=True)
class CompactionCommit(RewriteCommit):
    pass


@dataclass(frozen=True)
class EraseCommit(RewriteCommit):
    keys_file: str | None = None
    erased_file: str | None = None
    #: The digest of `erased_file` (incremental reads report its keys deleted).
    erased_checksum: str = ""
    requested_keys: int = 0
    erased_keys: int = 0
    #: `--purge`: older copies go too, the published tables' history included (their next publish recreates them).
    purge: bool = False
    #: Its purge writes a `purged` marker when done (erases before markers have none): until then it is unfinished.
    purge_marked: bool = False

    OWN_FIELDS: ClassVar[tuple[str, ...]] = ("keys_file", "erased_file")


@dataclass(frozen=True)
class RescaleCommit(RewriteCommit):
    """A rescale's base files (`operations`: the new file groups written), and the layout it leaves."""

    buckets: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    whole_table: bool = False


@dataclass(frozen=True)
class CleanCommit(Commit):
    policy: str | None = None
    deleted: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()


@dataclass(frozen=True)
class RollbackCommit(Commit):
    rolled_back: tuple[str, ...] = ()
    reset_compactions: tuple[str, ...] = ()
    deleted_files: tuple[str, ...] = ()
    reason: str = ""
    resumed: bool = False
    #: The plan's `positions`: a stream's next offsets after the undo, where no remaining commit records them.
    positions: dict[str, tuple[OffsetRange, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreCommit(Commit):
    savepoint: str = ""
    savepoint_of: str = ""
    undone: tuple[str, ...] = ()
    #: The plan's `positions`: a stream's next offsets after the undo, where no remaining commit records them.
    positions: dict[str, tuple[OffsetRange, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AlterCommit(Commit):
    schema_version: int = 0
    #: The whole new schema (None only in a damaged record).
    properties: SchemaRecord | None = None
    changes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PublishCommit(Commit):
    """What a publish made: the published table's new version (Delta) or snapshot (Iceberg) and its size."""

    format: PublishFormat
    location: str = ""
    source: str = ""
    version: int = 0
    identifier: str = ""
    rows: int = 0
    removed_files: int = 0
    #: The format table's own location: Delta's is `location`; an Iceberg catalog may put tables elsewhere.
    table_location: str = ""
    #: Where an Iceberg reader finds it by `identifier` (the catalog's URI, no credentials; "" for Delta, and in
    #: publishes recorded before catalogs were): with another catalog, the table published is another table.
    catalog: str = ""


@dataclass(frozen=True)
class SavepointCommit(Commit):
    savepoint_of: str = ""
    instant: str = ""
    name: str | None = None
    files: tuple[str, ...] = ()


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    """A validator per record class, built once (building one costs more than thousands of validations)."""
    found = _ADAPTERS.get(cls)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


def load(cls: type[Any], data: dict[str, Any]) -> Any:
    """A record from its JSON form (unknown keys ignored); ValueError naming the problem if it does not fit."""
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where or cls.__name__}: {first['msg']}") from None


def dump(record: Any) -> dict[str, Any]:
    """A record's JSON form."""
    return dict(_adapter(type(record)).dump_python(record, mode="json"))


def plan_json(plan: Plan) -> dict[str, Any]:
    return dump(plan)


def commit_json(commit: Commit) -> dict[str, Any]:
    return dump(commit)
