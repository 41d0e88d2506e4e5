"""One action on the table from request to publish: the only code that takes the table lock.

The lock is held for two tiny critical sections — drawing the requested time (and creating the requested and
inflight files with it), and drawing the completion time (and publishing the completed file with it). Writing data
never holds it (design.md §4, §6).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypedDict, Unpack

from stitchlake.concurrency import conflicts
from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.heartbeat import Heartbeat
from stitchlake.concurrency.markers import create_marker, delete_marked, delete_markers, marked_files
from stitchlake.config import ConcurrencyMode
from stitchlake.errors import (
    COMMIT_SENT_UNANSWERED,
    COMPLETED_BEFORE_STOP,
    BusyError,
    ConflictError,
    PlanUndone,
    StitchError,
    Terminated,
)
from stitchlake.paths import quarantine_folder
from stitchlake.table.guards import (
    refuse_if_rescaled,
    refuse_if_stream_busy,
    refuse_while_rescaling,
    refuse_while_undoing,
    taken_over,
    undone_by,
    undone_since,
)
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.clock import next_time
from stitchlake.timeline.instant import Action, Instant, State
from stitchlake.timeline.metadata import (
    Commit,
    DeltaCommit,
    DeltaCommitPlan,
    InflightMark,
    Plan,
    WriterInfo,
)
from stitchlake.timeline.timeline import (
    Timeline,
    delete_instant,
    read_inflight,
    write_completed,
    write_inflight,
    write_requested,
)

if TYPE_CHECKING:
    from stitchlake.storage import Storage
    from stitchlake.table.handle import TableHandle

log = logging.getLogger(__name__)

#: Runs under the lock just before publishing, with a fresh timeline; raises to refuse the commit.
ConflictCheck = Callable[[Timeline, Instant], None]


class BeginOptions(TypedDict, total=False):
    """What `Transaction.begin` passes on to `begin_planned` (see there)."""

    exclusive_stream: str | None
    heartbeat: bool
    busy_check: Callable[[Timeline], None] | None


def writer_info() -> WriterInfo:
    return WriterInfo(host=socket.gethostname(), pid=os.getpid(), started=time.time())


class Transaction:
    """A begun instant with its heartbeat; complete it or abort it.

    `attempt` is a token this run wrote into the instant's inflight file. A process that froze past its
    heartbeat's expiry (a "zombie") may have been rolled back, reset or taken over meanwhile; publishing checks
    the token, so only the attempt that owns the instant now can publish it.
    """

    def __init__(
        self,
        table: TableHandle,
        instant: Instant,
        heartbeat: Heartbeat | None,
        attempt: str | None = None,
        plan: Plan | None = None,
    ) -> None:
        self.table = table
        self.instant = instant
        self.heartbeat = heartbeat
        self.attempt = attempt
        #: What the requested file holds (kept here: a run presumed dead may find the file gone under it).
        self.plan: Plan = plan if plan is not None else kind_of(instant.action).plan()
        self.started = time.time()
        #: A check for whoever publishes through a helper that takes none (ingest's exactly-once check).
        self.conflict_check: ConflictCheck | None = None
        self.aborted = False
        #: The completion time of a create that was sent: from then on the commit may stand though no answer came
        #: (an S3 timeout or 5xx after the PUT landed, a signal right after the create), and nothing is undone.
        self.sent: str | None = None
        #: A create sent without an answer was waited out, under the lock, for as long as it could take to land.
        self.settled = False

    @property
    def time(self) -> str:
        return self.instant.requested

    @classmethod
    def begin(
        cls, table: TableHandle, action: Action, content: Plan | None = None, **options: Unpack[BeginOptions]
    ) -> Transaction:
        """Draw a requested time and create the requested instant (see `begin_planned`)."""
        txn = cls.begin_planned(table, action, content, **options)
        assert txn is not None
        return txn

    @classmethod
    def begin_planned(
        cls,
        table: TableHandle,
        action: Action,
        content: Plan | None = None,
        *,
        exclusive_stream: str | None = None,
        heartbeat: bool = True,
        busy_check: Callable[[Timeline], None] | None = None,
        plan: Callable[[Timeline, str], Plan | None] | None = None,
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
        body = content if content is not None else kind_of(action).plan()
        if exclusive_stream:
            assert isinstance(body, DeltaCommitPlan), "only a deltacommit claims a stream"
            body = replace(body, stream=exclusive_stream, claimed=True)
        instant: Instant | None = None
        requested_here: Instant | None = None
        beat: Heartbeat | None = None
        try:
            with table.lock() as lock:
                timeline = Timeline.load(storage)
                planning = kind_of(action).refused_while_undoing
                if planning is not None:
                    refuse_while_undoing(timeline, planning)
                if action == Action.DELTACOMMIT:
                    refuse_while_rescaling(timeline)
                if exclusive_stream:
                    refuse_if_stream_busy(table, timeline, exclusive_stream)
                if busy_check is not None:
                    busy_check(timeline)
                requested = next_time(timeline.all_times(), max_ahead_s=table.config.concurrency.max_clock_skew_s)
                if plan is not None:
                    planned = plan(timeline, requested)
                    if planned is None:
                        return None
                    body = planned
                body = replace(body, writer=writer_info())
                requested_here = Instant(requested, action, State.REQUESTED)
                # Fenced: the checks above (busy, plan, a rollback's re-check) hold only while our lease does.
                instant = write_requested(storage, requested, action, body, ready=lock.fence)
                attempt = None
                if inflight:  # under the lock too: a run frozen here and rolled back must not mark it again
                    attempt = new_attempt()
                    instant = write_inflight(storage, instant, InflightMark(attempt), ready=lock.fence)
                # Beat only once the instant exists, so a heartbeat is never a trace of an instant not on the
                # timeline. Found without a beat meanwhile, it is safe: rollbacks re-check liveness under our lock.
                if heartbeat:
                    beat = Heartbeat(storage, requested, interval_s=spec.interval_s, expire_s=spec.expire_s)
                    beat.start()
            return cls(table, instant, beat, attempt, body)
        except BaseException:
            # Interrupted (SIGTERM, Ctrl-C) or failed before the caller holds a handle that could abort: nothing
            # was written but the instant itself, so take it back now rather than leave it pending for recovery.
            # A signal can land inside the create, after the file exists but before `write_requested` returns it:
            # then the file on the timeline is what says whether it is ours (its writer record is this run's).
            if instant is None:
                instant = _created_by(storage, requested_here, body)
            if instant is not None:
                _take_back(storage, instant, beat)
            raise

    @classmethod
    def attach(cls, table: TableHandle, requested: str) -> Transaction:
        """A handle on a pending instant begun by another process (e.g. the driver of a Spark job).

        An instant gone (rolled back: its launcher was presumed dead) or completed by another process was
        superseded while the job started: nothing of this run is published, so it is a conflict (exit 3, run
        again), as for a writer fenced at publish, not an ambiguous failure."""
        timeline = Timeline.load(table.storage)
        instant = timeline.get(requested)
        if instant is None or instant.is_completed:
            state = "was taken back" if instant is None else f"was completed at {instant.completed}"
            raise ConflictError(
                f"instant {requested} {state} by another process while this job started; nothing was published — "
                "run again"
            )
        return cls(table, instant, None, inflight_attempt(table, instant), timeline.plan(instant))

    @classmethod
    def take_over(cls, table: TableHandle, instant: Instant, what: str) -> Transaction:
        """`resume` a planned rewrite (compaction, rescale) and delete what its crashed earlier attempts wrote.

        Their files are listed before the take-over: listed after, a run frozen right after taking over could find
        and delete the files of a run that took the plan over from it meanwhile, which that run then publishes.
        """
        earlier = marked_files(table.storage, instant.requested)
        txn = cls.resume(table, instant, what, gone=PlanUndone)
        try:
            delete_marked(table.storage, instant.requested, earlier)
        except BaseException:
            txn.finish_here()  # or its beat ran on in this process: the plan stayed "run by a live process"
            raise
        return txn

    @classmethod
    def resume(
        cls, table: TableHandle, instant: Instant, what: str = "instant", gone: type[StitchError] = BusyError
    ) -> Transaction:
        """Take over a requested (or crashed inflight) instant to run it: refuse while its owner is alive.

        Under the lock it also refuses an instant that completed meanwhile or that a pending rollback is undoing
        or resetting, and it claims the instant with a new attempt token (replacing a crashed attempt's), so a
        zombie of the previous attempt can no longer publish.
        """
        storage = table.storage
        spec = table.config.concurrency.heartbeat
        beat: Heartbeat | None = None
        try:
            with table.lock() as lock:
                if storage.exists(heartbeats.heartbeat_path(instant.requested)) and not heartbeats.is_expired(
                    storage, instant.requested, spec.expire_s
                ):
                    raise BusyError(
                        f"{what} {instant.requested} is being run by another live process (its heartbeat is fresh); "
                        "try again later"
                    )
                timeline = Timeline.load(storage)
                current = timeline.get(instant.requested)
                if current is None:  # a restore or rollback undid it, or its own process aborted it
                    then = "run again" if issubclass(gone, ConflictError) else "nothing to do"
                    raise gone(f"{what} {instant.requested} is gone from the timeline (undone meanwhile); {then}")
                if current.is_completed:
                    raise BusyError(
                        f"{what} {instant.requested} completed at {current.completed} (another process finished it); "
                        "nothing to do"
                    )
                undoing = undone_by(timeline, instant.requested)
                if undoing is not None:
                    raise BusyError(
                        f"{what} {instant.requested} is being rolled back or reset by {undoing}; try again later"
                    )
                attempt = new_attempt()  # fenced: the checks above hold only while our lease does
                inflight = write_inflight(storage, instant, InflightMark(attempt), replace=True, ready=lock.fence)
                beat = Heartbeat(storage, instant.requested, interval_s=spec.interval_s, expire_s=spec.expire_s)
                beat.start()
            plan = timeline.plan(instant)
        except BaseException:
            # Taken over, then failed (the lock's release, reading the plan): a beat left running here kept the
            # plan "run by a live process", so every later run was refused busy and recovery never reset it. Its
            # file goes too while the attempt is still ours (a lost lease may have let another take it over).
            if beat is not None:
                try:
                    ours = inflight_attempt(table, inflight) == attempt
                except Exception:  # cannot tell: leave the file to expire
                    ours = False
                beat.stop(delete=ours)
            raise
        return cls(table, inflight, beat, attempt, plan)

    def mark(self, path: str) -> None:
        """Record that this instant is about to create `path` (before creating it)."""
        create_marker(self.table.storage, self.time, path)

    def complete(self, metadata: Commit, conflict_check: ConflictCheck | None = None) -> Instant:
        """Publish: draw the completion time and create the completed file, under the lock."""
        metadata = replace(metadata, timings={**metadata.timings, "total_s": round(time.time() - self.started, 3)})
        try:
            self._publish(metadata, conflict_check)
        except BaseException as exc:
            landed = self.landed() if self.sent is not None else "none"
            if landed == "none" and self.settled:
                self.sent = None  # its budget is out and it is not there: it can no longer land
            if landed == "ours":
                # The create landed though its answer was lost: the commit stands, and says so.
                if not isinstance(exc, Exception):
                    exc.add_note(f"{COMPLETED_BEFORE_STOP}: instant {self.time} was published")
                    self._finish()
                    raise
                log.warning("instant %s was published, though its store answered: %s", self.time, exc)
            elif landed == "other" and isinstance(exc, Exception):
                self._stop_beating(delete=False)
                raise self.refusal("was completed") from exc
            else:
                # Not published. Stop beating now, or a long-lived caller that has no abort path (restore, clean,
                # rollback) keeps its half-done instant looking alive and every planner refusing while it runs.
                self._stop_beating(delete=self.sent is None and self._still_ours())
                if self.sent is not None:
                    self.beat_while_it_may_land()
                    exc.add_note(f"{COMMIT_SENT_UNANSWERED}: instant {self.time} is left pending; it may still land")
                raise
        try:
            self._drop_unnamed_quarantine(metadata)
            self._finish()
        except Exception:  # published: leftover markers or a heartbeat are tidied by `stitch clean`
            log.warning("instant %s was published; tidying its markers failed", self.time, exc_info=True)
        return self.instant

    def _drop_unnamed_quarantine(self, metadata: Commit) -> None:
        """Quarantine files marked under this instant that its commit does not name: an earlier run's of the same
        instant (a micro-batch replayed after a crash) or a task attempt Spark did not take. Left, they sat in the
        commit's quarantine folder, where an operator reading its files saw those bad rows twice; the orphan sweep
        never looks under `.stitch`."""
        if not isinstance(metadata, DeltaCommit):
            return
        named = set(metadata.quarantine_files) | {q.copy for q in metadata.quarantined_files if q.copy}
        folder = f"{quarantine_folder(self.time)}/"
        for path in marked_files(self.table.storage, self.time):
            if path.startswith(folder) and path not in named:
                self.table.storage.delete(path)

    def _publish(self, metadata: Commit, conflict_check: ConflictCheck | None) -> None:
        storage = self.table.storage
        with self.table.lock() as lock:
            timeline = Timeline.load(storage)
            lost = self.superseded(timeline, claim=False)
            if lost is not None:
                self._refuse(lost)
            if kind_of(self.instant.action).undo_sensitive:
                undo = undone_since(timeline, self.instant.requested)
                if undo is not None:
                    raise ConflictError(
                        f"{undo.action} {undo.requested} rolled back history while instant {self.time} ran, so what "
                        "it chose (e.g. the landing files it took) may no longer follow the table's history; nothing "
                        "was published — run again"
                    )
            if isinstance(metadata, DeltaCommit):
                refuse_if_rescaled(self.table, timeline, self.time, metadata.added)
            if isinstance(metadata, DeltaCommit) and self.table.config.concurrency.mode == ConcurrencyMode.OPTIMISTIC:
                footprint = conflicts.DEFAULT_RULE.footprint(conflicts.groups_of(metadata.added))
                conflicts.check_completed_and_planned(timeline, self.time, metadata.stream or "", footprint)
            for check in (self.conflict_check, conflict_check):
                if check is not None:
                    check(timeline, self.instant)
            lost = self.claim_lost(timeline)  # after the checks that name what was taken twice, if anything was
            if lost is not None:
                self._refuse(lost)
            self._refuse_unseen(metadata)  # after them: a superseded run's files were deleted by its rollback
            completed = next_time(timeline.all_times(), max_ahead_s=self.table.config.concurrency.max_clock_skew_s)

            sent_at: list[float] = []

            def fenced() -> None:  # as late as possible: after the slow, durable part, right before the create
                lock.fence()
                self.sent = completed
                sent_at.append(time.monotonic())

            try:
                self.instant = write_completed(storage, self.instant, completed, metadata, ready=fenced)
            except BaseException:
                if sent_at:
                    # No answer: the create may still land, as late as its budget allows. Released now, the lock
                    # would let another writer complete after us with a later time while ours lands with an
                    # earlier one (a change read past it, or a compaction, would miss it): the lease is held
                    # until the budget is out (the fence left at least that much), and then the answer is known.
                    wait_until(sent_at[0] + lock.publish_s)
                    self.settled = True
                raise

    def _refuse_unseen(self, metadata: Commit) -> None:
        """A commit never names a data file this table's disk does not hold: Spark executors on other machines
        write to their own disks when the table is on local disk (every reader would then fail on a missing file).
        Checked on local disk only, where a look is cheap; an object store is one place for every machine."""
        storage = self.table.storage
        if storage.local_path() is None:
            return
        unseen = [f.path for f in metadata.added_files if not storage.exists(f.path)]
        if unseen:
            raise StitchError(
                f"{len(unseen)} data file(s) instant {self.time} wrote are not on this machine (e.g. {unseen[0]}); "
                f"nothing was published. A table on local disk ({self.table.path}) works with a Spark cluster only "
                "on a folder every machine mounts at the same path; or put the table on S3"
            )

    def landed(self) -> str:
        """After a create was sent, what the timeline says: `ours` (our create landed: adopted), `other` (another
        process completed the instant), `none` (not completed) or `unknown` (the timeline cannot be read)."""
        try:
            current = Timeline.load(self.table.storage).get(self.instant.requested)
        except Exception:
            return "unknown"
        if current is None or not current.is_completed:
            return "none"
        if current.completed != self.sent:
            return "other"
        self.instant = current
        return "ours"

    def superseded(self, timeline: Timeline | None = None, claim: bool = True) -> str | None:
        """Why this attempt may no longer publish, or None: its instant was rolled back or completed by someone
        else, a pending rollback is undoing or resetting it, another attempt took it over, or (`claim`) another
        claim took its stream over (`claim_lost`).

        It happens to a process presumed dead while it ran (frozen past its heartbeat's expiry): publishing
        then would name files the rollback deletes. `complete` asks under the lock; error paths may ask too.
        """
        timeline = timeline or Timeline.load(self.table.storage)
        current = timeline.get(self.instant.requested)
        if current is None or current.is_completed:
            return "was rolled back (or completed)"
        undoing = undone_by(timeline, self.instant.requested)
        if undoing is not None:
            return f"is being rolled back or reset by {undoing}"
        if self.attempt is not None and inflight_attempt(self.table, self.instant) != self.attempt:
            return "was reset or taken over"
        return self.claim_lost(timeline) if claim else None

    def claim_lost(self, timeline: Timeline) -> str | None:
        """Why a stream's claim may no longer publish, or None: a later claim took the stream over while this one
        looked dead (`guards.taken_over`)."""
        plan = self.plan
        if not (isinstance(plan, DeltaCommitPlan) and plan.claimed and plan.stream is not None):
            return None
        other = taken_over(self.table, timeline, self.instant, plan.stream)
        return None if other is None else f"lost its claim on stream {plan.stream} to instant {other.requested}, taken"

    def refusal_after(self, error: BaseException) -> StitchError | None:
        """The refusal a failed run should report instead of `error`, or None.

        A run presumed dead while it ran finds its files and plan deleted under it: whatever that makes fail, it
        is "superseded, nothing was published", not "file not found". After the publish nothing is refused.
        """
        if self.instant.is_completed or self.sent is not None or isinstance(error, KeyboardInterrupt | Terminated):
            return None  # a create was sent: "nothing was published" may be false
        try:
            # A refusal that names what was taken twice stays; any other failure of a claim taken over says so.
            lost = self.superseded(claim=not isinstance(error, ConflictError))
        except Exception:  # cannot tell: report the original error
            return None
        return None if lost is None else self.refusal(lost)

    def run_failed(self, error: BaseException) -> None:
        """After a rewrite's run failed (any engine): stop its heartbeat, and raise the refusal when it was
        superseded. Its heartbeat file may then be the new attempt's, so it stays."""
        refused = self.refusal_after(error)
        if self.heartbeat is not None:
            self.heartbeat.stop(delete=refused is None)
            self.heartbeat = None
        if refused is not None:
            raise refused from error

    def refusal(self, what: str) -> StitchError:
        """Superseded: nothing was published, so running again is safe (exit 3, as for any write conflict)."""
        return ConflictError(
            f"instant {self.instant.requested} {what} by another process while it ran; nothing was published — "
            "run again"
        )

    def _refuse(self, what: str) -> None:
        """Stop beating and refuse to publish."""
        self._stop_beating()
        raise self.refusal(what)

    def _stop_beating(self, delete: bool = False) -> None:
        """Stop beating. The file stays unless it is surely ours: it may be another attempt's now (an old one
        simply expires, and `stitch clean` tidies it)."""
        if self.heartbeat is not None:
            self.heartbeat.stop(delete=delete)
            self.heartbeat = None

    def _still_ours(self) -> bool:
        try:
            return self.superseded() is None
        except Exception:  # cannot tell: leave the file to expire
            return False

    def abort(self) -> None:
        """Undo a failed attempt at once: delete what the markers name, then the instant itself.

        Never after the publish: a failure that comes later (tidying, an interrupt) leaves the commit standing.
        """
        storage = self.table.storage
        if self.aborted:  # an interrupted caller and the code it called may both undo it
            return
        self.aborted = True
        if self.instant.is_completed:
            log.warning("instant %s was already published; not aborting it", self.time)
            self._finish(delete_markers_too=False)
            return
        if self.sent is not None:
            # Its create was sent and no answer came: not there now, it may still land (a store holds a request it
            # has taken a while longer than its client waits). Deleting its files could destroy a commit, so the
            # instant is left pending with its heartbeat (not deleted: it expires), and the lazy rollback, which
            # waits for that and re-checks under the lock, sees whether it completed.
            landed = self.landed()
            if landed == "ours":
                log.warning("instant %s was published though its store gave no answer; not aborting it", self.time)
            else:
                self.beat_while_it_may_land()
                log.warning(
                    "instant %s may still be published (its commit was sent, no answer came; the timeline says %s); "
                    "not aborting it: `stitch clean` rolls it back once its heartbeat has expired if it did not land",
                    self.time,
                    landed,
                )
            self._stop_beating(delete=False)
            self._finish(delete_markers_too=False)
            return
        try:
            for path in marked_files(storage, self.time):
                storage.delete(path)
            delete_markers(storage, self.time)
            delete_instant(storage, self.instant)
        except Exception:  # the lazy rollback of expired instants will finish the job
            log.exception("could not fully abort instant %s; `stitch clean` will roll it back", self.time)
        finally:
            self._finish(delete_markers_too=False)

    def leave_pending(self) -> None:
        """Its commit may still land (another process sent it, no answer came): stop beating and leave the
        instant, its files and its heartbeat (which expires) to the lazy rollback, which waits for that."""
        self.aborted = True
        self._stop_beating(delete=False)
        self.beat_while_it_may_land()

    def beat_while_it_may_land(self) -> None:
        """One last beat for an instant left pending because its create was sent and no answer came: it names no
        process and lasts at least the create's budget. The beat it had named this process, and a beat whose
        process is gone from this host expires at once: as soon as this process exited, a `stitch clean` deleted
        the files of a commit that could still land, or a new claim took the same landing files again."""
        spec = self.table.config.concurrency.heartbeat
        lasting = max(spec.expire_s, self.table.storage.create_budget_s + spec.interval_s)
        try:
            beat = Heartbeat(self.table.storage, self.time, interval_s=spec.interval_s, expire_s=lasting)
            beat.beat(sent=self.sent or "unknown")
        except Exception:  # the beat it had stays: it still holds others off while this process lives
            log.warning("instant %s: its last beat could not be written", self.time, exc_info=True)

    def finish_here(self) -> None:
        """This process no longer runs the instant (a job it started published or aborted it): stop beating."""
        if self.heartbeat is not None:
            self.heartbeat.stop(delete=True)
            self.heartbeat = None

    def _finish(self, delete_markers_too: bool = True) -> None:
        try:
            if delete_markers_too:
                delete_markers(self.table.storage, self.time)
        finally:  # whatever happened, this process no longer runs the instant
            if self.heartbeat is not None:
                self.heartbeat.stop(delete=True)
                self.heartbeat = None


def wait_until(deadline: float) -> None:
    """Sleep until the monotonic clock reaches `deadline` (a stop ends the wait early, and is raised)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def new_attempt() -> str:
    return uuid.uuid4().hex


def inflight_attempt(table: TableHandle, instant: Instant) -> str | None:
    """The attempt token in an instant's inflight file; None when there is none (not inflight, or reset)."""
    mark = read_inflight(table.storage, instant)
    return mark.attempt if mark is not None else None


def _created_by(storage: Storage, requested: Instant | None, body: Plan) -> Instant | None:
    """`requested` if its requested file exists and was written by this run (its writer record is `body`'s:
    host, pid and start time), else None. Another run may have drawn the same time after our lease lapsed."""
    if requested is None:
        return None
    try:
        current = Timeline.load(storage)
        if current.get(requested.requested) is None:
            return None
        return requested if current.plan(requested).writer == body.writer else None
    except Exception:  # cannot tell: leave it to the lazy rollback of dead writers' instants
        log.exception("could not tell whether instant %s is ours to take back", requested.requested)
        return None


def _take_back(storage: Storage, instant: Instant, beat: Heartbeat | None) -> None:
    """Undo a begin that was interrupted before it returned: stop beating, delete the instant."""
    try:
        if beat is not None:
            beat.stop(delete=True)
        delete_instant(storage, instant)
    except Exception:  # the lazy rollback of expired instants finishes the job
        log.exception("could not take back instant %s; `stitch clean` will roll it back", instant.requested)
