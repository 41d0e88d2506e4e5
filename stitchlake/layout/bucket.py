"""The bucket index: `bucket = stable_hash(key) mod buckets` (design.md §3).

The hash is specified here and pinned by test vectors, so every engine path (in-process, Spark executors,
any future engine) sends a key to the same file group without talking to anyone:

* each key column's value becomes canonical bytes: int, long and date -> the value as 8-byte little-endian
  two's complement (date = days since 1970-01-01); string -> its UTF-8 bytes;
* the key's bytes are, for each key column in order, a 4-byte little-endian length followed by those bytes;
* `stable_hash` = 64-bit FNV-1a over the key's bytes, then the MurmurHash3 fmix64 finaliser (FNV alone
  leaves the low bits, which `mod` uses, poorly mixed).

The implementation is vectorised: one numpy pass per byte position, never one per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
_MASK8 = np.uint64(0xFF)


def _feed_fixed(state: np.ndarray, words: np.ndarray, width: int) -> np.ndarray:
    """FNV-1a over the `width` little-endian bytes of each uint64 word."""
    for shift in range(width):
        byte = (words >> np.uint64(8 * shift)) & _MASK8
        state = (state ^ byte) * FNV_PRIME
    return state


def _feed_strings(state: np.ndarray, column: pa.Array) -> np.ndarray:
    column = column.cast(pa.large_binary()) if not pa.types.is_large_binary(column.type) else column
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    data_buffer = column.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    state = _feed_fixed(state, lengths.astype(np.uint64), 4)
    longest = int(lengths.max()) if len(lengths) else 0
    for position in range(longest):
        active = np.flatnonzero(lengths > position)
        if active.size == len(state):
            byte = data[starts + position].astype(np.uint64)
            state = (state ^ byte) * FNV_PRIME
        else:
            byte = data[starts[active] + position].astype(np.uint64)
            state[active] = (state[active] ^ byte) * FNV_PRIME
    return state


def _as_int64(column: pa.Array) -> np.ndarray:
    if pa.types.is_date32(column.type):
        column = column.view(pa.int32())
    return column.cast(pa.int64()).to_numpy(zero_copy_only=False)


def fmix64(value: np.ndarray) -> np.ndarray:
    value = value ^ (value >> np.uint64(33))
    value = value * np.uint64(0xFF51AFD7ED558CCD)
    value = value ^ (value >> np.uint64(33))
    value = value * np.uint64(0xC4CEB9FE1A85EC53)
    return value ^ (value >> np.uint64(33))


def stable_hash(columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The 64-bit stable hash of each row's key (columns must hold no nulls)."""
    length = len(columns[0])
    state = np.full(length, FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in columns:
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            if (
                pa.types.is_string(column.type)
                or pa.types.is_large_string(column.type)
                or pa.types.is_binary(column.type)
            ):
                state = _feed_strings(state, column)
            else:
                state = _feed_fixed(state, np.full(length, 8, dtype=np.uint64), 4)
                state = _feed_fixed(state, _as_int64(column).view(np.uint64), 8)
        return fmix64(state)


def bucket_of(columns: list[pa.Array | pa.ChunkedArray], buckets: int) -> np.ndarray:
    """The bucket (file group number) of each row's key."""
    if not len(columns[0]):
        return np.zeros(0, dtype=np.int64)
    return (stable_hash(columns) % np.uint64(buckets)).astype(np.int64)


def bucket_for_values(values: list[object], types: list[pa.DataType], buckets: int) -> int:
    """The bucket of one key given as Python values (used to prune reads to one file group)."""
    columns = [pc.cast(pa.array([value]), kind) for value, kind in zip(values, types, strict=True)]
    return int(bucket_of(columns, buckets)[0])
