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
from tests.support.session_servers import file_lock, session_owner, shared_root


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """'127.0.0.1:<port>' of a real Kafka broker that lives for the test session."""
    external = os.environ.get("STITCH_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    root, shared = shared_root(tmp_path_factory)
    workdir = root / "kafka"
    try:
        with file_lock(root / "kafka.lock"):
            workdir.mkdir(exist_ok=True)
            started = kafka_broker_script.start(workdir, watch_pid=session_owner(shared))
    except kafka_broker_script.KafkaBrokerError as exc:
        pytest.fail(f"could not start the Kafka broker:\n{exc}", pytrace=False)
    try:
        yield started.bootstrap
    finally:
        if not shared:
            kafka_broker_script.stop(workdir)
