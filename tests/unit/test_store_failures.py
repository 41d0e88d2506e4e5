"""A store that fails or answers too late mid-action: an object store can commit a conditional create its client
has already given up on, or fail a release or a delete. What a writer does then must hold whichever way it went."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.heartbeat import heartbeat_path
from stitchlake.concurrency.lock import LOCKS_FOLDER, FileSystemLock
from stitchlake.concurrency.markers import marked_files
from stitchlake.errors import COMMIT_SENT_UNANSWERED, LockLost, StitchError
from stitchlake.jobs.launch import abort_unless_published
from stitchlake.paths import ARCHIVE_DIR
from stitchlake.services.rewrites import compaction
from stitchlake.storage.base import Storage
from stitchlake.storage.local import LocalStorage
from stitchlake.table import transaction
from stitchlake.timeline.archive import BATCH_SUFFIX, archived_batches_newest_first, archived_instants
from stitchlake.timeline.metadata import DeltaCommitPlan, EraseCommit
from stitchlake.timeline.timeline import Timeline, delete_instant
from stitchlake.vocabulary import Action, CompactionStrategy
from tests.support.tables import MODELS, SHORT_BEATS, batch, lock_held_elsewhere, new_table, until_expired

ORDERS = MODELS[0]


def _commit_answer_lost(monkeypatch: pytest.MonkeyPatch, storage: Storage) -> list[Callable[[], object]]:
    """The next create of a completed instant file is taken by the store but its answer never comes: the client
    raises, and the create lands when the test calls what the returned list holds."""
    late: list[Callable[[], object]] = []
    original = type(storage).put_if_absent

    def taken_no_answer(self: Storage, path: str, data: bytes, ready: Callable[[], None] | None = None) -> Any:
        name = path.rsplit("/", 1)[-1]
        if not late and path.startswith(".stitch/timeline/") and "_" in name and ready is not None:
            ready()  # fenced: the create is sent
            late.append(lambda: original(self, path, data))
            raise OSError(errno.ETIMEDOUT, "conditional PUT: operation timed out (retries exhausted)", path)
        return original(self, path, data, ready)

    monkeypatch.setattr(type(storage), "put_if_absent", taken_no_answer)
    return late


def _rows(table: Any) -> list[tuple[int, int]]:
    read = table.read(columns=["k", "amount"])
    return sorted(zip(read.column("k").to_pylist(), read.column("amount").to_pylist(), strict=True))


def _while_waited_out(monkeypatch: pytest.MonkeyPatch, during: Callable[[], None]) -> None:
    """Run `during` inside the writer's wait for its unanswered create (the lock still held), then wait no longer:
    the create's budget is what a real store's client waits; a test store has no budget of its own."""
    monkeypatch.setattr(transaction, "wait_until", lambda _deadline: during())


@pytest.mark.parametrize("lands", [True, False])
def test_a_commit_whose_answer_was_lost_is_waited_out_under_the_lock_and_then_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: bool
) -> None:
    """Before, the writer's abort found the commit not there yet and deleted its data files; the create landed
    after, and the timeline named files that no longer existed. Then, left pending, the lock was given back at once:
    another writer completed after it with a later time while it landed with an earlier one, which a change read
    past that time or a compaction missed for good. Now the lease is held until the create's budget is out, and
    then the answer is known: it landed (the write stands) or it never will (aborted as any failed write)."""
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    late = _commit_answer_lost(monkeypatch, table.storage)
    other = new_table(tmp_path, SHORT_BEATS)  # another writer of the table, in its own handle
    held: list[bool] = []

    def meanwhile() -> None:
        held.append(lock_held_elsewhere(other))
        if lands:
            late[0]()

    _while_waited_out(monkeypatch, meanwhile)
    if lands:
        done = table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
        assert done.completed is not None
    else:
        with pytest.raises(OSError, match="timed out") as failed:
            table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
        assert not [n for n in getattr(failed.value, "__notes__", ()) if COMMIT_SENT_UNANSWERED in n], "known now"
    monkeypatch.undo()
    assert held == [True], "no other writer could complete while the answer was awaited"
    assert _rows(table) == ([(1, 1), (2, 2)] if lands else [(1, 1)])
    assert Timeline.load(table.storage).pending() == []
    assert table.rollback().result.rolled_back == []


def test_a_commit_whose_wait_for_its_answer_was_stopped_is_left_pending_with_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop during the wait leaves the answer unknown: nothing is deleted (the create may still land: then the
    write stands), the failure says so, and the heartbeat is left to expire for the lazy rollback."""
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    for lands in (True, False):
        late = _commit_answer_lost(monkeypatch, table.storage)

        def stopped() -> None:
            raise KeyboardInterrupt

        _while_waited_out(monkeypatch, stopped)
        with pytest.raises(KeyboardInterrupt) as failed:
            table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
        monkeypatch.undo()
        assert [n for n in getattr(failed.value, "__notes__", ()) if n.startswith(COMMIT_SENT_UNANSWERED)]
        (pending,) = Timeline.load(table.storage).pending()
        assert table.storage.exists(heartbeat_path(pending.requested)), "left to expire, not deleted"
        if lands:
            late[0]()
            assert _rows(table) == [(1, 1), (2, 2)]
            continue
        until_expired(table, pending.requested)
        assert table.rollback().result.rolled_back == [pending.requested]
        assert _rows(table) == [(1, 1), (2, 2)]
        assert Timeline.load(table.storage).pending() == []


