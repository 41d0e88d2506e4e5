"""Table locks under real contention: several processes, real files, a real ZooKeeper, real SIGKILLs."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

import stitchlake
from stitchlake.concurrency import lock as lock_module
from stitchlake.concurrency.lock import LOCKS_FOLDER, FileSystemLock, TableLock
from stitchlake.concurrency.providers import PROVIDERS, LockRequest, lock_spec, make_lock
from stitchlake.config import LockProvider
from stitchlake.errors import ConfigError, LockLost, LockTimeout, StitchError
from stitchlake.storage import LocalStorage

REPO = str(Path(stitchlake.__file__).resolve().parents[1])
WORKERS = 4
ITERATIONS = 12


def _env() -> dict[str, str]:
    """Child interpreters import stitchlake from this checkout whether or not it is installed."""
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""))


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


def _record(root: str, generation: int) -> dict[str, Any]:
    """A lease as the lock itself recorded it (a generation file)."""
    record: dict[str, Any] = json.loads(LocalStorage(root).read_bytes(f"{LOCKS_FOLDER}/table.{generation:020d}"))
    return record


def _make(kind: str, root: str, hosts: str | None, *, owner: str, wait_s: float, expire_s: float) -> TableLock:
    settings = {"provider": kind, "wait_s": wait_s, "expire_s": expire_s, **({"hosts": hosts} if hosts else {})}
    request = LockRequest(owner=owner, table_id="t-" + Path(root).name)
    return make_lock(LocalStorage(root), lock_spec(settings), request)


# -- exclusivity under contention (both providers) --------------------------------------------------


def _contend(kind: str, root: str, hosts: str | None, log_path: str, start: Event) -> None:
    pid = os.getpid()
    # Leases far longer than a busy machine can stall a holder between two lines: exclusivity is the point here,
    # not expiry (the tests below prove that), and a worker may wait long for its turns.
    lock = _make(kind, root, hosts, owner=f"worker-{pid}", wait_s=600, expire_s=600)
    start.wait()
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for _ in range(ITERATIONS):
            with lock:
                os.write(fd, f"enter {pid}\n".encode())
                time.sleep(random.uniform(0.002, 0.01))
                lock.check()
                os.write(fd, f"exit {pid}\n".encode())
            time.sleep(random.uniform(0.0, 0.02))  # give the others a chance to get in between
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["filesystem", pytest.param("zookeeper", marks=pytest.mark.zookeeper)], ids=str)
def test_never_two_holders_at_once(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    hosts = request.getfixturevalue("zookeeper_hosts") if kind == "zookeeper" else None
    root = str(tmp_path / "table")
    log_path = str(tmp_path / "critical.log")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_contend, args=(kind, root, hosts, log_path, start)) for _ in range(WORKERS)]
    try:
        for proc in procs:
            proc.start()
        start.set()
        for proc in procs:
            proc.join(timeout=1800)  # (only turns a hang into a failure: the exit codes below report it)
    finally:  # however it went, no worker is left running
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join()

    lines = Path(log_path).read_text().splitlines()
    inside: str | None = None
    switches = 0
    last: str | None = None
    for number, line in enumerate(lines, 1):
        event, pid = line.split()
        if event == "enter":
            assert inside is None, f"line {number}: {pid} entered while {inside} was inside"
            inside = pid
            switches += last is not None and pid != last
            last = pid
        else:
            assert inside == pid, f"line {number}: {pid} exited but {inside} was inside"
            inside = None
    assert [proc.exitcode for proc in procs] == [0] * WORKERS
    assert inside is None
    assert len(lines) == 2 * WORKERS * ITERATIONS
    assert switches >= WORKERS - 1, "the workers never actually contended"


# -- filesystem lock --------------------------------------------------------------------------------

HOLDER = """
import sys, time
from stitchlake.storage import LocalStorage
from stitchlake.concurrency.lock import FileSystemLock
lock = FileSystemLock(LocalStorage(sys.argv[1]), expire_s=float(sys.argv[2]), owner="victim")
lock.acquire(wait_s=5)
print(lock.generation, repr(lock.expires_at), flush=True)
time.sleep(600)
"""


@pytest.fixture
def killed_later() -> Iterator[list[subprocess.Popen[str]]]:
    """Subprocesses to SIGKILL at the end of the test whatever happens."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=120)


