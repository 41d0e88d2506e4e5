"""Table config: YAML in, a typed and validated `TableConfig` out (DESIGN §10).

Every error names the file and the YAML path of the problem, because the person reading it is usually
looking at a cron log, not at this code. Unknown keys are errors: a typo must never be silently ignored.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stitchlake.errors import ConfigError
from stitchlake.types import KEY_TYPES, ORDERING_TYPES, normalize_type

FORMAT_VERSION = 1
TABLE_JSON = ".stitch/table.json"

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Column names we use ourselves: meta columns start with `_sl`; `_op` is the incremental read's change type.
RESERVED_PREFIX = "_sl"
RESERVED_NAMES = frozenset({"_op"})
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: What a value taken from the environment is shown as, wherever stitchlake prints or records text.
SECRET_PLACEHOLDER = "<secret from the environment>"
#: Environment values shorter than this are not searched for in free text (masking every "8" or "on" in a
#: message would garble it); such values are still masked by their YAML path (`TableConfig.secret_paths`).
MIN_SECRET_LENGTH = 4
#: Environment variables whose names say they hold a secret; their values are masked in everything printed.
#: Others (`${YEAR}`, `${WAREHOUSE}`) are plain settings: masking them would garble data and instant times.
SECRET_NAME = re.compile(r"(SECRET|PASSW|PWD|TOKEN|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH|SESSION)", re.I)
#: A config with more values than this once YAML aliases are expanded is refused (an "alias bomb").
MAX_CONFIG_VALUES = 100_000

SOURCE_FORMATS = ("parquet", "json", "csv", "avro")
LOG_FORMATS = ("parquet", "avro")
NULLS_MODES = ("overwrite", "ignore")
BAD_ROWS = ("fail", "quarantine")
CONCURRENCY_MODES = ("lock_free", "optimistic")
LOCK_PROVIDERS = ("filesystem", "zookeeper")
CLEAN_POLICIES = ("keep_latest_commits", "keep_latest_file_versions", "keep_latest_hours")
COMPACTION_STRATEGIES = ("all", "log_files", "log_bytes")


@dataclass(frozen=True)
class ColumnSpec:
    """A named, typed column; `default` is what a stream that never wrote a key reads as."""

    name: str
    type: str
    default: Any = None


@dataclass(frozen=True)
class DeleteSpec:
    """A source column (not stored) whose listed values mark an event as a delete of the stream's group."""

    column: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class SourceSpec:
    """Where a stream's landing files are; `path` is absolute after loading."""

    format: str
    path: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamSpec:
    """One stream: the column group it owns, how its events are ordered, and how nulls and deletes behave."""

    name: str
    columns: tuple[ColumnSpec, ...]
    ordering: tuple[str, ...] = ()
    nulls: str = "overwrite"
    deletes: DeleteSpec | None = None
    source: SourceSpec | None = None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> ColumnSpec:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)


@dataclass(frozen=True)
class LockSpec:
    provider: str = "filesystem"
    wait_s: float = 60.0
    expire_s: float = 30.0
    hosts: str | None = None
    zk_path: str = "/stitchlake"


@dataclass(frozen=True)
class HeartbeatSpec:
    interval_s: float = 10.0
    expire_s: float = 60.0


@dataclass(frozen=True)
class ConcurrencySpec:
    mode: str = "lock_free"
    lock: LockSpec = field(default_factory=LockSpec)
    heartbeat: HeartbeatSpec = field(default_factory=HeartbeatSpec)
    #: How far the timeline's newest time may be ahead of this host's clock before writers refuse.
    max_clock_skew_s: float = 86400.0


@dataclass(frozen=True)
class CompactionSpec:
    inline: bool = False
    after_delta_commits: int = 5
    strategy: str = "all"
    min_log_files: int = 2
    min_log_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class CleanSpec:
    policy: str = "keep_latest_commits"
    retain: int = 10


@dataclass(frozen=True)
class ArchiveSpec:
    keep_instants: int = 200