@pytest.mark.parametrize("failing", ["the lock's release", "deleting an earlier attempt's files"])
def test_a_rewrite_whose_take_over_fails_leaves_no_beat_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Before, the run's heartbeat, started under the lock, kept beating in this process after the take-over
    failed: the plan looked run by a live process, every later run was refused busy, and recovery never reset it."""
    table = new_table(tmp_path, SHORT_BEATS)
    for version in range(2):
        table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": version, "status": "a", "ots": version}]))
    plan = compaction.schedule(table, CompactionStrategy.ALL)
    assert plan is not None
    if failing == "the lock's release":
        release = FileSystemLock.release

        def release_then_fail(self: FileSystemLock) -> None:
            release(self)
            monkeypatch.setattr(FileSystemLock, "release", release)  # once
            raise OSError(errno.EIO, "conditional PUT: 503 SlowDown")

        monkeypatch.setattr(FileSystemLock, "release", release_then_fail)
    else:

        def delete_fails(*_args: Any) -> None:
            raise OSError(errno.EIO, "DELETE: 500 InternalError")

        monkeypatch.setattr(transaction, "delete_marked", delete_fails)
    with pytest.raises(OSError, match=r"503|500"):
        compaction.run(table, plan)
    monkeypatch.undo()
    assert not [t for t in threading.enumerate() if t.name == f"stitchlake-heartbeat-{plan}"], "no beat left running"
    done = compaction.run(table, plan)  # at once: nobody runs the plan any more
    assert done is not None and done.instant == plan


def test_a_fence_whose_renewal_was_slow_refuses_when_the_lease_left_cannot_cover_the_create(tmp_path: Path) -> None:
    """The fence renews a lease with less left than the create it guards may take; before, it then checked only
    that the renewed lease had not ended. A renewal slow enough (a store browning out) left less than the create's
    budget, and the create could land after a writer that took the lock over had passed its checks."""

    class SlowLockCreates(LocalStorage):
        create_budget_s = 2.0  # as an object store's bounded create, scaled down

        def put_if_absent(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> bool:
            if path.startswith(f"{LOCKS_FOLDER}/") and not path.endswith(".released"):
                time.sleep(1.6)  # each lease is taken slowly: what is left only shrinks under load
            return super().put_if_absent(path, data, ready)

    lock = FileSystemLock(SlowLockCreates(str(tmp_path)), expire_s=3.0, wait_s=30)
    lock.bound_creates(2.0)
    lock.acquire()
    try:
        with pytest.raises(LockLost, match=r"less than the 2s the create it guards may take"):
            lock.fence()
    finally:
        lock.release()


def test_a_launcher_leaves_pending_the_claim_whose_job_sent_its_commit_unanswered(tmp_path: Path) -> None:
    """A Spark job's driver whose commit got no answer leaves the instant pending; its launcher then aborted the
    claim anyway (its own handle never sent anything) and deleted the files the late commit names. The driver's
    failure carries a note saying so through the result file, and the launcher leaves the instant to the lazy
    rollback, its heartbeat to expire."""
    table = new_table(tmp_path, SHORT_BEATS)
    for said in ("in the note", "in the driver's last beat", None):
        noted = said is not None
        claim = transaction.Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
        written = "p=even/written-by-the-job.parquet"
        claim.mark(written)
        table.storage.write_bytes(written, b"rows")
        failure: BaseException = StitchError("conditional PUT: operation timed out")
        if said == "in the note":
            failure.add_note(f"{COMMIT_SENT_UNANSWERED}: instant {claim.time} is left pending; it may still land")
        if said == "in the driver's last beat":  # the launcher stopped before it read the result file
            transaction.Transaction.attach(table, claim.time).beat_while_it_may_land()
            failure = KeyboardInterrupt()
        assert abort_unless_published(table, failure=failure, claim=claim) is not noted, said
        claim.finish_here()  # as `execute` does, whatever happened
        pending = [i.requested for i in Timeline.load(table.storage).pending()]
        left = (
            pending == [claim.time],
            table.storage.exists(written),
            table.storage.exists(heartbeat_path(claim.time)),
        )
        assert left == ((True, True, True) if noted else (False, False, False)), said
        if noted:
            table.storage.delete(written)
            delete_instant(table.storage, claim.instant)


def test_an_archive_batch_no_checkpoint_stands_behind_is_not_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive that lost its lease between writing its batch and its checkpoint left the batch; its instants
    stay on the active timeline, but the history, metadata tables and status read them as archived, and kept doing
    so for one a rollback took back once a later archive's checkpoint passed the batch."""
    table = new_table(tmp_path, SHORT_BEATS)
    payments = MODELS[1]
    table.write(ORDERS.name, batch(ORDERS, [{"k": 0, "amount": 0, "status": "a", "ots": 1}]))
    undone = table.write(payments.name, batch(payments, [{"k": 0, "paid": 5, "note": "x", "pts": 1}])).instant
    for version in (1, 2):
        table.write(ORDERS.name, batch(ORDERS, [{"k": version, "amount": version, "status": "a", "ots": 1}]))
    original = type(table.storage).put_if_absent

    def lease_lost_at_the_checkpoint(
        self: Storage, path: str, data: bytes, ready: Callable[[], None] | None = None
    ) -> bool:
        if "checkpoint" in path.rsplit("/", 1)[-1]:
            raise LockLost("our lease was taken over")
        return original(self, path, data, ready)

    monkeypatch.setattr(type(table.storage), "put_if_absent", lease_lost_at_the_checkpoint)
    with pytest.raises(LockLost):
        table.archive(keep=1)
    monkeypatch.undo()
    assert [n for n in table.storage.list_names(ARCHIVE_DIR) if n.endswith(BATCH_SUFFIX)], "the batch was left"
    assert archived_instants(table.storage) == [] and list(archived_batches_newest_first(table.storage)) == []
    assert len(Timeline.load(table.storage).completed()) == 4
    assert table.rollback(stream=payments.name).result.rolled_back == [undone]
    table.write(ORDERS.name, batch(ORDERS, [{"k": 3, "amount": 3, "status": "a", "ots": 1}]))
    assert table.archive(keep=1).result.archived == 4  # three orders commits and the rollback
    archived = [entry.instant.requested for entry in archived_instants(table.storage)]
    assert len(archived) == 4 and undone not in archived


