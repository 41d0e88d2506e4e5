"""The names the table's files, the library and the CLI share, spelled once.

A leaf: it imports nothing of stitchlake, so every layer (the CLI too, which may not import the timeline or the
config models' machinery) takes its choices from here. Each enum's values are the strings written on disk and
typed on the command line: a StrEnum is that string, so plans and instants encode as they always did.
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """Every action the timeline records. What each one means (what it writes, whether a restore undoes it, ...)
    is written once, in `timeline.actions.ACTIONS`; services ask that table, never list actions themselves."""

    DELTACOMMIT = "deltacommit"
    COMPACTION = "compaction"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    ERASE = "erase"
    ALTER = "alter"
    PUBLISH = "publish"
    RESCALE = "rescale"


class Recovery(StrEnum):
    """What recovery (`stitch rollback --failed`, and `stitch clean` first) does with an instant whose process died."""

    #: Its partial work is undone (the markers name every file it began).
    ROLL_BACK = "roll back"
    #: Reset to run again from its plan: partial files deleted, plan kept (its command's `--resume`/`--run` runs
    #: it; a rescale fences the writers of its partitions until then). Never undone.
    RERUN = "rerun"
    #: Finished from its recorded plan, never undone: half a deletion cannot be taken back.
    FINISH = "finish"


class State(StrEnum):
    """An instant's state, in the order it advances (`rank`); the value is the file name's suffix."""

    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    @property
    def label(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """How far the instant has advanced: a later state of one instant outranks an earlier one."""
        return _STATE_ORDER.index(self)


_STATE_ORDER = tuple(State)


class ReadMode(StrEnum):
    """snapshot merges logs into base files; read_optimized reads base files only."""

    SNAPSHOT = "snapshot"
    READ_OPTIMIZED = "read_optimized"


class EngineChoice(StrEnum):
    """Where a job runs: `auto` in this process for small work and on Spark otherwise, `local` here, `spark` as a
    spark-submit job. Where a job *ran* (`JobRun.engine`, a deltacommit's `engine`) stays a string, the engine's own
    name: an `Engine` object a caller makes names itself, and `none` says nothing was pending."""

    auto = "auto"
    local = "local"
    spark = "spark"


class CompactionStrategy(StrEnum):
    """Which file slices a compaction takes."""

    ALL = "all"
    LOG_FILES = "log_files"
    LOG_BYTES = "log_bytes"


class SavepointAction(StrEnum):
    """What a savepoint job does: pin the state as of an instant, or let a pinned state go."""

    CREATE = "create"
    DELETE = "delete"


class PublishFormat(StrEnum):
    """Table formats other engines read: `stitch publish` writes the compacted state as one of them."""

    DELTA = "delta"
    ICEBERG = "iceberg"


class SourceFormat(StrEnum):
    """Format of a stream's landing files, or `kafka`: the stream reads a Kafka topic instead."""

    PARQUET = "parquet"
    JSON = "json"
    CSV = "csv"
    AVRO = "avro"
    KAFKA = "kafka"
