"""Each lock provider reads its own typed settings from the one flat `concurrency.lock` section, and the registry
maps each provider name to that settings class and the factory that builds its lock."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from stitchlake.concurrency.lock import FileSystemLock
from stitchlake.concurrency.providers import PROVIDERS, LockRequest, lock_spec, make_lock
from stitchlake.config import LockProvider, parse_config
from stitchlake.config.locks import LOCK_SPECS, FileSystemLockSpec, ZooKeeperLockSpec
from stitchlake.errors import ConfigError
from stitchlake.storage import LocalStorage
from tests.support.tables import THREE_STREAMS


def _lock(tmp_path: Path, lock: Any) -> FileSystemLockSpec | ZooKeeperLockSpec:
    document = copy.deepcopy(THREE_STREAMS)
    document["concurrency"] = {"lock": lock}
    return parse_config(document, file="t.yaml", base=tmp_path).concurrency.lock


def test_each_provider_reads_its_own_settings_from_the_same_yaml_shape(tmp_path: Path) -> None:
    assert _lock(tmp_path, None) == FileSystemLockSpec()
    assert _lock(tmp_path, {"provider": "storage", "wait_s": "5"}) == FileSystemLockSpec(
        provider=LockProvider.STORAGE, wait_s=5.0
    )
    found = _lock(tmp_path, {"provider": "zookeeper", "hosts": "h1:2181", "zk_path": "/x", "expire_s": 9})
    assert isinstance(found, ZooKeeperLockSpec)
    assert (found.hosts, found.zk_path, found.wait_s, found.expire_s) == ("h1:2181", "/x", 60.0, 9.0)
    assert not hasattr(FileSystemLockSpec(), "zk_path") and not hasattr(FileSystemLockSpec(), "hosts")


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ({"provider": "zookeeper"}, "concurrency.lock.hosts: is required with provider: zookeeper"),
        ({"hosts": "h:1"}, "concurrency.lock.hosts: only applies to provider: zookeeper"),
        # a ZooKeeper setting under another provider would be read and ignored: refused, whatever its value
        (
            {"provider": "filesystem", "zk_path": "/stitchlake"},
            "concurrency.lock.zk_path: only applies to provider: zookeeper",
        ),
        ({"provider": "storage", "zk_path": "x"}, "concurrency.lock.zk_path: only applies to provider: zookeeper"),
        ({"provider": "etcd"}, "concurrency.lock.provider: 'etcd' is not one of: filesystem, storage, zookeeper"),
        ({"provider": "zookeeper", "hosts": "h:1", "zk_path": "x"}, "concurrency.lock.zk_path: must start with /"),
        ({"provider": "zookeeper", "hosts": "h:1", "wait_s": "x"}, "concurrency.lock.wait_s: must be a number"),
        ({"wait_s": 1, "what": 1}, "concurrency.lock.what: unknown key (allowed here: provider, wait_s, expire_s)"),
    ],
)
def test_a_setting_of_another_provider_or_a_bad_value_is_refused_with_its_yaml_path(
    tmp_path: Path, lock: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(f"t.yaml: {message}")):
        _lock(tmp_path, lock)
    with pytest.raises(ConfigError, match="^" + re.escape(message.split(":")[0] + ":")):
        lock_spec(lock)


def test_the_registry_maps_every_provider_to_its_settings_and_factory(tmp_path: Path) -> None:
    assert set(PROVIDERS) == set(LockProvider) == set(LOCK_SPECS)
    assert all(PROVIDERS[name].settings is LOCK_SPECS[name] for name in LockProvider)
    storage = LocalStorage(str(tmp_path))
    lock = make_lock(storage, lock_spec({"provider": "storage", "wait_s": 2, "expire_s": 7}), LockRequest(name="t"))
    assert isinstance(lock, FileSystemLock) and (lock.wait_s, lock.expire_s) == (2.0, 7.0)


class _NoConditionalPuts(LocalStorage):
    conditional_put = False


def test_the_filesystem_lock_refuses_a_storage_without_conditional_puts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the filesystem lock provider needs a storage that creates a file only if"):
        make_lock(_NoConditionalPuts(str(tmp_path)), "filesystem")