def _spawn_holder(code: str, args: list[str], procs: list[subprocess.Popen[str]]) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO
    )
    procs.append(proc)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line, f"holder process failed to take the lock (exit {proc.poll()})"
    return proc.pid, line.strip()


def test_sigkilled_holder_is_taken_over_after_expiry_and_not_before(
    tmp_path: Path, killed_later: list[subprocess.Popen[str]]
) -> None:
    root = str(tmp_path)
    expire_s = 1.5
    pid, line = _spawn_holder(HOLDER, [root, str(expire_s)], killed_later)
    generation, expires_at = int(line.split()[0]), float(line.split()[1])
    os.kill(pid, signal.SIGKILL)
    killed_later[0].wait(timeout=120)
    record = _record(root, generation)
    assert record["pid"] == pid and record["expires_at"] == expires_at, "the dead holder's lease, as the lock has it"
    assert not LocalStorage(root).exists(f"{LOCKS_FOLDER}/table.{generation:020d}.released")

    waiter = FileSystemLock(LocalStorage(root), expire_s=expire_s, owner="successor")
    # Not before: on a clock the test sets, the lease of the dead holder is refused at any moment before it ends,
    # however long the machine took to get here.
    with pytest.MonkeyPatch.context() as frozen:
        clock = Clock(expires_at)
        frozen.setattr(lock_module, "time", clock)
        for before_end in (expire_s, 0.5, 0.001):
            clock.now = expires_at - before_end
            with pytest.raises(LockTimeout) as caught:
                waiter.acquire(wait_s=0)
            message = str(caught.value)
            assert "'victim'" in message and f"pid {pid}" in message and socket.gethostname() in message
            assert "since" in message and "lease until" in message
        assert not waiter.held

    # After: on the real clock, polled until taken over. Each refusal began before the lease ended (a refusal of an
    # ended lease would be the bug) and the takeover ended after it, however slowly the attempts ran.
    deadline = time.monotonic() + 600  # (only turns a lock never taken over into a failure)
    while True:
        began = time.time()
        try:
            waiter.acquire(wait_s=0)
            taken_by = time.time()
            break
        except LockTimeout:
            assert began < expires_at, "refused although the dead holder's lease had ended before the attempt"
            assert time.monotonic() < deadline, "the expired lease was never taken over"
            time.sleep(0.02)
    assert taken_by >= expires_at, "the lock was taken over before the holder's lease expired"
    assert waiter.generation == generation + 1
    waiter.check()
    waiter.release()