@dataclass(frozen=True)
class SparkSpec:
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSpec:
    """The `table:` section. Key, partitioning, buckets and log format are fixed when the table is created."""

    name: str
    path: str
    key: tuple[ColumnSpec, ...]
    partition_by: tuple[ColumnSpec, ...] = ()
    buckets: int = 4
    log_format: str = "parquet"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.key)

    @property
    def partition_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.partition_by)


@dataclass(frozen=True)
class TableConfig:
    """A whole table config. `source_file` is the YAML it came from (None when built from table.json)."""

    table: TableSpec
    streams: Mapping[str, StreamSpec]
    bad_rows: str = "fail"
    concurrency: ConcurrencySpec = field(default_factory=ConcurrencySpec)
    compaction: CompactionSpec = field(default_factory=CompactionSpec)
    clean: CleanSpec = field(default_factory=CleanSpec)
    archive: ArchiveSpec = field(default_factory=ArchiveSpec)
    spark: SparkSpec = field(default_factory=SparkSpec)
    source_file: str | None = None
    #: YAML paths whose values came from `${ENV}`: never print them.
    secret_paths: frozenset[str] = frozenset()
    #: The environment values themselves, to mask them in any text (`redact`). Kept out of repr and equality.
    secret_values: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

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

    def table_properties(self) -> dict[str, Any]:
        """What `.stitch/table.json` records: the properties that decide how stored data is read."""
        return {
            "format_version": FORMAT_VERSION,
            "name": self.table.name,
            "key": [_column_json(c) for c in self.table.key],
            "partition_by": [_column_json(c) for c in self.table.partition_by],
            "buckets": self.table.buckets,
            "log_format": self.table.log_format,
            "streams": {
                s.name: {
                    "columns": [_column_json(c) for c in s.columns],
                    "ordering": list(s.ordering),
                    "nulls": s.nulls,
                    "deletes": ({"column": s.deletes.column, "values": list(s.deletes.values)} if s.deletes else None),
                }
                for s in self.streams.values()
            },
        }

    def with_path(self, path: str) -> TableConfig:
        return replace(self, table=replace(self.table, path=path))


def _column_json(column: ColumnSpec) -> dict[str, Any]:
    data: dict[str, Any] = {"name": column.name, "type": column.type}
    if column.default is not None:
        data["default"] = _default_to_json(column.default)
    return data


