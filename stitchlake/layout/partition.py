"""Hive-style partition paths (`order_date=2026-11-21/region=eu`).

Values are escaped so that no partition value can create a folder outside its own, whatever it contains.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote, unquote

_SAFE = "-_.+ "
#: The folder name of an empty value: `quote` always escapes a literal '%', so it can mean nothing else.
EMPTY = "%"


def escape(value: str) -> str:
    text = quote(value, safe=_SAFE)
    if text in (".", ".."):
        text = "".join(f"%{ord(ch):02X}" for ch in text)
    return text or EMPTY


def format_value(value: object) -> str:
    if isinstance(value, dt.datetime):
        raise TypeError("timestamps cannot be partition values")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))


def partition_path(names: tuple[str, ...], values: tuple[object, ...]) -> str:
    """The folder of a partition ('' for an unpartitioned table)."""
    return "/".join(f"{name}={format_value(value)}" for name, value in zip(names, values, strict=True))


def parse_partition_path(path: str) -> dict[str, str]:
    """Partition column -> raw text value of a partition path."""
    if not path:
        return {}
    out: dict[str, str] = {}
    for part in path.split("/"):
        name, _, value = part.partition("=")
        out[name] = "" if value == EMPTY else unquote(value)
    return out


def in_layout(folder: str, names: tuple[str, ...]) -> bool:
    """Whether a table-relative folder is one of the table's partition folders (`''` when unpartitioned)."""
    parts = folder.split("/") if folder else []
    return len(parts) == len(names) and all(
        part.partition("=")[0] == name and "=" in part for part, name in zip(parts, names, strict=True)
    )
