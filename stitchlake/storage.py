"""Table storage: the only module that knows how files are created, published and removed.

Everything above this layer speaks in paths relative to the table root ("a/b/c.parquet"), so commit
metadata stays portable and no caller can build a path that escapes the table folder. The atomic
primitives (`put_if_absent`, `write_atomic`) are what the timeline and the locks are built on; an
object-store backend implements them with conditional puts instead of links and renames.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from stitchlake.errors import ConfigError, StitchError

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def clean_relpath(path: str) -> str:
    """Normalise a table-relative path and refuse anything that would leave the table folder."""
    text = str(path).replace("\\", "/")
    if text.startswith("/") or (os.name == "nt" and len(text) > 1 and text[1] == ":"):
        raise StitchError(f"path {path!r} must be relative to the table folder")
    norm = posixpath.normpath(text)
    if norm == ".":
        return ""
    if norm == ".." or norm.startswith("../"):
        raise StitchError(f"path {path!r} escapes the table folder")
    return norm


class Storage(ABC):
    """A table's files, addressed by paths relative to the table root."""

    #: Where the table lives, as the user wrote it (a local path or a URI).
    uri: str

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file; FileNotFoundError if absent."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> bool:
        """Create `path` with `data` only if it does not exist. True if we created it.

        Exactly one of any number of racing callers wins, and nobody ever sees the file half-written.
        `ready`, if given, runs once the content is durable, just before the create: the last moment to refuse
        (publishing fences on the table lock there, so a stall during the slow part cannot outlive the lease).
        """

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Create or replace `path`; readers see the old or the new content, never a mix."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or folder exists at `path`."""

    @abstractmethod
    def list_names(self, folder: str) -> list[str]:
        """Names (not paths) of the entries directly in `folder`; empty if the folder is absent."""

    @abstractmethod
    def walk_files(self, folder: str = "") -> Iterator[str]:
        """Every file under `folder`, as table-relative paths (used by audits, never by reads)."""

    @abstractmethod
    def delete(self, path: str) -> bool:
        """Delete one file (or a folder written as one unit, e.g. by Spark); False if it was already gone."""

    @abstractmethod
    def delete_tree(self, folder: str) -> None:
        """Delete a folder and everything in it, if it exists."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes of a file."""

    @abstractmethod
    def makedirs(self, folder: str) -> None:
        """Create a folder and its parents (a no-op on object stores)."""

    @abstractmethod
    def abspath(self, path: str) -> str:
        """The path to hand to `filesystem` for a table-relative path."""

    @abstractmethod
    def ancestors(self) -> list[Storage]:
        """Storage rooted at each folder above this one, nearest first (to refuse nested tables)."""

    @property
    @abstractmethod
    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for bulk reads and writes of data files."""


class LocalStorage(Storage):
    """Local (or locally mounted) disk. Atomic create uses a hard link, which never overwrites."""

    def __init__(self, root: str) -> None:
        self.uri = root
        self.root = os.path.abspath(root)
        self._fs: pafs.FileSystem | None = None

    def _full(self, path: str) -> str:
        rel = clean_relpath(path)
        return os.path.join(self.root, rel) if rel else self.root

    def abspath(self, path: str) -> str:
        return self._full(path)

    def ancestors(self) -> list[Storage]:
        parents = [str(p) for p in Path(self.root).parents]
        return [LocalStorage(parent) for parent in parents]

    @property
    def filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            import pyarrow.fs as pafs

            self._fs = pafs.LocalFileSystem()
        return self._fs

    def read_bytes(self, path: str) -> bytes:
        try:
            with open(self._full(path), "rb") as handle:
                return handle.read()
        except NotADirectoryError:
            # A parent on the way is a file (e.g. table.path names a file): the file is simply not there.
            raise FileNotFoundError(errno.ENOENT, "no such file", self._full(path)) from None

    def _write_temp(self, full: str, data: bytes) -> str:
        folder = os.path.dirname(full)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(full)[:100]}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return tmp

    def put_if_absent(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> bool:
        full = self._full(path)
        if os.path.exists(full):
            return False
        tmp = self._write_temp(full, data)
        try:
            if ready is not None:
                ready()
            os.link(tmp, full)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise StitchError(
                    f"{self.root}: this filesystem has no hard links, which the atomic create-if-absent of "
                    "the timeline and the lock relies on; put the table on a local POSIX filesystem"
                ) from exc
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_folder(os.path.dirname(full))
        return True

    def write_atomic(self, path: str, data: bytes) -> None:
        full = self._full(path)
        tmp = self._write_temp(full, data)
        os.replace(tmp, full)
        _fsync_folder(os.path.dirname(full))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._full(path))

    def list_names(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._full(folder)) as entries:
                return [entry.name for entry in entries if not _is_temp(entry.name)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def walk_files(self, folder: str = "") -> Iterator[str]:
        base = self._full(folder)
        for dirpath, _dirs, files in os.walk(base):
            for name in files:  # temp files included: a crashed writer's leftovers are orphans to audit
                yield os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")

    def delete(self, path: str) -> bool:
        full = self._full(path)
        try:
            os.unlink(full)
            return True
        except FileNotFoundError:
            return False
        except (IsADirectoryError, PermissionError):
            if not os.path.isdir(full):
                raise
            self.delete_tree(path)  # a folder a Spark job wrote under one marker
            return True

    def delete_tree(self, folder: str) -> None:
        import shutil

        shutil.rmtree(self._full(folder), ignore_errors=True)

    def size(self, path: str) -> int:
        return os.path.getsize(self._full(path))

    def makedirs(self, folder: str) -> None:
        os.makedirs(self._full(folder), exist_ok=True)


def _is_temp(name: str) -> bool:
    """Our own in-flight temp files (`.<name>.<uuid>.tmp`), never anyone else's."""
    return name.startswith(".") and name.endswith(".tmp")


def _fsync_folder(folder: str) -> None:
    """Make a new directory entry durable, so a published instant survives a power loss."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def storage_for(uri: str) -> Storage:
    """The storage backend for a table location (a local path or a URI)."""
    parsed = urlparse(str(uri))
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = unquote(parsed.path) if parsed.scheme == "file" else str(uri)
        return LocalStorage(path)
    raise ConfigError(
        f"table.path: {uri!r} uses {parsed.scheme}://, but only local paths and file:// are implemented; "
        "object stores need a conditional-put backend for storage.put_if_absent (see docs/architecture.md)"
    )
