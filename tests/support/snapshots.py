"""What a folder holds, to check that a command refused (or a dry run) changed nothing there: every file by a
digest of its path and content, and every folder by name."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: What a lock leaves (`ignore` it): taking the filesystem lock rotates the lease files under it.
LOCKS = ".stitch/locks/"


def snapshot(root: Path, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file (sha256 of path + content) and folder under `root`, by path relative to it (a folder's ends in
    `/`), skipping paths containing one of `ignore` (e.g. `.stitch/locks/`, whose lease files a lock rotates)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(part in rel + ("/" if path.is_dir() else "") for part in ignore):
            continue
        if path.is_dir():
            found[rel + "/"] = "folder"
        else:
            found[rel] = hashlib.sha256(rel.encode() + b"\0" + path.read_bytes()).hexdigest()
    return found
