"""One registry of storage backends keyed by URL scheme: a local path (or `file://`) or an object store."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from stitchlake.errors import ConfigError
from stitchlake.storage.base import Storage

#: Scheme -> factory(uri, options). Backends register themselves lazily so a local run never imports obstore.
Factory = Callable[[str, Mapping[str, str]], Storage]


def _local(uri: str, _options: Mapping[str, str]) -> Storage:
    from stitchlake.storage.local import LocalStorage

    parsed = urlparse(uri)
    return LocalStorage(unquote(parsed.path) if parsed.scheme == "file" else uri)


def _s3(uri: str, options: Mapping[str, str]) -> Storage:
    from stitchlake.storage.s3 import S3Storage  # imports obstore only when a table or folder is on S3

    return S3Storage(uri, options)


BACKENDS: dict[str, Factory] = {"": _local, "file": _local, "s3": _s3}
#: Schemes people write for stores we reach another way, with what to write instead.
HINTS = {
    "s3a": "write s3:// (stitchlake reaches S3 itself, without Hadoop's s3a connector)",
    "s3n": "write s3://",
    "hdfs": "HDFS is not implemented; put the table on local or mounted disk, or on S3",
}


def scheme_of(uri: str) -> str:
    parsed = urlparse(str(uri))
    if len(parsed.scheme) == 1 and os.name == "nt":  # C:\...
        return ""
    return parsed.scheme.lower()


def absolute(location: str) -> str:
    """A location as every process sees it: a local path made absolute, a URI as written."""
    return str(location) if scheme_of(str(location)) else str(Path(location).resolve())


def storage_for(uri: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage backend for a location (a local path or a URI), with backend `options` (e.g. credentials)."""
    scheme = scheme_of(uri)
    factory = BACKENDS.get(scheme)
    if factory is None:
        known = ", ".join(sorted(f"{s}://" for s in BACKENDS if s)) + " and local paths"
        hint = f"; {HINTS[scheme]}" if scheme in HINTS else ""
        raise ConfigError(f"{uri!r}: {scheme}:// is not a supported storage (supported: {known}){hint}")
    return factory(str(uri), options or {})
