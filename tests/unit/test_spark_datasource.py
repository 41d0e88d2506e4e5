"""Spark engine, in one real in-process session: source formats, batch order, the data source, bad rows.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest:
tests/integration/test_spark_datasource.py).
"""

from __future__ import annotations


def test_slices_are_packed_by_size_as_spark_packs_files() -> None:
    from stitchlake.spark.packing import Packing, parse_bytes

    weights = [60, 50, 40, 30, 5]
    assert Packing(max_bytes=100, open_cost=10, min_partitions=1).pack(weights) == [[0], [1, 2], [3, 4]]
    # Four cores: at most 185 / 4 = 46 per partition, so the small read still keeps four tasks busy.
    assert Packing(max_bytes=100, open_cost=10, min_partitions=4).pack(weights) == [[0], [1], [2], [3, 4]]
    assert Packing(max_bytes=1000, open_cost=10, min_partitions=1).pack(weights) == [[0, 1, 2, 3, 4]]
    assert Packing(max_bytes=1, open_cost=1, min_partitions=1).pack(weights) == [[0], [1], [2], [3], [4]]
    assert Packing().pack([]) == []
    assert [parse_bytes(t) for t in ("134217728", "128m", "128MB", "4 MiB", "1b", "2k")] == [
        134217728,
        134217728,
        134217728,
        4194304,
        1,
        2048,
    ]
    packing = Packing.of({"maxpartitionbytes": "64m"}, {"maxpartitionbytes": "1g", "opencostinbytes": "1m"})
    assert (packing.max_bytes, packing.open_cost) == (64 << 20, 1 << 20)
