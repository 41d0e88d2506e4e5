"""The folder `stitch read --engine spark --out` writes: checked before the job starts (nothing else there is
ever lost), and swapped in whole when the job has written it, so the path always holds one whole output."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path

from stitchlake.errors import UsageError

#: The marker Spark's file committer leaves in a folder it finished writing: only such a folder is replaced.
SUCCESS_MARKER = "_SUCCESS"


def check_out_folder(target: Path) -> None:
    """A folder `--out` may write: new, or an earlier finished Spark output (a re-run replaces it); never a file or
    a folder of something else."""
    if target.is_file():
        raise UsageError(f"--out {target}: is a file; with --engine spark --out names a folder for Spark's part files")
    if target.is_dir() and not (target / SUCCESS_MARKER).is_file():
        raise UsageError(
            f"--out {target}: exists and is not a finished Spark output (no {SUCCESS_MARKER}); remove it or give a "
            "new folder name"
        )
    if not target.parent.is_dir():
        raise UsageError(f"--out {target}: folder {target.parent} does not exist")


def temporary_sibling(target: Path, kind: str) -> Path:
    """A hidden name beside `target` for a folder on its way in (`tmp`) or out (`old`)."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.{kind}")


def replace_folder(written: Path, target: Path) -> None:
    """Put the finished `written` folder where `target` is: an old output is moved aside first and removed once the
    new one is in place (a rename each: the same file system)."""
    if not target.exists():
        written.rename(target)
        return
    old = temporary_sibling(target, "old")
    target.rename(old)
    try:
        written.rename(target)
    except BaseException:
        with contextlib.suppress(OSError):
            old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)
