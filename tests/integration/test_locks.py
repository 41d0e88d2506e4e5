"""Table locks under real contention: several processes, real files, a real ZooKeeper, real SIGKILLs.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_locks.py).
"""

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
from stitchlake.errors import ConfigError, LockLost, LockTimeout
from stitchlake.storage import LocalStorage
from tests.support.lock_clock import Clock

REPO = str(Path(stitchlake.__file__).resolve().parents[1])


WORKERS = 4


ITERATIONS = 12


def _env() -> dict[str, str]:
    """Child interpreters import stitchlake from this checkout whether or not it is installed."""
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""))


def _record(root: str, generation: int) -> dict[str, Any]:
    """A lease as the lock itself recorded it (a generation file)."""
    record: dict[str, Any] = json.loads(LocalStorage(root).read_bytes(f"{LOCKS_FOLDER}/table.{generation:020d}"))
    return record


def _make(kind: str, root: str, hosts: str | None, *, owner: str, wait_s: float, expire_s: float) -> TableLock:
    settings = {"provider": kind, "wait_s": wait_s, "expire_s": expire_s, **({"hosts": hosts} if hosts else {})}
    request = LockRequest(owner=owner, table_id="t-" + Path(root).name)
    return make_lock(LocalStorage(root), lock_spec(settings), request)


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
