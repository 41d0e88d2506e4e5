"""Heartbeats: liveness of running writers and services (design.md §6).

A writer refreshes ``.stitch/heartbeats/<instant>`` while it works; an inflight instant whose heartbeat has
expired is a failed write that `stitch clean` / `stitch rollback --failed` may roll back. Why this shape:

- The file holds JSON ``{instant, owner, host, pid, ts, expire_s}`` written with `Storage.write_atomic`, so a reader
  sees a whole beat or the previous one, never a torn file.
- Expiry uses ``ts`` *inside* the file, not the file's mtime, so it works on object stores (where mtime is
  the upload time, if available at all) and needs no extra metadata call. Like the lock, it assumes host
  clocks agree to well within ``expire_s``.
- A missing heartbeat counts as expired: a writer that never started beating, or one that finished and
  deleted its beat, is not alive. So does the beat of a process on this host that no longer exists
  (`concurrency.liveness`): a killed writer's stream proceeds at once instead of after the expiry.
- Beats come from a daemon thread, so a crashed or killed process simply stops beating. `stop()` waits for
  the thread and holds the same mutex as a beat, so a late background beat can never resurrect a heartbeat
  that `stop(delete=True)` removed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

from stitchlake.concurrency import liveness
from stitchlake.concurrency.lock import default_owner
from stitchlake.errors import StitchError
from stitchlake.paths import HEARTBEATS_DIR
from stitchlake.storage import Storage

log = logging.getLogger(__name__)

#: Table-relative folder of heartbeat files (design.md §3).
HEARTBEATS_FOLDER = HEARTBEATS_DIR


def heartbeat_path(instant: str) -> str:
    """The table-relative path of an instant's heartbeat; the instant must be one plain file name."""
    if not instant or "/" in instant or "\\" in instant or instant in (".", "..") or instant.startswith("."):
        raise StitchError(f"heartbeat instant {instant!r} must be a plain name (no '/', not hidden)")
    return f"{HEARTBEATS_FOLDER}/{instant}"


class Heartbeat:
    """Keeps one instant's heartbeat fresh from a background thread while a writer or service runs.

    `with Heartbeat(storage, instant):` starts beating (first beat written before the block runs) and on exit
    stops and, by default, deletes the beat: after a clean exit the instant is complete, after an exception it
    has failed, and in both cases it is no longer "alive".
    """

    def __init__(
        self,
        storage: Storage,
        instant: str,
        *,
        interval_s: float = 10.0,
        expire_s: float | None = None,
        owner: str | None = None,
        delete_on_exit: bool = True,
        process_bound: bool = True,
    ) -> None:
        if interval_s <= 0:
            raise StitchError(f"concurrency.heartbeat.interval_s: must be > 0, got {interval_s!r}")
        if expire_s is not None and expire_s <= interval_s:
            raise StitchError(
                f"concurrency.heartbeat.expire_s: {expire_s!r} must be greater than interval_s {interval_s!r}"
            )
        self.storage = storage
        self.instant = instant
        self.path = heartbeat_path(instant)
        self.interval_s = float(interval_s)
        #: How long others wait before presuming us dead; only used to warn loudly when our beats fail.
        self.expire_s = None if expire_s is None else float(expire_s)
        self.owner = owner or default_owner()
        self.delete_on_exit = delete_on_exit
        #: Whether the beats name this process (its death on this host is then seen at once): not for a Spark task's
        #: Python worker, which may exit while the job and its instant live on.
        self.process_bound = process_bound
        self.last_ts: float | None = None
        self.last_error: BaseException | None = None
        self._mutex = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def healthy(self) -> bool:
        """Whether our last successful beat is recent enough that others still consider us alive."""
        if self.last_ts is None:
            return False
        limit = self.expire_s if self.expire_s is not None else 2 * self.interval_s
        return time.time() - self.last_ts <= limit

    @property
    def running(self) -> bool:
        """Whether the background thread is beating."""
        return self._thread is not None and self._thread.is_alive()

    def beat(self, **fields: str) -> float:
        """Write one beat now and return its ts, naming no process: for short-lived callers (Spark tasks) whose
        exit says nothing about the instant. `fields` go into the beat (`sent`: `sent_unanswered`). Errors
        propagate."""
        with self._mutex:
            return self._write(process_bound=False, fields=fields)

    def _write(self, process_bound: bool = True, fields: dict[str, str] | None = None) -> float:
        """One beat; a process-bound one names this process, so its death on this host is seen at once."""
        ts = time.time()
        record: dict[str, object] = {
            "instant": self.instant,
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ts": ts,
        }
        if self.expire_s is not None:
            record["expire_s"] = self.expire_s  # its own config's: judges with a shorter one wait for it
        if process_bound:
            record.update(liveness.identity())
        record.update(fields or {})
        self.storage.write_atomic(self.path, json.dumps(record, sort_keys=True).encode("utf-8"))
        self.last_ts = ts
        return ts

    def start(self) -> Heartbeat:
        """Write the first beat synchronously (we are visibly alive at once), then beat in the background."""
        if self._thread is not None:
            raise StitchError(f"heartbeat of {self.instant} already started")
        self._stopped = False
        self._stop_event.clear()
        with self._mutex:
            self._write(self.process_bound)
        self._thread = threading.Thread(target=self._run, name=f"stitchlake-heartbeat-{self.instant}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            with self._mutex:
                if self._stopped:
                    return
                try:
                    self._write(self.process_bound)
                    self.last_error = None
                except Exception as exc:  # a transient storage error must not kill liveness for good
                    self.last_error = exc
                    if self.healthy:
                        log.warning("heartbeat of %s failed: %r", self.instant, exc)
                    else:
                        log.error(
                            "heartbeat of %s keeps failing (%r): other processes may now presume this "
                            "instant failed and roll it back",
                            self.instant,
                            exc,
                        )

    def stop(self, delete: bool = False) -> None:
        """Stop beating; with `delete`, also remove the heartbeat file (the instant is no longer running)."""
        with self._mutex:
            self._stopped = True
            self._stop_event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(self.interval_s, 5.0))
        self._thread = None
        if delete:
            with self._mutex:
                self.storage.delete(self.path)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(delete=self.delete_on_exit)


