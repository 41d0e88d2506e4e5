"""The vectorised merge kernels against brute force: group_argmax and key_index on random data with many ties."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from stitchlake.merge.keys import key_index
from stitchlake.merge.version import group_argmax


def _brute_argmax(groups: np.ndarray, version: tuple[np.ndarray, ...], n_groups: int, rows: np.ndarray) -> list[int]:
    best: list[tuple[tuple[int, ...], int] | None] = [None] * n_groups
    for row in rows:
        key = (tuple(int(c[row]) for c in version), int(row))
        group = int(groups[row])
        if best[group] is None or key > best[group]:  # type: ignore[operator]
            best[group] = key
    return [-1 if b is None else b[1] for b in best]


@pytest.mark.parametrize("seed", range(40))
def test_group_argmax_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    n_groups = int(rng.integers(1, 40))
    spread = int(rng.integers(1, 5))  # few distinct values: many ties on every component
    groups = rng.integers(0, n_groups, n)
    extreme = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1])
    version = tuple(
        np.where(rng.random(n) < 0.1, rng.choice(extreme, n), rng.integers(0, spread, n)).astype(np.int64)
        for _ in range(int(rng.integers(1, 4)))
    )
    rows = np.arange(n) if seed % 2 else np.sort(rng.choice(n, size=n // 2, replace=False)) if n else np.arange(0)
    expected = _brute_argmax(groups, version, n_groups, rows)
    got = group_argmax(groups, version, n_groups, None if seed % 2 else rows)
    assert got.tolist() == expected


@pytest.mark.parametrize("seed", range(10))
def test_key_index_is_dense_and_consistent(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    first = rng.integers(0, 6, n)
    second = rng.choice(["a", "b", "c"], n)
    index = key_index([pa.array(first), pa.array(second)])
    pairs = list(zip(first.tolist(), second.tolist(), strict=True))
    assert index.count == len(set(pairs))
    assert sorted(set(index.ids.tolist())) == list(range(index.count))
    for row, pair in enumerate(pairs):
        assert pairs[int(index.first[index.ids[row]])] == pair


@pytest.mark.parametrize(
    ("low", "span", "kind"),
    [
        (0, 50, pa.int64()),  # compact: numbered by direct addressing
        (-(2**62), 50, pa.int64()),  # compact near the bottom of int64
        (2**63 - 60, 50, pa.int64()),  # and near its top
        (7, 40, pa.uint32()),
        (2**63 + 5, 40, pa.uint64()),  # above int64's range
        (-100, 201, pa.int8()),  # a span wider than int8 itself: offsets must not wrap
        (-20_000, 40_001, pa.int16()),
        (-(2**31), 2**31, pa.int32()),  # sparse for 300 rows: hashed
        (0, 10**12, pa.int64()),  # sparse: hashed
    ],
)
def test_single_integer_keys_get_the_same_ids_either_way(low: int, span: int, kind: pa.DataType) -> None:
    """Direct addressing and hashing give consistent dense ids; direct addressing numbers keys in ascending order."""
    rng = np.random.default_rng(span % 97)
    rows = 300 if span > 10**6 else max(300, span // 8)  # compact spans: enough rows for direct addressing
    offsets = rng.integers(0, min(span, 2**62), rows)
    values = [low + int(o) for o in offsets] + [low, low + span - 1]  # both ends of the span
    index = key_index([pa.array(values, kind)])
    assert index.count == len(set(values))
    assert sorted(set(index.ids.tolist())) == list(range(index.count))
    for row, value in enumerate(values):
        assert values[int(index.first[index.ids[row]])] == value
    by_id = {int(i): v for i, v in zip(index.ids.tolist(), values, strict=True)}
    if span < 10**6:  # compact keys: ids follow the key order
        assert [by_id[i] for i in range(index.count)] == sorted(set(values))
    if span < 10**6:
        assert index.ids.dtype == np.int64 and int(index.ids.max()) == index.count - 1
    chunked = key_index([pa.chunked_array([pa.array(values[:100], kind), pa.array(values[100:], kind)])])
    assert chunked.ids.tolist() == index.ids.tolist()
