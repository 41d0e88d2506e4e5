"""Layout (design.md §3, §5): the pinned bucket hash, partition paths, data file names, and the file-system view
built from a real timeline on disk (completion-time slicing, pending compactions, invisibility, time travel)."""

from __future__ import annotations

import datetime as dt
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from stitchlake.errors import StitchError
from stitchlake.layout.bucket import bucket_for_values, bucket_of, fmix64, stable_hash
from stitchlake.layout.fsview import DataFile, FileSystemView
from stitchlake.layout.names import (
    BASE,
    LOG,
    DataFileName,
    base_name,
    file_group_id,
    join,
    log_name,
    parse_name,
    write_token,
)
from stitchlake.layout.partition import escape, format_value, parse_partition_path, partition_path
from stitchlake.storage import LocalStorage, clean_relpath
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import dump, load
from stitchlake.timeline.timeline import Timeline, write_completed, write_inflight, write_requested
from tests.support.bucket_vectors import PINNED

# ----------------------------------------------------------------------- independent reference hash

MASK64 = (1 << 64) - 1
EPOCH = dt.date(1970, 1, 1)


def ref_fnv1a64(data: bytes) -> int:
    state = 0xCBF29CE484222325
    for byte in data:
        state = ((state ^ byte) * 0x100000001B3) & MASK64
    return state


def ref_fmix64(value: int) -> int:
    value ^= value >> 33
    value = (value * 0xFF51AFD7ED558CCD) & MASK64
    value ^= value >> 33
    value = (value * 0xC4CEB9FE1A85EC53) & MASK64
    return value ^ (value >> 33)


def ref_canonical(value: object) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dt.date):
        return struct.pack("<q", (value - EPOCH).days)
    assert isinstance(value, int)
    return struct.pack("<q", value)


def ref_hash(*values: object) -> int:
    data = b"".join(struct.pack("<I", len(c)) + c for c in map(ref_canonical, values))
    return ref_fmix64(ref_fnv1a64(data))


def test_reference_implementation_matches_published_fnv_vectors() -> None:
    assert ref_fnv1a64(b"") == 0xCBF29CE484222325
    assert ref_fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert ref_fnv1a64(b"foobar") == 0x85944171F73967E8
    assert ref_fmix64(0) == 0
    assert int(fmix64(np.array([0x1234], dtype=np.uint64))[0]) == ref_fmix64(0x1234)


@pytest.mark.parametrize(("columns", "expected"), PINNED, ids=[f"{c[0][0]}" for c, _ in PINNED])
def test_pinned_hash_vectors(columns: list[pa.Array], expected: int) -> None:
    values = [c[0].as_py() for c in columns]
    assert ref_hash(*values) == expected
    assert int(stable_hash(columns)[0]) == expected


def test_many_pinned_vectors_in_one_vectorised_call() -> None:
    """A mixed batch (different string lengths side by side) hashes each row like a batch of one."""
    strings = ["", "a", "order-1", "münchen", "日本語🙂", "x" * 300]
    longs = [0, -1, 2**63 - 1, -(2**63), 7, 123456789]
    got = stable_hash([pa.array(longs, pa.int64()), pa.array(strings)])
    assert [int(v) for v in got] == [ref_hash(n, s) for n, s in zip(longs, strings, strict=True)]


def _random_string(rng: random.Random) -> str:
    alphabet = "abcXYZ019-_/= %é日🙂\x00"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))


def test_vectorised_hash_equals_reference_on_random_keys() -> None:
    rng = random.Random(20261121)
    n = 10_000
    longs = [rng.randrange(-(2**63), 2**63) for _ in range(n)]
    ints = [rng.randrange(-(2**31), 2**31) for _ in range(n)]
    strings = [_random_string(rng) for _ in range(n)]
    dates = [EPOCH + dt.timedelta(days=rng.randrange(-40000, 40000)) for _ in range(n)]

    composite = stable_hash([pa.array(longs, pa.int64()), pa.array(strings)])
    assert [int(v) for v in composite] == [ref_hash(a, b) for a, b in zip(longs, strings, strict=True)]

    assert [int(v) for v in stable_hash([pa.array(ints, pa.int32())])] == [ref_hash(v) for v in ints]
    assert [int(v) for v in stable_hash([pa.array(dates, pa.date32())])] == [ref_hash(v) for v in dates]
    triple = stable_hash([pa.array(strings), pa.array(dates, pa.date32()), pa.array(ints, pa.int32())])
    assert [int(v) for v in triple] == [ref_hash(s, d, i) for s, d, i in zip(strings, dates, ints, strict=True)]

    for buckets in (1, 7, 8, 256, 65536):
        expected = [ref_hash(a, b) % buckets for a, b in zip(longs, strings, strict=True)]
        assert bucket_of([pa.array(longs, pa.int64()), pa.array(strings)], buckets).tolist() == expected


