"""pytest plugin for the lock tests of both tiers: the lock module's clock, driven by the test (`clock`)."""

from __future__ import annotations

import time

import pytest

from stitchlake.concurrency import lock as lock_module


class Clock:
    """The lock module's clock, driven by the test: wall and monotonic time move only when the test moves them or
    when the lock sleeps (a sleep moves them by its length, at once). What a lease test proves then follows from the
    order of events, never from how fast a busy machine runs the test. The other side of a lease (a holder in
    another process) keeps the real clock: the test sets this one relative to the expiry that holder recorded."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.ticks = 1_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.ticks

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.ticks += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Every lock in this process runs on a `Clock` for the test, starting at the real time."""
    driven = Clock(time.time())
    monkeypatch.setattr(lock_module, "time", driven)
    return driven
