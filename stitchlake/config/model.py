"""The typed table config (design.md §10): frozen pydantic models, every default written once, here (and in the
sections `locks` and `sources` hold; `fields` has what every section is built from, `choices` the config's enums).

The models accept two shapes: the YAML a person writes (columns and streams as mappings `name: spec`, numbers
and `true`/`false` possibly as text after `${ENV}` expansion) and the stored form of `.stitch/table.json`
(columns as lists of `{name, type, default}`). Validators raise `refuse(...)` errors whose message is final;
`parse.py` puts the file and the YAML path in front. `at` in such an error is the part of the YAML path below
the value being validated (a cross-field check on a stream names `ordering`, not the whole stream).

Models are frozen (a config is shared by every component of a run), picklable (they travel to Spark
executors) and plain attribute access (nothing is computed on access but the few derived properties).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from annotated_types import Ge, Le
from pydantic import (
    BeforeValidator,
    Field,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from stitchlake.errors import ConfigError
from stitchlake.paths import PUBLISHED_DIR
from stitchlake.types import KEY_TYPES, can_order, ordering_type_names
from stitchlake.vocabulary import CompactionStrategy, PublishFormat

from . import yaml_schema as schema
from .choices import BadRows, CleanPolicy, ConcurrencyMode, LogFormat, NullsMode
from .fields import (
    WHOLE,
    ColumnName,
    ColumnType,
    Flag,
    Keyed,
    Location,
    MarkerName,
    Seconds,
    Spec,
    StreamName,
    TableName,
    Text,
    as_catalog_properties,
    as_delete_values,
    as_secret_names,
    as_spark_conf,
    check_ordering,
    from_yaml,
    iceberg_catalog_refusal,
    is_within,
    kind,
    refuse,
)
from .locks import AnyLockSpec, FileSystemLockSpec
from .sources import SourceSpec
from .values import parse_default


def _named_columns(value: Any, info: ValidationInfo) -> Any:
    """YAML writes columns as a mapping `name: type` or `name: {type, default}`; the model keeps a tuple."""
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple(Keyed(key, item) for key, item in value.items())
    if from_yaml(info) or not isinstance(value, list | tuple):
        raise refuse(f"must be a mapping of column names to types, got {kind(value)}")
    return value  # table.json's list of {name, type, default}, or ColumnSpecs


def _named_streams(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(f"must be a mapping of stream names to streams, got {kind(value)}")
    return {str(key): item if isinstance(item, StreamSpec) else Keyed(key, item) for key, item in value.items()}


# ------------------------------------------------------------------------------------------------- models


class ColumnSpec(Spec):
    """A named, typed column; `default` is what a stream that never wrote a key reads as."""

    key_field = "name"
    shorthand = "type"

    name: ColumnName
    type: ColumnType
    """int, long, float, double, boolean, string, date, timestamp (UTC, µs), binary, decimal(p,s), or nested:
    array<T>, map<K,V>, struct<name:T,...>."""
    default: Any = None
    """What the column reads for a key the stream never wrote (or deleted); without one, null."""

    @field_validator("default")
    @classmethod
    def _typed_default(cls, value: Any, info: ValidationInfo) -> Any:
        type_name = info.data.get("type")
        if type_name is None:  # the type itself was refused
            return value
        try:
            return parse_default(type_name, value)
        except (ValueError, TypeError) as exc:
            raise refuse(f"not a valid {type_name}: {exc}") from None


#: Columns: a mapping name -> type or {type, default} in YAML, an ordered tuple in the model.
Columns = Annotated[tuple[ColumnSpec, ...], BeforeValidator(_named_columns)]


class DeleteSpec(Spec):
    """A source column (not stored) whose listed values mark an event as a delete of the stream's group."""

    column: MarkerName
    """The source column that marks deletes; read from the landing files, not stored."""
    values: Annotated[tuple[str, ...], BeforeValidator(as_delete_values), WithJsonSchema(schema.DELETE_VALUES)]
    """The values that mean delete, compared as text (YAML true/false mean "true"/"false")."""