def test_bucket_distribution_is_not_degenerate() -> None:
    keys = pa.array(range(80_000), pa.int64())
    counts = np.bincount(bucket_of([keys], 8), minlength=8)
    assert counts.min() > 9_000 and counts.max() < 11_000


def test_int32_and_int64_hash_alike() -> None:
    values = [0, 1, -1, 2**31 - 1, -(2**31), 99]
    assert stable_hash([pa.array(values, pa.int32())]).tolist() == stable_hash([pa.array(values, pa.int64())]).tolist()


def test_string_flavours_hash_alike() -> None:
    values = ["", "a", "münchen", "x" * 50]
    plain = stable_hash([pa.array(values, pa.string())]).tolist()
    assert stable_hash([pa.array(values, pa.large_string())]).tolist() == plain


def test_chunked_and_sliced_arrays_hash_like_plain_ones() -> None:
    rng = random.Random(7)
    longs = [rng.randrange(-(2**40), 2**40) for _ in range(300)]
    strings = [_random_string(rng) for _ in range(300)]
    dates = [EPOCH + dt.timedelta(days=rng.randrange(-9000, 9000)) for _ in range(300)]
    plain = stable_hash([pa.array(longs), pa.array(strings), pa.array(dates, pa.date32())]).tolist()

    chunked = stable_hash(
        [
            pa.chunked_array([longs[:1], longs[1:100], longs[100:]], pa.int64()),
            pa.chunked_array([strings[:150], [], strings[150:]], pa.string()),
            pa.chunked_array([dates[:7], dates[7:]], pa.date32()),
        ]
    ).tolist()
    assert chunked == plain

    padding = 37
    big_longs = pa.array([0] * padding + longs + [5] * 11, pa.int64())
    big_strings = pa.array(["pad" * 5] * padding + strings + ["tail"] * 11, pa.string())
    big_large = pa.array(["pad" * 5] * padding + strings + ["tail"] * 11, pa.large_string())
    big_dates = pa.array([EPOCH] * padding + dates + [EPOCH] * 11, pa.date32())
    sliced = [big_longs.slice(padding, 300), big_strings.slice(padding, 300), big_dates.slice(padding, 300)]
    assert all(column.offset == padding for column in sliced)
    assert stable_hash(sliced).tolist() == plain
    sliced_large = [big_longs.slice(padding, 300), big_large.slice(padding, 300), big_dates.slice(padding, 300)]
    assert stable_hash(sliced_large).tolist() == plain
    # slices inside chunks, as `Table.slice` produces
    table = pa.table({"n": big_longs, "s": big_strings, "d": big_dates}).slice(padding, 300)
    assert stable_hash([table.column("n"), table.column("s"), table.column("d")]).tolist() == plain


def test_bucket_for_values_matches_vectorised() -> None:
    key = [123456789, "eu"]
    expected = ref_hash(*key) % 8
    assert bucket_for_values(key, [pa.int64(), pa.string()], 8) == expected
    assert bucket_for_values([dt.date(2026, 11, 21)], [pa.date32()], 16) == ref_hash(dt.date(2026, 11, 21)) % 16
    assert bucket_for_values([42], [pa.int32()], 5) == ref_hash(42) % 5


def test_empty_input() -> None:
    assert bucket_of([pa.array([], pa.int64())], 8).tolist() == []
    assert stable_hash([pa.array([], pa.string())]).tolist() == []


# --------------------------------------------------------------------------------------- partitions

ESCAPES = [
    ("a/b", "a%2Fb"),
    ("k=v", "k%3Dv"),
    ("50%", "50%25"),
    ("..", "%2E%2E"),
    (".", "%2E"),
    ("münchen", "m%C3%BCnchen"),
    ("eu west", "eu west"),
    ("a\\b", "a%5Cb"),
    ("plain-value_1.2", "plain-value_1.2"),
]


@pytest.mark.parametrize(("value", "escaped"), ESCAPES, ids=[e for _, e in ESCAPES])
def test_escape(value: str, escaped: str) -> None:
    assert escape(value) == escaped
    path = partition_path(("region",), (value,))
    assert path == f"region={escaped}"
    assert "/" not in path
    assert parse_partition_path(path) == {"region": value}


