"""Where given keys live: their file groups under any bucket count (design.md §3).

A key's file group is `stable_hash(key) mod N` in its partition, and N changes with each rescale. An erase rewrites
the groups of the count in force now; its purge must also reach the files laid out by every earlier count, so
both ask this one place. Keys that carry their partition columns live in that partition only; keys without them
may live in any partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.names import file_group_id
from stitchlake.layout.partition import partition_path


@dataclass
class KeyPlacement:
    """Keys (a table with the key columns, perhaps the partition columns too) and where each may live."""

    keys: pa.Table
    key_names: tuple[str, ...]
    partition_names: tuple[str, ...] = ()
    #: Per key row its partition path, or None when the keys do not name their partitions (any partition).
    places: list[str] | None = field(init=False, default=None)
    _buckets: dict[int, np.ndarray] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        names = self.partition_names
        if names and all(name in self.keys.column_names for name in names):
            rows = self.keys.select(list(names)).to_pylist()
            self.places = [partition_path(names, tuple(row[n] for n in names)) for row in rows]

    def buckets(self, count: int) -> np.ndarray:
        """Each key row's bucket under `count` buckets."""
        if count not in self._buckets:
            self._buckets[count] = bucket_of([self.keys.column(n) for n in self.key_names], count)
        return self._buckets[count]

    def file_groups(self, partition: str, count: int) -> set[str]:
        """The file group ids of `partition` that may hold one of the keys when it has `count` buckets."""
        buckets = self.buckets(count)
        if self.places is not None:
            buckets = buckets[np.array([place == partition for place in self.places], dtype=bool)]
        return {file_group_id(int(b)) for b in np.unique(buckets)}
