"""Column default values: from YAML or `.stitch/table.json` to the Python value of the column's type, and back.

A default is what a stream that never wrote a key reads as, so it must be exactly of the column's type: a
`date` default is a `datetime.date`, a `decimal(p,s)` default a `Decimal` that fits p and s, a `timestamp` an
aware UTC datetime. table.json stores the JSON form (`default_to_json`), which `parse_default` reads back.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any


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
        return _decimal(type_name, value)
    raise ValueError(f"columns of type {type_name} cannot have a default")


def _decimal(type_name: str, value: Any) -> decimal.Decimal:
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