class StreamSpec(Spec):
    """One stream: the column group it owns, how its events are ordered, and how nulls and deletes behave."""

    key_field = "name"

    name: StreamName
    columns: Annotated[Columns, Field(json_schema_extra=schema.named_mapping(schema.COLUMN_TYPE, 1))]
    """The stream's own columns: name: type, or name: {type: T, default: V}."""
    ordering: Annotated[tuple[str, ...], BeforeValidator(check_ordering), WithJsonSchema(schema.ORDERING)] = ()
    """The event version: a column or a list of them, compared left to right; omitted = commit-time ordering."""
    nulls: NullsMode = NullsMode.OVERWRITE
    """overwrite: the winning event replaces the whole group; ignore: per column, the newest non-null value."""
    deletes: DeleteSpec | None = None
    """Delete marker: {column: NAME, values: [V, ...]}."""
    source: SourceSpec | None = None
    """Landing files for `stitch ingest`; streams written only through the API need none."""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> ColumnSpec:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Ordering and the delete marker refer to the stream's own columns."""
        if self.source is not None:
            self.source._stream = self.name
        if not self.columns:
            raise refuse(f"stream {self.name} needs at least one column of its own", at="columns")
        names = self.column_names
        for item in self.ordering:
            if item not in names:
                listing = ", ".join(names)
                raise refuse(f"{item!r} is not a column of stream {self.name} (columns: {listing})", at="ordering")
            kind_ = self.column(item).type
            if not can_order(kind_):
                allowed = ordering_type_names()
                raise refuse(
                    f"{item!r} has type {kind_}, which cannot order events (use one of: {allowed})", "ordering"
                )
        if len(set(self.ordering)) != len(self.ordering):
            raise refuse("lists a column twice", at="ordering")
        if self.deletes is not None and self.deletes.column in names:
            raise refuse(
                f"{self.deletes.column!r} is one of the stream's stored columns; the delete marker is a separate "
                "source column that is not stored",
                at="deletes.column",
            )
        return self


class TableSpec(Spec):
    """The `table:` section. Key and partitioning are fixed when the table is created; the bucket count changes
    only through `stitch rescale`, the log format through `stitch alter`."""

    name: TableName
    """Table name, recorded in .stitch/table.json."""
    path: Location
    """Where the table lives: a folder (relative to the config file), file:///..., or s3://bucket/prefix."""
    key: Annotated[Columns, Field(json_schema_extra=schema.named_mapping(schema.COLUMN_TYPE, 1))]
    """Record key: column -> type (int, long, string, date); several columns make a composite key."""
    partition_by: Annotated[Columns, Field(json_schema_extra=schema.named_mapping(schema.COLUMN_TYPE, 0))] = ()
    """Hive-style partition columns: column -> type (int, long, string, date)."""
    buckets: Annotated[int, Strict(), Ge(1), Le(65536), WHOLE] = 4
    """File groups per partition: bucket = stable_hash(key) mod buckets (the table's count now; `stitch rescale`
    changes it)."""
    log_format: LogFormat = LogFormat.PARQUET
    """Format of log files (one stream's rows from one commit)."""

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.key)

    @property
    def partition_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.partition_by)

    @field_validator("key", "partition_by")
    @classmethod
    def _key_like(cls, columns: tuple[ColumnSpec, ...], info: ValidationInfo) -> tuple[ColumnSpec, ...]:
        """Key and partition values are hashed and become folder names: few types, and never a default."""
        what = "key" if info.field_name == "key" else "partition"
        if what == "key" and not columns:
            raise refuse("needs at least one column, e.g. {order_id: long}")
        for column in columns:
            if column.type not in KEY_TYPES:
                allowed = ", ".join(sorted(KEY_TYPES))
                raise refuse(f"type {column.type} cannot be a {what} column (use one of: {allowed})", column.name)
            if column.default is not None:
                raise refuse(f"a {what} column cannot have a default", at=column.name)
        return columns

    @model_validator(mode="after")
    def _partition_not_key(self) -> Self:
        for column in self.partition_by:
            if column.name in self.key_names:
                raise refuse("is also a key column", at=f"partition_by.{column.name}")
        return self


