"""Local (or locally mounted) disk. Atomic create uses a hard link, which never overwrites."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from stitchlake.errors import StitchError
from stitchlake.storage.base import FileInfo, Storage, clean_relpath

if TYPE_CHECKING:
    import pyarrow as pa


class LocalStorage(Storage):
    #: A hard link never overwrites: exactly one racing creator wins (a filesystem without links is refused
    #: when the create is tried).
    conditional_put = True

    def __init__(self, root: str) -> None:
        self.uri = root
        self.root = os.path.abspath(root)

    def __repr__(self) -> str:
        return f"LocalStorage({self.root!r})"

    def _full(self, path: str) -> str:
        rel = clean_relpath(path)
        return os.path.join(self.root, rel) if rel else self.root

    def describe(self, path: str = "") -> str:
        return self._full(path)

    def local_path(self, path: str = "") -> str | None:
        return self._full(path)

    def read_bytes(self, path: str) -> bytes:
        try:
            with open(self._full(path), "rb") as handle:
                return handle.read()
        except NotADirectoryError:
            # A parent on the way is a file (e.g. table.path names a file): the file is simply not there.
            raise FileNotFoundError(errno.ENOENT, "no such file", self._full(path)) from None

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """The bytes of the file opened (a file replaced meanwhile is another inode: the one read is described),
        refused if it was written in place while read."""
        full = self._full(path)
        try:
            with open(full, "rb") as handle:
                before = _info(path, os.fstat(handle.fileno())).version
                data = handle.read()
                if _info(path, os.fstat(handle.fileno())).version != before:
                    raise OSError(errno.EAGAIN, "written while it was read", full)
        except NotADirectoryError:
            raise FileNotFoundError(errno.ENOENT, "no such file", full) from None
        return data, before

    def open_input(self, path: str) -> pa.NativeFile:
        import pyarrow as pa

        full = self._full(path)
        try:
            return pa.OSFile(full, "rb")
        except FileNotFoundError:
            raise
        except OSError as exc:  # pyarrow reports a missing file as a plain OSError
            if not os.path.exists(full):
                raise FileNotFoundError(errno.ENOENT, "no such file", full) from exc
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with _naming(full):
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as handle:
                handle.write(data)

    def _write_temp(self, full: str, data: bytes) -> str:
        """Write `data` beside `full` under a temporary name; on failure (a full disk) nothing is left behind."""
        folder = os.path.dirname(full)
        tmp = os.path.join(folder, f".{os.path.basename(full)[:100]}.{uuid.uuid4().hex}.tmp")
        with _naming(full):
            os.makedirs(folder, exist_ok=True)
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
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

    def write_atomic(self, path: str, data: bytes, ready: Callable[[], None] | None = None) -> None:
        full = self._full(path)
        tmp = self._write_temp(full, data)
        if ready is not None:
            try:
                ready()
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        os.replace(tmp, full)
        _fsync_folder(os.path.dirname(full))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._full(path))

    def stat(self, path: str) -> FileInfo:
        return _info(clean_relpath(path), os.stat(self._full(path)))

    def list_names(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._full(folder)) as entries:
                return [entry.name for entry in entries if not _is_temp(entry.name)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_files(self, folder: str = "") -> Iterator[FileInfo]:
        base = self._full(folder)
        if os.path.isfile(base):
            yield _info(clean_relpath(folder), os.stat(base))
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in files:  # temp files included: a crashed writer's leftovers are orphans to audit
                full = os.path.join(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    yield _info(os.path.relpath(full, self.root).replace(os.sep, "/"), os.stat(full))

    def delete(self, path: str) -> bool:
        full = self._full(path)
        try:
            os.unlink(full)
            return True
        except (FileNotFoundError, NotADirectoryError):  # absent (a file stands where a folder of the path would)
            return False
        except (IsADirectoryError, PermissionError):
            if not os.path.isdir(full):
                raise
            self.delete_tree(path)  # a folder written as one unit
            return True

    def delete_tree(self, folder: str) -> None:
        shutil.rmtree(self._full(folder), ignore_errors=True)

    def makedirs(self, folder: str) -> None:
        os.makedirs(self._full(folder), exist_ok=True)

    def ancestors(self) -> list[Storage]:
        return [LocalStorage(str(parent)) for parent in Path(self.root).parents]


@contextlib.contextmanager
def _naming(full: str) -> Iterator[None]:
    """OS errors raised while writing (ENOSPC comes from `write()`, which names no file) name the file."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, full) from exc
        raise


def _info(path: str, stat: os.stat_result) -> FileInfo:
    return FileInfo(path, stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}")


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