def test_empty_value_gets_a_real_folder_name() -> None:
    """The exact token is free (it must only differ from every escaped non-empty value)."""
    path = partition_path(("region",), ("",))
    assert path.startswith("region=") and len(path) > len("region=")
    assert "/" not in path
    assert parse_partition_path(path) == {"region": ""}


PARTITION_VALUES = ["a/b", "k=v", "50%", "%2F", "..", ".", "", "../..", "/", "münchen", "日本/語", "a b+c", "%00x"]


@pytest.mark.parametrize("value", PARTITION_VALUES)
def test_partition_path_round_trip_stays_in_its_folder(value: str) -> None:
    names = ("order_date", "region", "n")
    values = (dt.date(2026, 11, 21), value, -5)
    path = partition_path(names, values)
    parts = path.split("/")
    assert len(parts) == 3
    assert all(part not in ("", ".", "..") for part in parts)
    assert clean_relpath(path) == path
    assert parse_partition_path(path) == {"order_date": "2026-11-21", "region": value, "n": "-5"}


def test_distinct_values_get_distinct_folders() -> None:
    values = [*PARTITION_VALUES, "\x00", "%", "%25"]
    paths = [partition_path(("p",), (v,)) for v in values]
    assert len(set(paths)) == len(values), sorted(zip(paths, values, strict=True))
    for value, path in zip(values, paths, strict=True):
        assert parse_partition_path(path) == {"p": value}


def test_partition_value_formats() -> None:
    assert format_value(dt.date(2026, 1, 2)) == "2026-01-02"
    assert format_value(True) == "true"
    assert format_value(12) == "12"
    assert partition_path((), ()) == ""
    assert parse_partition_path("") == {}
    with pytest.raises(TypeError):
        format_value(dt.datetime(2026, 1, 2, 3, 4))


# -------------------------------------------------------------------------------------------- names


def test_file_names_round_trip() -> None:
    token = write_token()
    assert len(token) == 10 and token.isalnum()
    assert file_group_id(7) == "00007" and file_group_id(65535) == "65535"
    base = base_name("00007", "20261121103000500", token)
    assert base == f"00007_20261121103000500_{token}.parquet"
    assert parse_name(base) == DataFileName("00007", "20261121103000500", token, BASE, "parquet")
    for fmt in ("parquet", "avro"):
        log = log_name("00003", "20261121103000501", fmt, "abc-123")
        assert log == f"00003_20261121103000501_abc-123.log.{fmt}"
        assert parse_name(log) == DataFileName("00003", "20261121103000501", "abc-123", LOG, fmt)
        assert str(parse_name(log)) == log
    assert parse_name(base_name("00001", "20261121103000500")) is not None  # a fresh random token
    assert join("", base) == base
    assert join("order_date=2026-11-21", base) == f"order_date=2026-11-21/{base}"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "data.parquet",
        "00007_20261121103000500_tok.avro",  # base files are always Parquet
        "00007_20261121103000500_tok.log.csv",
        "0007_20261121103000500_tok.parquet",
        "00007_2026112110300050_tok.parquet",
        "00007_20261121103000500_.parquet",
        "00007_20261121103000500_TOK.parquet",
        "00007_20261121103000500_tok.parquet.tmp",
        ".00007_20261121103000500_tok.parquet.abc.tmp",
        "00007_20261121103000500_tok.log.parquet.crc",
        "part-00000-uuid.snappy.parquet",
    ],
)
def test_garbage_file_names_parse_to_none(name: str) -> None:
    assert parse_name(name) is None


# ------------------------------------------------------------------------------- file-system view

P = "order_date=2026-11-21"
FG = "00003"
OTHER_FG = "00001"


def t(n: int) -> str:
    return f"20261121000000{n:03d}"