class HeartbeatSpec(Spec):
    """Writers' heartbeats: how a live writer is told from a failed one."""

    interval_s: Seconds = 10.0
    """Seconds between a writer's heartbeats."""
    expire_s: Seconds = 60.0
    """An inflight write whose heartbeat is older than this is a failed write (at least 2 x interval_s)."""

    @model_validator(mode="after")
    def _expire_after_two_beats(self) -> Self:
        if self.expire_s < 2 * self.interval_s:
            raise refuse(
                f"{self.expire_s:g} must be at least twice interval_s ({self.interval_s:g}), "
                "or a slow beat would look like a dead writer",
                at="expire_s",
            )
        return self


class ConcurrencySpec(Spec):
    """How concurrent writers and services coordinate."""

    mode: ConcurrencyMode = ConcurrencyMode.LOCK_FREE
    """lock_free: one live writer per stream, writers never fail because of each other; optimistic: several writers
    of a stream at once, a write that overlaps another one's file groups (or a pending rewrite's) aborts (exit 3)."""
    early_conflict_detection: Flag = True
    """optimistic mode: before writing file groups, check live writers' and completed writes' file groups, so a
    doomed write stops before writing its data (false: only the check at publish)."""
    lock: AnyLockSpec = Field(default_factory=FileSystemLockSpec)
    heartbeat: HeartbeatSpec = Field(default_factory=HeartbeatSpec)
    max_clock_skew_s: Seconds = 86400.0
    """How far the timeline's newest time may be ahead of this host's clock before writers refuse."""


class CompactionSpec(Spec):
    """When and what compaction merges into new base files."""

    inline: Flag = False
    """true: an ingest compacts at its end once after_delta_commits delta commits piled up."""
    after_delta_commits: Annotated[int, Strict(), Ge(1), WHOLE] = 5
    """Delta commits since the last compaction that trigger inline compaction."""
    strategy: CompactionStrategy = CompactionStrategy.ALL
    """all, log_files (at least min_log_files logs) or log_bytes (at least min_log_bytes of logs)."""
    min_log_files: Annotated[int, Strict(), Ge(1), WHOLE] = 2
    """Threshold for log_files."""
    min_log_bytes: Annotated[int, Strict(), Ge(0), WHOLE] = 64 * 1024 * 1024
    """Threshold for log_bytes."""
    stale_plan_minutes: Annotated[int, Strict(), Ge(1), WHOLE] = 60
    """`stitch status` warns about a plan pending this long: nobody runs it, or a live run may be hung."""
    max_file_group_mb: Annotated[int, Strict(), Ge(1), WHOLE] = 256
    """`stitch status` warns about file groups whose latest slice (base file and logs) is larger than this many
    MiB: merging a slice, in a read, a compaction or a Spark task, holds all of it, at about 8x its bytes."""


class CleanSpec(Spec):
    """What `stitch clean` keeps; time travel reaches back only as far as it keeps."""

    policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    retain: Annotated[int, Strict(), Ge(1), WHOLE] = 10
    """Commits, file versions or hours, by policy."""


class ArchiveSpec(Spec):
    """How much of the timeline stays active."""

    keep_instants: Annotated[int, Strict(), Ge(10), WHOLE] = 200
    """Completed instants kept in the active timeline; older ones move to the archive."""


class PublishSpec(Spec):
    """Publishing the compacted state as Delta Lake and/or Iceberg tables, for engines that cannot merge."""

    formats: tuple[PublishFormat, ...] = ()
    """Formats published after every compaction, rescale and alter (`stitch publish --format F` publishes any format on
    demand; an erase or a restore republishes every format the table has published)."""
    location: Location | None = None
    """Folder or `s3://` prefix of the published tables: `<location>/<table name>/<format>` (default:
    `.stitch/published/<format>` in the table). Relative paths resolve against the config file's folder. Never
    inside the table folder elsewhere than the default: `stitch clean` would take the published files for
    orphans."""
    retain_versions: Annotated[int, Strict(), Ge(1), WHOLE] = 10
    """Published versions kept readable (time travel); files only older versions need are deleted at publish."""
    iceberg_catalog: Annotated[dict[str, str], BeforeValidator(as_catalog_properties)] = Field(default_factory=dict)
    """The Iceberg catalog, as pyiceberg catalog properties: `{type: rest, uri: https://..., credential: ${VAR}}`
    for a REST catalog, `{type: sql, uri: <SQLAlchemy URL>}` for another SQL one. Default: a SQLite `SqlCatalog`
    beside the published Iceberg tables, on local disk only (required when they are published to S3)."""
    iceberg_namespace: Text = "stitchlake"
    """Catalog namespace of the published Iceberg table, which is named after the table."""

    @field_validator("formats")
    @classmethod
    def _once_each(cls, formats: tuple[PublishFormat, ...]) -> tuple[PublishFormat, ...]:
        """`[delta, delta]` published every compaction twice, two versions each time (half the retained window)."""
        twice = sorted({f for f in formats if formats.count(f) > 1})
        if twice:
            raise refuse(f"names {', '.join(twice)} more than once")
        return formats


