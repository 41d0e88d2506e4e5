"""Thread pools that wait on storage round trips (object store reads run many at once), one per process."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class PerProcessPool:
    """A thread pool made on first use, one per process: a forked child must not reuse its parent's, whose threads
    did not survive the fork (work submitted to it would never run). Calling it gives this process's pool."""

    def __init__(self, workers: int, thread_name_prefix: str) -> None:
        self._workers = workers
        self._thread_name_prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            pool = self._pools.get(os.getpid())
            if pool is None:
                pool = self._pools[os.getpid()] = ThreadPoolExecutor(
                    self._workers, thread_name_prefix=self._thread_name_prefix
                )
            return pool
