"""Streams fed from Kafka topics (issue 29): exactly-once ingest by offsets recorded in the table's commits.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_kafka.py).
"""

from __future__ import annotations

from scripts import kafka_broker as broker


def test_a_drawn_cluster_id_is_never_read_as_an_option() -> None:
    """One id in 64 would start with `-`, which kafka-storage reads as an option (a broker that never starts)."""
    drawn = [broker.cluster_id() for _ in range(2000)]
    assert not [d for d in drawn if d.startswith("-")]
    assert all(len(d) == 22 for d in drawn) and len(set(drawn)) == len(drawn)
