"""One registry of storage backends keyed by URL scheme: a local path (or `file://`) or an object store."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlparse

from stitchlake.errors import ConfigError
from stitchlake.storage.base import Storage

#: Scheme -> factory(uri, options). Backends register themselves lazily so a local run never imports obstore.
Factory = Callable[[str, Mapping[str, str]], Storage]


def _local(uri: str, _options: Mapping[str, str]) -> Storage:
    from stitchlake.storage.local import LocalStorage

    parsed = urlparse(uri)
    return LocalStorage(unquote(parsed.path) if parsed.scheme == "file" else uri)


BACKENDS: dict[str, Factory] = {"": _local, "file": _local}


def scheme_of(uri: str) -> str:
    parsed = urlparse(str(uri))
    if len(parsed.scheme) == 1 and os.name == "nt":  # C:\...
        return ""
    return parsed.scheme.lower()


def storage_for(uri: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage backend for a location (a local path or a URI), with backend `options` (e.g. credentials)."""
    scheme = scheme_of(uri)
    factory = BACKENDS.get(scheme)
    if factory is None:
        known = ", ".join(sorted(f"{s}://" for s in BACKENDS if s)) + " and local paths"
        raise ConfigError(f"{uri!r}: {scheme}:// is not a supported storage (supported: {known})")
    return factory(str(uri), options or {})
