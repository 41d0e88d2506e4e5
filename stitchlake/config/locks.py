"""The `concurrency.lock:` section, read with its provider's own settings class (`LOCK_SPECS`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)

from . import yaml_schema as schema
from .choices import LockProvider
from .fields import Seconds, Spec, Text, as_zk_path, refuse


class LockSpec(Spec):
    """The short table lock, held only to draw instant times and publish: what every provider takes. Each provider
    has its own settings class below (`LOCK_SPECS`); the YAML's `provider` says which one reads the section."""

    provider: LockProvider = LockProvider.FILESYSTEM
    """filesystem or its other name storage (lock objects under .stitch/locks/, created with the storage's
    atomic create: local disk and S3 alike), or zookeeper (writers on many hosts)."""
    wait_s: Seconds = 60.0
    """Seconds to wait for the lock before giving up (exit code 4)."""
    expire_s: Seconds = 30.0
    """Seconds after which a lock whose holder stopped renewing it may be taken over."""


def _provider_schema(*names: LockProvider) -> WithJsonSchema:
    """The names one provider's settings answer to, or a `${VAR}` holding one (as every enum in the schema)."""
    return WithJsonSchema(
        {"anyOf": [{"enum": [n.value for n in names]}, {"type": "string", "pattern": schema.ENV_REFERENCE}]}
    )


ZkPath = Annotated[str, Field(pattern="^/"), BeforeValidator(as_zk_path)]


class FileSystemLockSpec(LockSpec):
    """`provider: filesystem` (or `storage`): lock objects created with the storage's atomic create."""

    provider: Annotated[
        Literal[LockProvider.FILESYSTEM, LockProvider.STORAGE],
        _provider_schema(LockProvider.FILESYSTEM, LockProvider.STORAGE),
    ] = LockProvider.FILESYSTEM
    """filesystem, or its other name storage: lock objects under .stitch/locks/, created with the storage's atomic
    create (local disk and S3 alike). The default."""


class ZooKeeperLockSpec(LockSpec):
    """`provider: zookeeper`: an ephemeral znode per lock, for writers on many hosts."""

    provider: Annotated[Literal[LockProvider.ZOOKEEPER], _provider_schema(LockProvider.ZOOKEEPER)]
    """zookeeper: writers on many hosts."""
    hosts: Text
    """ZooKeeper connect string (h1:2181,h2:2181); required for zookeeper, refused for the others."""
    zk_path: ZkPath = "/stitchlake"
    """Znode under which the ZooKeeper locks live."""

    @model_validator(mode="before")
    @classmethod
    def _hosts_given(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("hosts") is None:
            raise refuse("is required with provider: zookeeper (a connect string, e.g. h1:2181,h2:2181)", "hosts")
        return data


#: Each provider's own settings (`concurrency.providers` maps the same names to the lock each builds).
LOCK_SPECS: dict[LockProvider, type[FileSystemLockSpec | ZooKeeperLockSpec]] = {
    LockProvider.FILESYSTEM: FileSystemLockSpec,
    LockProvider.STORAGE: FileSystemLockSpec,
    LockProvider.ZOOKEEPER: ZooKeeperLockSpec,
}


def _lock_by_provider(value: Any, _handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """Read a `lock:` section with its provider's settings class; a key of another provider's is refused
    naming that provider, so the YAML keeps one flat shape whatever the provider."""
    if isinstance(value, LockSpec):
        return value
    if not isinstance(value, dict):  # an empty section, or not a mapping: the default provider says what is wrong
        return FileSystemLockSpec.model_validate(value, context=info.context)
    written = value.get("provider", LockProvider.FILESYSTEM.value)
    try:
        spec = LOCK_SPECS[LockProvider(written)]
    except (ValueError, TypeError):
        choices = ", ".join(p.value for p in LockProvider)
        raise refuse(f"{written!r} is not one of: {choices}", "provider") from None
    for key in value:
        owners = [p.value for p, other in LOCK_SPECS.items() if key in other.yaml_keys()]
        if key not in spec.yaml_keys() and owners:
            raise refuse(f"only applies to provider: {', '.join(owners)}", at=str(key))
    return spec.model_validate(value, context=info.context)


#: `concurrency.lock`: the settings of the provider it names.
AnyLockSpec = Annotated[FileSystemLockSpec | ZooKeeperLockSpec, WrapValidator(_lock_by_provider)]