def _default_to_json(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


# --------------------------------------------------------------------------------------------- parsing


class _Ctx:
    """Carries the file name into every error, and remembers which values came from the environment."""

    def __init__(self, file: str | None) -> None:
        self.file = file
        self.secret_paths: set[str] = set()
        self.secret_values: set[str] = set()
        self.declared_secrets: frozenset[str] = frozenset()

    def error(self, path: str, message: str) -> ConfigError:
        where = f"{self.file}: " if self.file else ""
        return ConfigError(redact(f"{where}{path}: {message}" if path else f"{where}{message}", self.secret_values))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (of at least MIN_SECRET_LENGTH characters) replaced by a placeholder."""
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: a secret may contain another
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, SECRET_PLACEHOLDER)
    return text


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(ctx: _Ctx, value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ctx.error(path, f"must be a mapping, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false"}.get(type(value), type(value).__name__)


def _only_keys(ctx: _Ctx, data: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            raise ctx.error(_join(path, str(key)), f"unknown key (allowed here: {', '.join(allowed)})")


def _str(ctx: _Ctx, value: Any, path: str, *, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ctx.error(path, f"must be non-empty text, got {_kind(value)}")
    if choices is not None and value not in choices:
        shown = "(from the environment)" if path in ctx.secret_paths else repr(value)
        raise ctx.error(path, f"{shown} is not one of: {', '.join(choices)}")
    return value


def _int(ctx: _Ctx, value: Any, path: str, *, minimum: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error(path, f"must be a whole number, got {_kind(value)}")
    if value < minimum:
        raise ctx.error(path, f"must be >= {minimum}, got {value}")
    return value


def _number(ctx: _Ctx, value: Any, path: str, *, positive: bool = True) -> float:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.error(path, f"must be a number, got {_kind(value)}")
    if positive and value <= 0:
        raise ctx.error(path, f"must be > 0, got {value}")
    return float(value)


def _bool(ctx: _Ctx, value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ctx.error(path, f"must be true or false, got {_kind(value)}")


def _identifier(ctx: _Ctx, name: Any, path: str, what: str) -> str:
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ctx.error(path, f"{name!r} is not a valid {what} name (letters, digits and _, not starting with a digit)")
    if name.startswith(RESERVED_PREFIX) or name in RESERVED_NAMES:
        raise ctx.error(path, f"{name!r} is reserved (names starting with {RESERVED_PREFIX!r} and _op)")
    return name


def _type(ctx: _Ctx, value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ctx.error(path, f"a column type must be text, got {_kind(value)}")
    try:
        return normalize_type(value)
    except ValueError as exc:
        raise ctx.error(path, str(exc)) from None


def parse_default(type_name: str, value: Any) -> Any:
    """Convert a YAML default to the Python value of the column's type; ValueError if it does not fit."""
    if value is None:
        return None
    if type_name in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{value!r} is not a whole number")
        number = int(value)
        limit = 2**31 if type_name == "int" else 2**63
        if not -limit <= number < limit:
            raise ValueError(f"{value!r} does not fit in {type_name}")
        return number
    if type_name in ("float", "double"):
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a number")
        return float(value)
    if type_name == "boolean":
        if isinstance(value, bool):
            return value
        raise ValueError(f"{value!r} is not true or false")
    if type_name == "string":
        return str(value)
    if type_name == "date":
        if isinstance(value, dt.datetime):
            raise ValueError(f"{value!r} has a time of day; a date default is just yyyy-mm-dd")
        return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
    if type_name == "timestamp":
        stamp = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
        return stamp.replace(tzinfo=dt.UTC) if stamp.tzinfo is None else stamp.astimezone(dt.UTC)
    if type_name.startswith("decimal"):
        try:
            number = decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal number") from None
        precision, scale = (int(x) for x in type_name[len("decimal(") : -1].split(","))
        if not number.is_finite() or number != number.quantize(decimal.Decimal(1).scaleb(-scale)):
            raise ValueError(f"{value!r} has more than {scale} digits after the point")
        if abs(number) >= decimal.Decimal(10) ** (precision - scale):
            raise ValueError(f"{value!r} does not fit in {type_name}")
        return number
    raise ValueError(f"columns of type {type_name} cannot have a default")


def _column(ctx: _Ctx, name: Any, spec: Any, path: str, what: str) -> ColumnSpec:
    name = _identifier(ctx, name, path, what)
    default = None
    if isinstance(spec, dict):
        _only_keys(ctx, spec, path, ("type", "default"))
        if "type" not in spec:
            raise ctx.error(path, "needs a type, e.g. {type: string, default: EUR}")
        type_name = _type(ctx, spec["type"], _join(path, "type"))
        if "default" in spec:
            try:
                default = parse_default(type_name, spec["default"])
            except (ValueError, TypeError) as exc:
                raise ctx.error(_join(path, "default"), f"not a valid {type_name}: {exc}") from None
    else:
        type_name = _type(ctx, spec, path)
    return ColumnSpec(name=name, type=type_name, default=default)


def _columns(ctx: _Ctx, value: Any, path: str, what: str, *, allowed: frozenset[str] | None = None):
    data = _mapping(ctx, value, path)
    columns = tuple(_column(ctx, name, spec, _join(path, str(name)), what) for name, spec in data.items())
    if allowed is not None:
        for column in columns:
            if column.type not in allowed:
                raise ctx.error(
                    _join(path, column.name),
                    f"type {column.type} cannot be a {what} column (use one of: {', '.join(sorted(allowed))})",
                )
            if column.default is not None:
                raise ctx.error(_join(path, column.name), f"a {what} column cannot have a default")
    return columns


def _resolve_path(ctx: _Ctx, value: Any, path: str, base: Path | None) -> str:
    text = _str(ctx, value, path)
    if "://" in text:
        return text
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = (base or Path.cwd()) / candidate
    return str(candidate.resolve())


def _stream(ctx: _Ctx, name: Any, value: Any, path: str, base: Path | None) -> StreamSpec:
    name = _identifier(ctx, name, path, "stream")
    data = _mapping(ctx, value, path)
    _only_keys(ctx, data, path, ("columns", "ordering", "nulls", "deletes", "source"))
    if not data.get("columns"):
        raise ctx.error(_join(path, "columns"), f"stream {name} needs at least one column of its own")
    columns = _columns(ctx, data["columns"], _join(path, "columns"), "column")
    names = [c.name for c in columns]
    listing = ", ".join(names)

    ordering_raw = data.get("ordering")
    ordering: tuple[str, ...] = ()
    if ordering_raw is not None:
        items = ordering_raw if isinstance(ordering_raw, list) else [ordering_raw]
        if not items:
            raise ctx.error(_join(path, "ordering"), "an empty list; omit ordering for commit-time ordering")
        for item in items:
            if not isinstance(item, str) or item not in names:
                raise ctx.error(
                    _join(path, "ordering"),
                    f"{item!r} is not a column of stream {name} (columns: {listing})",
                )
            kind = columns[names.index(item)].type
            if kind not in ORDERING_TYPES:
                raise ctx.error(
                    _join(path, "ordering"),
                    f"{item!r} has type {kind}, which cannot order events "
                    f"(use one of: {', '.join(sorted(ORDERING_TYPES))})",
                )
        if len(set(items)) != len(items):
            raise ctx.error(_join(path, "ordering"), "lists a column twice")
        ordering = tuple(items)

    nulls = _str(ctx, data.get("nulls", "overwrite"), _join(path, "nulls"), choices=NULLS_MODES)
    deletes = None
    if data.get("deletes") is not None:
        dpath = _join(path, "deletes")
        ddata = _mapping(ctx, data["deletes"], dpath)
        _only_keys(ctx, ddata, dpath, ("column", "values"))
        column = _identifier(ctx, ddata.get("column"), _join(dpath, "column"), "delete marker column")
        if column in names:
            raise ctx.error(
                _join(dpath, "column"),
                f"{column!r} is one of the stream's stored columns; the delete marker is a separate source "
                "column that is not stored",
            )
        values = ddata.get("values")
        if not isinstance(values, list) or not values:
            raise ctx.error(_join(dpath, "values"), "must be a non-empty list of the values that mean delete")
        deletes = DeleteSpec(column=column, values=tuple(_delete_value(v) for v in values))

    source = None
    if data.get("source") is not None:
        spath = _join(path, "source")
        sdata = _mapping(ctx, data["source"], spath)
        _only_keys(ctx, sdata, spath, ("format", "path", "options"))
        fmt = _str(ctx, sdata.get("format"), _join(spath, "format"), choices=SOURCE_FORMATS)
        if "path" not in sdata:
            raise ctx.error(_join(spath, "path"), "is required (the folder of landing files)")
        spath_value = _resolve_path(ctx, sdata["path"], _join(spath, "path"), base)
        options = _mapping(ctx, sdata.get("options"), _join(spath, "options"))
        source = SourceSpec(format=fmt, path=spath_value, options={str(k): str(v) for k, v in options.items()})
    return StreamSpec(name=name, columns=columns, ordering=ordering, nulls=nulls, deletes=deletes, source=source)


def _delete_value(value: Any) -> str:
    """Delete markers compare as text; YAML's true/false become the lower-case words Arrow prints."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _table(ctx: _Ctx, value: Any, base: Path | None) -> TableSpec:
    data = _mapping(ctx, value, "table")
    if not data:
        raise ctx.error("table", "is required (name, path, key, ...)")
    _only_keys(ctx, data, "table", ("name", "path", "key", "partition_by", "buckets", "log_format"))
    for required in ("name", "path", "key"):
        if required not in data:
            raise ctx.error(_join("table", required), "is required")
    name = _identifier(ctx, data["name"], "table.name", "table")
    path = _resolve_path(ctx, data["path"], "table.path", base)
    key = _columns(ctx, data["key"], "table.key", "key", allowed=KEY_TYPES)
    if not key:
        raise ctx.error("table.key", "needs at least one column, e.g. {order_id: long}")
    partition_by = _columns(ctx, data.get("partition_by"), "table.partition_by", "partition", allowed=KEY_TYPES)
    buckets = _int(ctx, data.get("buckets", 4), "table.buckets", minimum=1)
    if buckets > 65536:
        raise ctx.error("table.buckets", f"{buckets} is more than the 65536 file groups per partition supported")
    log_format = _str(ctx, data.get("log_format", "parquet"), "table.log_format", choices=LOG_FORMATS)
    return TableSpec(name=name, path=path, key=key, partition_by=partition_by, buckets=buckets, log_format=log_format)


def _check_columns_disjoint(ctx: _Ctx, table: TableSpec, streams: Mapping[str, StreamSpec]) -> None:
    common = {c.name: f"table.{'key' if c in table.key else 'partition_by'}" for c in table.partition_by}
    common.update({c.name: "table.key" for c in table.key})
    for column in table.partition_by:
        if column.name in table.key_names:
            raise ctx.error(f"table.partition_by.{column.name}", "is also a key column")
    owner: dict[str, str] = {}
    for stream in streams.values():
        for column in stream.columns:
            path = f"streams.{stream.name}.columns.{column.name}"
            if column.name in common:
                raise ctx.error(
                    path,
                    f"{column.name!r} is a {common[column.name].split('.')[1]} column; key and partition "
                    "columns are carried by every stream and cannot belong to one",
                )
            if column.name in owner:
                raise ctx.error(
                    path,
                    f"{column.name!r} already belongs to stream {owner[column.name]}; "
                    "each column belongs to exactly one stream",
                )
            owner[column.name] = stream.name
        if stream.deletes and stream.deletes.column in common:
            raise ctx.error(
                f"streams.{stream.name}.deletes.column",
                f"{stream.deletes.column!r} is a key or partition column",
            )


def _concurrency(ctx: _Ctx, value: Any) -> ConcurrencySpec:
    data = _mapping(ctx, value, "concurrency")
    _only_keys(ctx, data, "concurrency", ("mode", "lock", "heartbeat", "max_clock_skew_s"))
    mode = _str(ctx, data.get("mode", "lock_free"), "concurrency.mode", choices=CONCURRENCY_MODES)
    ldata = _mapping(ctx, data.get("lock"), "concurrency.lock")
    _only_keys(ctx, ldata, "concurrency.lock", ("provider", "wait_s", "expire_s", "hosts", "zk_path"))
    provider = _str(ctx, ldata.get("provider", "filesystem"), "concurrency.lock.provider", choices=LOCK_PROVIDERS)
    hosts = ldata.get("hosts")
    if provider == "zookeeper":
        hosts = _str(ctx, hosts, "concurrency.lock.hosts")
    elif hosts is not None:
        raise ctx.error("concurrency.lock.hosts", "only applies to provider: zookeeper")
    zk_path = _str(ctx, ldata.get("zk_path", "/stitchlake"), "concurrency.lock.zk_path")
    if not zk_path.startswith("/"):
        raise ctx.error("concurrency.lock.zk_path", "must start with /")
    lock = LockSpec(
        provider=provider,
        wait_s=_number(ctx, ldata.get("wait_s", 60), "concurrency.lock.wait_s"),
        expire_s=_number(ctx, ldata.get("expire_s", 30), "concurrency.lock.expire_s"),
        hosts=hosts,
        zk_path=zk_path,
    )
    hdata = _mapping(ctx, data.get("heartbeat"), "concurrency.heartbeat")
    _only_keys(ctx, hdata, "concurrency.heartbeat", ("interval_s", "expire_s"))
    heartbeat = HeartbeatSpec(
        interval_s=_number(ctx, hdata.get("interval_s", 10), "concurrency.heartbeat.interval_s"),
        expire_s=_number(ctx, hdata.get("expire_s", 60), "concurrency.heartbeat.expire_s"),
    )
    if heartbeat.expire_s < 2 * heartbeat.interval_s:
        raise ctx.error(
            "concurrency.heartbeat.expire_s",
            f"{heartbeat.expire_s:g} must be at least twice interval_s ({heartbeat.interval_s:g}), "
            "or a slow beat would look like a dead writer",
        )
    skew = _number(ctx, data.get("max_clock_skew_s", 86400), "concurrency.max_clock_skew_s")
    return ConcurrencySpec(mode=mode, lock=lock, heartbeat=heartbeat, max_clock_skew_s=skew)


def _compaction(ctx: _Ctx, value: Any) -> CompactionSpec:
    data = _mapping(ctx, value, "compaction")
    allowed = ("inline", "after_delta_commits", "strategy", "min_log_files", "min_log_bytes")
    _only_keys(ctx, data, "compaction", allowed)
    default = CompactionSpec()
    return CompactionSpec(
        inline=_bool(ctx, data.get("inline", default.inline), "compaction.inline"),
        after_delta_commits=_int(
            ctx,
            data.get("after_delta_commits", default.after_delta_commits),
            "compaction.after_delta_commits",
            minimum=1,
        ),
        strategy=_str(
            ctx, data.get("strategy", default.strategy), "compaction.strategy", choices=COMPACTION_STRATEGIES
        ),
        min_log_files=_int(
            ctx, data.get("min_log_files", default.min_log_files), "compaction.min_log_files", minimum=1
        ),
        min_log_bytes=_int(
            ctx, data.get("min_log_bytes", default.min_log_bytes), "compaction.min_log_bytes", minimum=0
        ),
    )


def _clean(ctx: _Ctx, value: Any) -> CleanSpec:
    data = _mapping(ctx, value, "clean")
    _only_keys(ctx, data, "clean", ("policy", "retain"))
    return CleanSpec(
        policy=_str(ctx, data.get("policy", "keep_latest_commits"), "clean.policy", choices=CLEAN_POLICIES),
        retain=_int(ctx, data.get("retain", 10), "clean.retain", minimum=1),
    )


def _archive(ctx: _Ctx, value: Any) -> ArchiveSpec:
    data = _mapping(ctx, value, "archive")
    _only_keys(ctx, data, "archive", ("keep_instants",))
    return ArchiveSpec(keep_instants=_int(ctx, data.get("keep_instants", 200), "archive.keep_instants", minimum=10))


def _spark(ctx: _Ctx, value: Any) -> SparkSpec:
    data = _mapping(ctx, value, "spark")
    _only_keys(ctx, data, "spark", ("master", "conf"))
    conf = _mapping(ctx, data.get("conf"), "spark.conf")
    for key in conf:
        if not str(key).startswith("spark."):
            raise ctx.error(f"spark.conf.{key}", "Spark settings start with 'spark.'")
    return SparkSpec(
        master=_str(ctx, data.get("master", "local[*]"), "spark.master"),
        conf={str(k): _conf_value(v) for k, v in conf.items()},
    )


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _count_values(ctx: _Ctx, document: Any) -> None:
    """Refuse a document that YAML aliases blow up: count what expanding it would visit, in linear time."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        known = sizes.get(id(value))
        if known is None:
            items = value.values() if isinstance(value, dict) else value
            known = 1 + sum(size(item) for item in items)
            if known > MAX_CONFIG_VALUES:
                raise ctx.error(
                    "",
                    f"the config expands to more than {MAX_CONFIG_VALUES:,} values; nested YAML aliases (&a / *a) "
                    "repeat blocks exponentially — write the values out instead",
                )
            sizes[id(value)] = known
        return known

    size(document)


def is_secret_name(name: str, declared: frozenset[str] = frozenset()) -> bool:
    """Whether an environment variable's value is a secret: its name says so, or the config's `secrets:` lists it."""
    return name in declared or SECRET_NAME.search(name) is not None


def _expand_env(ctx: _Ctx, value: Any, path: str = "") -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every text value, remembering where secrets went."""
    if isinstance(value, dict):
        return {key: _expand_env(ctx, item, _join(path, str(key))) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand_env(ctx, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        name, fallback = match.group(1), match.group(2)
        if name in os.environ:
            if is_secret_name(name, ctx.declared_secrets):
                ctx.secret_values.add(os.environ[name])
                ctx.secret_paths.add(path)
            return os.environ[name]
        if fallback is not None:
            return fallback
        raise ctx.error(path, f"environment variable {name} is not set")

    return _ENV.sub(substitute, value)


def _declared_secrets(ctx: _Ctx, value: Any) -> frozenset[str]:
    """`secrets: [VAR, ...]`: environment variables to mask whatever their names."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) and re.match(r"^[A-Za-z_]\w*$", v) for v in value):
        raise ctx.error("secrets", "must be a list of environment variable names, e.g. [DB_PASS]")
    return frozenset(value)


def parse_config(data: Any, *, file: str | None = None, base: Path | None = None) -> TableConfig:
    """Validate an already-loaded YAML document. `base` is the folder relative paths resolve against."""
    ctx = _Ctx(file)
    if not isinstance(data, dict):
        raise ctx.error("", f"the config must be a mapping with a 'table' section, got {_kind(data)}")
    _count_values(ctx, data)
    ctx.declared_secrets = _declared_secrets(ctx, data.get("secrets"))
    data = _expand_env(ctx, data)
    top = ("table", "streams", "bad_rows", "concurrency", "compaction", "clean", "archive", "spark", "secrets")
    _only_keys(ctx, data, "", top)
    table = _table(ctx, data.get("table"), base)
    streams_raw = _mapping(ctx, data.get("streams"), "streams")
    if not streams_raw:
        raise ctx.error("streams", "needs at least one stream")
    streams = {str(name): _stream(ctx, name, value, f"streams.{name}", base) for name, value in streams_raw.items()}
    _check_columns_disjoint(ctx, table, streams)
    return TableConfig(
        table=table,
        streams=streams,
        bad_rows=_str(ctx, data.get("bad_rows", "fail"), "bad_rows", choices=BAD_ROWS),
        concurrency=_concurrency(ctx, data.get("concurrency")),
        compaction=_compaction(ctx, data.get("compaction")),
        clean=_clean(ctx, data.get("clean")),
        archive=_archive(ctx, data.get("archive")),
        spark=_spark(ctx, data.get("spark")),
        source_file=file,
        secret_paths=frozenset(ctx.secret_paths),
        secret_values=frozenset(ctx.secret_values),
    )


def _unique_key_loader() -> type:
    """yaml.SafeLoader that refuses duplicate keys: a block pasted twice must not silently win."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def load_config(path: str | os.PathLike[str]) -> TableConfig:
    """Read and validate a table config YAML file (safe loading: no object construction)."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: config file not found")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read config: {exc}") from None
    try:
        data = yaml.load(text, Loader=_unique_key_loader())  # a SafeLoader subclass: no object construction
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError) and "could not determine a constructor" in problem:
            tag = problem.rsplit("tag ", 1)[-1]
            problem = f"the tag {tag} is not allowed: a config is plain data, and no objects are ever built from it"
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}") from None
    return parse_config(data, file=str(file), base=file.resolve().parent)


