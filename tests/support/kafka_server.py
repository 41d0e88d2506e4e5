"""pytest plugin: a real, throw-away Kafka broker (KRaft, one node, scripts/kafka_broker.py) for the Kafka tests.

`kafka_broker` (session scope) yields "127.0.0.1:<port>". The broker's jars come from Maven Central on first use
(`scripts/maven_jars.py`, cached in .venv/maven); a failed fetch or start fails the tests that need it. Under
pytest-xdist all workers share one broker (the first to take the file lock starts it); a watchdog stops it when
the xdist controller, or this pytest without xdist, exits, and without xdist the fixture stops it at session end.
`$STITCH_KAFKA_BOOTSTRAP` points the tests at an existing broker instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scripts import kafka_broker as kafka_broker_script
from tests.support.session_servers import serve


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """'127.0.0.1:<port>' of a real Kafka broker that lives for the test session."""
    if external := os.environ.get("STITCH_KAFKA_BOOTSTRAP"):
        yield external
        return
    yield from serve(
        tmp_path_factory,
        "kafka",
        "the Kafka broker",
        lambda workdir, owner: kafka_broker_script.start(workdir, watch_pid=owner).bootstrap,
        kafka_broker_script.stop,
        kafka_broker_script.KafkaBrokerError,
    )