def read_beat(storage: Storage, instant: str) -> dict[str, Any] | None:
    """An instant's latest beat (with a float `ts`); None if there is none (or it cannot be read)."""
    try:
        record = json.loads(storage.read_bytes(heartbeat_path(instant)))
        record["ts"] = float(record["ts"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("heartbeat of %s is unreadable (%r); treating it as missing", instant, exc)
        return None
    return record if isinstance(record, dict) else None


def last_beat(storage: Storage, instant: str) -> float | None:
    """The ts of an instant's latest beat; None if there is none (or it cannot be read)."""
    record = read_beat(storage, instant)
    return None if record is None else float(record["ts"])


def is_expired(storage: Storage, instant: str, expire_s: float, now: float | None = None) -> bool:
    """Whether the writer of `instant` is presumed dead: no beat, its process gone from this host, or the last
    beat older than `expire_s`, or than the writer's own expiry where its beat records a longer one (two configs
    of one table may differ: the writer's is the promise it keeps)."""
    record = read_beat(storage, instant)
    if record is None or liveness.gone(record):
        return True
    own = record.get("expire_s")
    limit = max(expire_s, float(own)) if isinstance(own, int | float) else expire_s
    return (time.time() if now is None else now) - float(record["ts"]) > limit


def sent_unanswered(storage: Storage, instant: str) -> str | None:
    """Whether the instant's last beat says its commit was sent and no answer came (the completion time it was
    sent with, or "unknown"): a process undoing the instant on another's behalf (Spark's abort of a write whose
    commit ran elsewhere) must then leave its files for the create that may still land."""
    record = read_beat(storage, instant)
    sent = record.get("sent") if record is not None else None
    return str(sent) if sent else None


def delete(storage: Storage, instant: str) -> bool:
    """Remove an instant's heartbeat; False if there was none."""
    return storage.delete(heartbeat_path(instant))


def list_beats(storage: Storage) -> list[str]:
    """The instants that have a heartbeat file, sorted."""
    return sorted(name for name in storage.list_names(HEARTBEATS_FOLDER) if not name.startswith("."))