class Table:
    """A table folder with a real timeline and real (tiny) data files."""

    def __init__(self, root: Path) -> None:
        self.storage = LocalStorage(str(root))
        self.pending: dict[str, Instant] = {}

    def data_file(self, instant: str, kind: str, file_group: str = FG) -> dict[str, Any]:
        name = base_name(file_group, instant) if kind == BASE else log_name(file_group, instant, "parquet")
        path = join(P, name)
        self.storage.write_atomic(path, b"PAR1 not really")
        return {
            "path": path,
            "partition": P,
            "file_group": file_group,
            "kind": kind,
            "stream": None if kind == BASE else "orders",
            "rows": 3,
            "bytes": 15,
        }

    def request(
        self, requested: int, action: str = Action.DELTACOMMIT, content: dict[str, object] | None = None
    ) -> None:
        plan = load(kind_of(action).plan, content or {"stream": "orders"})  # the JSON shape tables hold
        instant = write_requested(self.storage, t(requested), action, plan)
        self.pending[t(requested)] = write_inflight(self.storage, instant)

    def complete(self, requested: int, completed: int, **metadata: object) -> None:
        instant = self.pending.pop(t(requested))
        write_completed(self.storage, instant, t(completed), load(kind_of(instant.action).commit, dict(metadata)))

    def view(self) -> FileSystemView:
        return FileSystemView.build(Timeline.load(self.storage))


