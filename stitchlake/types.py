"""The column types a table config may name, and their Arrow equivalents.

One table of names keeps the config parser, the file writers and the Spark schema in agreement. Besides the simple
types there are `decimal(p,s)` and the nested types, written as Spark writes them: `array<T>`, `map<K,V>` and
`struct<name:T,...>` (nested values merge as whole values: a stream's event replaces the value, never a field).
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

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Ordering types mapped to an order-preserving int64 (one vectorised comparison).
ENCODED_ORDERING_TYPES = frozenset({"int", "long", "float", "double", "boolean", "date", "timestamp"})
#: Ordering types compared by rank within each merge (text and exact numbers have no int64 image).
RANKED_ORDERING_TYPES = frozenset({"string", "binary"})
#: Simple type names usable as an ordering column (`decimal(p,s)` too: see `orders_by_rank`).
ORDERING_TYPES = ENCODED_ORDERING_TYPES | RANKED_ORDERING_TYPES
#: Types usable as key or partition columns: they have one canonical byte form for hashing and paths.
KEY_TYPES = frozenset({"int", "long", "string", "date"})


def known_type_names() -> str:
    """A human list of accepted type names, for error messages."""
    return ", ".join([*SIMPLE_TYPES, "decimal(p,s)", "array<T>", "map<K,V>", "struct<name:T,...>"])


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside <...> or (...)."""
    parts, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced brackets")
        elif char == "," and depth == 0:
            parts.append(text[start:position])
            start = position + 1
    if depth:
        raise ValueError("unbalanced brackets")
    parts.append(text[start:])
    return parts


def _normalize(text: str) -> str:
    lower = text.lower()
    if lower in SIMPLE_TYPES:
        return lower
    match = _DECIMAL.match(lower)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ValueError(f"decimal({precision},{scale}) needs 1 <= p <= 38 and s <= p")
        return f"decimal({precision},{scale})"
    for word in ("array", "map", "struct"):
        if lower.startswith(f"{word}<") and text.endswith(">"):
            inner = text[len(word) + 1 : -1]
            if word == "array":
                return f"array<{_normalize(inner)}>"
            if word == "map":
                parts = _split_top(inner)
                if len(parts) != 2:
                    raise ValueError(f"map<K,V> needs a key and a value type, got {text!r}")
                key = _normalize(parts[0])
                if key not in KEY_TYPES:
                    raise ValueError(f"map keys must be one of {', '.join(sorted(KEY_TYPES))}, got {key}")
                return f"map<{key},{_normalize(parts[1])}>"
            fields = []
            seen = set()
            for part in _split_top(inner):
                name, colon, kind = part.partition(":")
                if not colon or not _FIELD_NAME.match(name):
                    raise ValueError(f"struct fields are name:type with a plain name, got {part!r}")
                if name in seen:
                    raise ValueError(f"struct field {name!r} appears twice")
                seen.add(name)
                fields.append(f"{name}:{_normalize(kind)}")
            return f"struct<{','.join(fields)}>"
    raise ValueError(f"unknown type {text!r} (known: {known_type_names()})")


def normalize_type(name: str) -> str:
    """Canonical spelling of a type name (keywords lower case, no spaces), or ValueError if unknown."""
    return _normalize(re.sub(r"\s+", "", str(name)))


def is_nested(name: str) -> bool:
    return name.startswith(("array<", "map<", "struct<"))


def orders_by_rank(name: str) -> bool:
    """Whether an ordering column of this type is compared by rank within a merge (not an int64 image)."""
    return name in RANKED_ORDERING_TYPES or bool(_DECIMAL.match(name))


def can_order(name: str) -> bool:
    """Whether a column of this type can order a stream's events (a total order on its values)."""
    return name in ENCODED_ORDERING_TYPES or orders_by_rank(name)


def ordering_type_names() -> str:
    return ", ".join([*sorted(ORDERING_TYPES), "decimal(p,s)"])


def contiguous(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One Arrow array for a column (a chunked one's chunks joined; a single chunk as it is, with no copy)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


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
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    if text.startswith("array<"):
        return pa.list_(arrow_type(text[len("array<") : -1]))
    if text.startswith("map<"):
        key, value = _split_top(text[len("map<") : -1])
        return pa.map_(arrow_type(key), arrow_type(value))
    fields = []
    for part in _split_top(text[len("struct<") : -1]):
        field_name, _, kind = part.partition(":")
        fields.append(pa.field(field_name, arrow_type(kind)))
    return pa.struct(fields)
