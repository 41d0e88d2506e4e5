"""Lock providers by name (`concurrency.lock.provider`): one place that knows them all.

`filesystem` (also called `storage`) is built on the storage's own create-if-absent: hard links on local disk,
conditional PUTs (`If-None-Match: *`) on S3; `zookeeper` is for many hosts. docs/operations.md ("Running on S3
and on a cluster") compares what each guarantees. The providers import this module's caller-facing factory,
never each other.
"""

from __future__ import annotations

from stitchlake.concurrency.lock import FileSystemLock, TableLock
from stitchlake.errors import ConfigError
from stitchlake.storage import Storage


def make_lock(
    storage: Storage,
    *,
    provider: str,
    name: str = "table",
    wait_s: float = 60,
    expire_s: float = 30,
    hosts: str | None = None,
    zk_path: str = "/stitchlake",
    table_id: str = "table",
    owner: str | None = None,
) -> TableLock:
    """The configured lock provider (`concurrency.lock`); kazoo is imported only for `zookeeper`."""
    if provider in ("filesystem", "storage"):
        return FileSystemLock(storage, name=name, wait_s=wait_s, expire_s=expire_s, owner=owner)
    if provider == "zookeeper":
        if not hosts:
            raise ConfigError(
                "concurrency.lock.hosts: the zookeeper lock provider needs hosts, e.g. 'zk1:2181,zk2:2181'"
            )
        from stitchlake.concurrency.zookeeper import ZooKeeperLock

        return ZooKeeperLock(
            hosts,
            zk_path=zk_path,
            table_id=table_id,
            name=name,
            wait_s=wait_s,
            expire_s=expire_s,
            owner=owner,
        )
    raise ConfigError(
        f"concurrency.lock.provider: unknown lock provider {provider!r}; use filesystem (or storage) or zookeeper"
    )