def log_base_log(table: Table) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A file group's history: a log (completed 101), a compaction's base (103), then a log on it (105)."""
    table.request(100)
    l1 = table.data_file(t(100), LOG)
    table.complete(100, 101, added=[l1])
    table.request(102, Action.COMPACTION, {"operations": [{"partition": P, "file_group": FG}]})
    base = table.data_file(t(102), BASE)
    table.complete(102, 103, added=[base])
    table.request(104)
    l2 = table.data_file(t(104), LOG)
    table.complete(104, 105, added=[l2])
    return l1, base, l2


def _paths(files: list[DataFile] | tuple[DataFile, ...]) -> list[str]:
    return [f.path for f in files]


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return Table(tmp_path / "table")


def test_completion_time_rule_and_pending_compaction(table: Table) -> None:
    key = (P, FG)
    # D1: requested 100, completed 101 -> L1
    table.request(100)
    l1 = table.data_file(t(100), LOG)
    other = table.data_file(t(100), LOG, OTHER_FG)
    table.complete(100, 101, added=[l1, other])
    # D2 requested 102, i.e. BEFORE the compaction is requested ...
    table.request(102)
    # C: compaction of L1 requested at 103
    table.request(103, Action.COMPACTION, {"operations": [{"partition": P, "file_group": FG}]})
    # ... but D2 completes at 104, AFTER the compaction was requested -> L2 belongs to the new slice
    l2 = table.data_file(t(102), LOG)
    table.complete(102, 104, added=[l2])

    view = table.view()
    assert view.file_groups() == [(P, OTHER_FG), key]
    assert view.pending_rewrites == {key: t(103)}
    slices = view.slices(key)
    assert [(s.base_instant, s.base, _paths(s.logs)) for s in slices] == [
        ("", None, [l1["path"]]),
        (t(103), None, [l2["path"]]),
    ]
    # without the pending plan there is only one slice
    assert [_paths(s.logs) for s in view.slices(key, include_pending=False)] == [[l1["path"], l2["path"]]]
    # readers merge the old slice with the new logs
    latest = view.latest_slice(key)
    assert latest is not None and latest.base is None
    assert _paths(latest.logs) == [l1["path"], l2["path"]]

    # the compaction completes at 105 with a base file for its plan; D3 (106 -> 107) follows
    base = table.data_file(t(103), BASE)
    table.complete(103, 105, added=[base])
    table.request(106)
    l3 = table.data_file(t(106), LOG)
    table.complete(106, 107, added=[l3])

    view = table.view()
    assert view.pending_rewrites == {}
    slices = view.slices(key)
    assert [(s.base_instant, _paths(s.logs)) for s in slices] == [
        ("", [l1["path"]]),
        (t(103), [l2["path"], l3["path"]]),
    ]
    assert slices[1].base is not None and slices[1].base.path == base["path"]
    latest = view.latest_slice(key)
    assert latest is not None and latest.base is not None
    assert latest.base.path == base["path"] and latest.base_instant == t(103)
    assert latest.base.instant == t(103) and latest.base.completed == t(105)
    assert _paths(latest.logs) == [l2["path"], l3["path"]]  # L2 although its instant (102) < 103
    assert [f.completed for f in latest.logs] == [t(104), t(107)]
    assert latest.log_bytes == 30
    other_slice = view.latest_slice((P, OTHER_FG))
    assert other_slice is not None and _paths(other_slice.files) == [other["path"]]

    # time travel: as of each completion time
    def as_of(n: int) -> tuple[str | None, list[str]]:
        found = view.latest_slice(key, as_of=t(n))
        assert found is not None
        return (found.base.path if found.base else None, _paths(found.logs))

    assert as_of(101) == (None, [l1["path"]])
    assert as_of(103) == (None, [l1["path"]])
    assert as_of(104) == (None, [l1["path"], l2["path"]])  # the compaction had not completed yet
    assert as_of(105) == (base["path"], [l2["path"]])
    assert as_of(107) == (base["path"], [l2["path"], l3["path"]])
    assert view.latest_slice(key, as_of=t(99)) is None
    assert [s.file_group for s in view.latest_slices(as_of=t(104))] == [OTHER_FG, FG]
    one = view.latest_slice(key, t(104))
    assert one is not None and view.latest_slices(as_of=t(104), file_groups=[key]) == [one]


def test_a_later_compaction_plan_splits_again(table: Table) -> None:
    key = (P, FG)
    l1, base, l2 = log_base_log(table)
    table.request(106, Action.COMPACTION, {"operations": [{"partition": P, "file_group": FG}]})
    table.request(107)
    l3 = table.data_file(t(107), LOG)
    table.complete(107, 108, added=[l3])
    view = table.view()
    assert [(s.base_instant, s.base is not None, _paths(s.logs)) for s in view.slices(key)] == [
        ("", False, [l1["path"]]),
        (t(102), True, [l2["path"]]),
        (t(106), False, [l3["path"]]),
    ]
    latest = view.latest_slice(key)
    assert latest is not None and latest.base is not None and latest.base.path == base["path"]
    assert _paths(latest.logs) == [l2["path"], l3["path"]]


def test_files_not_named_by_a_completed_instant_are_invisible(table: Table) -> None:
    table.request(100)
    l1 = table.data_file(t(100), LOG)
    table.complete(100, 101, added=[l1])
    # a crashed writer: its file is on disk, its instant inflight (and even lists the file)
    crashed = table.data_file(t(102), LOG)
    table.request(102, Action.DELTACOMMIT, {"stream": "orders", "added": [crashed]})
    # an orphan nobody ever mentioned, in the same file group and in a new one
    orphan = table.data_file(t(101), LOG)
    table.data_file(t(103), LOG, "00009")
    # a completed instant of a non-writing action that (wrongly) lists a file
    table.request(104, Action.SAVEPOINT, {})
    stray = table.data_file(t(104), LOG)
    table.complete(104, 105, added=[stray])

    assert table.storage.exists(crashed["path"]) and table.storage.exists(orphan["path"])
    view = table.view()
    assert _paths(view.live_files()) == [l1["path"]]
    assert view.file_groups() == [(P, FG)]
    assert view.partitions() == [P]
    latest = view.latest_slice((P, FG))
    assert latest is not None and _paths(latest.files) == [l1["path"]]


def test_clean_removed_file_needed_by_time_travel_is_a_clear_error(table: Table) -> None:
    l1, base, l2 = log_base_log(table)
    table.request(106, Action.CLEAN, {})
    table.storage.delete(l1["path"])
    table.complete(106, 107, deleted=[l1["path"]])

    view = table.view()
    assert sorted(_paths(view.live_files())) == sorted([base["path"], l2["path"]])
    # the latest state does not need L1
    [latest] = view.latest_slices()
    assert latest.base is not None and _paths(latest.logs) == [l2["path"]]
    assert len(view.latest_slices(as_of=t(103))) == 1
    # as of 101 it does
    with pytest.raises(StitchError) as info:
        view.latest_slices(as_of=t(101))
    message = str(info.value)
    assert l1["path"] in message and "clean" in message and t(107) in message


def test_pending_erase_is_a_rewrite_too(table: Table) -> None:
    key = (P, FG)
    table.request(100)
    l1 = table.data_file(t(100), LOG)
    table.complete(100, 101, added=[l1])
    table.request(102, Action.ERASE, {"operations": [{"partition": P, "file_group": FG}]})
    table.request(103)
    l2 = table.data_file(t(103), LOG)
    table.complete(103, 104, added=[l2])
    view = table.view()
    assert [(s.base_instant, _paths(s.logs)) for s in view.slices(key)] == [
        ("", [l1["path"]]),
        (t(102), [l2["path"]]),
    ]


def test_data_file_json_round_trip(table: Table) -> None:
    table.request(100)
    l1 = table.data_file(t(100), LOG)
    table.complete(100, 101, added=[l1])
    [item] = table.view().live_files()
    assert load(DataFile, dump(item)) == item
    assert (item.instant, item.completed, item.kind, item.stream, item.rows, item.bytes) == (
        t(100),
        t(101),
        LOG,
        "orders",
        3,
        15,
    )
