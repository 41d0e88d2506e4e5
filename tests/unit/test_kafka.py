"""Streams fed from Kafka topics (issue 29): exactly-once ingest by offsets recorded in the table's commits.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_kafka.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from scripts import kafka_broker as broker


def test_a_drawn_cluster_id_is_never_read_as_an_option() -> None:
    """One id in 64 would start with `-`, which kafka-storage reads as an option (a broker that never starts)."""
    drawn = [broker.cluster_id() for _ in range(2000)]
    assert not [d for d in drawn if d.startswith("-")]
    assert all(len(d) == 22 for d in drawn) and len(set(drawn)) == len(drawn)


def test_the_topic_check_before_a_commit_asks_again_after_a_blip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that the topic is still the one planned runs once, after the whole ingest was written: a broker
    that fails to answer once must not throw that work away; one that never answers fails it; another id refuses
    it (exit 5). What the broker answers is given here (tests/integration/test_kafka_topics.py asks a real one)."""
    from stitchlake.config.sources import SourceSpec
    from stitchlake.errors import InputRejected, StitchError
    from stitchlake.io import kafka
    from stitchlake.timeline.metadata import OffsetRange

    source = SourceSpec.model_validate({"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1"})
    answers: list[Any] = []

    def describe(_admin: Any, _source: Any, _timeout: Any = None) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(kafka, "_describe", describe)
    monkeypatch.setattr("stitchlake.io.kafka.time.sleep", lambda _seconds: None)
    read = [OffsetRange("t", 0, 0, 5, "ID")]
    answers[:] = [StitchError("blip"), ("ID", [0])]
    kafka.same_topic(source, read)
    assert answers == [], "asked again after the blip"
    answers[:] = [StitchError("down")] * kafka.SAME_TOPIC_ATTEMPTS
    with pytest.raises(StitchError, match="down"):
        kafka.same_topic(source, read)
    answers[:] = [("OTHER", [0])]
    with pytest.raises(InputRejected, match="topic id ID when planned, OTHER"):
        kafka.same_topic(source, read)
