"""Lock providers by name (`concurrency.lock.provider`): the one registry that knows them all.

`filesystem` (also called `storage`) is built on the storage's own create-if-absent: hard links on local disk,
conditional PUTs (`If-None-Match: *`) on S3; `zookeeper` is for many hosts. docs/operations.md ("Running on S3
and on a cluster") compares what each guarantees; docs/architecture.md says how to add one. Each provider is a
factory taking the storage and one typed `LockRequest`; the providers never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stitchlake.concurrency.lock import FileSystemLock, TableLock
from stitchlake.config import LockProvider
from stitchlake.errors import ConfigError
from stitchlake.storage import Storage


@dataclass(frozen=True)
class LockRequest:
    """Everything a provider may need: the `concurrency.lock` settings and who asks for which lock."""

    name: str = "table"
    wait_s: float = 60
    expire_s: float = 30
    hosts: str | None = None
    zk_path: str = "/stitchlake"
    table_id: str = "table"
    owner: str | None = None


def _filesystem(storage: Storage, request: LockRequest) -> TableLock:
    return FileSystemLock(
        storage, name=request.name, wait_s=request.wait_s, expire_s=request.expire_s, owner=request.owner
    )


def _zookeeper(_storage: Storage, request: LockRequest) -> TableLock:
    """kazoo is imported only when this provider is chosen."""
    if not request.hosts:
        raise ConfigError("concurrency.lock.hosts: the zookeeper lock provider needs hosts, e.g. 'zk1:2181,zk2:2181'")
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    return ZooKeeperLock(
        request.hosts,
        zk_path=request.zk_path,
        table_id=request.table_id,
        name=request.name,
        wait_s=request.wait_s,
        expire_s=request.expire_s,
        owner=request.owner,
    )


#: Every provider the config accepts (`config.LockProvider` names them), and how it is built.
PROVIDERS: dict[LockProvider, Callable[[Storage, LockRequest], TableLock]] = {
    LockProvider.FILESYSTEM: _filesystem,
    LockProvider.STORAGE: _filesystem,
    LockProvider.ZOOKEEPER: _zookeeper,
}


def make_lock(storage: Storage, provider: str, request: LockRequest | None = None) -> TableLock:
    """The configured lock provider (`concurrency.lock`) built for `request`."""
    try:
        factory = PROVIDERS[LockProvider(provider)]
    except ValueError:
        known = ", ".join(p.value for p in LockProvider)
        message = f"concurrency.lock.provider: unknown lock provider {provider!r}; use one of {known}"
        raise ConfigError(message) from None
    return factory(storage, request or LockRequest())
