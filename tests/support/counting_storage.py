"""An S3 storage that counts its round trips and the *waves* of them a command waits for, with a simulated latency.

A wave is a run of requests during which at least one is always in flight: requests issued one after another
make one wave each, requests issued together (a thread pool) share one. With a latency per request (a round trip
to a real object store costs 10-50 ms), a command's wall time grows with its number of waves; its cost grows
with its number of requests.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from stitchlake.storage import registry
from stitchlake.storage.s3 import S3Storage

#: Steps of `S3Storage._request` that are not round trips of their own.
NOT_ROUND_TRIPS = frozenset({"BODY", "WAIT", "STREAM"})
SCHEME = "counting+s3"


class Recorder:
    """Requests and waves of every storage object made by one `install` (a command makes several)."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.requests: Counter[str] = Counter()
        self.waves = 0
        self.log: list[tuple[int, str, str]] = []  # (wave, operation, path)
        self._in_flight = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.waves = 0
            self.log.clear()

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def request(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        if op in NOT_ROUND_TRIPS:
            return call()
        with self._lock:
            if self._in_flight == 0:
                self.waves += 1
            self._in_flight += 1
            self.requests[op] += 1
            self.log.append((self.waves, op, path))
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            return call()
        finally:
            with self._lock:
                self._in_flight -= 1

    def waves_summary(self) -> list[str]:
        """One line per wave: how many requests of which kinds, and the first path."""
        lines: dict[int, list[tuple[str, str]]] = {}
        for wave, op, path in self.log:
            lines.setdefault(wave, []).append((op, path))
        out = []
        for wave, items in sorted(lines.items()):
            kinds = Counter(op for op, _ in items)
            out.append(f"wave {wave}: {dict(kinds)} first {items[0][1]}")
        return out


class CountingS3Storage(S3Storage):
    recorder: Recorder

    def __init__(self, uri: str, options: Mapping[str, str] | None = None, recorder: Recorder | None = None) -> None:
        super().__init__(uri.replace(f"{SCHEME}://", "s3://"), options)
        self.recorder = recorder or Recorder(0.0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (S3Storage, (self.uri, self.options))

    def describe(self, path: str = "") -> str:
        return super().describe(path)

    def _request(self, op: str, path: str, fn: Callable[[], Any]) -> Any:
        return self.recorder.request(op, path, fn)

    def ancestors(self) -> list[Any]:
        return [CountingS3Storage(outer.uri, self.options, self.recorder) for outer in super().ancestors()]


def install(latency_s: float = 0.0) -> Recorder:
    """Register `counting+s3://` (an S3 location whose storage objects all report to the returned recorder)."""
    recorder = Recorder(latency_s)
    registry.BACKENDS[SCHEME] = lambda uri, options: CountingS3Storage(uri, options, recorder)
    return recorder


def uninstall() -> None:
    registry.BACKENDS.pop(SCHEME, None)