def test_waiting_acquire_takes_over_promptly_after_expiry(
    tmp_path: Path, killed_later: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    pid, line = _spawn_holder(HOLDER, [root, "1.0"], killed_later)
    generation, expires_at = int(line.split()[0]), float(line.split()[1])
    os.kill(pid, signal.SIGKILL)
    killed_later[0].wait(timeout=120)
    # The waiter starts a second before the dead holder's lease ends, on a clock only its own polling moves.
    clock = Clock(expires_at - 1.0)
    monkeypatch.setattr(lock_module, "time", clock)
    waiter = FileSystemLock(LocalStorage(root), expire_s=5, owner="successor")
    waiter.acquire(wait_s=10)
    # Not before the lease ended, and promptly after: within one poll (the longest is _MAX_POLL_S with 1.5x jitter).
    assert expires_at <= clock.now < expires_at + 1.5 * lock_module._MAX_POLL_S
    assert waiter.generation == generation + 1
    assert _record(root, generation + 1)["acquired_at"] == clock.now
    waiter.release()


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


def test_make_lock_validates_and_imports_kazoo_lazily(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    assert isinstance(make_lock(storage, "filesystem"), FileSystemLock)
    with pytest.raises(ConfigError, match=r"concurrency\.lock\.provider"):
        make_lock(storage, "etcd")
    with pytest.raises(ConfigError, match=r"concurrency\.lock\.hosts"):
        make_lock(storage, "zookeeper")
    with pytest.raises(ConfigError):
        FileSystemLock(storage, name="../escape")
    assert set(PROVIDERS) == set(LockProvider), "every provider the config accepts can be built"
    code = (
        "import sys\n"
        "from stitchlake.storage import LocalStorage\n"
        "from stitchlake.concurrency.providers import make_lock\n"
        f"lock = make_lock(LocalStorage({str(tmp_path)!r}), 'filesystem')\n"
        "lock.acquire(); lock.release()\n"
        "assert 'kazoo' not in sys.modules, 'kazoo imported for the filesystem lock'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), cwd=REPO, timeout=600)


# -- ZooKeeper lock ---------------------------------------------------------------------------------

ZK_HOLDER = """
import sys, time
from stitchlake.concurrency.zookeeper import ZooKeeperLock
lock = ZooKeeperLock(sys.argv[1], table_id=sys.argv[2], expire_s=float(sys.argv[3]), owner="zk-victim")
lock.acquire(wait_s=600)
print("acquired", flush=True)
time.sleep(600)
"""


@pytest.mark.zookeeper
def test_zookeeper_sigkilled_holder_goes_with_its_session(
    zookeeper_hosts: str, tmp_path: Path, killed_later: list[subprocess.Popen[str]]
) -> None:
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    table_id = "kill-" + tmp_path.name
    # A 10 s session: its lease outlives a holder a busy machine stalls for seconds before the kill, so the waiter
    # meets a live holder first, and a session ended by the kill (not by a stall) after it.
    pid, _line = _spawn_holder(ZK_HOLDER, [zookeeper_hosts, table_id, "10"], killed_later)
    waiter = ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-successor", expire_s=5)
    with pytest.raises(LockTimeout) as caught:
        waiter.acquire(wait_s=0)
    message = str(caught.value)
    assert "'zk-victim'" in message and f"pid {pid}" in message and zookeeper_hosts in message

    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    waiter.acquire(wait_s=600)  # (the session's expiry is the progress waited for; the limit only ends a hang)
    waited = time.monotonic() - killed_at
    assert waited >= 1.0, f"taken over {waited:.2f}s after the kill, before the 10s session could expire"
    waiter.check()
    waiter.release()


@pytest.mark.zookeeper
def test_zookeeper_timeout_names_holder_and_hosts(zookeeper_hosts: str, tmp_path: Path) -> None:
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    table_id = "timeout-" + tmp_path.name
    holder = ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-holder")
    holder.acquire(wait_s=5)
    started = time.monotonic()
    with pytest.raises(LockTimeout) as caught:
        ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-other").acquire(wait_s=0.5)
    assert time.monotonic() - started >= 0.4, "gave up before wait_s"  # (no upper bound: a busy machine is slow)
    message = str(caught.value)
    for part in ("'zk-holder'", f"pid {os.getpid()}", socket.gethostname(), zookeeper_hosts, "since"):
        assert part in message
    holder.check()
    holder.release()
    ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-other").acquire(wait_s=2)


@pytest.mark.zookeeper
def test_zookeeper_check_and_release_semantics(
    zookeeper_hosts: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    table_id = "check-" + tmp_path.name
    lock = ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-a")
    intruder = ZooKeeperLock(zookeeper_hosts, table_id=table_id, owner="zk-b")
    with lock:
        lock.check()
        with caplog.at_level(logging.WARNING, logger="stitchlake.concurrency.zookeeper"):
            intruder.release()
        assert "not held by zk-b" in caplog.text
        lock.check()
        with pytest.raises(LockTimeout, match="zk-a"):
            intruder.acquire(wait_s=0)
    intruder.acquire(wait_s=2)  # released on exit
    # losing the session while holding must fail the fencing check
    assert intruder._client is not None
    intruder._client.stop()
    with pytest.raises(LockLost, match="session lost"):
        intruder.check()
    assert not intruder.held
    intruder.release()  # a no-op with a warning now
    lock.acquire(wait_s=5)  # the lost session's node is gone
    lock.release()


def test_zookeeper_unreachable_is_a_lock_timeout_naming_hosts() -> None:
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        hosts = f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens here
    started = time.monotonic()
    with pytest.raises(LockTimeout, match=hosts):
        ZooKeeperLock(hosts, owner="nobody").acquire(wait_s=1)
    assert time.monotonic() - started < 120  # (sanity: it gave up rather than hang; generous for a busy machine)
