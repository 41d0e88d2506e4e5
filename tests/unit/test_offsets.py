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


class FakeTopic:
    """The planner's own logic over what the broker says: the broker is stood in for by its answers (the topic id
    and offsets per partition; tests/integration/test_kafka.py has the real one), the table by its recorded
    ranges."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ordering: tuple[str, ...] = ()) -> None:
        from types import SimpleNamespace

        from stitchlake.io import kafka
        from stitchlake.services import offsets

        source = SimpleNamespace(is_kafka=True, topic="t", starting_offsets="earliest")
        stream = SimpleNamespace(source=source, ordering=ordering)
        self.table = SimpleNamespace(config=SimpleNamespace(stream=lambda _s: stream))
        self.state: dict[tuple[str, int], OffsetRange] = {}
        self.held: dict[int, tuple[int, int]] = {}
        self.topic_id: str | None = "ID"
        monkeypatch.setattr(offsets, "next_offsets", lambda *_a: {p: r for (_t, p), r in self.state.items()})
        monkeypatch.setattr(kafka, "topic_state", lambda _s: kafka.TopicState(self.topic_id, dict(self.held)))
        monkeypatch.setattr(kafka, "where", lambda _s: "topic t")

    def ingest(self, **options: Any) -> list[OffsetRange]:
        """Plan an ingest and record it as its deltacommit would; the ranges it reads."""
        from stitchlake.services import offsets
        from stitchlake.timeline.metadata import DeltaCommit

        todo = offsets.plan(self.table, "s", **options)  # type: ignore[arg-type]
        commit = DeltaCommit(stream="s", offsets=tuple(todo.recorded), offset_resets=tuple(todo.resets))
        found = offsets.latest_ranges([commit], tuple(self.state.values()), "s")
        self.state.clear()
        self.state.update(found)
        return todo.reads


def test_a_reset_left_without_a_share_of_the_budget_is_still_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--reset-offsets earliest --max-records 1` over two partitions: the reset one gets no share of the budget.
    It must still record where it now stands, or the next ingest takes it for never recorded and skips what
    retention took meanwhile without a word."""
    from stitchlake.errors import InputRejected

    topic = FakeTopic(monkeypatch)
    topic.held.update({0: (0, 100), 1: (0, 100)})
    topic.ingest()
    topic.held.update({0: (0, 200), 1: (150, 300)})  # retention took partition 1's 100..149
    topic.ingest(max_records=1, reset="earliest")
    assert topic.state[("t", 1)].end == 150, "the reset partition records where it went on"
    topic.held.update({1: (250, 300)})  # ... and its 150..249 now, never read
    with pytest.raises(InputRejected, match="partition 1: next offset 150, but the topic starts at 250"):
        topic.ingest()


@pytest.mark.parametrize("ordering", [(), ("updated_at",)], ids=["commit-time", "event-time"])
def test_a_truncated_log_is_not_read_again_where_older_values_would_win(
    monkeypatch: pytest.MonkeyPatch, ordering: tuple[str, ...]
) -> None:
    """A partition whose log was truncated (same topic id, it ends before the table's next offset: an unclean
    leader election) holds, before its end, records the table already ingested. `--reset-offsets earliest` read
    them again, so on a stream ordered by commit time their older values overwrote newer ones. Nor is a re-read
    harmless on an event-time stream: a re-read record wins a tie of the ordering against a newer one (its commit
    is later), and a key erased since comes back. Refused on every stream (nothing read); `latest` goes on from the
    end."""
    from stitchlake.errors import InputRejected, UsageError

    topic = FakeTopic(monkeypatch, ordering)
    topic.held.update({0: (0, 100), 1: (0, 50)})
    topic.ingest()
    topic.held.update({0: (0, 120), 1: (0, 40)})  # partition 1 truncated: 40..49 gone, 0..39 already ingested
    with pytest.raises(
        InputRejected, match="partition 1: next offset 50, but the topic ends at 40: its log was trunc"
    ) as lost:
        topic.ingest()
    assert "`stitch ingest --stream s --reset-offsets latest`" in str(lost.value), lost.value
    assert "reset-offsets earliest`" not in str(lost.value), "the refused reset is not offered"
    with pytest.raises(UsageError, match=r"would ingest again records the table already has.*1 \(next offset 50"):
        topic.ingest(reset="earliest")
    assert topic.state[("t", 1)].end == 50, "nothing recorded"
    reads = topic.ingest(reset="latest")
    starts = {r.partition: (r.start, r.end) for r in reads}
    assert starts[0] == (100, 120), "the partition that was not truncated goes on where it was"
    assert starts.get(1) is None
    assert topic.state[("t", 1)].end == 40


def test_a_topic_created_again_without_ids_is_still_read_from_its_start_by_earliest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without topic ids (a broker before 2.8) a topic that ends before the next offset may have been created again:
    `earliest` reads it from its start, commit-time ordering or not (only a known, unchanged id says truncated)."""
    topic = FakeTopic(monkeypatch)
    topic.topic_id = None
    topic.held.update({0: (0, 100)})
    topic.ingest()
    topic.held.update({0: (0, 30)})
    assert [(r.start, r.end) for r in topic.ingest(reset="earliest")] == [(0, 30)]


def test_a_partition_never_recorded_starts_by_the_one_rule_the_planner_and_the_lag_share() -> None:
    from stitchlake.services.offsets import unrecorded_start

    assert unrecorded_start({}, 0, 5, 9, "earliest") == 5, "a first read starts where the topic starts"
    assert unrecorded_start({}, 0, 5, 9, "latest") == 9, "a first `latest` read starts at the end: no lag"
    seen = {0: OffsetRange("t", 0, 0, 7, "id", 2), 1: OffsetRange("t", 1, 0, 3, "id", 2)}
    assert unrecorded_start(seen, 2, 5, 9, "latest") == 0, "added since the last ingest: owed from offset 0"
    older = {0: OffsetRange("t", 0, 0, 7, "id")}  # commits from before the count was recorded
    assert unrecorded_start(older, 1, 5, 9, "earliest") == 5
