"""LocalStorage: the atomic primitives the timeline and locks are built on, raced by real processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pytest

from stitchlake.errors import StitchError
from stitchlake.storage import LocalStorage, clean_relpath, storage_for

RACERS = 8
ROUNDS = 10
BIG = 4 * 1024 * 1024  # large enough that a non-atomic write would be observably partial


def _race_put_if_absent(root: str, index: int, barrier: Barrier, results: mp.Queue) -> None:
    storage = LocalStorage(root)
    for round_no in range(ROUNDS):
        payload = f"winner {index} round {round_no} ".encode() * 1000
        barrier.wait()
        won = storage.put_if_absent(f"race/round-{round_no}", payload)
        results.put((round_no, index, won))


def test_put_if_absent_exactly_one_winner_across_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    results = ctx.Queue()
    args = [(str(tmp_path), i, barrier, results) for i in range(RACERS)]
    procs = [ctx.Process(target=_race_put_if_absent, args=a) for a in args]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in range(RACERS * ROUNDS)]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    storage = LocalStorage(str(tmp_path))
    for round_no in range(ROUNDS):
        winners = [index for r, index, won in outcomes if r == round_no and won]
        assert len(winners) == 1, f"round {round_no}: winners {winners}"
        expected = f"winner {winners[0]} round {round_no} ".encode() * 1000
        assert storage.read_bytes(f"race/round-{round_no}") == expected
    assert sorted(storage.list_names("race")) == sorted(f"round-{r}" for r in range(ROUNDS))


def _payload(version: int) -> bytes:
    """A file whose every byte names its version, so a torn or mixed read is detectable."""
    return bytes([version % 251]) * BIG


def _check_whole(data: bytes) -> bool:
    return len(data) == BIG and data.count(data[:1]) == BIG


def _writer_atomic(root: str, versions: int, start: Event) -> None:
    storage = LocalStorage(root)
    start.wait()
    for version in range(1, versions + 1):
        storage.write_atomic("shared/file.bin", _payload(version))


def _writer_put(root: str, count: int, start: Event) -> None:
    storage = LocalStorage(root)
    start.wait()
    for index in range(count):
        assert storage.put_if_absent(f"puts/file-{index}", _payload(index))


def _reader(root: str, seconds: float, start: Event, results: mp.Queue) -> None:
    """Read the shared file and every published put as fast as possible; report (reads, torn reads)."""
    storage = LocalStorage(root)
    start.wait()
    reads = torn = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = storage.read_bytes("shared/file.bin")
        except FileNotFoundError:
            data = None
        if data is not None:
            reads += 1
            torn += not _check_whole(data)
        for name in storage.list_names("puts"):
            data = storage.read_bytes(f"puts/{name}")
            reads += 1
            torn += not _check_whole(data)
    results.put((reads, torn))


def test_readers_never_see_a_half_written_file(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    root = str(tmp_path)
    LocalStorage(root).write_atomic("shared/file.bin", _payload(0))
    start = ctx.Event()
    results = ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(root, 3.0, start, results)) for _ in range(3)]
    writers = [
        ctx.Process(target=_writer_atomic, args=(root, 40, start)),
        ctx.Process(target=_writer_put, args=(root, 25, start)),
    ]
    for proc in readers + writers:
        proc.start()
    time.sleep(0.5)  # let the spawned interpreters import before the race starts
    start.set()
    outcomes = [results.get(timeout=60) for _ in readers]
    for proc in readers + writers:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    reads = sum(r for r, _ in outcomes)
    torn = sum(t for _, t in outcomes)
    assert reads > 20, "the readers did not overlap with the writers"
    assert torn == 0
    storage = LocalStorage(root)
    assert storage.read_bytes("shared/file.bin") == _payload(40)
    assert len(storage.list_names("puts")) == 25
    # no temp files are left behind by either primitive
    assert not [name for name in os.listdir(tmp_path / "shared") if name.endswith(".tmp")]
    assert not [name for name in os.listdir(tmp_path / "puts") if name.endswith(".tmp")]


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/abs", "/etc/passwd", "..", "a/b/../../../c"])
def test_paths_escaping_the_table_are_refused(tmp_path: Path, bad: str) -> None:
    storage = LocalStorage(str(tmp_path / "table"))
    with pytest.raises(StitchError):
        clean_relpath(bad)
    for call in (
        lambda: storage.read_bytes(bad),
        lambda: storage.put_if_absent(bad, b"x"),
        lambda: storage.write_atomic(bad, b"x"),
        lambda: storage.exists(bad),
        lambda: storage.delete(bad),
        lambda: storage.list_names(bad),
    ):
        with pytest.raises(StitchError):
            call()
    assert not (tmp_path / "x").exists()


def test_relative_paths_are_normalised(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    assert clean_relpath("a/./b/../c") == "a/c"
    assert clean_relpath("a\\b") == "a/b"
    assert clean_relpath(".") == ""
    assert storage.put_if_absent("a/./b/../c", b"1")
    assert storage.read_bytes("a/c") == b"1"


def test_put_if_absent_never_overwrites(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    assert storage.put_if_absent("d/f", b"first")
    assert not storage.put_if_absent("d/f", b"second")
    assert storage.read_bytes("d/f") == b"first"
    storage.write_atomic("d/f", b"third")  # write_atomic replaces on purpose
    assert storage.read_bytes("d/f") == b"third"


def test_list_names_delete_exists_basics(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    assert storage.list_names("missing") == []
    assert not storage.exists("missing")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("missing/file")
    storage.write_atomic("folder/a", b"a")
    storage.put_if_absent("folder/b", b"b")
    storage.makedirs("folder/sub")
    (tmp_path / "folder" / ".c.123.tmp").write_bytes(b"partial")  # a crashed writer's temp file
    assert sorted(storage.list_names("folder")) == ["a", "b", "sub"]
    assert storage.exists("folder") and storage.exists("folder/a") and storage.exists("folder/sub")
    assert storage.size("folder/a") == 1
    assert sorted(storage.walk_files("folder")) == ["folder/.c.123.tmp", "folder/a", "folder/b"]
    assert storage.delete("folder/a") is True
    assert storage.delete("folder/a") is False
    assert not storage.exists("folder/a")
    assert storage.list_names("folder/a") == []  # a file is not a folder
    storage.delete_tree("folder")
    assert not storage.exists("folder")
    storage.delete_tree("folder")  # idempotent


def test_storage_for_local_and_unsupported(tmp_path: Path) -> None:
    assert isinstance(storage_for(str(tmp_path)), LocalStorage)
    local = storage_for(f"file://{tmp_path}")
    assert isinstance(local, LocalStorage) and local.root == str(tmp_path)
    with pytest.raises(StitchError, match="s3://"):
        storage_for("s3://bucket/table")