class SparkSpec(Spec):
    """How jobs are submitted to Spark."""

    master: Text = "local[*]"
    """spark-submit --master: local[N], yarn, spark://host:7077, k8s://..."""
    conf: Annotated[dict[str, str], BeforeValidator(as_spark_conf), WithJsonSchema(schema.SPARK_CONF)] = Field(
        default_factory=dict
    )
    """Spark settings for every job; keys start with spark., values are kept as text."""
    auto_local_max_mb: Annotated[int, Strict(), Ge(0), Le(1_048_576), WHOLE] = 256
    """`--engine auto` runs a job in-process when its work (landing files to ingest, file slices to rewrite) is at
    most this many MiB, and as a spark-submit job otherwise; 0 sends every heavy job to Spark."""


class StorageSpec(Spec):
    """How to reach the object store of `s3://` paths (the table, landing folders); local paths need nothing.

    Unset fields come from the standard AWS environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ALLOW_HTTP) or the host's instance profile.
    """

    #: Fields that hold secrets: only `${VAR}` may give them, and their values are never printed.
    secret_fields: ClassVar[tuple[str, ...]] = ("secret_access_key", "session_token")

    endpoint: Text | None = None
    """S3 endpoint URL of a store that is not AWS (Ceph RGW, MinIO...), e.g. http://127.0.0.1:7480."""
    region: Text | None = None
    """Region of the bucket (us-east-1 when neither this nor AWS_REGION says)."""
    access_key_id: Text | None = None
    """Access key id; ${VAR} keeps it out of the file."""
    secret_access_key: Annotated[Text | None, Field(repr=False)] = None
    """Secret key: ${VAR} only, never written in the file; kept as that reference, read from the environment
    by each process that connects, never printed."""
    session_token: Annotated[Text | None, Field(repr=False)] = None
    """Session token of temporary credentials: ${VAR} only, like secret_access_key."""
    allow_http: Flag | None = None
    """Plain http to the endpoint (a local test store); default: only when the endpoint says http://."""

    @property
    def options(self) -> dict[str, str]:
        """The settings given, as the storage backend takes them (`storage.s3.OPTIONS`; secrets as `${VAR}`)."""
        out = {name: value for name, value in self if value is not None and not isinstance(value, bool)}
        if self.allow_http is not None:
            out["allow_http"] = "true" if self.allow_http else "false"
        return out


