"""Lock providers by name (`concurrency.lock.provider`): the one registry that knows them all.

`filesystem` (also called `storage`) is built on the storage's own create-if-absent: hard links on local disk,
conditional PUTs (`If-None-Match: *`) on S3; `zookeeper` is for many hosts. docs/operations.md ("Running on S3
and on a cluster") compares what each guarantees; docs/architecture.md says how to add one.

Each provider has its own settings class, which the config validates (`config.LOCK_SPECS` maps a name to it), and
a factory here taking the storage, those settings and a `LockRequest` (who asks for which lock, the same for every
provider); the providers never import each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from stitchlake.concurrency.lock import FileSystemLock, TableLock
from stitchlake.config import LockProvider
from stitchlake.config.locks import LOCK_SPECS, AnyLockSpec, FileSystemLockSpec, LockSpec, ZooKeeperLockSpec
from stitchlake.config.parse import explain
from stitchlake.errors import ConfigError
from stitchlake.storage import Storage

S = TypeVar("S", bound=LockSpec)


@dataclass(frozen=True)
class LockRequest:
    """Who asks for which lock, whatever the provider: the lock's name, the table it guards, the owner to record."""

    name: str = "table"
    table_id: str = "table"
    owner: str | None = None


@dataclass(frozen=True)
class Provider(Generic[S]):
    """One lock provider: the class of its `concurrency.lock` settings and how it builds a lock from them."""

    settings: type[S]
    build: Callable[[Storage, S, LockRequest], TableLock]


def _filesystem(storage: Storage, spec: FileSystemLockSpec, request: LockRequest) -> TableLock:
    storage.require_conditional_put("the filesystem lock provider")
    return FileSystemLock(storage, name=request.name, wait_s=spec.wait_s, expire_s=spec.expire_s, owner=request.owner)


def _zookeeper(_storage: Storage, spec: ZooKeeperLockSpec, request: LockRequest) -> TableLock:
    """kazoo is imported only when this provider is chosen."""
    from stitchlake.concurrency.zookeeper import ZooKeeperLock

    return ZooKeeperLock(
        spec.hosts,
        zk_path=spec.zk_path,
        table_id=request.table_id,
        name=request.name,
        wait_s=spec.wait_s,
        expire_s=spec.expire_s,
        owner=request.owner,
    )


_FACTORIES: tuple[Provider[Any], ...] = (
    Provider(FileSystemLockSpec, _filesystem),
    Provider(ZooKeeperLockSpec, _zookeeper),
)


def _by_name() -> dict[LockProvider, Provider[Any]]:
    """Every provider the config accepts, with its settings class and factory (a name without one fails here)."""
    found = {}
    for name, settings in LOCK_SPECS.items():
        chosen = [p for p in _FACTORIES if p.settings is settings]
        if not chosen:
            raise TypeError(f"lock provider {name.value} has settings {settings.__name__} but no factory")
        found[name] = chosen[0]
    return found


PROVIDERS: dict[LockProvider, Provider[Any]] = _by_name()
_SETTINGS: TypeAdapter[FileSystemLockSpec | ZooKeeperLockSpec] = TypeAdapter(AnyLockSpec)


def lock_spec(settings: Mapping[str, Any]) -> FileSystemLockSpec | ZooKeeperLockSpec:
    """`concurrency.lock` settings given as a mapping, checked as a config file's are (ConfigError naming the key)."""
    document = dict(settings)
    try:
        return _SETTINGS.validate_python(document)
    except ValidationError as exc:
        path, message = explain(exc.errors(include_url=False)[0], document)
        raise ConfigError(f"concurrency.lock.{path}: {message}" if path else f"concurrency.lock: {message}") from None


def make_lock(storage: Storage, spec: LockSpec | str = "filesystem", request: LockRequest | None = None) -> TableLock:
    """The lock `spec` configures (`concurrency.lock`; a provider's name alone means its defaults), for `request`."""
    settings = lock_spec({"provider": spec}) if isinstance(spec, str) else spec
    provider = PROVIDERS[LockProvider(settings.provider)]
    if not isinstance(settings, provider.settings):
        raise ConfigError(f"concurrency.lock: {type(settings).__name__} is not the settings of {settings.provider}")
    return provider.build(storage, settings, request or LockRequest())
