"""Shared fixtures. Real parts only: real files on disk, real processes, real ZooKeeper, real spark-submit, a real
S3 server (Ceph's RADOS Gateway), a real Spark standalone cluster and a real Trino server, each started once per
session."""

from __future__ import annotations

pytest_plugins = ["zookeeper_server", "spark_fixtures", "s3_server", "spark_cluster", "trino_server", "kafka_server"]