def test_an_erase_left_pending_keeps_its_keys_for_the_commit_that_may_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erase's abort left its instant pending, and then it deleted its folder anyway: the commit that landed
    named a keys file that was gone, and its purge could never finish."""
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in (1, 2)]))
    late = _commit_answer_lost(monkeypatch, table.storage)

    def stopped() -> None:
        raise KeyboardInterrupt

    _while_waited_out(monkeypatch, stopped)
    with pytest.raises(KeyboardInterrupt):
        table.erase(pa.table({"k": pa.array([1], pa.int64())}))
    monkeypatch.undo()
    (pending,) = Timeline.load(table.storage).pending()
    late[0]()
    timeline = Timeline.load(table.storage)
    landed = timeline.get(pending.requested)
    assert landed is not None and landed.is_completed
    commit = timeline.commit(landed)
    assert isinstance(commit, EraseCommit) and commit.keys_file and table.storage.exists(commit.keys_file)
    assert _rows(table) == [(2, 2)]


def test_an_instant_left_pending_after_a_stopped_wait_outlives_the_process_that_left_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instant left pending kept its beat to hold others off until its create could no longer land; but the
    beat named its process, and a beat whose process is gone from this host expires at once. As soon as the
    stopped writer exited, a `stitch clean` (or rollback) deleted the files of a commit that could still land, and
    a new claim of the stream was free. Its last beat now names no process and lasts the create's budget."""
    import multiprocessing
    import os

    monkeypatch.setattr(LocalStorage, "create_budget_s", 60.0)  # an object store's budget: the beat must last it
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    _commit_answer_lost(monkeypatch, table.storage)

    def stopped() -> None:
        raise KeyboardInterrupt

    _while_waited_out(monkeypatch, stopped)

    def writer() -> None:  # a process of its own, stopped in its wait for the answer, and then gone
        try:
            table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
        except KeyboardInterrupt as stop:
            os._exit(0 if any(COMMIT_SENT_UNANSWERED in n for n in getattr(stop, "__notes__", ())) else 3)
        os._exit(4)

    child = multiprocessing.get_context("fork").Process(target=writer)
    child.start()
    child.join()
    monkeypatch.undo()
    assert child.exitcode == 0, "the child was stopped in its wait, the instant left pending"
    (pending,) = Timeline.load(table.storage).pending()
    files = [path for path in marked_files(table.storage, pending.requested) if path.endswith(".parquet")]
    assert files and all(table.storage.exists(path) for path in files)
    assert table.rollback().result.rolled_back == [], "not taken for a failed write while its create may land"
    assert [i.requested for i in Timeline.load(table.storage).pending()] == [pending.requested]
    assert all(table.storage.exists(path) for path in files), "its files stay for the commit that may land"
    later = time.time() + 60.2  # the budget and one interval: it can no longer land then
    assert heartbeats.is_expired(table.storage, pending.requested, 0.4, now=later), "and the beat ends"


