"""Table locks under real contention: several processes, real files, a real ZooKeeper, real SIGKILLs."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

import pytest

from stitchlake.concurrency import lock as lock_module
from stitchlake.concurrency.lock import LOCKS_FOLDER, FileSystemLock
from stitchlake.errors import LockLost, LockTimeout, StitchError
from stitchlake.storage import LocalStorage
from tests.support.lock_clock import Clock

# -- exclusivity under contention (both providers) --------------------------------------------------


# -- filesystem lock --------------------------------------------------------------------------------


def test_non_owner_cannot_release(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    storage = LocalStorage(str(tmp_path))
    owner = FileSystemLock(storage, owner="owner-a")
    intruder = FileSystemLock(storage, owner="owner-b")
    owner.acquire(wait_s=0)
    before = sorted(storage.list_names(LOCKS_FOLDER))
    with caplog.at_level(logging.WARNING, logger="stitchlake.concurrency.lock"):
        intruder.release()
    assert "not held by owner-b" in caplog.text
    assert sorted(storage.list_names(LOCKS_FOLDER)) == before
    owner.check()
    with pytest.raises(LockTimeout, match="owner-a"):
        intruder.acquire(wait_s=0.05)
    owner.release()
    intruder.acquire(wait_s=0)
    intruder.release()


def test_release_after_takeover_is_a_noop_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    storage = LocalStorage(str(tmp_path))
    slow = FileSystemLock(storage, owner="slow", expire_s=0.2)
    fast = FileSystemLock(storage, owner="fast", expire_s=30)
    slow.acquire(wait_s=0)
    clock.advance(0.3)
    slow.check()  # expired but nobody took over: still ours
    fast.acquire(wait_s=0)
    with caplog.at_level(logging.WARNING, logger="stitchlake.concurrency.lock"):
        slow.release()
    assert "taken over" in caplog.text and "fast" in caplog.text
    assert not slow.held
    assert not [name for name in storage.list_names(LOCKS_FOLDER) if name.endswith(".released")]
    fast.check()
    with pytest.raises(LockTimeout, match="'fast'"):
        FileSystemLock(storage, owner="third").acquire(wait_s=0)
    fast.release()


def test_check_raises_lock_lost_after_takeover(tmp_path: Path, clock: Clock) -> None:
    storage = LocalStorage(str(tmp_path))
    first = FileSystemLock(storage, owner="first", expire_s=0.2)
    second = FileSystemLock(storage, owner="second")
    first.acquire(wait_s=0)
    first_expires = first.expires_at
    assert first_expires is not None
    first.check()
    second.acquire(wait_s=2)  # waits for the lease to run out (on the test's clock: its polls move it)
    assert clock.now >= first_expires
    with pytest.raises(LockLost, match="taken over by owner 'second'"):
        first.check()
    assert not first.held
    with pytest.raises(LockLost):
        first.check()
    with pytest.raises(LockLost):
        first.renew()
    second.check()
    second.release()
    with pytest.raises(LockLost, match="not held"):
        second.check()


def test_timeout_message_names_the_holder(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    holder = FileSystemLock(storage, owner="nightly-ingest")
    holder.acquire()
    started = time.monotonic()
    with pytest.raises(LockTimeout) as caught:
        FileSystemLock(storage, owner="other").acquire(wait_s=0.3)
    assert time.monotonic() - started >= 0.3, "gave up before wait_s"  # (no upper bound: a busy machine is slow)
    message = str(caught.value)
    for part in ("'nightly-ingest'", socket.gethostname(), f"pid {os.getpid()}", "since", "within 0.3s"):
        assert part in message
    assert caught.value.exit_code == 4
    holder.release()


def test_renew_extends_the_lease(tmp_path: Path, clock: Clock) -> None:
    storage = LocalStorage(str(tmp_path))
    holder = FileSystemLock(storage, owner="long-runner", expire_s=2.0)
    other = FileSystemLock(storage, owner="other")
    holder.acquire()
    acquired_at = clock.now
    first_generation, first_expiry = holder.generation, holder.expires_at
    assert first_generation is not None and first_expiry == acquired_at + 2.0
    for _ in range(5):  # a renewal 1.5 s into each 2 s lease: 7.5 s in all, well past the first lease
        clock.advance(1.5)
        holder.renew()
        assert holder.expires_at == clock.now + 2.0
        with pytest.raises(LockTimeout, match="long-runner"):
            other.acquire(wait_s=0)
    assert clock.now > first_expiry
    holder.check()
    assert holder.generation is not None and holder.generation > first_generation
    record = json.loads(storage.read_bytes(f"{LOCKS_FOLDER}/table.{holder.generation:020d}"))
    assert record["acquired_at"] == acquired_at  # "since" survives renewals
    last_expiry = holder.expires_at
    other.acquire(wait_s=3)  # stops renewing -> expires -> taken over (the wait moves the clock)
    assert last_expiry is not None and clock.now >= last_expiry
    with pytest.raises(LockLost):
        holder.renew()
    other.release()


def test_the_fence_renews_a_lease_too_short_for_the_create_it_guards(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A fenced create may take its storage's budget (an S3 PUT retried after a lost answer): with less lease left
    than that, it could land after the lease ran out and another process took the lock. The fence renews first."""
    storage = LocalStorage(str(tmp_path))
    holder = FileSystemLock(storage, owner="publisher", expire_s=30.0)
    holder.bound_creates(21.0)
    holder.acquire()
    generation = holder.generation
    clock.advance(8.0)
    holder.fence()  # 22 s left: enough
    assert holder.generation == generation
    clock.advance(17.0)
    holder.fence()  # 5 s left: renewed to a full lease before the create
    assert holder.generation != generation and holder.expires_at == clock.now + 30.0
    clock.advance(18.0)
    holder.fence()  # 12 s left, more than half the lease but less than the create may take: renewed again
    assert holder.expires_at == clock.now + 30.0
    clock.advance(31.0)
    with pytest.raises(LockLost, match="expired"):
        holder.fence()  # run out: never renewed after the fact (another process may have acted meanwhile)
    holder.release()
    short = FileSystemLock(storage, owner="short lease", expire_s=10.0)
    lock_module._warn_short_lease.cache_clear()  # once a process: another test of this worker may have had it
    with caplog.at_level(logging.WARNING, logger="stitchlake.concurrency.lock"):
        short.bound_creates(21.0)
        FileSystemLock(storage, owner="the next transaction's", expire_s=10.0).bound_creates(21.0)
    assert [r.getMessage() for r in caplog.records] == [
        "concurrency.lock.expire_s: 10 s is no longer than a create on this table's storage may take (21 s, retries "
        "included): a commit fenced under the lease could land after it ran out and another writer took the lock; "
        "set it above 21 s (the default 30 s is)"
    ]  # said once a process, not at every transaction
    short.acquire()
    taken = short.generation
    clock.advance(2.0)
    short.fence()  # a lease no longer than the budget: renewing cannot promise it, and is not done each time
    assert short.generation == taken
    clock.advance(4.0)
    short.fence()  # 4 s of 10 left: renewed, as much as it can be helped
    assert short.generation != taken
    short.release()


