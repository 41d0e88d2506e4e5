"""Job requests: one frozen record per job, built by the CLI (or a scheduler), run in-process or sent to a
spark-submit job as JSON. The same record on both sides means the job's options are spelled once."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from stitchlake.config.choices import CleanPolicy, clean_policy
from stitchlake.errors import UsageError, one_of
from stitchlake.vocabulary import ReadMode, SavepointAction

if TYPE_CHECKING:
    from stitchlake.jobs.results import SparkReadResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.rewrites.compaction import CompactionResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.rewrites.erase import EraseResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.rewrites.rescale import RescaleResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.undo.restore import RestoreResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.undo.rollback import RollbackResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.upkeep.archive import ArchiveResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.upkeep.clean import CleanResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.writes.ingest import IngestResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.services.writes.streaming import StreamResult  # noqa: F401 (named in the type arguments below)
    from stitchlake.timeline.savepoints import Savepoint  # noqa: F401 (named in the type arguments below)

#: The service result a request's job returns (its class's type argument; `jobs.specs` names it for decoding).
R = TypeVar("R", covariant=True)


@dataclass(frozen=True)
class JobRequest(Generic[R]):
    """Base of every request. `metadata_only` jobs never start Spark: they read and write a few small files.

    A request's type argument is its job's result type, so `launch.execute(table, IngestRequest(...))` is a
    `JobRun[IngestResult]` to the type checker, and the spark-submit result file is read back into that type."""

    job: ClassVar[str] = ""
    metadata_only: ClassVar[bool] = False
    #: Whether the job only reads the table (a table opened from its folder runs no other: `TableHandle.lock`).
    reads_only: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, **asdict(self)}


@dataclass(frozen=True)
class IngestRequest(JobRequest["IngestResult"]):
    job: ClassVar[str] = "ingest"
    stream: str = ""
    sources: tuple[str, ...] = ()
    max_files: int | None = None
    reingest_changed: bool = False
    #: A claim (the stream's pending deltacommit) the caller took before starting the job.
    instant: str | None = None
    #: Kafka sources: at most this many records, and `earliest`/`latest` for partitions whose recorded offset the
    #: topic no longer holds.
    max_records: int | None = None
    reset_offsets: str | None = None


@dataclass(frozen=True)
class CompactRequest(JobRequest["CompactionResult | None"]):
    """Run a scheduled compaction plan (`instant`, else the oldest pending). Scheduling is metadata only: the
    caller does it first (`services.compaction.schedule`), so it can size the plan to choose the engine."""

    job: ClassVar[str] = "compact"
    instant: str | None = None


@dataclass(frozen=True)
class RescaleRequest(JobRequest["RescaleResult | None"]):
    """Run a planned rescale (`instant`, else the oldest pending). Planning is metadata only: the caller does it
    first (`services.rescale.schedule`), so it can size the plan to choose the engine."""

    job: ClassVar[str] = "rescale"
    instant: str | None = None


@dataclass(frozen=True)
class CleanRequest(JobRequest["CleanResult"]):
    job: ClassVar[str] = "clean"
    policy: CleanPolicy | None = None
    retain: int | None = None
    dry_run: bool = False

    def __post_init__(self) -> None:
        # Checked where it is built (the CLI, a scheduler), and a policy read back from JSON is a policy again.
        if self.policy is not None:
            object.__setattr__(self, "policy", clean_policy(self.policy))


@dataclass(frozen=True)
class EraseRequest(JobRequest["EraseResult"]):
    job: ClassVar[str] = "erase"
    #: A Parquet, CSV or JSON-lines file with the key columns (read by the job).
    keys: str = ""
    purge: bool = False


@dataclass(frozen=True)
class RollbackRequest(JobRequest["RollbackResult"]):
    job: ClassVar[str] = "rollback"
    metadata_only: ClassVar[bool] = True
    instant: str | None = None
    failed: bool = False
    #: Roll back this stream's latest deltacommit (other streams may have committed after it).
    stream: str | None = None


@dataclass(frozen=True)
class SavepointRequest(JobRequest["Savepoint"]):
    """Create or delete (`action`) a savepoint."""

    job: ClassVar[str] = "savepoint"
    metadata_only: ClassVar[bool] = True
    action: SavepointAction = SavepointAction.CREATE
    name: str | None = None
    instant: str | None = None
    savepoint: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", one_of(SavepointAction, self.action, "savepoint action"))


@dataclass(frozen=True)
class RestoreRequest(JobRequest["RestoreResult"]):
    """Bring the table back to a savepoint (by name or instant)."""

    job: ClassVar[str] = "restore"
    metadata_only: ClassVar[bool] = True
    savepoint: str = ""
    force: bool = False


@dataclass(frozen=True)
class ArchiveRequest(JobRequest["ArchiveResult"]):
    job: ClassVar[str] = "archive"
    metadata_only: ClassVar[bool] = True
    keep: int | None = None


@dataclass(frozen=True)
class StreamRequest(JobRequest["StreamResult"]):
    """`stitch stream`: a stream's landing folder as a long-running Structured Streaming query (Spark only)."""

    job: ClassVar[str] = "stream"
    stream: str = ""
    #: Overrides of the stream's `source.files_per_trigger` and `source.trigger_interval_s`.
    files_per_trigger: int | None = None
    trigger_interval_s: float | None = None
    #: Kafka sources: override of `source.records_per_trigger`.
    records_per_trigger: int | None = None
    #: Ingest what is there now, in batches, then stop (Trigger.AvailableNow).
    available_now: bool = False
    #: The query's checkpoint folder (default: under the table's `.stitch/streams/`, or local state for S3).
    checkpoint: str | None = None
    #: A file whose appearance asks the query to stop after the running batch (the CLI's graceful SIGTERM).
    stop_file: str | None = None

    def __post_init__(self) -> None:
        # The CLI's bounds, for every caller: 0 fell back to the config in silence, and a negative records budget
        # planned nothing for ever (a query that never moved).
        for name in ("files_per_trigger", "records_per_trigger", "trigger_interval_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be more than 0, got {value}")
        if self.available_now and self.trigger_interval_s is not None:
            raise UsageError(
                "a trigger interval (--trigger-interval) paces a query that keeps running; available_now "
                "(--available-now) ingests what is pending in back-to-back micro-batches and stops: give one or the "
                "other"
            )


@dataclass(frozen=True)
class SparkReadRequest(JobRequest["SparkReadResult"]):
    """`stitch read --engine spark`: the table read through `format("stitchlake")` in a spark-submit job, so the JVM
    reader merges file slices in Spark's tasks: the count and a sample, or every row written by Spark (Spark only).

    The read's choices are `stitch read`'s own (the local engine's), checked the same way before the JVM starts."""

    job: ClassVar[str] = "read"
    reads_only: ClassVar[bool] = True
    mode: ReadMode = ReadMode.SNAPSHOT
    as_of: str | None = None
    since: str | None = None
    until: str | None = None
    columns: tuple[str, ...] | None = None
    #: `--where` texts (`reading.filters`), applied to the merged rows.
    where: tuple[str, ...] = ()
    before_images: bool = False
    #: Rows in the sample (0: all of them).
    limit: int = 20
    #: A folder Spark writes every row into, as part files of `out_format` (None: the count and a sample).
    out: str | None = None
    out_format: str | None = None
    #: Where the driver leaves the sample: an Arrow IPC file the launcher reads back, so values keep their types.
    sample: str | None = None
