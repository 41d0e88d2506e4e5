"""Values as a person reads them: sizes, durations, counts, instant times, cells; config values masked when
they came from the environment."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from stitchlake.cli.printing import NULL, SECRET, text

if TYPE_CHECKING:
    from rich.text import Text

    from stitchlake.config import TableConfig


def human_size(size: int | None) -> str:
    if size is None:
        return "-"
    if abs(size) < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_duration(seconds: float | None) -> str:
    """`45 ms`, `1.25 s`, `3 m 05 s`, `2 h 03 m`, `3 d 04 h`: precise when short, readable when long."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} m {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} m"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"


def human_count(count: int | None) -> str:
    return "-" if count is None else f"{count:,}"


def instant_datetime(instant_time: str) -> dt.datetime:
    from stitchlake.services.inspect.history import instant_datetime as parsed

    return parsed(instant_time)


def human_time(instant_time: str | None) -> str:
    """An instant time (`yyyyMMddHHmmssSSS`, UTC) as `yyyy-MM-dd HH:mm:ss`."""
    if not instant_time:
        return "-"
    return instant_datetime(instant_time).strftime("%Y-%m-%d %H:%M:%S")


def iso_time(instant_time: str | None) -> str | None:
    """An instant time as ISO-8601 UTC with milliseconds, for `--json`."""
    if not instant_time:
        return None
    return instant_datetime(instant_time).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cell(value: Any) -> Text:
    """A table cell for one value of a read result."""
    if value is None:
        return text(NULL, "dim", data=True)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return text(f"0x{raw[:16].hex()}{'…' if len(raw) > 16 else ''}", data=True)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return text(value.isoformat(), data=True)
    if isinstance(value, bool):
        return text("true" if value else "false", data=True)
    return text(str(value), data=True)


# ---------------------------------------------------------------------------------------------- secrets


def masked(config: TableConfig, yaml_path: str, value: Any) -> Any:
    """`value`, unless the config took it from the environment (`${VAR}`): then a placeholder."""
    return SECRET if yaml_path in config.secret_paths else value


def table_name(config: TableConfig) -> str:
    return str(masked(config, "table.name", config.table.name))


def table_path(config: TableConfig) -> str:
    return str(masked(config, "table.path", config.table.path))
