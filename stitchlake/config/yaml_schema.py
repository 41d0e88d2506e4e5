"""The pieces that shape the JSON Schema of the table config YAML (`config.jsonschema` assembles it).

The schema describes what a person writes, which is not quite the model: streams and columns are mappings
`name: spec` (a column may be just its type), every text value may hold `${VAR}`, and numbers and `true`/`false`
may be written as text. The model refers to these pieces in its annotations, so they live below it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from stitchlake.types import SIMPLE_TYPES

DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Where the shipped schema lives, relative to the repository root.
SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "table.schema.json"

JsonDict = dict[str, Any]

#: A name: letters, digits and _, not starting with a digit (mapping keys, and the names written as values).
NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
#: `${VAR}` or `${VAR:-fallback}` somewhere in a text value: whatever the variable holds is checked on load.
ENV_REFERENCE = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"
_WHOLE_TEXT = r"^\s*-?[0-9]+\s*$"
_NUMBER_TEXT = r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"
_SCALAR = {"type": ["string", "number", "boolean"]}


def _any_case(word: str) -> str:
    """A regex for `word` in any letter case (JSON Schema patterns have no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _with_env(pattern: str) -> str:
    return f"(?:{pattern})|{ENV_REFERENCE}"


def _or_text(schema: JsonSchemaValue, pattern: str) -> JsonSchemaValue:
    """`schema`, or text that reads as it (YAML `"8"`, or a `${VAR}` that must hold such a value)."""
    return {"anyOf": [schema, {"type": "string", "pattern": _with_env(pattern)}]}


_TYPE_WORDS = "|".join(_any_case(name) for name in SIMPLE_TYPES)
_DECIMAL = _any_case("decimal") + r"\(\s*[0-9]+\s*,\s*[0-9]+\s*\)"
#: A column type: the enum lets editors complete; the pattern accepts any case and spacing, as the loader does.
#: Nested types (`array<T>`, `map<K,V>`, `struct<name:T,...>`) are checked by the loader, not by this pattern.
_NESTED = rf"(?:{_any_case('array')}|{_any_case('map')}|{_any_case('struct')})\s*<.*>"
COLUMN_TYPE: JsonDict = {
    "type": "string",
    "anyOf": [
        {"enum": [*SIMPLE_TYPES, "decimal(10,2)", "array<string>", "map<string,long>", "struct<name:string>"]},
        {"pattern": _with_env(rf"^\s*(?:{_TYPE_WORDS}|{_DECIMAL}|{_NESTED})\s*$")},
    ],
}
ORDERING: JsonDict = {
    "anyOf": [
        {"type": "string", "pattern": _with_env(NAME_PATTERN)},
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
    ]
}
DELETE_VALUES: JsonDict = {"type": "array", "items": _SCALAR, "minItems": 1}
TEXT_MAPPING: JsonDict = {"type": "object", "additionalProperties": _SCALAR}
SPARK_CONF: JsonDict = {**TEXT_MAPPING, "propertyNames": {"pattern": r"^spark\."}}
ENV_NAMES: JsonDict = {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}}
AVRO_SCHEMA: JsonDict = {"anyOf": [{"type": "string"}, {"type": "object"}]}


def named_mapping(shorthand: JsonDict | None, min_entries: int) -> Callable[[JsonDict], None]:
    """Field hook: a tuple or dict of named specs is written as a mapping `name: spec` (or `name: shorthand`)."""

    def shape(schema: JsonDict) -> None:
        item = schema.pop("items", None) or schema.pop("additionalProperties")
        for key in ("type", "minItems", "maxItems"):
            schema.pop(key, None)
        schema["type"] = "object"
        schema["propertyNames"] = {"pattern": NAME_PATTERN}
        schema["additionalProperties"] = {"anyOf": [item, shorthand]} if shorthand else item
        if min_entries:
            schema["minProperties"] = min_entries
        if schema.get("default") == []:
            schema["default"] = {}

    return shape


def yaml_keys_only(schema: JsonDict, model: type[Any]) -> None:
    """Model hook: only the keys a person writes (not the name a mapping key gives, nor loader-filled fields)."""
    keys = model.yaml_keys()
    schema["properties"] = {k: v for k, v in schema.get("properties", {}).items() if k in keys}
    required = [k for k in schema.get("required", []) if k in keys]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)


class YamlSchema(GenerateJsonSchema):
    """pydantic's schema, loosened where YAML and `${VAR}` may write a value as text, and without titles."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return _or_text(super().int_schema(schema), _WHOLE_TEXT)

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return _or_text(super().float_schema(schema), _NUMBER_TEXT)

    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return _or_text(super().bool_schema(schema), f"^(?:{_any_case('true')}|{_any_case('false')})$")

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        result = super().str_schema(schema)
        if "pattern" in result:
            result["pattern"] = _with_env(result["pattern"])
        return result

    def enum_schema(self, schema: core_schema.EnumSchema) -> JsonSchemaValue:
        result = super().enum_schema(schema)
        choices = {"enum": result.pop("enum")}
        result.pop("type", None)
        result["anyOf"] = [choices, {"type": "string", "pattern": ENV_REFERENCE}]
        return result