class TableConfig(Spec):
    """A whole table config. `source_file` is the YAML it came from (None when built from table.json)."""

    internal = frozenset({"source_file", "secret_paths", "secret_values"})

    table: TableSpec
    streams: Annotated[
        dict[str, StreamSpec],
        BeforeValidator(_named_streams),
        Field(json_schema_extra=schema.named_mapping(None, 1)),
    ]
    """Stream name -> stream; each column belongs to exactly one stream."""
    bad_rows: BadRows = BadRows.FAIL
    """Rows with a null key, partition or ordering value, or a value that does not convert to its type."""
    concurrency: ConcurrencySpec = Field(default_factory=ConcurrencySpec)
    compaction: CompactionSpec = Field(default_factory=CompactionSpec)
    clean: CleanSpec = Field(default_factory=CleanSpec)
    archive: ArchiveSpec = Field(default_factory=ArchiveSpec)
    publish: PublishSpec = Field(default_factory=PublishSpec)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    """Object-store settings for s3:// paths (endpoint, region, credentials); local tables need none."""
    secrets: Annotated[tuple[str, ...], BeforeValidator(as_secret_names), WithJsonSchema(schema.ENV_NAMES)] = ()
    """Environment variables whose values are masked wherever stitchlake prints, whatever their names."""
    source_file: str | None = None
    #: YAML paths whose values came from `${ENV}` of a secret: never print them.
    secret_paths: frozenset[str] = frozenset()
    #: The environment values themselves, to mask them in any text (`redact`). Kept out of repr and equality.
    secret_values: frozenset[str] = Field(default=frozenset(), repr=False, exclude=True)

    def __eq__(self, other: object) -> bool:
        """Equal configs describe the same table and settings; which secret values they read does not count."""
        if not isinstance(other, TableConfig):
            return NotImplemented
        return {**self.__dict__, "secret_values": None} == {**other.__dict__, "secret_values": None}

    __hash__ = None  # type: ignore[assignment]  # holds dicts, like the dataclass it replaces

    def stream(self, name: str) -> StreamSpec:
        """The named stream, or a ConfigError listing the streams there are."""
        try:
            return self.streams[name]
        except KeyError:
            known = ", ".join(self.streams) or "none"
            raise ConfigError(f"unknown stream {name!r} (streams: {known})") from None

    @property
    def common_columns(self) -> tuple[ColumnSpec, ...]:
        """Key then partition columns: every stream carries them."""
        return self.table.key + self.table.partition_by

    def all_columns(self) -> list[ColumnSpec]:
        """The wide table's user-visible columns in order: key, partition, then each stream's group."""
        columns = list(self.common_columns)
        for stream in self.streams.values():
            columns.extend(stream.columns)
        return columns

    def with_path(self, path: str) -> TableConfig:
        return self.model_copy(update={"table": self.table.model_copy(update={"path": path})})

    @field_validator("streams")
    @classmethod
    def _some_stream(cls, streams: dict[str, StreamSpec]) -> dict[str, StreamSpec]:
        if not streams:
            raise refuse("needs at least one stream")
        return streams

    @model_validator(mode="after")
    def _published_outside_the_table(self) -> Self:
        """`stitch clean` takes unknown files inside the table folder for orphans: published tables live in its
        `.stitch/published` (the default) or outside it."""
        where = self.publish.location
        if where and is_within(where, self.table.path) and not is_within(where, f"{self.table.path}/{PUBLISHED_DIR}"):
            raise refuse(
                f"{where} is inside the table folder {self.table.path}: keep it outside, or leave it unset "
                f"({PUBLISHED_DIR} in the table)",
                "publish.location",
            )
        return self

    @model_validator(mode="after")
    def _iceberg_catalog_off_the_store(self) -> Self:
        """The default Iceberg catalog is a SQLite file beside the published tables: not on an object store."""
        catalog = self.publish.iceberg_catalog
        where = self.publish.location or self.table.path
        refused = iceberg_catalog_refusal(where, catalog)
        if PublishFormat.ICEBERG in self.publish.formats and refused:
            raise refuse(refused, "publish.iceberg_catalog")
        return self

    @model_validator(mode="after")
    def _columns_disjoint(self) -> Self:
        """Each column belongs to one stream; key and partition columns are carried by all, owned by none."""
        carried = {c.name: "partition" for c in self.table.partition_by} | {c.name: "key" for c in self.table.key}
        owner: dict[str, str] = {}
        for stream in self.streams.values():
            for column in stream.columns:
                at = f"streams.{stream.name}.columns.{column.name}"
                if column.name in carried:
                    raise refuse(
                        f"{column.name!r} is a {carried[column.name]} column; key and partition columns are "
                        "carried by every stream and cannot belong to one",
                        at,
                    )
                if column.name in owner:
                    raise refuse(
                        f"{column.name!r} already belongs to stream {owner[column.name]}; "
                        "each column belongs to exactly one stream",
                        at,
                    )
                owner[column.name] = stream.name
            if stream.deletes and stream.deletes.column in carried:
                raise refuse(
                    f"{stream.deletes.column!r} is a key or partition column", f"streams.{stream.name}.deletes.column"
                )
        return self
