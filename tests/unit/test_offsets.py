"""How a Kafka ingest shares `--max-records` over the partitions (`services.offsets._capped`): pure, no broker."""

from __future__ import annotations

from stitchlake.services.offsets import _capped
from stitchlake.timeline.metadata import OffsetRange


def test_a_budget_smaller_than_the_busy_partitions_reaches_every_partition_in_turn() -> None:
    """Two records per ingest over five partitions with records: the lowest-numbered partitions used to take the
    whole budget every time, and the others never got a record."""
    starts = dict.fromkeys(range(5), 0)
    for _ingest in range(10):
        ranges = [OffsetRange("t", p, starts[p], starts[p] + 100) for p in range(5)]
        read, unread = _capped(ranges, 2)
        assert sum(r.size for r in read) == 2
        assert {r.partition for r in read} | {r.partition for r in unread} == set(range(5))
        assert all(r.size == 0 for r in unread)
        starts.update({r.partition: r.end for r in read})
    assert sorted(starts.values()) == [4, 4, 4, 4, 4], starts


def test_a_budget_is_shared_evenly_and_empty_ranges_are_kept_as_positions() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 3)]
    read, unread = _capped(ranges, 8)
    assert {r.partition: (r.start, r.end) for r in read} == {0: (0, 5), 1: (5, 5), 2: (0, 3)}
    assert unread == []
