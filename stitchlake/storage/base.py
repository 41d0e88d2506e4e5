"""The storage contract: the only layer that knows how bytes are created, published, listed and removed.

Everything above it speaks in paths relative to a root ("a/b/c.parquet"), so commit metadata stays portable and
no caller can build a path that escapes the root. The atomic primitives (`put_if_absent`, `write_atomic`) are
what the timeline and the locks are built on: local disk implements them with links and renames, object stores
with conditional puts. Nothing hands a raw path to pyarrow or Spark: bytes go through `open_input`/`write_bytes`.
"""

from __future__ import annotations

import errno
import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from stitchlake.errors import ConfigError, StitchError

if TYPE_CHECKING:
    import pyarrow as pa


def clean_relpath(path: str) -> str:
    """Normalise a root-relative path and refuse anything that would leave the root."""
    text = str(path).replace("\\", "/")
    if text.startswith("/") or (os.name == "nt" and len(text) > 1 and text[1] == ":"):
        raise StitchError(f"path {path!r} must be relative to the table folder")
    norm = posixpath.normpath(text)
    if norm == ".":
        return ""
    if norm == ".." or norm.startswith("../"):
        raise StitchError(f"path {path!r} escapes the table folder")
    return norm


@dataclass(frozen=True)
class FileInfo:
    """A file as listed: its root-relative path, size, and what tells one content from another.

    `version` is the object's ETag on object stores and size + modification time on disk: a landing file
    re-delivered under the same name with new content has a new version.
    """

    path: str
    size: int
    version: str


class Storage(ABC):
    """Files under one root (a table, or a landing folder), addressed by root-relative paths.

    Callers ask a backend what it can do rather than test its class or its URL's scheme: `local_path()` (a
    folder on this machine, or None), `remote` (every request, a listing page included, is a round trip: batch
    and cache), `conditional_put` (whether `put_if_absent` is atomic) and `client_settings()` (how delta-rs or
    pyiceberg reach the same store). How a location is written (a path or a URI) is `registry`'s to say.
    """

    #: Where the root is, as the user wrote it (a local path or a URI).
    uri: str
    #: Whether `put_if_absent` is an atomic create-if-absent (a hard link on disk, a conditional PUT on S3). The
    #: timeline and the `filesystem` lock rest on it, so a table refuses a storage without it
    #: (`require_conditional_put`); a backend says True only when its store decides the race, not the client.
    conditional_put: bool = False
    #: Whether each request is a network round trip (object stores; a listing costs one per page): readers of
    #: many small files then issue their requests in parallel, and immutable files (completed instants) are
    #: cached in-process.
    remote: bool = False
    #: The longest a fenced `put_if_absent` (one with `ready`) may take after `ready` ran: publishing wants this
    #: much of its lock lease left at the fence, so a create retried after a lost answer cannot land after it.
    create_budget_s: float = 0.0

    def require_conditional_put(self, needed_by: str) -> None:
        """Refuse, naming `needed_by`, a storage whose creates are not atomic: two writers could both win."""
        if not self.conditional_put:
            raise ConfigError(
                f"{self.uri}: {needed_by} needs a storage that creates a file only if it is absent, atomically "
                f"(a hard link on disk, a conditional PUT on S3); {type(self).__name__} cannot"
            )

    @abstractmethod
    def describe(self, path: str = "") -> str:
        """The full location of `path`, for messages (the reader has a cron log, not the table path)."""

    def local_path(self, path: str = "") -> str | None:
        """`path` as a path on this machine's disk, or None on an object store: callers that need a real folder
        (Spark's own logs, a streaming checkpoint) ask this rather than testing the storage's class."""
        return None

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file; FileNotFoundError if absent."""

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """The whole content of a file and the version (as `stat` and listings give it) of those very bytes: a file
        re-delivered between a listing and the read is told apart. This default asks before and after the read and
        refuses a file that changed meanwhile (OSError); backends that learn the version with the bytes override it."""
        before = self.stat(path).version
        data = self.read_bytes(path)
        if self.stat(path).version != before:
            raise OSError(errno.EAGAIN, "changed while it was read", self.describe(path))
        return data, before

    @abstractmethod
    def open_input(self, path: str) -> pa.NativeFile | BinaryIO:
        """A seekable reader of a file (Parquet footers and column chunks are read by range)."""

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a data file in one write. Data files only count once an instant names them, so
        no atomic visibility is needed here (unlike `write_atomic`)."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> bool:
        """Create `path` with `data` only if it does not exist. True if we created it.

        Exactly one of any number of racing callers wins, and nobody ever sees the file half-written.
        `ready`, if given, runs once the content is ready, just before the create: the last moment to refuse
        (publishing fences on the table lock there, so a stall during the slow part cannot outlive the lease).
        """

    @abstractmethod
    def write_atomic(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> None:
        """Create or replace `path`; readers see the old or the new content, never a mix. `ready`, if given, runs
        once the content is ready, just before it replaces the file (a fence: see `put_if_absent`)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file (or, on disk, a folder) exists at `path`."""

    @abstractmethod
    def stat(self, path: str) -> FileInfo:
        """Size and version of one file; FileNotFoundError if absent."""

    @abstractmethod
    def list_names(self, folder: str) -> list[str]:
        """Names (not paths) of the entries directly in `folder`; empty if the folder is absent."""

    @abstractmethod
    def list_files(self, folder: str = "") -> Iterator[FileInfo]:
        """Every file under `folder`, recursively, with size and version (landing folders, audits)."""

    def walk_files(self, folder: str = "") -> Iterator[str]:
        """Every file under `folder`, as root-relative paths (used by audits, never by reads)."""
        return (info.path for info in self.list_files(folder))

    def client_settings(self) -> dict[str, str]:
        """What another client of this store (delta-rs, pyiceberg) needs to reach it as we do: nothing on disk."""
        return {}

    @abstractmethod
    def delete(self, path: str) -> bool:
        """Delete one file; False if it was already gone."""

    def delete_many(self, paths: list[str]) -> None:
        """Delete files, best effort and without saying which existed (object stores: one request per 1000)."""
        for path in paths:
            self.delete(path)

    @abstractmethod
    def delete_tree(self, folder: str) -> None:
        """Delete a folder and everything in it, if it exists."""

    def prefetch(self, files: Iterable[tuple[str, int]]) -> None:  # noqa: B027 - optional hook
        """Hint: these files (path, size in bytes) are about to be read. Object stores fetch them together, in
        parallel, so reading N files costs one round trip instead of N; local disk ignores it."""

    def size(self, path: str) -> int:
        """Size in bytes of a file."""
        return self.stat(path).size

    @abstractmethod
    def makedirs(self, folder: str) -> None:
        """Create a folder and its parents (a no-op on object stores)."""

    @abstractmethod
    def ancestors(self) -> list[Storage]:
        """Storage rooted at each folder above this root, nearest first (to refuse nested tables)."""
