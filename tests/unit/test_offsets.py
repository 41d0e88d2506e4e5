"""How a Kafka ingest shares `--max-records` over the partitions (`services.offsets._capped`): pure, no broker."""

from __future__ import annotations

from typing import Any

import pytest

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


def test_a_reset_left_without_a_share_of_the_budget_is_still_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--reset-offsets earliest --max-records 1` over two partitions: the reset one gets no share of the budget.
    It must still record where it now stands, or the next ingest takes it for never recorded and skips what
    retention took meanwhile without a word. The planner's own logic over what the broker says (the broker is
    stood in for by its answers: offsets per partition; tests/integration/test_kafka.py has the real one)."""
    from types import SimpleNamespace

    from stitchlake.errors import InputRejected
    from stitchlake.io import kafka
    from stitchlake.services import offsets
    from stitchlake.timeline.metadata import DeltaCommit

    source = SimpleNamespace(is_kafka=True, topic="t", starting_offsets="earliest")
    table = SimpleNamespace(config=SimpleNamespace(stream=lambda _s: SimpleNamespace(source=source)))
    state: dict[tuple[str, int], OffsetRange] = {}
    held: dict[int, tuple[int, int]] = {}
    monkeypatch.setattr(offsets, "next_offsets", lambda *_a: {p: r for (_t, p), r in state.items()})
    monkeypatch.setattr(kafka, "topic_state", lambda _s: kafka.TopicState("ID", dict(held)))
    monkeypatch.setattr(kafka, "where", lambda _s: "topic t")

    def ingest(**options: Any) -> None:
        todo = offsets.plan(table, "s", **options)  # type: ignore[arg-type]
        commit = DeltaCommit(stream="s", offsets=tuple(todo.recorded), offset_resets=tuple(todo.resets))
        found = offsets.latest_ranges([commit], tuple(state.values()), "s")
        state.clear()
        state.update(found)

    held.update({0: (0, 100), 1: (0, 100)})
    ingest()
    held.update({0: (0, 200), 1: (150, 300)})  # retention took partition 1's 100..149
    ingest(max_records=1, reset="earliest")
    assert state[("t", 1)].end == 150, "the reset partition records where it went on"
    held.update({1: (250, 300)})  # ... and its 150..249 now, never read
    with pytest.raises(InputRejected, match="partition 1: next offset 150, but the topic starts at 250"):
        ingest()


def test_a_partition_never_recorded_starts_by_the_one_rule_the_planner_and_the_lag_share() -> None:
    from stitchlake.services.offsets import unrecorded_start

    assert unrecorded_start({}, 0, 5, 9, "earliest") == 5, "a first read starts where the topic starts"
    assert unrecorded_start({}, 0, 5, 9, "latest") == 9, "a first `latest` read starts at the end: no lag"
    seen = {0: OffsetRange("t", 0, 0, 7, "id", 2), 1: OffsetRange("t", 1, 0, 3, "id", 2)}
    assert unrecorded_start(seen, 2, 5, 9, "latest") == 0, "added since the last ingest: owed from offset 0"
    older = {0: OffsetRange("t", 0, 0, 7, "id")}  # commits from before the count was recorded
    assert unrecorded_start(older, 1, 5, 9, "earliest") == 5
