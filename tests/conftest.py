"""Shared fixtures (tests/support). Real parts only: real files on disk, real processes, real ZooKeeper, real
spark-submit, a real S3 server (Ceph's RADOS Gateway), a real Spark standalone cluster and a real Trino server, each
started once per session."""

from __future__ import annotations

pytest_plugins = [
    "tests.support.zookeeper_server",
    "tests.support.spark_fixtures",
    "tests.support.s3_server",
    "tests.support.spark_cluster",
    "tests.support.trino_server",
    "tests.support.kafka_server",
]
