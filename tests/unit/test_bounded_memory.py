"""Bounded memory (issue 27 point 2): reads, `stitch sql`, `stitch read --out`, compaction and erase hold a few file
slices at a time, never the whole table, and give exactly the rows the whole-table reads give.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_bounded_memory.py).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest

from stitchlake.api import Table
from stitchlake.engine import LocalEngine
from tests.support.histories import MODEL
from tests.support.reads import canonical_rows
from tests.support.tables import batch, new_table

R = TypeVar("R")


def test_the_local_engine_runs_file_groups_heavier_than_its_budget_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import stitchlake.engine as engine_module

    running = most = 0
    lock = threading.Lock()
    entered = threading.Event()

    def task(item: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        entered.set()
        with lock:
            running -= 1
        return item * 2

    engine = LocalEngine()
    monkeypatch.setattr(engine_module, "LOCAL_BYTES_IN_FLIGHT", 100)
    assert engine.map(task, list(range(12)), weight=lambda _i: 1000) == [i * 2 for i in range(12)]
    assert most == 1
    # Unweighted work (landing files, deletions) keeps every thread.
    assert engine.map(task, list(range(12))) == [i * 2 for i in range(12)]


class WatchedPool(ThreadPoolExecutor):
    """The in-process engine's thread pool, counting the tasks submitted and not finished yet (a task counts as
    finished before its result is handed back, so a task submitted after `result()` of the last never overlaps)."""

    made: list[WatchedPool] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.submitted = self.outstanding = self.most = 0
        WatchedPool.made.append(self)

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        def task() -> R:
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.outstanding -= 1

        with self.lock:
            self.submitted += 1
            self.outstanding += 1
            self.most = max(self.most, self.outstanding)
        return super().submit(task)


def _service_table(root: Path) -> Table:
    """16 file groups (2 partitions x 8 buckets), each with a log of every stream: a few KiB per file group."""
    table = new_table(root, buckets=8)
    rng = random.Random(9)
    for stream in ("orders", "payments", "shipments"):
        model = MODEL[stream]
        rows = []
        for key in range(1, 321):
            row: dict[str, Any] = {"k": key}
            for column in model.columns:
                row[column] = rng.randrange(0, 10**6) if column not in ("status", "note", "carrier") else f"v{key}"
            rows.append(row)
        table.write(stream, batch(model, rows))
    return table


@pytest.mark.parametrize("service", ["compaction", "erase", "rescale"])
def test_compaction_erase_and_rescale_run_file_groups_heavier_than_the_budget_one_at_a_time(
    service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each service hands the in-process engine its tasks' bytes (`weight=`): with a budget smaller than a file
    group, the engine never has two of them in flight; with the default budget it runs them side by side (so the
    watch does see concurrency when it happens). The answer is the same either way."""
    import stitchlake.engine as engine_module

    monkeypatch.setattr(engine_module, "ThreadPoolExecutor", WatchedPool)
    default = engine_module.LOCAL_BYTES_IN_FLIGHT  # 128 MiB: the file groups of these tables fit it together

    def run(budget: int, root: Path) -> tuple[WatchedPool, list[dict[str, Any]]]:
        table = _service_table(root)
        monkeypatch.setattr(engine_module, "LOCAL_BYTES_IN_FLIGHT", budget)
        WatchedPool.made.clear()
        if service == "compaction":
            assert table.compact().done is not None
        elif service == "erase":
            erased = table.erase(pa.table({"k": pa.array(range(1, 321, 7), pa.int64())})).result
            assert erased.erased_keys > 0
        else:
            result = table.rescale(16).done
            assert result is not None and result.file_groups == 32
        [pool] = WatchedPool.made  # the service's one map over its file groups
        return pool, canonical_rows(table.read())

    bounded_pool, bounded_rows = run(1, tmp_path / "tiny")
    assert bounded_pool.submitted >= 12, bounded_pool.submitted  # one task per file group (or rescale unit)
    assert bounded_pool.most == 1, bounded_pool.most
    free_pool, free_rows = run(default, tmp_path / "default")
    assert free_pool.submitted == bounded_pool.submitted and free_pool.most > 1, free_pool.most
    assert bounded_rows == free_rows
