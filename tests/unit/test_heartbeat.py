"""Heartbeats: background refresh, expiry of a SIGKILLed writer, deletion, and "missing means dead"."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from stitchlake.concurrency import heartbeat
from stitchlake.concurrency.heartbeat import HEARTBEATS_FOLDER, Heartbeat
from stitchlake.errors import StitchError
from stitchlake.storage import LocalStorage
from tests.support.tables import INSTANT


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


def test_a_writer_is_judged_by_its_own_longer_expiry_not_a_shorter_one_of_another_config(tmp_path: Path) -> None:
    """Two configs of one table may set different expiries (or a run uses the default): a writer promising to beat
    within 300 s is not rolled back by a judge whose config says 30 s; a judge with a longer expiry keeps its own."""
    storage = LocalStorage(str(tmp_path))
    ts = Heartbeat(storage, INSTANT, interval_s=60, expire_s=300).beat()
    assert json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/{INSTANT}"))["expire_s"] == 300
    assert not heartbeat.is_expired(storage, INSTANT, expire_s=30, now=ts + 200)
    assert heartbeat.is_expired(storage, INSTANT, expire_s=30, now=ts + 300.001)
    assert not heartbeat.is_expired(storage, INSTANT, expire_s=900, now=ts + 800)
    older = Heartbeat(storage, "older", interval_s=1).beat()  # no expiry of its own (as beats before it)
    assert "expire_s" not in json.loads(storage.read_bytes(f"{HEARTBEATS_FOLDER}/older"))
    assert heartbeat.is_expired(storage, "older", expire_s=2, now=older + 2.5)  # the judge's own then


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


def test_a_beat_is_judged_by_its_pid_only_where_that_pid_means_this_process_space(tmp_path: Path) -> None:
    """Containers sharing a host name (host networking, a set hostname) each count their own pids: a fresh beat of
    a live writer in the next container named a pid that meant nothing here, and it was taken for dead at once (its
    stream's next run rolled it back while it wrote). Only a beat of this boot and pid namespace is judged by pid."""
    from stitchlake.concurrency import liveness

    storage = LocalStorage(str(tmp_path))
    here = liveness.identity()
    assert here["boot"] and here["pidns"], "Linux's /proc names this boot and pid namespace"
    reused = {**here, "started": "1"}  # this pid, started at another time: a reused pid, so a dead writer
    cases = {
        "this process space": (reused, True),
        "another container on this kernel": ({**reused, "pidns": "pid:[1]"}, False),
        "another machine of this name": ({**reused, "boot": "another-boot"}, False),
        "a beat that does not say where": ({k: v for k, v in reused.items() if k not in ("boot", "pidns")}, False),
        "this very process": (here, False),
    }
    for name, (identity, dead) in cases.items():
        record = {"instant": name.replace(" ", "-"), "owner": "w", "ts": time.time(), "expire_s": 60, **identity}
        storage.write_atomic(heartbeat.heartbeat_path(str(record["instant"])), json.dumps(record).encode())
        assert heartbeat.is_expired(storage, str(record["instant"]), 60) is dead, name
