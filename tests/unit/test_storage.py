"""The storage contract on both backends: local disk and a real S3 server (Ceph RGW, tests/support/s3_server.py).

Every test that takes `storage` runs twice. The atomic primitives the timeline and the locks are built on are
raced by real processes (spawned, never forked: obstore hangs in a child forked after it did I/O).
"""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import pytest

from stitchlake.errors import ConfigError
from stitchlake.storage import LocalStorage, storage_for
from stitchlake.storage.s3 import S3Storage


def test_storage_for_schemes(tmp_path: Path) -> None:
    assert isinstance(storage_for(str(tmp_path)), LocalStorage)
    local = storage_for(f"file://{tmp_path}")
    assert isinstance(local, LocalStorage) and local.root == str(tmp_path)
    from stitchlake.storage.s3 import S3Storage  # building one makes no request

    s3 = storage_for("s3://bucket/some/table/")
    assert isinstance(s3, S3Storage) and s3.uri == "s3://bucket/some/table"
    assert s3.describe(".stitch/table.json") == "s3://bucket/some/table/.stitch/table.json"
    assert [outer.uri for outer in s3.ancestors()] == ["s3://bucket/some", "s3://bucket"]
    for bad, words in (
        ("hdfs://nn/warehouse/t", "hdfs:// is not a supported storage"),
        ("s3a://bucket/t", "write s3://"),
        ("gs://bucket/t", "gs:// is not a supported storage"),
        ("s3:///nobucket", "s3://bucket"),
        ("s3://bucket/t?versionId=1", "no query"),
    ):
        with pytest.raises(ConfigError, match=words):
            storage_for(bad)
    with pytest.raises(ConfigError, match="unknown S3 setting"):
        storage_for("s3://bucket/t", {"secret": "x"})


def test_s3_storage_pickles_as_location_and_settings_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark ships storage objects to executors by pickling: never the client, nor what it read from the env."""
    secret = f"env-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    storage = storage_for("s3://bucket/t", {"endpoint": "http://127.0.0.1:9", "region": "eu-west-1"})
    assert isinstance(storage, S3Storage)
    _ = storage.store  # a client built (it took the credentials from the environment)
    data = pickle.dumps(storage)
    assert secret.encode() not in data and b"env-key" not in data
    again = pickle.loads(data)
    assert again == storage and again.options == {"endpoint": "http://127.0.0.1:9", "region": "eu-west-1"}