def test_context_manager_and_folder_stays_small(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    lock = FileSystemLock(storage, wait_s=1)
    for _ in range(30):
        with lock:
            assert lock.held
            lock.check()
        assert not lock.held
    names = storage.list_names(LOCKS_FOLDER)
    assert len(names) <= 4, names
    assert "table.00000000000000000030.released" in names
    with pytest.raises(StitchError, match="re-entrant"), lock, lock:
        pass
    assert not lock.held


def test_locks_with_different_names_are_independent(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    table = FileSystemLock(storage, name="table")
    stream = FileSystemLock(storage, name="stream-orders")
    table.acquire(wait_s=0)
    stream.acquire(wait_s=0)
    with pytest.raises(LockTimeout):
        FileSystemLock(storage, name="stream-orders").acquire(wait_s=0)
    table.release()
    stream.release()


class StaleListingStorage(LocalStorage):
    """Fault injection: the first listing of the locks folder is a stale snapshot (a slow list)."""

    def __init__(self, root: str, stale: list[str]) -> None:
        super().__init__(root)
        self.stale: list[str] | None = stale

    def list_names(self, folder: str) -> list[str]:
        if folder == LOCKS_FOLDER and self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return super().list_names(folder)


def test_stale_listing_cannot_resurrect_a_cleaned_generation(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    busy = FileSystemLock(storage, owner="busy")
    busy.acquire()
    busy.release()
    snapshot = storage.list_names(LOCKS_FOLDER)  # generation 1, released
    for _ in range(3):
        busy.acquire()
        busy.release()
    busy.acquire()  # generation 5 held; generations 1..3 were cleaned up
    assert not storage.exists(f"{LOCKS_FOLDER}/table.{2:020d}")

    stale = FileSystemLock(StaleListingStorage(str(tmp_path), snapshot), owner="stale")
    with pytest.raises(LockTimeout, match="'busy'"):
        stale.acquire(wait_s=0.1)  # it wins put_if_absent of generation 2, then must notice generation 5
    assert not stale.held
    assert not storage.exists(f"{LOCKS_FOLDER}/table.{2:020d}"), "the ghost generation was left behind"
    busy.check()
    busy.release()


def test_unreadable_lock_file_blocks_for_one_lease_only(tmp_path: Path, clock: Clock) -> None:
    storage = LocalStorage(str(tmp_path))
    storage.put_if_absent(f"{LOCKS_FOLDER}/table.{1:020d}", b"{not json")
    lock = FileSystemLock(storage, expire_s=0.3)
    with pytest.raises(LockTimeout, match="unreadable"):
        lock.acquire(wait_s=0)
    seen = clock.ticks
    lock.acquire(wait_s=2)  # (its polls move the clock: taken over once it has seen the file unchanged for 0.3 s)
    assert clock.ticks - seen >= 0.3
    assert lock.generation == 2
    lock.release()


# -- ZooKeeper lock ---------------------------------------------------------------------------------


def test_zookeeper_unreachable_is_a_lock_timeout_naming_hosts() -> None:
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        hosts = f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens here
    started = time.monotonic()
    with pytest.raises(LockTimeout, match=hosts):
        ZooKeeperLock(hosts, owner="nobody").acquire(wait_s=1)
    assert time.monotonic() - started < 120  # (sanity: it gave up rather than hang; generous for a busy machine)
