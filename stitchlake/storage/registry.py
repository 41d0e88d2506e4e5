"""One registry of storage backends keyed by URL scheme: a local path (or `file://`) or an object store.

It is also the one place that knows how a location is written: `scheme://...` is a URI (kept as written),
anything else a path on this machine (made absolute). The config, the landing files and the published formats ask
these functions rather than look for `://` themselves, so a location means the same thing everywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from stitchlake.errors import ConfigError
from stitchlake.storage.base import Storage

#: Scheme -> factory(uri, options). Backends register themselves lazily so a local run never imports obstore.
Factory = Callable[[str, Mapping[str, str]], Storage]


def _local(uri: str, _options: Mapping[str, str]) -> Storage:
    from stitchlake.storage.local import LocalStorage

    return LocalStorage(unquote(urlparse(uri).path) if scheme_of(uri) == "file" else uri)


def _s3(uri: str, options: Mapping[str, str]) -> Storage:
    from stitchlake.storage.s3 import S3Storage  # imports obstore only when a table or folder is on S3

    return S3Storage(uri, options)


BACKENDS: dict[str, Factory] = {"": _local, "file": _local, "s3": _s3}
#: What to put a table on instead of a store stitchlake does not reach.
_ELSEWHERE = "is not implemented; put the table on local or mounted disk, or on S3"
#: Schemes people write for stores we reach another way, with what to write instead.
HINTS = {
    "s3a": "write s3:// (stitchlake reaches S3 itself, without Hadoop's s3a connector)",
    "s3n": "write s3://",
    **{scheme: f"{store} {_ELSEWHERE}" for scheme, store in (("hdfs", "HDFS"), ("gs", "Google Cloud Storage"))},
    **{scheme: f"Azure storage {_ELSEWHERE}" for scheme in ("abfs", "abfss")},
}


#: A URI names its scheme and `://` first; a scheme has two characters at least, so `C:\\` or `C://` is a path.
_URI = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")
#: `s3:/bucket`, `hdfs:/x`: a URI with one slash, refused rather than taken for a folder (`file:/` is a file URI).
_ONE_SLASH = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


#: `file:/tmp/t`: Hadoop's spelling of a file URI, which Spark hands a data source for `LOCATION '/tmp/t'`.
_FILE_ONE_SLASH = re.compile(r"file:/(?!/)", re.IGNORECASE)


def scheme_of(location: str) -> str:
    """The scheme of a location written as a URI (lower case), "" for a path."""
    text = str(location)
    found = _URI.match(text)
    if found:
        return found.group(1).lower()
    return "file" if _FILE_ONE_SLASH.match(text) else ""


def is_uri(location: str) -> bool:
    """Whether a location is written as a URI (`s3://...`, `file:///...`), not as a path on this machine."""
    return bool(scheme_of(location))


def absolute(location: str) -> str:
    """A location as every process sees it: a local path made absolute, a URI as written."""
    return str(location) if is_uri(location) else str(Path(location).resolve())


def is_local(location: str) -> bool:
    """Whether a location is on this machine's disk (a path, or a `file://` URI), asked before any storage is
    built (a config being checked): the registry knows which backends are local."""
    return BACKENDS.get(scheme_of(location)) is _local


def without_file_scheme(location: str) -> str:
    """A `file://` URI as the path it names, as written (delta-rs and pyiceberg list the files they wrote under a
    folder this way); any other location unchanged."""
    text = str(location)
    if scheme_of(text) != "file":
        return text
    return text[len("file://") :] if _URI.match(text) else text[len("file:") :]


def local_place(location: str) -> str:
    """One spelling of a place: on this machine an absolute path, links not followed (a `file://` URI as the path
    it holds), so a folder written two ways compares equal; any other location as written."""
    return os.path.abspath(without_file_scheme(location)) if is_local(location) else str(location)


def location_refusal(uri: str) -> str | None:
    """Why no storage serves a location (a scheme we do not reach, a URI with one slash), or None: asked when a
    config is read, so the error names the YAML path, and again by `storage_for`."""
    scheme = scheme_of(uri)
    one_slash = None if scheme else _ONE_SLASH.match(str(uri))
    if one_slash:
        written = one_slash.group(1)
        return (
            f"{uri!r}: write {written}:// with two slashes (or a plain path): {written}:/ is not read as a URI, and "
            "a folder of that name is surely not meant"
        )
    if scheme not in BACKENDS:
        known = ", ".join(sorted(f"{s}://" for s in BACKENDS if s)) + " and local paths"
        hint = f"; {HINTS[scheme]}" if scheme in HINTS else ""
        return f"{uri!r}: {scheme}:// is not a supported storage (supported: {known}){hint}"
    return None


def storage_for(uri: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage backend for a location (a local path or a URI), with backend `options` (e.g. credentials)."""
    refusal = location_refusal(uri)
    if refusal is not None:
        raise ConfigError(refusal)
    return BACKENDS[scheme_of(uri)](str(uri), options or {})
