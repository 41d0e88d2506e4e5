"""The stored schema and table properties: what `.stitch/table.json`, each `alter` commit and the archive
checkpoint record, as typed records.

A schema version decides how stored data is read (key, partitioning, buckets, each stream's columns, ordering and
null rule), so it is kept apart from the YAML's runtime settings and compared field by field
(`config.evolution`). `to_json` writes the stored form (defaults in their JSON form, a column's `default` only
when it has one); `from_json` reads it back, naming the file when it is damaged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import PlainSerializer

from stitchlake.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import TypeAdapter

#: The format new tables are created in. A table keeps the format it was created in (its `table.json`); an alter
#: records it again. Version 2: a `nulls: ignore` column's version is written only where it is not its row's
#: (`merge/summary.py`), which a reader of version 1 would misread, so such a reader refuses the table instead.
FORMAT_VERSION = 2
#: The formats this stitchlake reads and writes.
SUPPORTED_FORMATS = (1, 2)
#: The first format whose files leave a column's version null where it is the row's own.
SPARSE_COLUMN_VERSIONS = 2


@dataclass(frozen=True)
class StoredColumn:
    name: str
    type: str
    #: The default in its JSON form (`config.values.default_to_json`); None: the column has none.
    default: Any = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.default is not None:
            data["default"] = self.default
        return data


@dataclass(frozen=True)
class StoredDeletes:
    """A stream's delete marker: events whose `column` holds one of `values` delete the key."""

    column: str
    values: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "values": list(self.values)}


@dataclass(frozen=True)
class StoredStream:
    columns: tuple[StoredColumn, ...]
    ordering: tuple[str, ...]
    nulls: str
    deletes: StoredDeletes | None = None

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": [c.to_json() for c in self.columns],
            "ordering": list(self.ordering),
            "nulls": self.nulls,
            "deletes": self.deletes.to_json() if self.deletes else None,
        }


@dataclass(frozen=True)
class StoredSchema:
    """One version of a table's schema. `streams` are in the table's wide-schema order."""

    format_version: int
    name: str
    key: tuple[StoredColumn, ...]
    partition_by: tuple[StoredColumn, ...]
    buckets: int
    log_format: str
    streams: dict[str, StoredStream] = field(default_factory=dict)

    def with_buckets(self, buckets: int) -> StoredSchema:
        """This schema with the table's bucket count now (a rescale changes it, not an alter)."""
        return self if buckets == self.buckets else replace(self, buckets=buckets)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "name": self.name,
            "key": [c.to_json() for c in self.key],
            "partition_by": [c.to_json() for c in self.partition_by],
            "buckets": self.buckets,
            "log_format": self.log_format,
            "streams": {name: stream.to_json() for name, stream in self.streams.items()},
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> StoredSchema:
        """A stored schema; ConfigError naming `where` for another format version or a damaged record."""
        version = data.get("format_version") if isinstance(data, dict) else None
        if version not in SUPPORTED_FORMATS:
            raise ConfigError(
                f"{where}: table format version {version} is not supported by this stitchlake "
                f"(supports {', '.join(map(str, SUPPORTED_FORMATS))})"
            )
        from pydantic import ValidationError

        try:
            return _schema_adapter().validate_python(data)
        except ValidationError as exc:
            missing = ".".join(str(part) for part in exc.errors()[0]["loc"]) or "schema"
            raise ConfigError(f"{where}: damaged table properties (missing or malformed {missing!r})") from None


#: A schema inside another record (an alter's plan and commit, the archive checkpoint): written in the stored form
#: too, so every file holds one shape of it.
SchemaRecord = Annotated[StoredSchema, PlainSerializer(lambda schema: schema.to_json(), return_type=dict)]


@dataclass(frozen=True)
class TableProperties:
    """`.stitch/table.json`: the schema the table was created with (version 0), and its identity."""

    schema: StoredSchema
    #: A random id, so two tables of the same name (or one dropped and created again) are told apart.
    table_id: str
    created: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored form: the schema's fields first (`format_version` leads: readers check it), then identity."""
        return {**self.schema.to_json(), "table_id": self.table_id, "created": self.created}

    @classmethod
    def from_json(cls, data: Any, where: str) -> TableProperties:
        schema = StoredSchema.from_json(data, where)
        return cls(schema, str(data.get("table_id") or schema.name), data.get("created"))


@cache
def _schema_adapter() -> TypeAdapter[StoredSchema]:
    from pydantic import TypeAdapter

    return TypeAdapter(StoredSchema)
