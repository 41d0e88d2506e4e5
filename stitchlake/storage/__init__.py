"""Storage backends, chosen by URL scheme (see `registry`)."""

from stitchlake.storage.base import FileInfo, Storage, clean_relpath
from stitchlake.storage.local import LocalStorage
from stitchlake.storage.registry import storage_for

__all__ = ["FileInfo", "LocalStorage", "Storage", "clean_relpath", "storage_for"]
