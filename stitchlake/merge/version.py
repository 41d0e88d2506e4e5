"""Event versions as tuples of int64 arrays, compared lexicographically (design.md §2).

A version is `(ordering values..., commit completion time, position)`. Numbers, dates, timestamps and booleans
map to an order-preserving int64 image. Text, binary and decimals have none, so they are compared by *rank*: each
merge builds, per ordering column, the sorted distinct values of every file it merges (a `Ranks` dictionary) and
uses each value's index in it. Ranks are order-isomorphic to the values within the merge, so the same winners are
chosen as by comparing values — the merge stays a CRDT — and files store the values themselves, never ranks.
Either way the whole merge runs on plain integer arrays: no per-row Python, no sorting of rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT64_MIN = np.iinfo(np.int64).min
_LOW63 = np.int64(0x7FFFFFFFFFFFFFFF)

#: A version: one int64 array per component, most significant first.
Version = tuple[np.ndarray, ...]


def encode_ordering(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Map an ordering column (int, long, date, timestamp, boolean, float, double) to order-preserving int64.

    Nulls must have been rejected before (a null ordering value is a bad row).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if pa.types.is_floating(kind):
        floats = values.cast(pa.float64()).to_numpy(zero_copy_only=False) + 0.0  # -0.0 == 0.0: one value
        bits = floats.view(np.int64)
        # Negative floats order backwards as integers: flip their magnitude bits.
        return np.where(bits < 0, bits ^ _LOW63, bits)
    if pa.types.is_boolean(kind):
        return values.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        storage = pa.int64() if pa.types.is_timestamp(kind) else pa.int32()
        return values.view(storage).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return values.cast(pa.int64()).to_numpy(zero_copy_only=False)


#: Per ordering column: the sorted distinct values it is ranked against in one merge (None: an int64 image).
Ranks = tuple["pa.Array | None", ...]


def rank_dictionary(arrays: list[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """The sorted distinct non-null values of some arrays of one type (what their ranks index)."""
    chunks = [a for array in arrays for a in (array.chunks if isinstance(array, pa.ChunkedArray) else [array])]
    if not chunks:
        raise ValueError("no values to rank")
    values = pc.unique(pa.chunked_array(chunks)).drop_null()
    return values.take(pc.sort_indices(values))


def encode_rank(values: pa.Array | pa.ChunkedArray, dictionary: pa.Array) -> np.ndarray:
    """Each value's index in the sorted dictionary (its rank); nulls become 0 (they are masked by presence)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    ranks = pc.index_in(values, value_set=dictionary)
    return pc.fill_null(ranks, 0).cast(pa.int64()).to_numpy(zero_copy_only=False)


def lex_greater(left: Version, right: Version) -> np.ndarray:
    """Element-wise `left > right` for versions of equal length."""
    greater = np.zeros(len(left[0]), dtype=bool)
    equal = np.ones(len(left[0]), dtype=bool)
    for a, b in zip(left, right, strict=True):
        greater |= equal & (a > b)
        equal &= a == b
    return greater


def take(version: Version, rows: np.ndarray) -> Version:
    return tuple(component[rows] for component in version)


def constant(value: int, length: int) -> np.ndarray:
    return np.full(length, value, dtype=np.int64)


def group_argmax(groups: np.ndarray, version: Version, n_groups: int, rows: np.ndarray | None = None) -> np.ndarray:
    """For each group, the row holding the greatest version among `rows` (all rows if None); -1 if none.

    One scatter-max pass per component keeps only the rows that tie for their group's maximum so far. Groups
    left with a single candidate are decided at once, so later components only look at the (usually few)
    groups that still tie: a typical merge is one pass, not one per component, and never a sort. Ties over
    the whole version go to the later row.
    """
    winner = np.full(n_groups, -1, dtype=np.int64)
    candidates: np.ndarray | None = None if rows is None else np.asarray(rows, dtype=np.int64)
    owner = groups if candidates is None else groups[candidates]
    if owner.size == 0:
        return winner
    for component in version:
        value = component if candidates is None else component[candidates]
        best = np.full(n_groups, INT64_MIN, dtype=np.int64)
        np.maximum.at(best, owner, value)
        keep = value == best[owner]
        candidates = np.flatnonzero(keep) if candidates is None else candidates[keep]
        owner = owner[keep]
        single = np.bincount(owner, minlength=n_groups)[owner] == 1
        if single.all():
            winner[owner] = candidates
            return winner
        winner[owner[single]] = candidates[single]
        candidates = candidates[~single]
        owner = owner[~single]
    assert candidates is not None
    np.maximum.at(winner, owner, candidates)
    return winner


def is_valid(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Numpy mask of non-null entries."""
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return pc.is_valid(array).to_numpy(zero_copy_only=False)
