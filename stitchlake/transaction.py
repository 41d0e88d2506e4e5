"""One action on the table from request to publish: the only code that takes the table lock.

The lock is held for two tiny critical sections — drawing the requested time (and creating the requested
file with it), and drawing the completion time (and publishing the completed file with it). Writing data
never holds it (DESIGN §4, §6).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.heartbeat import Heartbeat
from stitchlake.concurrency.markers import create_marker, delete_markers, marked_files
from stitchlake.errors import BusyError, StitchError
from stitchlake.timeline.clock import next_time
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import (
    Timeline,
    delete_instant,
    write_completed,
    write_inflight,
    write_requested,
)

if TYPE_CHECKING:
    from stitchlake.table import Table

log = logging.getLogger(__name__)

#: Runs under the lock just before publishing, with a fresh timeline; raises to refuse the commit.
ConflictCheck = Callable[[Timeline, Instant], None]


def writer_info() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}


class Transaction:
    """A begun instant with its heartbeat; complete it or abort it."""

    def __init__(self, table: Table, instant: Instant, heartbeat: Heartbeat | None) -> None:
        self.table = table
        self.instant = instant
        self.heartbeat = heartbeat
        self.started = time.time()

    @property
    def time(self) -> str:
        return self.instant.requested

    @classmethod
    def begin(
        cls,
        table: Table,
        action: str,
        content: dict[str, Any] | None = None,
        *,
        exclusive_stream: str | None = None,
        heartbeat: bool = True,
        busy_check: Callable[[Timeline], None] | None = None,
    ) -> Transaction:
        """Draw a requested time and create the requested instant (see `begin_planned`)."""
        txn = cls.begin_planned(
            table,
            action,
            content,
            exclusive_stream=exclusive_stream,
            heartbeat=heartbeat,
            busy_check=busy_check,
        )
        assert txn is not None
        return txn

    @classmethod
    def begin_planned(
        cls,
        table: Table,
        action: str,
        content: dict[str, Any] | None = None,
        *,
        exclusive_stream: str | None = None,
        heartbeat: bool = True,
        busy_check: Callable[[Timeline], None] | None = None,
        plan: Callable[[Timeline, str], dict[str, Any] | None] | None = None,
        inflight: bool = True,
    ) -> Transaction | None:
        """Draw a requested time and create the requested instant, under the lock.

        `exclusive_stream` refuses (BusyError) while another live writer of that stream has a pending
        instant: cron overlap must not double-ingest. `plan(timeline, requested)` computes the requested
        content under the same lock — a compaction plan must see exactly the commits completed before its
        time — and returning None means there is nothing to do (no instant is created).
        """
        storage = table.storage
        spec = table.config.concurrency.heartbeat
        body = {**(content or {}), "writer": writer_info()}
        if exclusive_stream:
            body["stream"] = exclusive_stream
        with table.lock():
            timeline = Timeline.load(storage)
            if exclusive_stream:
                refuse_if_stream_busy(table, timeline, exclusive_stream)
            if busy_check is not None:
                busy_check(timeline)
            requested = next_time(timeline.all_times())
            if plan is not None:
                planned = plan(timeline, requested)
                if planned is None:
                    return None
                body = {**planned, **body}
            beat = None
            if heartbeat:
                beat = Heartbeat(storage, requested, interval_s=spec.interval_s, expire_s=spec.expire_s)
                beat.start()
            instant = write_requested(storage, requested, action, body)
        if inflight:
            instant = write_inflight(storage, instant)
        return cls(table, instant, beat)

    @classmethod
    def attach(cls, table: Table, requested: str) -> Transaction:
        """A handle on a pending instant begun by another process (e.g. the driver of a Spark job)."""
        instant = Timeline.load(table.storage).get(requested)
        if instant is None or instant.is_completed:
            state = "not on the timeline" if instant is None else f"already completed at {instant.completed}"
            raise StitchError(f"instant {requested} is {state}; cannot commit into it")
        return cls(table, instant, None)

    @classmethod
    def resume(cls, table: Table, instant: Instant, what: str = "instant") -> Transaction:
        """Take over a requested (or crashed inflight) instant to run it: refuse while its owner is alive."""
        storage = table.storage
        spec = table.config.concurrency.heartbeat
        with table.lock():
            if storage.exists(f".stitch/heartbeats/{instant.requested}") and not heartbeats.is_expired(
                storage, instant.requested, spec.expire_s
            ):
                raise BusyError(
                    f"{what} {instant.requested} is being run by another live process (its heartbeat is fresh); "
                    "try again later"
                )
            beat = Heartbeat(storage, instant.requested, interval_s=spec.interval_s, expire_s=spec.expire_s)
            beat.start()
        return cls(table, write_inflight(storage, instant), beat)

    def mark(self, path: str) -> None:
        """Record that this instant is about to create `path` (before creating it)."""
        create_marker(self.table.storage, self.time, path)

    def complete(self, metadata: dict[str, Any], conflict_check: ConflictCheck | None = None) -> Instant:
        """Publish: draw the completion time and create the completed file, under the lock."""
        storage = self.table.storage
        metadata = {
            **metadata,
            "timings": {**metadata.get("timings", {}), "total_s": time.time() - self.started},
        }
        with self.table.lock() as lock:
            timeline = Timeline.load(storage)
            current = timeline.get(self.instant.requested)
            if current is None or current.is_completed:
                raise StitchError(
                    f"instant {self.instant.requested} was rolled back (or completed) by another process while "
                    "it ran; nothing was published — run again"
                )
            if conflict_check is not None:
                conflict_check(timeline, self.instant)
            completed = next_time(timeline.all_times())
            lock.check()
            self.instant = write_completed(storage, self.instant, completed, metadata)
        self._finish()
        return self.instant

    def abort(self) -> None:
        """Undo a failed attempt at once: delete what the markers name, then the instant itself."""
        storage = self.table.storage
        try:
            for path in marked_files(storage, self.time):
                storage.delete(path)
            delete_markers(storage, self.time)
            delete_instant(storage, self.instant)
        except Exception:  # the lazy rollback of expired instants will finish the job
            log.exception("could not fully abort instant %s; `stitch clean` will roll it back", self.time)
        finally:
            self._finish(delete_markers_too=False)

    def _finish(self, delete_markers_too: bool = True) -> None:
        if delete_markers_too:
            delete_markers(self.table.storage, self.time)
        if self.heartbeat is not None:
            self.heartbeat.stop(delete=True)
            self.heartbeat = None


def live_writer(table: Table, timeline: Timeline, instant: Instant) -> bool:
    """Whether a pending instant's heartbeat is still fresh."""
    expire = table.config.concurrency.heartbeat.expire_s
    return not heartbeats.is_expired(table.storage, instant.requested, expire)


def refuse_if_stream_busy(table: Table, timeline: Timeline, stream: str) -> None:
    for instant in timeline.pending([Action.DELTACOMMIT]):
        content = timeline.requested_content(instant)
        if content.get("stream") != stream or not live_writer(table, timeline, instant):
            continue
        writer = content.get("writer", {})
        raise BusyError(
            f"stream {stream} is already being written by instant {instant.requested} "
            f"(host {writer.get('host', '?')}, pid {writer.get('pid', '?')}); its heartbeat is alive, so this "
            "run stops here instead of ingesting twice — run again after it finishes"
        )
