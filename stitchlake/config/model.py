"""The typed table config (design.md §10): frozen pydantic models, every default written once, here.

The models accept two shapes: the YAML a person writes (columns and streams as mappings `name: spec`, numbers
and `true`/`false` possibly as text after `${ENV}` expansion) and the stored form of `.stitch/table.json`
(columns as lists of `{name, type, default}`). Validators raise `refuse(...)` errors whose message is final;
`parse.py` puts the file and the YAML path in front. `at` in such an error is the part of the YAML path below
the value being validated (a cross-field check on a stream names `ordering`, not the whole stream).

Models are frozen (a config is shared by every component of a run), picklable (they travel to Spark
executors) and plain attribute access (nothing is computed on access but the few derived properties).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Self

from annotated_types import Ge, Gt, Le
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from stitchlake.errors import ConfigError
from stitchlake.paths import PUBLISHED_DIR
from stitchlake.storage.registry import absolute, is_local, is_uri
from stitchlake.types import KEY_TYPES, can_order, normalize_type, ordering_type_names
from stitchlake.vocabulary import CompactionStrategy, PublishFormat, SourceFormat

from . import yaml_schema as schema
from .secrets import declared_secrets
from .values import parse_default

#: Names (table, streams, columns, the delete marker): they become folder and column names.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Column names we use ourselves: meta columns start with `_sl`; `_op` is the incremental read's change type.
RESERVED_PREFIX = "_sl"
RESERVED_NAMES = frozenset({"_op"})
_WHOLE_TEXT = re.compile(r"\s*-?[0-9]+\s*")


# ------------------------------------------------------------------------------------------------ choices


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


# ------------------------------------------------------------------------------------------ errors, input


def _within(location: str, folder: str) -> bool:
    """Whether `location` is `folder` or under it (local paths compared absolute, URIs as text)."""
    if not is_uri(location) and not is_uri(folder):
        location, folder = os.path.abspath(location), os.path.abspath(folder)
    location, folder = location.rstrip("/"), folder.rstrip("/")
    return location == folder or location.startswith(folder + "/")


def given_location(value: str) -> str:
    """A location given outside the YAML (a command-line flag) as every process sees it: a path made absolute
    against the working folder, a URI as written. The CLI asks here: it may not import storage."""
    return absolute(value)


def iceberg_catalog_refusal(location: str, catalog: Mapping[str, Any]) -> str | None:
    """Why publishing Iceberg to `location` with `catalog` cannot work, or None: the default catalog is a SQLite
    file beside the published tables, which needs a disk. The one rule: the config checks it for the formats it
    publishes (naming the YAML path), `stitch publish -f iceberg` and `iceberg_catalog()` for the others."""
    if is_local(location) or "uri" in catalog or catalog.get("type", "sql") != "sql":
        return None
    return (
        f"publishing Iceberg to {location} needs a catalog that is not a file on the object store: set "
        "publish.iceberg_catalog to a REST catalog, or to type: sql with a database uri"
    )


def refuse(message: str, at: str = "") -> PydanticCustomError:
    """A validation error whose message is shown as it is; `at` is the YAML path below the validated value."""
    return PydanticCustomError("stitch", message, {"at": at} if at else None)


def kind(value: Any) -> str:
    """What a YAML value is, in words, for "must be X, got Y" messages."""
    if value is None:
        return "nothing"
    names = {dict: "a mapping", list: "a list", tuple: "a list", str: "text", bool: "true/false"}
    return names.get(type(value), type(value).__name__)


def from_yaml(info: ValidationInfo) -> bool:
    """Whether this validation reads a YAML document (`parse.py`), rather than table.json or Python arguments."""
    return bool(info.context and info.context.get("yaml"))


class Keyed(NamedTuple):
    """One entry of a YAML mapping `name: spec` (streams, columns), on its way to a model with that name."""

    key: Any
    value: Any


def _whole_number(value: Any) -> Any:
    """Whole numbers may be written as text ("8", or a `${VAR}`); the strict int check does the rest."""
    return int(value) if isinstance(value, str) and _WHOLE_TEXT.fullmatch(value) else value


def _number(value: Any) -> Any:
    """Numbers may be written as text; the strict float check (ints are fine, true/false are not) does the rest."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _flag(value: Any) -> Any:
    """`true`/`false` may be written as text (any case); nothing else means true or false."""
    return value.lower() == "true" if isinstance(value, str) and value.lower() in ("true", "false") else value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise refuse(f"must be non-empty text, got {kind(value)}")
    return value


