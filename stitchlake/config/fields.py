"""What every config section is built from: the `Spec` base, the refusals whose message is final, the coercers
that accept YAML text after `${ENV}` expansion, and the annotated field types (names, seconds, locations)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, NamedTuple

from annotated_types import Gt, Le
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from stitchlake.storage.registry import absolute, is_local, is_uri, local_place, location_refusal
from stitchlake.types import normalize_type

from . import yaml_schema as schema
from .secrets import declared_secrets

#: Names (table, streams, columns, the delete marker): they become folder and column names.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Column names we use ourselves: meta columns start with `_sl`; `_op` is the incremental read's change type.
RESERVED_PREFIX = "_sl"
RESERVED_NAMES = frozenset({"_op"})
_WHOLE_TEXT = re.compile(r"\s*-?[0-9]+\s*")


# ------------------------------------------------------------------------------------------ errors, input


def is_within(location: str, folder: str) -> bool:
    """Whether `location` is `folder` or under it (places on this machine compared as absolute paths, a `file://`
    URI as the path it holds, so one place written two ways is one place; other URIs as text)."""
    if is_local(location) and is_local(folder):
        location, folder = local_place(location), local_place(folder)
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


def resolve_location(value: str, info: ValidationInfo) -> str:
    """Relative paths resolve against the config's folder (the context's `base`); URLs are kept as written, and
    one no storage serves is refused here, naming the YAML path, not when a command first reaches it."""
    refusal = location_refusal(value)
    if refusal is not None:
        raise refuse(refusal)
    if is_uri(value):
        return value
    candidate = Path(value).expanduser()
    if not candidate.is_absolute():
        base = info.context.get("base") if info.context else None
        candidate = (base or Path.cwd()) / candidate
    return str(candidate.resolve())


def as_zk_path(value: Any) -> Any:
    if isinstance(value, str) and not value.startswith("/"):
        raise refuse("must start with /")
    return value


def check_ordering(value: Any, info: ValidationInfo) -> Any:
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


def as_delete_values(value: Any) -> Any:
    if not isinstance(value, list | tuple) or not value:
        raise refuse("must be a non-empty list of the values that mean delete")
    return tuple(_text_value(item) for item in value)


def _settings(value: Any) -> dict[Any, Any]:
    """A block of free-form settings (source options, Spark conf, catalog properties): a null block is none, and
    anything but a mapping is refused naming what it was."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(f"must be a mapping, got {kind(value)}")
    return value


def _setting_values(value: Any) -> dict[str, str]:
    """A settings block's values as text. A key with nothing after it is YAML's null, which became the text "None"
    (a CSV's `null_values:` then read the word None as null, and empty fields as text): refused."""
    out = {}
    for key, item in _settings(value).items():
        if item is None:
            raise refuse("has no value: write '' for the empty text, or leave the key out", at=str(key))
        out[str(key)] = _text_value(item)
    return out


def as_options(value: Any) -> dict[str, str]:
    return _setting_values(value)


def as_spark_conf(value: Any) -> dict[str, str]:
    conf = _setting_values(value)
    for key in conf:
        if not key.startswith("spark."):
            raise refuse("Spark settings start with 'spark.'", at=key)
    return conf


def as_catalog_properties(value: Any) -> dict[str, str]:
    """pyiceberg catalog properties (`type`, `uri`, `warehouse`, `credential` ...), values as text."""
    return _setting_values(value)


def as_secret_names(value: Any) -> tuple[str, ...]:
    try:
        return declared_secrets(value)
    except ValueError as exc:
        raise refuse(str(exc)) from None


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
Location = Annotated[str, TEXT, AfterValidator(resolve_location)]
#: A year: a longer wait or lease is no setting but a typo, and past it the clock's arithmetic overflows (an
#: interval of 1e300 s failed after its publish; an infinite lease held a dead writer's stream for good).
MAX_SECONDS = 365 * 24 * 3600
Seconds = Annotated[float, Strict(), Gt(0), Le(MAX_SECONDS), NUMBER]
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
