"""The storage contract on both backends: local disk and a real S3 server (Ceph RGW, tests/support/s3_server.py).

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_storage.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest

from stitchlake.errors import StitchError
from stitchlake.storage import LocalStorage, Storage, clean_relpath, storage_for

RACERS = 8


ROUNDS = 10


BIG = 4 * 1024 * 1024  # large enough that a non-atomic write would be observably partial


@contextlib.contextmanager
def ended(procs: Sequence[BaseProcess]) -> Iterator[None]:
    """Start `procs`; on the way out, however the test went, kill those still running."""
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=120)


def _race_put_if_absent(uri: str, options: dict[str, str], index: int, barrier: Barrier, results: Any) -> None:
    storage = storage_for(uri, options)
    for round_no in range(ROUNDS):
        payload = f"winner {index} round {round_no} ".encode() * 1000
        barrier.wait()
        won = storage.put_if_absent(f"race/round-{round_no}", payload)
        results.put((round_no, index, won))


def test_put_if_absent_exactly_one_winner_across_processes(location: tuple[str, dict[str, str]]) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(RACERS, timeout=600)
    results = ctx.Queue()
    procs = [ctx.Process(target=_race_put_if_absent, args=(*location, i, barrier, results)) for i in range(RACERS)]
    with ended(procs):
        outcomes = [results.get(timeout=900) for _ in range(RACERS * ROUNDS)]
        for proc in procs:
            proc.join(timeout=600)
            assert proc.exitcode == 0
    storage = storage_for(*location)
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


def _writer_atomic(uri: str, options: dict[str, str], versions: int, start: Barrier) -> None:
    storage = storage_for(uri, options)
    start.wait()
    for version in range(1, versions + 1):
        storage.write_atomic("shared/file.bin", _payload(version))


def _writer_put(uri: str, options: dict[str, str], count: int, start: Barrier) -> None:
    storage = storage_for(uri, options)
    start.wait()
    for index in range(count):
        assert storage.put_if_absent(f"puts/file-{index}", _payload(index))


def _reader(uri: str, options: dict[str, str], seconds: float, start: Barrier, results: Any) -> None:
    """Read the shared file and every published put as fast as possible; report (reads, torn reads)."""
    storage = storage_for(uri, options)
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


def test_readers_never_see_a_half_written_file(location: tuple[str, dict[str, str]]) -> None:
    ctx = mp.get_context("spawn")
    uri, options = location
    storage_for(uri, options).write_atomic("shared/file.bin", _payload(0))
    # Everyone, this process too, waits at the barrier: the race starts once every spawned interpreter has
    # imported (however long a busy machine takes), not after a guessed half second.
    start = ctx.Barrier(3 + 2 + 1, timeout=600)
    results = ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(uri, options, 3.0, start, results)) for _ in range(3)]
    writers = [
        ctx.Process(target=_writer_atomic, args=(uri, options, 40, start)),
        ctx.Process(target=_writer_put, args=(uri, options, 25, start)),
    ]
    with ended(readers + writers):
        start.wait()
        outcomes = [results.get(timeout=900) for _ in readers]
        for proc in readers + writers:
            proc.join(timeout=600)
            assert proc.exitcode == 0
    reads = sum(r for r, _ in outcomes)
    torn = sum(t for _, t in outcomes)
    assert reads > 20, "the readers did not overlap with the writers"
    assert torn == 0
    storage = storage_for(uri, options)
    assert storage.read_bytes("shared/file.bin") == _payload(40)
    assert len(storage.list_names("puts")) == 25
    # no temp files are left behind by either primitive
    assert not [name for name in storage.walk_files() if name.endswith(".tmp")]


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/abs", "/etc/passwd", "..", "a/b/../../../c"])
def test_paths_escaping_the_root_are_refused(storage: Storage, bad: str) -> None:
    with pytest.raises(StitchError):
        clean_relpath(bad)
    for call in (
        lambda: storage.read_bytes(bad),
        lambda: storage.put_if_absent(bad, b"x"),
        lambda: storage.write_atomic(bad, b"x"),
        lambda: storage.write_bytes(bad, b"x"),
        lambda: storage.exists(bad),
        lambda: storage.delete(bad),
        lambda: storage.list_names(bad),
        lambda: storage.describe(bad),
    ):
        with pytest.raises(StitchError):
            call()
    assert list(storage.ancestors()[0].list_files()) == []  # nothing was written outside the root


def test_relative_paths_are_normalised(storage: Storage) -> None:
    assert clean_relpath("a/./b/../c") == "a/c"
    assert clean_relpath("a\\b") == "a/b"
    assert clean_relpath(".") == ""
    assert storage.put_if_absent("a/./b/../c", b"1")
    assert storage.read_bytes("a/c") == b"1"


def test_put_if_absent_never_overwrites(storage: Storage) -> None:
    assert storage.put_if_absent("d/f", b"first")
    assert not storage.put_if_absent("d/f", b"second")
    assert storage.read_bytes("d/f") == b"first"
    storage.write_atomic("d/f", b"third")  # write_atomic replaces on purpose
    assert storage.read_bytes("d/f") == b"third"
    storage.write_bytes("d/f", b"fourth")
    assert storage.read_bytes("d/f") == b"fourth"


def test_ready_runs_before_the_create_and_can_refuse_it(storage: Storage) -> None:
    seen: list[bool] = []
    assert storage.put_if_absent("r/a", b"1", ready=lambda: seen.append(storage.exists("r/a")))
    assert seen == [False]

    def refuse() -> None:
        raise StitchError("fenced")

    with pytest.raises(StitchError, match="fenced"):
        storage.put_if_absent("r/b", b"1", ready=refuse)
    assert not storage.exists("r/b")


def test_list_names_delete_exists_basics(storage: Storage) -> None:
    assert storage.list_names("missing") == []
    assert not storage.exists("missing")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("missing/file")
    with pytest.raises(FileNotFoundError):
        storage.stat("missing/file")
    with pytest.raises(FileNotFoundError):
        storage.open_input("missing/file")
    storage.write_atomic("folder/a", b"a")
    storage.put_if_absent("folder/b", b"b")
    storage.write_bytes("folder/sub/c", b"cc")
    storage.makedirs("folder/empty")
    empty = ["empty"] if isinstance(storage, LocalStorage) else []  # an empty folder is nothing on S3
    assert sorted(storage.list_names("folder")) == sorted(["a", "b", "sub", *empty])
    assert storage.exists("folder") and storage.exists("folder/a") and storage.exists("folder/sub")
    assert storage.exists("")  # the root exists even when empty on S3 (the bucket answers)
    assert storage.size("folder/a") == 1 and storage.stat("folder/sub/c").size == 2
    files = {info.path: info for info in storage.list_files("folder")}
    assert sorted(files) == ["folder/a", "folder/b", "folder/sub/c"]
    assert files["folder/sub/c"].size == 2 and files["folder/a"].version != files["folder/b"].version
    assert [info.path for info in storage.list_files("folder/a")] == ["folder/a"]  # a folder naming one file
    assert sorted(storage.walk_files()) == ["folder/a", "folder/b", "folder/sub/c"]
    assert storage.delete("folder/a") is True
    assert storage.delete("folder/a") is False
    assert not storage.exists("folder/a")
    assert storage.list_names("folder/a") == []  # a file is not a folder
    assert storage.delete("folder/sub") is True  # a folder written as one unit
    assert not storage.exists("folder/sub/c")
    storage.delete_tree("folder")
    assert not storage.exists("folder") and list(storage.list_files()) == []
    storage.delete_tree("folder")  # idempotent


def test_a_rewrite_changes_the_version(storage: Storage) -> None:
    storage.write_bytes("landing/a.json", b'{"k": 1}\n')
    first = storage.stat("landing/a.json")
    storage.write_bytes("landing/a.json", b'{"k": 2}\n')
    second = storage.stat("landing/a.json")
    assert first.size == second.size and first.version != second.version
    assert [info.version for info in storage.list_files("landing")] == [second.version]


def test_open_input_reads_parquet_whole_and_by_range(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"a": np.arange(200_000), "b": np.arange(200_000) * 0.5, "c": np.arange(200_000) % 7})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=50_000)
    storage.write_bytes("data/f.parquet", sink.getvalue().to_pybytes())
    with storage.open_input("data/f.parquet") as handle:
        assert pq.ParquetFile(handle).read().equals(table)
    if not isinstance(storage, LocalStorage):  # files bigger than one GET are read footer first, then by range
        from stitchlake.storage import s3

        monkeypatch.setattr(s3, "WHOLE_BYTES", 64 * 1024)
        monkeypatch.setattr(s3, "TAIL_BYTES", 16 * 1024)
        with storage.open_input("data/f.parquet") as handle:
            assert pq.ParquetFile(handle).read(columns=["b"]).column("b").equals(table.column("b"))
        with storage.open_input("data/f.parquet") as handle:
            assert pq.ParquetFile(handle).read().equals(table)


def test_prefetched_files_read_the_same(storage: Storage) -> None:
    for index in range(5):
        storage.write_bytes(f"p/{index}", bytes([index]) * (index + 1))
    storage.prefetch([(f"p/{index}", index + 1) for index in range(5)] + [("p/missing", 3)])
    assert [storage.read_bytes(f"p/{index}") for index in range(5)] == [bytes([i]) * (i + 1) for i in range(5)]
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("p/missing")
    storage.write_bytes("p/0", b"new")  # read once: a later read sees the file as it is then
    assert storage.read_bytes("p/0") == b"new"


def test_ancestors_and_describe(location: tuple[str, dict[str, str]]) -> None:
    uri, options = location
    storage = storage_for(f"{uri}/a/b", options)
    assert storage.describe("x/y").endswith("/root/a/b/x/y")
    outer = storage.ancestors()
    assert outer[0].describe().endswith("/root/a") and outer[1].describe().endswith("/root")
    outer[1].write_bytes("marker", b"1")
    assert outer[1].exists("marker") and not storage.exists("marker")


@pytest.mark.s3
def test_s3_errors_name_the_object_and_never_the_secret(s3_bucket: Any) -> None:
    options = {**s3_bucket.options, "secret_access_key": "wrong-secret-1234567"}
    storage = storage_for(f"{s3_bucket.url}/t", options)
    with pytest.raises(PermissionError) as refused:
        storage.read_bytes("a/b")
    assert f"{s3_bucket.url}/t/a/b" in str(refused.value) and "wrong-secret" not in str(refused.value)
    missing = storage_for(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t", s3_bucket.options)
    with pytest.raises(OSError, match="no-such-bucket"):
        missing.put_if_absent("x", b"1")


@pytest.mark.s3
def test_s3_listing_pages_and_a_retried_create_counts_as_ours(s3_bucket: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    storage = storage_for(f"{s3_bucket.url}/many", s3_bucket.options)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: storage.write_bytes(f"k/{i:05d}", b"x"), range(1100)))
    assert len(list(storage.list_files("k"))) == 1100  # more than one page of 1000
    assert len(storage.list_names("k")) == 1100
    storage.delete_tree("k")
    assert list(storage.list_files()) == []
    # A conditional PUT whose answer was lost and that the client retried finds its own object: still a win.
    assert storage.put_if_absent("once", b"our unique bytes")
    assert storage.put_if_absent("once", b"our unique bytes")
    assert not storage.put_if_absent("once", b"someone else's bytes")


@pytest.mark.s3
def test_environment_settings_reach_the_client(s3_bucket: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no `storage:` block the standard AWS variables configure the client (plain http from the endpoint)."""
    for name, value in s3_bucket.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    storage = storage_for(f"{s3_bucket.url}/env")
    assert storage.put_if_absent("a", b"1") and storage.read_bytes("a") == b"1"
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://")