def _name(what: str) -> BeforeValidator:
    """A name check whose message says what the name is of (`'a/b' is not a valid stream name`)."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
            raise refuse(f"{value!r} is not a valid {what} name (letters, digits and _, not starting with a digit)")
        if value.startswith(RESERVED_PREFIX) or value in RESERVED_NAMES:
            raise refuse(f"{value!r} is reserved (names starting with {RESERVED_PREFIX!r} and _op)")
        return value

    return BeforeValidator(check)


def _column_type(value: Any) -> str:
    if not isinstance(value, str):
        raise refuse(f"a column type must be text, got {kind(value)}")
    try:
        return normalize_type(value)
    except ValueError as exc:
        raise refuse(str(exc)) from None


def _resolve(value: str, info: ValidationInfo) -> str:
    """Relative paths resolve against the config's folder (the context's `base`); URLs are kept as written."""
    if is_uri(value):
        return value
    candidate = Path(value).expanduser()
    if not candidate.is_absolute():
        base = info.context.get("base") if info.context else None
        candidate = (base or Path.cwd()) / candidate
    return str(candidate.resolve())


def _zk_path(value: Any) -> Any:
    if isinstance(value, str) and not value.startswith("/"):
        raise refuse("must start with /")
    return value


def _ordering(value: Any, info: ValidationInfo) -> Any:
    """One column or a list of them; table.json stores "no ordering" as an empty list, YAML omits the key."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and not value and from_yaml(info):
        raise refuse("an empty list; omit ordering for commit-time ordering")
    return value


def _text_value(value: Any) -> str:
    """Delete markers and options compare as text; YAML's true/false become the lower-case words Arrow prints."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _delete_values(value: Any) -> Any:
    if not isinstance(value, list | tuple) or not value:
        raise refuse("must be a non-empty list of the values that mean delete")
    return tuple(_text_value(item) for item in value)


def _options(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(f"must be a mapping, got {kind(value)}")
    return {str(key): str(item) for key, item in value.items()}


def _spark_conf(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(f"must be a mapping, got {kind(value)}")
    for key in value:
        if not str(key).startswith("spark."):
            raise refuse("Spark settings start with 'spark.'", at=str(key))
    return {str(key): _text_value(item) for key, item in value.items()}


def _catalog_properties(value: Any) -> dict[str, str]:
    """pyiceberg catalog properties (`type`, `uri`, `warehouse`, `credential` ...), values as text."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(f"must be a mapping, got {kind(value)}")
    return {str(key): _text_value(item) for key, item in value.items()}


def _secret_names(value: Any) -> tuple[str, ...]:
    try:
        return declared_secrets(value)
    except ValueError as exc:
        raise refuse(str(exc)) from None


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


WHOLE = BeforeValidator(_whole_number)
NUMBER = BeforeValidator(_number)
TEXT = BeforeValidator(_text)

TableName = Annotated[str, Field(pattern=schema.NAME_PATTERN), _name("table")]
StreamName = Annotated[str, Field(pattern=schema.NAME_PATTERN), _name("stream")]
ColumnName = Annotated[str, Field(pattern=schema.NAME_PATTERN), _name("column")]
MarkerName = Annotated[str, Field(pattern=schema.NAME_PATTERN), _name("delete marker column")]
ColumnType = Annotated[str, BeforeValidator(_column_type), WithJsonSchema(schema.COLUMN_TYPE)]
Text = Annotated[str, TEXT]
#: A folder or URL; relative folders resolve against the config file's folder.
Location = Annotated[str, TEXT, AfterValidator(_resolve)]
Seconds = Annotated[float, Strict(), Gt(0), NUMBER]
Flag = Annotated[bool, Strict(), BeforeValidator(_flag)]


# ------------------------------------------------------------------------------------------------- models


