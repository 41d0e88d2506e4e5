"""Dense key ids: the merge works on small integers instead of (possibly composite) key values."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.types import contiguous

#: Integer keys spanning at most this many values per row are numbered by direct addressing (a table as long as
#: their span) instead of hashing: 3-4x faster, and order ids by key value. Sequence-like keys (order ids, user
#: ids) in a file group span a few values per row; sparse ones (hashes, snowflake ids) fall back to hashing.
DIRECT_SPAN_PER_ROW = 8


@dataclass(frozen=True)
class KeyIndex:
    """`ids[row]` is the dense id of the row's key; `first[id]` a row holding that key."""

    ids: np.ndarray
    count: int
    first: np.ndarray


def _encode(column: pa.Array) -> tuple[np.ndarray, int]:
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(encoded.dictionary)


def _direct(column: pa.Array) -> tuple[np.ndarray, int] | None:
    """Ids by direct addressing (ascending key order), or None when the keys are not compact integers."""
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    values = column.to_numpy(zero_copy_only=False)
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    if span > DIRECT_SPAN_PER_ROW * len(values) + 1024:
        return None
    # Subtract in a type wide enough for the span: int8 keys from -100 to 100 would wrap around in int8.
    wide = values if values.dtype in (np.int64, np.uint64) else values.astype(np.int64)
    offsets = wide - wide.dtype.type(low) if low else wide
    seen = np.zeros(span, dtype=np.int32 if len(values) < 2**31 else np.int64)  # 4 bytes per value of the span
    seen[offsets] = 1
    np.cumsum(seen, out=seen)  # seen[v] is now the number of distinct keys <= low + v
    ids = np.take(seen, offsets).astype(np.int64) - 1
    return ids, int(seen[-1])


def key_index(columns: list[pa.ChunkedArray | pa.Array]) -> KeyIndex:
    """Dense ids for the rows' key tuples (columns must hold no nulls)."""
    length = len(columns[0]) if columns else 0
    if length == 0:
        return KeyIndex(np.zeros(0, dtype=np.int64), 0, np.zeros(0, dtype=np.int64))
    first_column = contiguous(columns[0])
    direct = _direct(first_column) if len(columns) == 1 else None
    ids, count = direct if direct is not None else _encode(first_column)
    for column in columns[1:]:
        more, more_count = _encode(contiguous(column))
        combined = ids * more_count + more
        ids, inverse = np.unique(combined, return_inverse=True)
        count = len(ids)
        ids = inverse.astype(np.int64)
    first = np.empty(count, dtype=np.int64)
    first[ids] = np.arange(length, dtype=np.int64)  # any row of the key will do: they hold the same key
    return KeyIndex(ids, count, first)
