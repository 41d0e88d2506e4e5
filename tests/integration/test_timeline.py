"""The timeline (design.md §4): unique increasing instant times under real multi-process contention, instant file
names, completion-time ordering from names alone, filters, metadata and state transitions. Real files only.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_timeline.py).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
from pathlib import Path

from stitchlake.concurrency.providers import lock_spec, make_lock
from stitchlake.storage import LocalStorage
from stitchlake.timeline.clock import is_time
from stitchlake.timeline.instant import (
    Action,
    State,
)
from stitchlake.timeline.metadata import (
    DeltaCommitPlan,
)
from stitchlake.timeline.timeline import (
    Timeline,
    draw_time,
    write_requested,
)

PROCESSES = 8


DRAWS = 200


def _draw_many(root: str, count: int) -> list[str]:
    """One writer process: draw `count` times exactly as a transaction does (lock, draw, publish, unlock)."""
    storage = LocalStorage(root)
    lock = make_lock(storage, lock_spec({"provider": "filesystem", "wait_s": 120}))
    drawn: list[str] = []
    for _ in range(count):
        with lock:
            requested = draw_time(storage)
            write_requested(storage, requested, Action.DELTACOMMIT, DeltaCommitPlan())
        drawn.append(requested)
    return drawn


def test_concurrent_draws_are_unique_and_increasing(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(_draw_many, [(str(tmp_path), DRAWS)] * PROCESSES)
    everything = [t for sequence in results for t in sequence]
    assert len(everything) == PROCESSES * DRAWS
    assert len(set(everything)) == PROCESSES * DRAWS
    assert all(is_time(t) and len(t) == 17 for t in everything)
    for sequence in results:
        assert all(a < b for a, b in itertools.pairwise(sequence))
    timeline = Timeline.load(LocalStorage(str(tmp_path)))
    assert sorted(i.requested for i in timeline.instants) == sorted(everything)
    assert all(i.state is State.REQUESTED and i.action == Action.DELTACOMMIT for i in timeline.instants)
