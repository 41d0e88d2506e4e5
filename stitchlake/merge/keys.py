"""Dense key ids: the merge works on small integers instead of (possibly composite) key values."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class KeyIndex:
    """`ids[row]` is the dense id of the row's key; `first[id]` a row holding that key."""

    ids: np.ndarray
    count: int
    first: np.ndarray


def _encode(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(encoded.dictionary)


def key_index(columns: list[pa.ChunkedArray | pa.Array]) -> KeyIndex:
    """Dense ids for the rows' key tuples (columns must hold no nulls)."""
    length = len(columns[0]) if columns else 0
    if length == 0:
        return KeyIndex(np.zeros(0, dtype=np.int64), 0, np.zeros(0, dtype=np.int64))
    ids, count = _encode(columns[0])
    for column in columns[1:]:
        more, more_count = _encode(column)
        combined = ids * more_count + more
        ids, inverse = np.unique(combined, return_inverse=True)
        count = len(ids)
        ids = inverse.astype(np.int64)
    first = np.full(count, length, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(length, dtype=np.int64))
    return KeyIndex(ids, count, first)