def config_from_properties(properties: Mapping[str, Any], table_path: str) -> TableConfig:
    """A config for an existing table from its `.stitch/table.json`, with default runtime settings."""
    version = properties.get("format_version")
    if version != FORMAT_VERSION:
        raise ConfigError(
            f"{table_path}/{TABLE_JSON}: table format version {version} is not supported by this stitchlake "
            f"(supports {FORMAT_VERSION})"
        )

    try:
        return _config_from_properties(properties, table_path)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{table_path}/{TABLE_JSON}: damaged table properties (missing or malformed {exc})") from None


def _config_from_properties(properties: Mapping[str, Any], table_path: str) -> TableConfig:
    def columns(items: list[Mapping[str, Any]]) -> dict[str, Any]:
        return {c["name"]: {"type": c["type"], **({"default": c["default"]} if "default" in c else {})} for c in items}

    streams = {}
    for name, stream in properties["streams"].items():
        entry: dict[str, Any] = {"columns": columns(stream["columns"]), "nulls": stream["nulls"]}
        if stream["ordering"]:
            entry["ordering"] = list(stream["ordering"])
        if stream.get("deletes"):
            entry["deletes"] = dict(stream["deletes"])
        streams[name] = entry
    document = {
        "table": {
            "name": properties["name"],
            "path": table_path,
            "key": columns(properties["key"]),
            "partition_by": columns(properties["partition_by"]),
            "buckets": properties["buckets"],
            "log_format": properties["log_format"],
        },
        "streams": streams,
    }
    return parse_config(document, file=f"{table_path}/{TABLE_JSON}", base=Path(table_path))


