"""A store that fails or answers too late mid-action: an object store can commit a conditional create its client
has already given up on, or fail a release or a delete. What a writer does then must hold whichever way it went."""

from __future__ import annotations

import copy
import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stitchlake.concurrency.heartbeat import heartbeat_path, is_expired
from stitchlake.concurrency.lock import LOCKS_FOLDER, FileSystemLock
from stitchlake.errors import COMMIT_SENT_UNANSWERED, LockLost, StitchError
from stitchlake.jobs.launch import abort_unless_published
from stitchlake.paths import ARCHIVE_DIR
from stitchlake.services.rewrites import compaction
from stitchlake.storage.base import Storage
from stitchlake.storage.local import LocalStorage
from stitchlake.table import transaction
from stitchlake.timeline.archive import BATCH_SUFFIX, archived_batches_newest_first, archived_instants
from stitchlake.timeline.metadata import DeltaCommitPlan
from stitchlake.timeline.timeline import Timeline, delete_instant
from stitchlake.vocabulary import Action, CompactionStrategy
from tests.support.tables import MODELS, THREE_STREAMS, batch, new_table

ORDERS = MODELS[0]
SHORT_BEATS = copy.deepcopy(THREE_STREAMS)
SHORT_BEATS["concurrency"] = {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}, "lock": {"wait_s": 20, "expire_s": 10}}


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


def test_a_commit_whose_answer_was_lost_keeps_its_files_and_stands_if_it_lands_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the writer's abort found the commit not there yet and deleted its data files; the create landed
    after, and the timeline named files that no longer existed: every read of them failed."""
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    late = _commit_answer_lost(monkeypatch, table.storage)
    with pytest.raises(OSError, match="timed out"):
        table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
    monkeypatch.undo()
    (land,) = late
    land()
    assert _rows(table) == [(1, 1), (2, 2)]
    assert table.rollback().result.rolled_back == [], "landed: nothing to roll back"


def test_a_commit_whose_answer_was_lost_and_that_never_lands_is_rolled_back_once_its_heartbeat_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left pending with its heartbeat (which expires, not deleted), the instant is the lazy rollback's: not before
    the expiry (the create might still land), and then wholly."""
    table = new_table(tmp_path, SHORT_BEATS)
    table.write(ORDERS.name, batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]))
    _commit_answer_lost(monkeypatch, table.storage)
    with pytest.raises(OSError, match="timed out"):
        table.write(ORDERS.name, batch(ORDERS, [{"k": 2, "amount": 2, "status": "b", "ots": 2}]))
    monkeypatch.undo()
    (pending,) = Timeline.load(table.storage).pending()
    assert table.storage.exists(heartbeat_path(pending.requested)), "left to expire, not deleted"
    while not is_expired(table.storage, pending.requested, SHORT_BEATS["concurrency"]["heartbeat"]["expire_s"]):
        time.sleep(0.05)  # the expiry is the heartbeat file's age: it comes whatever the machine's load
    assert table.rollback().result.rolled_back == [pending.requested]
    assert _rows(table) == [(1, 1)]
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
    for noted in (True, False):
        claim = transaction.Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
        written = "p=even/written-by-the-job.parquet"
        claim.mark(written)
        table.storage.write_bytes(written, b"rows")
        failure = StitchError("conditional PUT: operation timed out")
        if noted:
            failure.add_note(f"{COMMIT_SENT_UNANSWERED}: instant {claim.time} is left pending; it may still land")
        assert abort_unless_published(table, failure=failure, claim=claim) is not noted
        claim.finish_here()  # as `execute` does, whatever happened
        pending = [i.requested for i in Timeline.load(table.storage).pending()]
        left = (
            pending == [claim.time],
            table.storage.exists(written),
            table.storage.exists(heartbeat_path(claim.time)),
        )
        assert left == ((True, True, True) if noted else (False, False, False)), noted
        if noted:
            table.storage.delete(written)
            delete_instant(table.storage, claim.instant)


def test_an_archive_batch_no_checkpoint_stands_behind_is_not_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive that lost its lease between writing its batch and its checkpoint left the batch; its instants
    stay on the active timeline, but the history, metadata tables and status read them as archived (and kept doing
    so after a rollback took one back)."""
    table = new_table(tmp_path, SHORT_BEATS)
    for version in range(4):
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
    done = table.archive(keep=1).result
    assert done.archived == 3 and len(archived_instants(table.storage)) == 3
