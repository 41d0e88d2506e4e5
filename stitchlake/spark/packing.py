"""How a read's file slices are packed into Spark input partitions, as Spark packs files (no pyspark here: the
JVM reader's planner process packs too, and starts quickly without it)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Packing options (Spark lower-cases option names; any case works): the target bytes of one input partition,
#: what opening one more file counts as, and how many partitions a read aims for at least (the cores).
MAX_PARTITION_BYTES = "maxpartitionbytes"
OPEN_COST_IN_BYTES = "opencostinbytes"
MIN_PARTITIONS = "minpartitions"
#: Spark's own defaults for file sources (spark.sql.files.maxPartitionBytes / openCostInBytes).
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_OPEN_COST_IN_BYTES = 4 * 1024 * 1024
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_bytes(text: str | int) -> int:
    """`134217728`, `128m`, `128MB`, `4 MiB` (Spark's notation for byte sizes) as a number of bytes."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        from stitchlake.errors import UsageError

        raise UsageError(f"{text!r} is not a size in bytes (e.g. 134217728, 128m, 128MB)")
    return int(match.group(1)) * 1024 ** " kmgt".index((match.group(2) or " ").lower())


@dataclass(frozen=True)
class Packing:
    """How file slices are packed into input partitions (Spark's file packing, in slices instead of files)."""

    max_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost: int = DEFAULT_OPEN_COST_IN_BYTES
    min_partitions: int = 1

    @classmethod
    def of(cls, options: Mapping[str, str], defaults: Mapping[str, str]) -> Packing:
        """From the read's options, else the session's settings `register` recorded, else Spark's defaults."""

        def pick(name: str, default: int) -> int:
            value = options.get(name, defaults.get(name))
            return default if value in (None, "") else max(1, parse_bytes(str(value)))

        return cls(
            pick(MAX_PARTITION_BYTES, DEFAULT_MAX_PARTITION_BYTES),
            pick(OPEN_COST_IN_BYTES, DEFAULT_OPEN_COST_IN_BYTES),
            pick(MIN_PARTITIONS, os.cpu_count() or 1),
        )

    def split_bytes(self, weights: Sequence[int]) -> int:
        """The most one partition holds: `max_bytes`, lowered so a small read still spreads over the cores."""
        per_core = sum(weights) // max(1, self.min_partitions)
        return min(self.max_bytes, max(self.open_cost, per_core))

    def pack(self, weights: Sequence[int]) -> list[list[int]]:
        """Item indices per input partition: the largest first, each partition filled until the next would
        overflow it. Every item counts its bytes plus `open_cost` per file (in `weights` already)."""
        limit = self.split_bytes(weights)
        out: list[list[int]] = []
        current: list[int] = []
        size = 0
        for index in sorted(range(len(weights)), key=lambda i: -weights[i]):
            if current and size + weights[index] > limit:
                out.append(current)
                current, size = [], 0
            current.append(index)
            size += weights[index]
        if current:
            out.append(current)
        return out