def test_a_launcher_undoes_the_claim_of_a_job_that_died_without_a_word_only_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose JVM was killed writes no result file, and its launcher undid the claim at once, without the
    lock: had the job died inside its publish, the create it sent landed after, naming the files just deleted. The
    dead driver's lease lasts until that create has landed or never will; the undo now waits for the lock."""
    from stitchlake.writing.badrows import Rejected
    from stitchlake.writing.writer import deltacommit

    table = new_table(tmp_path, SHORT_BEATS)
    claim = transaction.Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
    written = "p=even/written-by-the-job.parquet"
    claim.mark(written)
    table.storage.write_bytes(written, b"rows")
    sent, landing = threading.Event(), threading.Event()
    original = LocalStorage.put_if_absent

    def held_in_flight(self: LocalStorage, path: str, data: bytes, ready: Callable[[], None] | None = None) -> Any:
        if path.startswith(".stitch/timeline/") and claim.time in path and ready is not None:
            ready()
            sent.set()  # the driver's create is on its way, its lease held ...
            landing.wait(120)  # ... and lands when the test says
        return original(self, path, data, ready)

    monkeypatch.setattr(LocalStorage, "put_if_absent", held_in_flight)
    driver = new_table(tmp_path, SHORT_BEATS)  # the job's driver, in its own handle
    publishing = threading.Thread(
        target=lambda: transaction.Transaction.attach(driver, claim.time).complete(
            deltacommit(driver, ORDERS.name, claim.time, [], 0, Rejected(), "spark")
        )
    )
    publishing.start()
    assert sent.wait(120), "the driver sent its create"
    asked = threading.Event()
    acquire = FileSystemLock.acquire

    def asking(self: FileSystemLock, wait_s: float | None = None) -> None:
        asked.set()
        acquire(self, wait_s)

    monkeypatch.setattr(FileSystemLock, "acquire", asking)
    undone: list[bool] = []
    launcher = threading.Thread(
        target=lambda: undone.append(abort_unless_published(table, claim, StitchError("exited before a result")))
    )
    launcher.start()
    while not asked.is_set() and launcher.is_alive():
        asked.wait(0.05)
    landing.set()
    publishing.join(120)
    launcher.join(120)
    claim.finish_here()
    assert table.storage.exists(written), "the files the commit may name are kept"
    assert undone == [False], "the commit landed: nothing to undo"
    landed = table.timeline().get(claim.time)
    assert landed is not None and landed.is_completed
    assert asked.is_set(), "the undo asked for the lock"


