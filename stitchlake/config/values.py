"""Column default values: from YAML or `.stitch/table.json` to the Python value of the column's type, and back.

A default is what a stream that never wrote a key reads as, so it must be exactly of the column's type: a
`date` default is a `datetime.date`, a `decimal(p,s)` default a `Decimal` that fits p and s, a `timestamp` an
aware UTC datetime. table.json stores the JSON form (`default_to_json`), which `parse_default` reads back.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Any

#: Text booleans, one grammar wherever stitch reads a boolean from text (a CSV landing file, `--where`), in any case.
TRUE_WORDS = ("true", "t", "yes", "y", "1")
FALSE_WORDS = ("false", "f", "no", "n", "0")
#: Whole numbers as text: ASCII digits and an optional sign (Python's int() would also take `1_0` and other
#: scripts' digits, Arrow's cast `0x10`).
WHOLE_TEXT = re.compile(r"[+-]?[0-9]+")
#: Numbers as text: ASCII digits, an optional sign, point and exponent (no `1_0`, no other scripts' digits).
NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: The doubles text may also name (what `--json` writes, and what Arrow's cast reads), in any case.
NON_FINITE_TEXT = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def parse_text(type_name: str, text: str) -> Any:
    """A value written as text (`--where`, a partition folder) as the Python value of the column's type, in the
    grammar CSV landing files are read with too; ValueError if it is not one."""
    if type_name == "boolean":
        word = text.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
        raise ValueError(f"{text!r} is not a boolean ({'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)})")
    return parse_default(type_name, text)


def parse_default(type_name: str, value: Any) -> Any:
    """Convert a YAML default to the Python value of the column's type; ValueError if it does not fit. Numbers
    written as text follow the strict grammar (`WHOLE_TEXT`, `NUMBER_TEXT`)."""
    if value is None:
        return None
    if type_name in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{value!r} is not a whole number")
        if isinstance(value, str) and not WHOLE_TEXT.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not a whole number (ASCII digits, optionally signed)")
        number = int(value)
        limit = 2**31 if type_name == "int" else 2**63
        if not -limit <= number < limit:
            raise ValueError(f"{value!r} does not fit in {type_name}")
        return number
    if type_name in ("float", "double"):
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a number")
        if isinstance(value, str) and not (
            NUMBER_TEXT.fullmatch(value.strip()) or NON_FINITE_TEXT.fullmatch(value.strip())
        ):
            raise ValueError(f"{value!r} is not a number (ASCII digits, optionally signed, a point, an exponent)")
        real = float(value)
        if math.isinf(real) and isinstance(value, str) and not NON_FINITE_TEXT.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is past the range of {type_name}")  # as ingest: not infinity
        return real
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
        return _decimal(type_name, value)
    raise ValueError(f"columns of type {type_name} cannot have a default")


def _decimal(type_name: str, value: Any) -> decimal.Decimal:
    if isinstance(value, str) and not NUMBER_TEXT.fullmatch(value.strip()):
        raise ValueError(f"{value!r} is not a decimal number (ASCII digits, optionally signed, a point)")
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


def default_to_json(value: Any) -> Any:
    """The JSON form of a parsed default, as table.json stores it (dates and timestamps ISO, decimals text)."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value