def diff_properties(existing: Mapping[str, Any], proposed: Mapping[str, Any]) -> list[str]:
    """Human lines for every way a config contradicts an existing table (empty when compatible)."""
    lines: list[str] = []
    for field_name in ("name", "key", "partition_by", "buckets", "log_format"):
        if existing.get(field_name) != proposed.get(field_name):
            lines.append(
                f"table.{field_name}: table has {_show(existing.get(field_name))}, "
                f"config says {_show(proposed.get(field_name))}"
            )
    old_streams, new_streams = existing.get("streams", {}), proposed.get("streams", {})
    for name in sorted(set(old_streams) | set(new_streams)):
        if name not in new_streams:
            lines.append(f"streams.{name}: exists in the table but not in the config")
        elif name not in old_streams:
            lines.append(f"streams.{name}: is in the config but not in the table")
        else:
            for key in ("columns", "ordering", "nulls", "deletes"):
                if not _same(key, old_streams[name].get(key), new_streams[name].get(key)):
                    lines.append(
                        f"streams.{name}.{key}: table has {_show(old_streams[name].get(key))}, "
                        f"config says {_show(new_streams[name].get(key))}"
                    )
    return lines


def _same(key: str, old: Any, new: Any) -> bool:
    """Equal as a table property: the order of columns (a mapping in the YAML) does not matter."""
    if key == "columns" and isinstance(old, list) and isinstance(new, list):
        return sorted(old, key=lambda c: c["name"]) == sorted(new, key=lambda c: c["name"])
    return bool(old == new)


def in_stored_order(config: TableConfig, properties: Mapping[str, Any]) -> TableConfig:
    """`config` with streams and columns in the order the table was created with (its wide schema's order)."""
    stored = properties.get("streams", {})
    if list(stored) == list(config.streams) and all(
        [c["name"] for c in stored[name]["columns"]] == list(config.streams[name].column_names) for name in stored
    ):
        return config
    streams = {}
    for name, entry in stored.items():
        spec = config.streams[name]
        order = [c["name"] for c in entry["columns"]]
        streams[name] = replace(spec, columns=tuple(sorted(spec.columns, key=lambda c: order.index(c.name))))
    return replace(config, streams=streams)


def _show(value: Any) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict) and "name" in value[0]:
        return "{" + ", ".join(f"{c['name']}: {c['type']}" for c in value) + "}"
    return json.dumps(value)