class Spec(BaseModel):
    """Base of every config section: frozen, no unknown keys, and built from YAML or from table.json."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        defer_build=True,
        json_schema_extra=schema.yaml_keys_only,
    )

    #: The field a YAML mapping key fills (`name` of streams and columns): not a key of its own in the YAML.
    key_field: ClassVar[str | None] = None
    #: The field a bare value fills when the YAML writes `name: value` (columns: `amount: double`).
    shorthand: ClassVar[str | None] = None
    #: Fields the loader fills, never the YAML.
    internal: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def yaml_keys(cls) -> tuple[str, ...]:
        """The keys this section may have in the YAML, in the order the docs list them."""
        return tuple(n for n in cls.model_fields if n != cls.key_field and n not in cls.internal)

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, data: Any, info: ValidationInfo) -> Any:
        """An empty section means all defaults; an unknown key is an error naming the keys allowed there."""
        if isinstance(data, cls):
            return data
        key = None
        if isinstance(data, Keyed):
            key, data = data
            if cls.shorthand and data is not None and not isinstance(data, dict):
                data = {cls.shorthand: data}
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise refuse(f"must be a mapping, got {kind(data)}")
        if key is not None or from_yaml(info):
            allowed = cls.yaml_keys()
            for name in data:
                if name not in allowed:
                    raise refuse(f"unknown key (allowed here: {', '.join(allowed)})", at=str(name))
        if key is not None and cls.key_field:
            data = {**data, cls.key_field: key}
        return data


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
    values: Annotated[tuple[str, ...], BeforeValidator(_delete_values), WithJsonSchema(schema.DELETE_VALUES)]
    """The values that mean delete, compared as text (YAML true/false mean "true"/"false")."""


#: Kafka client settings stitch sets itself (the consumer is assigned explicit offsets; nothing is committed to
#: the broker: the table records the offsets).
KAFKA_OWN_OPTIONS = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "enable.partition.eof",
        "client.id",
    }
)
#: Kafka client settings that hold secrets: written only as `${VAR}`, never printed, resolved in each process.
#: Besides names that say so (sasl.password, ssl.keystore.password, sasl.oauthbearer.client.secret,
#: sasl.jaas.config), a private key inline (ssl.key.pem, sasl.oauthbearer.assertion.private.key.pem), its
#: passphrase, and sasl.oauthbearer.config (it may carry a client secret).
KAFKA_SECRET_OPTION = re.compile(r"(password|secret|jaas|passphrase|key\.pem|oauthbearer\.config)", re.IGNORECASE)
#: Keys of a file source that a Kafka source refuses, and the other way round.
FILE_ONLY_KEYS = ("path", "files_per_trigger")
KAFKA_ONLY_KEYS = (
    "topic",
    "bootstrap_servers",
    "value_format",
    "avro_schema",
    "starting_offsets",
    "records_per_trigger",
    "read_timeout_s",
)


def _avro_schema(value: Any, info: ValidationInfo) -> Any:
    """An Avro writer schema: inline (a mapping) or a `.avsc` file (relative to the config's folder); kept as the
    schema's JSON text, parsed here once so a mistake names its YAML path."""
    import json

    if value is None:
        return None
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        where = Path(_resolve(value, info))
        try:
            value = where.read_text()
        except OSError as exc:
            raise refuse(f"cannot read the Avro schema file {where}: {exc.strerror or exc}") from None
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        parsed = json.loads(text)
        import fastavro

        fastavro.parse_schema(parsed)
    except (ValueError, TypeError, KeyError) as exc:
        raise refuse(f"not a valid Avro schema: {exc}") from None
    except Exception as exc:  # fastavro's SchemaParseException and friends
        raise refuse(f"not a valid Avro schema: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise refuse("must be an Avro record schema (type: record): a stream reads records whose fields are columns")
    return json.dumps(parsed, sort_keys=True)


class SourceSpec(Spec):
    """Where a stream's events come from: landing files (`path` is absolute after loading), or a Kafka topic."""

    format: SourceFormat
    """parquet, json (one object per line), csv (with a header row) or avro files; or kafka (a topic)."""
    path: Location | None = None
    """Files: the folder (or URL) searched recursively for landing files; sorted name = arrival order."""
    options: Annotated[dict[str, str], BeforeValidator(_options), WithJsonSchema(schema.TEXT_MAPPING)] = Field(
        default_factory=dict
    )
    """Reader settings, kept as text. CSV: delimiter (default `,`, tab for .tsv), quote (`"`), escape (none),
    null_values (comma-separated; default: empty, NULL, null). Other file formats take none. Kafka: client
    settings passed to the consumer as they are (security.protocol, sasl.mechanism, sasl.username,
    sasl.password: ${VAR}, ssl.ca.location, ...)."""
    #: Reader options each format takes (one character each, except null_values: a comma-separated list).
    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"csv": ("delimiter", "quote", "escape", "null_values")}
    files_per_trigger: Annotated[int, Field(ge=1, le=100_000)] = 10
    """`stitch stream`: landing files ingested per micro-batch at most."""
    trigger_interval_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    """`stitch stream`: seconds between micro-batches (a batch that runs longer starts the next at once)."""
    topic: Text | None = None
    """Kafka: the topic the stream reads (every partition, partitions added later included)."""
    bootstrap_servers: Text | None = None
    """Kafka: host:port[,host:port...] of the brokers."""
    value_format: ValueFormat = ValueFormat.JSON
    """Kafka: json (each value one JSON object whose fields are columns) or avro (each value one Avro record in
    binary encoding, no header, written with avro_schema)."""
    avro_schema: Annotated[str | None, BeforeValidator(_avro_schema), WithJsonSchema(schema.AVRO_SCHEMA)] = None
    """Kafka, value_format avro: the writer schema, inline or a .avsc file (relative to the config's folder)."""
    starting_offsets: StartingOffsets = StartingOffsets.EARLIEST
    """Kafka: where the first ingest of the topic starts (earliest: every record the topic holds; latest: only
    records produced from then on). Partitions added later always start at their earliest offset."""
    records_per_trigger: Annotated[int, Field(ge=1, le=100_000_000)] = 100_000
    """Kafka, `stitch stream`: records ingested per micro-batch at most."""
    read_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    """Kafka: seconds an ingest waits for the broker (metadata, offsets, the next records) before it fails."""
    #: The stream it belongs to (set by the stream), so messages name the YAML path: `streams.S.source`.
    _stream: str = PrivateAttr(default="")

    @property
    def is_kafka(self) -> bool:
        return self.format == SourceFormat.KAFKA

    @property
    def yaml_path(self) -> str:
        return f"streams.{self._stream}.source" if self._stream else "source"

    @model_validator(mode="after")
    def _known_options(self) -> Self:
        """An option the reader would not use is an error, never silently ignored."""
        if self.is_kafka:
            return self._kafka_settings()
        if self.path is None:
            raise refuse(f"is required for {self.format} files (the landing folder)", at="path")
        for key in KAFKA_ONLY_KEYS:
            if key in self.model_fields_set:
                raise refuse("only applies to format: kafka", at=key)
        allowed = self.OPTIONS.get(str(self.format), ())
        for key, value in self.options.items():
            if key not in allowed:
                takes = f"takes only: {', '.join(allowed)}" if allowed else "takes none"
                raise refuse(f"unknown option for {self.format} files ({self.format} {takes})", at=f"options.{key}")
            if key != "null_values" and len(value) != 1:
                raise refuse(f"must be one character, got {value!r}", at=f"options.{key}")
        return self

    def _kafka_settings(self) -> Self:
        for key in FILE_ONLY_KEYS:
            if key in self.model_fields_set:
                raise refuse("does not apply to format: kafka (a Kafka source reads a topic)", at=key)
        if self.topic is None:
            raise refuse("is required for format: kafka", at="topic")
        if self.bootstrap_servers is None:
            raise refuse("is required for format: kafka (host:port of the brokers)", at="bootstrap_servers")
        if self.value_format == ValueFormat.AVRO and self.avro_schema is None:
            raise refuse("is required for value_format: avro (the values' writer schema)", at="avro_schema")
        if self.value_format != ValueFormat.AVRO and self.avro_schema is not None:
            raise refuse("only applies to value_format: avro", at="avro_schema")
        for key in self.options:
            if key in KAFKA_OWN_OPTIONS:
                own = "bootstrap_servers" if key == "bootstrap.servers" else "stitch (offsets are kept in the table)"
                raise refuse(f"is set by {own}; remove it", at=f"options.{key}")
        return self


class StreamSpec(Spec):
    """One stream: the column group it owns, how its events are ordered, and how nulls and deletes behave."""

    key_field = "name"

    name: StreamName
    columns: Annotated[Columns, Field(json_schema_extra=schema.named_mapping(schema.COLUMN_TYPE, 1))]
    """The stream's own columns: name: type, or name: {type: T, default: V}."""
    ordering: Annotated[tuple[str, ...], BeforeValidator(_ordering), WithJsonSchema(schema.ORDERING)] = ()
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


class LockSpec(Spec):
    """The short table lock, held only to draw instant times and publish: what every provider takes. Each provider
    has its own settings class below (`LOCK_SPECS`); the YAML's `provider` says which one reads the section."""

    tolerated: ClassVar[frozenset[str]] = frozenset()

    provider: LockProvider = LockProvider.FILESYSTEM
    """filesystem or its other name storage (lock objects under .stitch/locks/, created with the storage's
    atomic create: local disk and S3 alike), or zookeeper (writers on many hosts)."""
    wait_s: Seconds = 60.0
    """Seconds to wait for the lock before giving up (exit code 4)."""
    expire_s: Seconds = 30.0
    """Seconds after which a lock whose holder stopped renewing it may be taken over."""


def _provider_schema(*names: LockProvider) -> WithJsonSchema:
    """The names one provider's settings answer to, or a `${VAR}` holding one (as every enum in the schema)."""
    return WithJsonSchema(
        {"anyOf": [{"enum": [n.value for n in names]}, {"type": "string", "pattern": schema.ENV_REFERENCE}]}
    )


ZkPath = Annotated[str, Field(pattern="^/"), BeforeValidator(_zk_path)]


class _UnusedZooKeeperKeys(Spec):
    """ZooKeeper settings a `filesystem` lock section may carry (`FileSystemLockSpec.tolerated`): checked, unused."""

    zk_path: ZkPath = "/stitchlake"


def _with_unused_zk_path(body: dict[str, Any], model: type[Any]) -> None:
    """The schema of a filesystem lock section lets editors accept the `zk_path` the loader tolerates."""
    schema.yaml_keys_only(body, model)
    body["properties"]["zk_path"] = {
        "type": "string",
        "pattern": f"(?:^/)|{schema.ENV_REFERENCE}",
        "description": "The zookeeper provider's setting, accepted and unused here (configs written before each "
        "provider had its own settings give it).",
    }


class FileSystemLockSpec(LockSpec):
    """`provider: filesystem` (or `storage`): lock objects created with the storage's atomic create."""

    model_config = ConfigDict(json_schema_extra=_with_unused_zk_path)
    #: Another provider's keys this one accepts and ignores: `zk_path` was a setting of every provider before each
    #: had its own, and configs written then give it here (configs/full_example.yaml does). Still checked.
    tolerated: ClassVar[frozenset[str]] = frozenset({"zk_path"})

    provider: Annotated[
        Literal[LockProvider.FILESYSTEM, LockProvider.STORAGE],
        _provider_schema(LockProvider.FILESYSTEM, LockProvider.STORAGE),
    ] = LockProvider.FILESYSTEM
    """filesystem, or its other name storage: lock objects under .stitch/locks/, created with the storage's atomic
    create (local disk and S3 alike). The default."""


class ZooKeeperLockSpec(LockSpec):
    """`provider: zookeeper`: an ephemeral znode per lock, for writers on many hosts."""

    provider: Annotated[Literal[LockProvider.ZOOKEEPER], _provider_schema(LockProvider.ZOOKEEPER)]
    """zookeeper: writers on many hosts."""
    hosts: Text
    """ZooKeeper connect string (h1:2181,h2:2181); required for zookeeper, refused for the others."""
    zk_path: ZkPath = "/stitchlake"
    """Znode under which the ZooKeeper locks live."""

    @model_validator(mode="before")
    @classmethod
    def _hosts_given(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("hosts") is None:
            raise refuse("is required with provider: zookeeper (a connect string, e.g. h1:2181,h2:2181)", "hosts")
        return data


#: Each provider's own settings (`concurrency.providers` maps the same names to the lock each builds).
LOCK_SPECS: dict[LockProvider, type[FileSystemLockSpec | ZooKeeperLockSpec]] = {
    LockProvider.FILESYSTEM: FileSystemLockSpec,
    LockProvider.STORAGE: FileSystemLockSpec,
    LockProvider.ZOOKEEPER: ZooKeeperLockSpec,
}


def _lock_by_provider(value: Any, _handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """Read a `lock:` section with its provider's settings class; a key of another provider's is refused
    naming that provider, so the YAML keeps one flat shape whatever the provider."""
    if isinstance(value, LockSpec):
        return value
    if not isinstance(value, dict):  # an empty section, or not a mapping: the default provider says what is wrong
        return FileSystemLockSpec.model_validate(value, context=info.context)
    written = value.get("provider", LockProvider.FILESYSTEM.value)
    try:
        spec = LOCK_SPECS[LockProvider(written)]
    except (ValueError, TypeError):
        choices = ", ".join(p.value for p in LockProvider)
        raise refuse(f"{written!r} is not one of: {choices}", "provider") from None
    for key in value:
        owners = [p.value for p, other in LOCK_SPECS.items() if key in other.yaml_keys()]
        if key not in spec.yaml_keys() and key not in spec.tolerated and owners:
            raise refuse(f"only applies to provider: {', '.join(owners)}", at=str(key))
    if spec.tolerated & value.keys():  # checked as they always were, then dropped
        _UnusedZooKeeperKeys.model_validate({k: value[k] for k in spec.tolerated & value.keys()}, context=info.context)
    kept = {key: setting for key, setting in value.items() if key not in spec.tolerated}
    return spec.model_validate(kept, context=info.context)


#: `concurrency.lock`: the settings of the provider it names.
AnyLockSpec = Annotated[FileSystemLockSpec | ZooKeeperLockSpec, WrapValidator(_lock_by_provider)]


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
    """Formats published after every compaction and alter (`stitch publish --format F` publishes any format on
    demand; an erase or a restore republishes every format the table has published)."""
    location: Location | None = None
    """Folder or `s3://` prefix of the published tables: `<location>/<table name>/<format>` (default:
    `.stitch/published/<format>` in the table). Relative paths resolve against the config file's folder. Never
    inside the table folder elsewhere than the default: `stitch clean` would take the published files for
    orphans."""
    retain_versions: Annotated[int, Strict(), Ge(1), WHOLE] = 10
    """Published versions kept readable (time travel); files only older versions need are deleted at publish."""
    iceberg_catalog: Annotated[dict[str, str], BeforeValidator(_catalog_properties)] = Field(default_factory=dict)
    """The Iceberg catalog, as pyiceberg catalog properties: `{type: rest, uri: https://..., credential: ${VAR}}`
    for a REST catalog, `{type: sql, uri: <SQLAlchemy URL>}` for another SQL one. Default: a SQLite `SqlCatalog`
    beside the published Iceberg tables, on local disk only (required when they are published to S3)."""
    iceberg_namespace: Text = "stitchlake"
    """Catalog namespace of the published Iceberg table, which is named after the table."""


class SparkSpec(Spec):
    """How jobs are submitted to Spark."""

    master: Text = "local[*]"
    """spark-submit --master: local[N], yarn, spark://host:7077, k8s://..."""
    conf: Annotated[dict[str, str], BeforeValidator(_spark_conf), WithJsonSchema(schema.SPARK_CONF)] = Field(
        default_factory=dict
    )
    """Spark settings for every job; keys start with spark., values are kept as text."""
    auto_local_max_mb: Annotated[int, Field(ge=0, le=1_048_576)] = 256
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
    secrets: Annotated[tuple[str, ...], BeforeValidator(_secret_names), WithJsonSchema(schema.ENV_NAMES)] = ()
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
        if where and _within(where, self.table.path) and not _within(where, f"{self.table.path}/{PUBLISHED_DIR}"):
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
