"""Heartbeats: background refresh, expiry of a SIGKILLed writer, deletion, and "missing means dead".

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_heartbeat.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import stitchlake
from stitchlake.concurrency import heartbeat
from stitchlake.concurrency.heartbeat import HEARTBEATS_FOLDER, Heartbeat
from stitchlake.storage import LocalStorage
from tests.support.tables import INSTANT

REPO = str(Path(stitchlake.__file__).resolve().parents[1])


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""))


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
