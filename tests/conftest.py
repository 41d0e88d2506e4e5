"""Shared fixtures. Real parts only: real files on disk, real processes, real ZooKeeper, real spark-submit."""

from __future__ import annotations

pytest_plugins = ["zookeeper_server", "spark_fixtures"]