def test_spark_s_abort_keeps_the_files_of_a_write_whose_commit_was_sent_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `df.write`'s commit runs in one process and Spark's abort after it in another. The commit, stopped while
    waiting for the answer of its create, left the instant pending; the abort then deleted the tasks' files and the
    instant, and the create landed naming them. The last beat says the commit was sent; the abort keeps them."""
    from stitchlake.services.writes.ingest import claim
    from stitchlake.spark.write import discard, publish, write_task

    table = new_table(tmp_path, SHORT_BEATS)
    instant = claim(table, ORDERS.name, heartbeat=False).time
    rows = batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}])
    written = write_task(table, ORDERS.name, instant, iter(rows.to_batches()))
    late = _commit_answer_lost(monkeypatch, table.storage)

    def stopped() -> None:
        raise KeyboardInterrupt

    _while_waited_out(monkeypatch, stopped)
    with pytest.raises(KeyboardInterrupt):
        publish(table, ORDERS.name, instant, [written], {})
    monkeypatch.undo()
    discard(table, instant, [written], abort_instant=True)  # Spark's abort, in its own process
    assert all(table.storage.exists(f.path) for f in written.files)
    late[0]()
    assert _rows(table) == [(2, 2)]


def test_a_launcher_that_cannot_take_the_lock_leaves_the_claim_to_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The undo of a claim waits for the lock; when it is not free within the lock's wait (a dead driver's lease,
    another writer), the claim is left pending with its files, for `stitch clean`, and asked about only once."""
    import copy

    doc = copy.deepcopy(SHORT_BEATS)
    doc["concurrency"]["lock"]["wait_s"] = 0.2
    table, other = new_table(tmp_path, doc), new_table(tmp_path, doc)
    claim = transaction.Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
    written = "p=even/written-by-the-job.parquet"
    claim.mark(written)
    table.storage.write_bytes(written, b"rows")
    asked: list[bool] = []
    acquire = FileSystemLock.acquire

    def counted(self: FileSystemLock, wait_s: float | None = None) -> None:
        asked.append(True)
        acquire(self, wait_s)

    held = other.lock()
    held.acquire()
    try:
        monkeypatch.setattr(FileSystemLock, "acquire", counted)
        failure = StitchError("exited before reporting a result")
        assert abort_unless_published(table, claim, failure) is False
        assert abort_unless_published(table, claim, failure) is False, "as `launch` asks again around `execute`"
    finally:
        monkeypatch.undo()
        held.release()
    claim.finish_here()
    assert asked == [True], "one wait for the lock"
    assert [i.requested for i in Timeline.load(table.storage).pending()] == [claim.time]
    assert table.storage.exists(written)
    until_expired(table, claim.time)
    assert table.rollback().result.rolled_back == [claim.time], "`stitch clean` takes it back"
    assert not table.storage.exists(written)
