"""Table config (design.md §10): YAML in, a typed and validated `TableConfig` out.

- `model`: the frozen pydantic models; every default is written there, once.
- `parse`: YAML text -> model (safe loading, `${ENV}`, alias-bomb guard), errors naming file and YAML path.
- `stored`: the stored schema and table properties (`.stitch/table.json`, alters, the archive), typed.
- `properties`: a config's stored schema, a config from one, and the stored column order.
- `evolution`: how a stored schema may change (`stitch alter`).
- `secrets`: which environment values are secrets, and masking them.
- `values`: typed column defaults and their JSON form.
- `jsonschema`: the JSON Schema of the YAML, shipped as `configs/table.schema.json`.
"""

from __future__ import annotations

from stitchlake.vocabulary import CompactionStrategy, PublishFormat, SourceFormat

from .choices import (
    BadRows,
    CleanPolicy,
    ConcurrencyMode,
    LockProvider,
    LogFormat,
    NullsMode,
    StartingOffsets,
    ValueFormat,
)
from .locks import LockSpec
from .model import (
    ArchiveSpec,
    CleanSpec,
    ColumnSpec,
    CompactionSpec,
    ConcurrencySpec,
    DeleteSpec,
    HeartbeatSpec,
    PublishSpec,
    SparkSpec,
    StorageSpec,
    StreamSpec,
    TableConfig,
    TableSpec,
)
from .parse import MAX_CONFIG_VALUES, _unique_key_loader, load_config, parse_config
from .properties import config_from_schema, in_stored_order, stored_schema
from .secrets import MIN_SECRET_LENGTH, SECRET_NAME, SECRET_PLACEHOLDER, is_secret_name, redact
from .sources import SourceSpec
from .stored import (
    FORMAT_VERSION,
    SPARSE_COLUMN_VERSIONS,
    StoredColumn,
    StoredDeletes,
    StoredSchema,
    StoredStream,
    TableProperties,
)
from .values import parse_default

__all__ = [
    "FORMAT_VERSION",
    "MAX_CONFIG_VALUES",
    "MIN_SECRET_LENGTH",
    "SECRET_NAME",
    "SECRET_PLACEHOLDER",
    "SPARSE_COLUMN_VERSIONS",
    "ArchiveSpec",
    "BadRows",
    "CleanPolicy",
    "CleanSpec",
    "ColumnSpec",
    "CompactionSpec",
    "CompactionStrategy",
    "ConcurrencyMode",
    "ConcurrencySpec",
    "DeleteSpec",
    "HeartbeatSpec",
    "LockProvider",
    "LockSpec",
    "LogFormat",
    "NullsMode",
    "PublishFormat",
    "PublishSpec",
    "SourceFormat",
    "SourceSpec",
    "SparkSpec",
    "StartingOffsets",
    "StorageSpec",
    "StoredColumn",
    "StoredDeletes",
    "StoredSchema",
    "StoredStream",
    "StreamSpec",
    "TableConfig",
    "TableProperties",
    "TableSpec",
    "ValueFormat",
    "_unique_key_loader",
    "config_from_schema",
    "in_stored_order",
    "is_secret_name",
    "load_config",
    "parse_config",
    "parse_default",
    "redact",
    "stored_schema",
]
