"""The column types a table config may name, and their Arrow equivalents.

One table of names keeps the config parser, the file writers and the Spark schema in agreement.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: Type name -> how to build its Arrow type. Kept as names so that parsing a config never imports pyarrow.
SIMPLE_TYPES: dict[str, str] = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "bool_",
    "string": "string",
    "date": "date32",
    "timestamp": "timestamp",
    "binary": "binary",
}

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")

#: Types usable as an ordering column: they map to an order-preserving int64.
ORDERING_TYPES = frozenset({"int", "long", "float", "double", "boolean", "date", "timestamp"})
#: Types usable as key or partition columns: they have one canonical byte form for hashing and paths.
KEY_TYPES = frozenset({"int", "long", "string", "date"})


def known_type_names() -> str:
    """A human list of accepted type names, for error messages."""
    return ", ".join([*SIMPLE_TYPES, "decimal(p,s)"])


def normalize_type(name: str) -> str:
    """Canonical spelling of a type name (lower case, no spaces), or ValueError if unknown."""
    text = str(name).strip().lower()
    if text in SIMPLE_TYPES:
        return text
    match = _DECIMAL.match(text)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ValueError(f"decimal({precision},{scale}) needs 1 <= p <= 38 and s <= p")
        return f"decimal({precision},{scale})"
    raise ValueError(f"unknown type {name!r} (known: {known_type_names()})")


@lru_cache(maxsize=256)
def arrow_type(name: str) -> pa.DataType:
    """The Arrow type for a (normalized or not) type name; timestamps are µs in UTC."""
    import pyarrow as pa

    text = normalize_type(name)
    if text == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if text in SIMPLE_TYPES:
        return getattr(pa, SIMPLE_TYPES[text])()
    match = _DECIMAL.match(text)
    assert match is not None
    return pa.decimal128(int(match.group(1)), int(match.group(2)))
