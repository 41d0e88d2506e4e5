"""Heartbeats: background refresh, expiry of a SIGKILLed writer, deletion, and "missing means dead"."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stitchlake
from stitchlake.concurrency import heartbeat
from stitchlake.concurrency.heartbeat import HEARTBEATS_FOLDER, Heartbeat
from stitchlake.errors import StitchError
from stitchlake.storage import LocalStorage

REPO = str(Path(stitchlake.__file__).resolve().parents[1])
INSTANT = "20260101120000000"


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""))


def test_start_beats_at_once_then_refreshes_in_the_background(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    beat = Heartbeat(storage, INSTANT, interval_s=0.1, owner="writer-1")
    before = time.time()
    beat.start()
    try:
        first = heartbeat.last_beat(storage, INSTANT)
        assert first is not None and before <= first <= time.time(), "start() beats at once"
        record = json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))
        assert record["instant"] == INSTANT and record["owner"] == "writer-1"
        assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
        seen = {first}
        deadline = time.monotonic() + 120  # only turns a hang into a failure: a busy machine starves the thread
        while len(seen) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
            ts = heartbeat.last_beat(storage, INSTANT)
            assert ts is not None
            seen.add(ts)
        assert len(seen) >= 4, "the background thread did not refresh the beat"
        assert beat.running
        assert heartbeat.list_beats(storage) == [INSTANT]
    finally:
        beat.stop()
    assert not beat.running
    stopped_ts = heartbeat.last_beat(storage, INSTANT)
    time.sleep(0.3)
    assert heartbeat.last_beat(storage, INSTANT) == stopped_ts, "beats continued after stop()"
    assert storage.exists(f"{HEARTBEATS_FOLDER}/{INSTANT}"), "stop() without delete keeps the beat"


BEATING = """
import sys, time
from stitchlake.storage import LocalStorage
from stitchlake.concurrency.heartbeat import Heartbeat
Heartbeat(LocalStorage(sys.argv[1]), sys.argv[2], interval_s=float(sys.argv[3])).start()
print("beating", flush=True)
time.sleep(600)
"""

ONE_BEAT = """
import sys
from stitchlake.storage import LocalStorage
from stitchlake.concurrency.heartbeat import Heartbeat
Heartbeat(LocalStorage(sys.argv[1]), sys.argv[2]).beat()
"""


def test_heartbeat_of_a_sigkilled_process_is_dead_at_once_here_and_expires_elsewhere(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    interval_s, expire_s = 0.2, 1.0
    proc = subprocess.Popen(
        [sys.executable, "-c", BEATING, str(tmp_path), INSTANT, str(interval_s)],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "beating"
        # Beating for longer than expire_s: only a writer that refreshes its beat gets there. Waited for as the
        # beats move on (a busy machine may pause the beating thread past expire_s; that is not the point here).
        first = heartbeat.last_beat(storage, INSTANT)
        assert first is not None
        deadline = time.monotonic() + 120
        while (heartbeat.last_beat(storage, INSTANT) or 0) < first + 1.5 * expire_s:
            assert time.monotonic() < deadline, "the beat was not refreshed"
            time.sleep(0.05)
        assert not heartbeat.is_expired(storage, INSTANT, expire_s=3600), "a live process here is alive"
        record = json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))
        assert record["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=120)

    last = heartbeat.last_beat(storage, INSTANT)
    assert last is not None
    # On this host the process is known to be gone: dead at once, long before its beat expires.
    assert heartbeat.is_expired(storage, INSTANT, expire_s=3600)
    assert heartbeat.last_beat(storage, INSTANT) == last, "a killed process kept beating"
    assert heartbeat.list_beats(storage) == [INSTANT]  # the file stays: it is what marks the failed write

    # Seen from another host nothing is known about the process: only the expiry decides.
    record["host"] = "another-host"
    record["ts"] = last
    storage.write_atomic(f"{HEARTBEATS_FOLDER}/{INSTANT}", json.dumps(record).encode())
    deadline = time.monotonic() + 120
    while not heartbeat.is_expired(storage, INSTANT, expire_s):
        assert time.monotonic() < deadline, "never expired"
        time.sleep(0.05)
    assert time.time() >= last + expire_s, "expired before expire_s had passed since the last beat"


def test_a_reused_pid_is_not_the_writer_and_a_task_beat_names_no_process(tmp_path: Path) -> None:
    """A pid can come back as another process: the start time tells them apart. A one-off beat (a Spark task's)
    names no process, so a worker exiting never makes a live job look dead."""
    storage = LocalStorage(str(tmp_path))
    with Heartbeat(storage, INSTANT, interval_s=5):
        record = json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))
        assert record["pid"] == os.getpid() and record["started"]
        assert not heartbeat.is_expired(storage, INSTANT, expire_s=3600)
        record["started"] = str(int(record["started"]) - 1)  # this pid, but a process started at another time
        storage.write_atomic(f"{HEARTBEATS_FOLDER}/{INSTANT}", json.dumps(record).encode())
        assert heartbeat.is_expired(storage, INSTANT, expire_s=3600)
    task = subprocess.run(
        [sys.executable, "-c", ONE_BEAT, str(tmp_path), INSTANT], check=True, env=_env(), capture_output=True
    )
    assert task.returncode == 0
    assert "started" not in json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))
    assert not heartbeat.is_expired(storage, INSTANT, expire_s=3600), "a finished task's beat is not a dead job"


def test_stop_with_delete_removes_the_beat_and_it_never_comes_back(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    for _ in range(20):  # a tiny interval makes a background beat race with stop() every time
        beat = Heartbeat(storage, INSTANT, interval_s=0.001)
        beat.start()
        time.sleep(0.01)
        beat.stop(delete=True)
        assert not storage.exists(f"{HEARTBEATS_FOLDER}/{INSTANT}")
    time.sleep(0.05)
    assert heartbeat.list_beats(storage) == []
    assert heartbeat.is_expired(storage, INSTANT, expire_s=3600)


def test_context_manager_deletes_on_exit_unless_told_otherwise(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(RuntimeError), Heartbeat(storage, "a", interval_s=10):
        assert not heartbeat.is_expired(storage, "a", expire_s=60)
        raise RuntimeError("the write failed")
    assert heartbeat.is_expired(storage, "a", expire_s=60)
    with Heartbeat(storage, "b", interval_s=10, delete_on_exit=False) as beat:
        assert beat.running
    assert not beat.running
    assert heartbeat.list_beats(storage) == ["b"]


def test_missing_means_expired_and_expiry_uses_ts_in_the_file(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    assert heartbeat.last_beat(storage, INSTANT) is None
    assert heartbeat.is_expired(storage, INSTANT, expire_s=3600)
    assert heartbeat.list_beats(storage) == []
    assert heartbeat.delete(storage, INSTANT) is False

    ts = Heartbeat(storage, INSTANT).beat()
    assert heartbeat.last_beat(storage, INSTANT) == ts
    assert not heartbeat.is_expired(storage, INSTANT, expire_s=10, now=ts + 10)
    assert heartbeat.is_expired(storage, INSTANT, expire_s=10, now=ts + 10.001)
    # a beat written long ago but copied just now: the file's mtime is fresh, the ts inside is not
    old = {"instant": "old", "owner": "x", "host": "h", "pid": 1, "ts": time.time() - 120}
    storage.write_atomic(f"{HEARTBEATS_FOLDER}/old", json.dumps(old).encode())
    assert heartbeat.is_expired(storage, "old", expire_s=60)
    assert not heartbeat.is_expired(storage, "old", expire_s=600)
    storage.write_atomic(f"{HEARTBEATS_FOLDER}/torn", b"{not json")
    assert heartbeat.last_beat(storage, "torn") is None and heartbeat.is_expired(storage, "torn", 60)
    assert heartbeat.list_beats(storage) == [INSTANT, "old", "torn"]
    assert heartbeat.delete(storage, INSTANT) is True
    assert heartbeat.list_beats(storage) == ["old", "torn"]


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", ".."])
def test_instant_must_be_a_plain_name(tmp_path: Path, bad: str) -> None:
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(StitchError):
        Heartbeat(storage, bad)
    with pytest.raises(StitchError):
        heartbeat.is_expired(storage, bad, 10)


def test_expire_s_is_validated_and_drives_healthy(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(StitchError, match="expire_s"):
        Heartbeat(storage, INSTANT, interval_s=10, expire_s=5)
    beat = Heartbeat(storage, INSTANT, interval_s=0.05, expire_s=60)  # 60: a busy machine may starve the thread
    assert not beat.healthy  # never beat yet
    with beat:
        time.sleep(0.2)
        assert beat.healthy and beat.last_error is None
        assert not heartbeat.is_expired(storage, INSTANT, beat.expire_s or 0)


def test_a_writer_that_exited_unreaped_is_dead_at_once(tmp_path: Path) -> None:
    """A process that exited but was not reaped (a zombie) still has its pid: a Spark job's Python driver, orphaned
    when its JVM ends, stays one for good under an init that does not reap. Its beat must not look alive."""
    storage = LocalStorage(str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", BEAT_AND_EXIT, str(tmp_path), INSTANT], env=_env(), stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"beating"
        deadline = time.monotonic() + 300
        while (Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        record = json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))
        assert record["pid"] == child.pid, "the beat names the exited process, whose pid still exists"
        assert heartbeat.is_expired(storage, INSTANT, expire_s=3600)
    finally:
        child.kill()
        child.wait()


#: Beat once as a long-lived writer would, leave the beat behind, exit without cleaning up.
BEAT_AND_EXIT = """
import os, sys
from stitchlake.concurrency.heartbeat import Heartbeat
from stitchlake.storage import LocalStorage
beat = Heartbeat(LocalStorage(sys.argv[1]), sys.argv[2], interval_s=3600)
beat.start()
print("beating", flush=True)
os._exit(0)
"""
