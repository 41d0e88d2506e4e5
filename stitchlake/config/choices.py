"""The config's own choices (a lock provider, a clean policy, ...): StrEnums whose values are the YAML's words.

The choices other layers share (source and publish formats, compaction strategies) are `stitchlake.vocabulary`'s."""

from __future__ import annotations

from enum import StrEnum

from stitchlake.errors import one_of


class NullsMode(StrEnum):
    """How a stream's null values merge: replace the whole group, or keep each column's newest non-null."""

    OVERWRITE = "overwrite"
    IGNORE = "ignore"


class BadRows(StrEnum):
    """What a bad row does: stop the batch, or set the row aside in `.stitch/quarantine/` (the policy's names, defined
    here only; `writing.badrows` applies them)."""

    FAIL = "fail"
    QUARANTINE = "quarantine"


class ConcurrencyMode(StrEnum):
    """lock_free: one live writer per stream, never a conflict; optimistic: several writers of a stream, and
    writes overlapping on file groups conflict (`concurrency.conflicts`)."""

    LOCK_FREE = "lock_free"
    OPTIMISTIC = "optimistic"


class LockProvider(StrEnum):
    """Where the short table lock lives: lock objects under `.stitch/locks/` created with the storage's atomic
    create (`storage`, also called `filesystem`: local disk and S3 alike), or ZooKeeper."""

    FILESYSTEM = "filesystem"
    STORAGE = "storage"
    ZOOKEEPER = "zookeeper"


class CleanPolicy(StrEnum):
    """What `stitch clean` keeps."""

    KEEP_LATEST_COMMITS = "keep_latest_commits"
    KEEP_LATEST_FILE_VERSIONS = "keep_latest_file_versions"
    KEEP_LATEST_HOURS = "keep_latest_hours"


def clean_policy(value: CleanPolicy | str) -> CleanPolicy:
    """`value` as a clean policy: anything else is refused (exit 2) before a clean touches anything."""
    return one_of(CleanPolicy, value, "clean policy")


class ValueFormat(StrEnum):
    """How a Kafka record's value holds one event: a JSON object, or one Avro record (binary, no header)."""

    JSON = "json"
    AVRO = "avro"


class StartingOffsets(StrEnum):
    """Where a Kafka stream starts the first time (no offsets recorded yet for its topic)."""

    EARLIEST = "earliest"
    LATEST = "latest"


class LogFormat(StrEnum):
    """Format of log files (base files are always Parquet)."""

    PARQUET = "parquet"
    AVRO = "avro"
