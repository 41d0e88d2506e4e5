"""Instant times: UTC `yyyyMMddHHmmssSSS`, strictly increasing and never reused (design.md §4).

Times are drawn under the table lock from max(wall clock, greatest time on the timeline + 1 ms), so a wall
clock that steps backwards can slow time down but never make it repeat or go back.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterable

from stitchlake.errors import StitchError

TIME_FORMAT = "%Y%m%d%H%M%S"
TIME_PATTERN = re.compile(r"^\d{17}$")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def is_time(text: str) -> bool:
    return bool(TIME_PATTERN.match(text))


def to_millis(instant_time: str) -> int:
    """Milliseconds since the epoch for an instant time."""
    stamp = dt.datetime.strptime(instant_time[:14], TIME_FORMAT).replace(tzinfo=dt.UTC)
    return int((stamp - _EPOCH).total_seconds()) * 1000 + int(instant_time[14:])


def from_millis(millis: int) -> str:
    """The instant time for milliseconds since the epoch."""
    stamp = _EPOCH + dt.timedelta(milliseconds=millis)
    return stamp.strftime(TIME_FORMAT) + f"{millis % 1000:03d}"


def now_millis() -> int:
    return time.time_ns() // 1_000_000


def next_time(existing: Iterable[str], now_ms: int | None = None, max_ahead_s: float | None = None) -> str:
    """The next instant time after every time in `existing`, as close to the wall clock as allowed.

    `max_ahead_s` refuses to go on from a timeline whose newest time is further ahead of this host's clock:
    every later instant would otherwise be dated after it (a host 10 years fast would date the table's future).
    """
    newest = max(existing, default=None)  # fixed-width digits: the text maximum is the time maximum
    latest = to_millis(newest) if newest else -1
    current = now_millis() if now_ms is None else now_ms
    if newest and max_ahead_s is not None and latest - current > max_ahead_s * 1000:
        raise ClockSkewError(
            f"the timeline's newest time {newest} ({to_datetime(newest).isoformat(timespec='seconds')}) is "
            f"{(latest - current) / 1000:,.0f}s ahead of this host's clock "
            f"({from_millis(current)}): a host whose clock was wrong wrote it, or this host's clock is behind. "
            "Fix the clock (NTP) and run again; nothing was written. To accept dating every new instant after "
            "it, raise concurrency.max_clock_skew_s"
        )
    return from_millis(max(current, latest + 1))


class ClockSkewError(StitchError):
    """The timeline holds a time far ahead of this host's clock."""


def parse_user_time(text: str) -> str:
    """Accept an instant time or an ISO-8601 timestamp (UTC unless it says otherwise) from a user."""
    text = text.strip()
    if is_time(text):
        try:
            to_millis(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a real time (yyyyMMddHHmmssSSS, UTC)") from None
        return text
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither an instant time (yyyyMMddHHmmssSSS) nor an ISO timestamp") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    millis = int((stamp - _EPOCH).total_seconds() * 1000)
    return from_millis(millis)


def to_datetime(instant_time: str) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=to_millis(instant_time))


def seconds_between(start: str, end: str) -> float:
    return (to_millis(end) - to_millis(start)) / 1000.0
