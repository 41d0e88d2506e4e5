"""The folder `stitch read --engine spark --out` writes: checked before the job starts (nothing else there is
ever lost), marked as ours when whole, and swapped in whole, so the path always holds one whole output.

Only a folder carrying our marker is replaced: Spark's own `_SUCCESS` is left by every Spark or MapReduce job,
so it would let a re-run delete someone else's data set."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from stitchlake.errors import StitchError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

#: The file a finished `stitch read --engine spark --out` leaves in its folder: what makes a re-run replace it.
OUTPUT_MARKER = "_STITCH_READ"


def check_out_folder(target: Path) -> None:
    """A folder `--out` may write: new, or an earlier `stitch read --engine spark` output (a re-run replaces it);
    never a file or a folder of something else."""
    if target.is_file():
        raise UsageError(f"--out {target}: is a file; with --engine spark --out names a folder for Spark's part files")
    if target.is_dir() and not (target / OUTPUT_MARKER).is_file():
        raise UsageError(
            f"--out {target}: exists and is not the output of an earlier `stitch read --engine spark` (no "
            f"{OUTPUT_MARKER}); remove it or give a new folder name"
        )
    if not target.parent.is_dir():
        raise UsageError(f"--out {target}: folder {target.parent} does not exist")


def check_out_schema(schema: pa.Schema, out_format: str, target: Path) -> None:
    """Columns Spark's CSV writer cannot write (nested values, bytes) are refused before the job starts."""
    import pyarrow.types as patypes

    if out_format != "csv":
        return
    unwritable = [f.name for f in schema if patypes.is_nested(f.type) or patypes.is_binary(f.type)]
    if unwritable:
        raise UsageError(
            f"--out {target}: CSV cannot hold nested or binary values ({', '.join(unwritable)}); write .parquet or "
            ".json, or leave those columns out with --columns"
        )


def leftovers(target: Path) -> list[Path]:
    """Hidden folders beside `target` that a killed job left (a half-written `.tmp`, an old output `.old`)."""
    if not target.parent.is_dir():
        return []
    return sorted(p for p in target.parent.glob(f".{target.name}.*") if p.suffix in (".tmp", ".old") and p.is_dir())


def temporary_sibling(target: Path, kind: str) -> Path:
    """A hidden name beside `target` for a folder on its way in (`tmp`) or out (`old`)."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.{kind}")


def part_files(folder: Path) -> list[Path]:
    """The data files of a written folder (not Spark's `_SUCCESS`, our marker or hidden checksums)."""
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(("_", "."))]


def check_parts_written(written: Path, target: Path, rows: int) -> None:
    """Rows counted but no part file here: the executors wrote them to their own disks (a cluster without a
    shared file system), so nothing may be reported written."""
    if rows and not part_files(written):
        raise StitchError(
            f"--out {target}: Spark wrote {rows:,} rows but the folder holds no part file: the executors wrote them "
            "on their own hosts; on a cluster, give a folder on a file system every host shares"
        )


def mark(written: Path, table: str, rows: int) -> None:
    """Mark a finished output as ours (what it read, how many rows), before it takes its place."""
    note = {"table": table, "rows": rows}
    (written / OUTPUT_MARKER).write_text(json.dumps(note) + "\n", encoding="utf-8")


def replace_folder(written: Path, target: Path) -> None:
    """Put the finished `written` folder where `target` is: an old output is moved aside first and removed once the
    new one is in place (a rename each: the same file system). On a failure the old output is put back; where even
    that fails, the error names both folders, and neither is deleted."""
    if not target.exists():
        written.rename(target)
        return
    old = temporary_sibling(target, "old")
    target.rename(old)
    try:
        written.rename(target)
    except OSError as exc:
        try:
            old.rename(target)
        except OSError:
            raise StitchError(
                f"--out {target}: could not put the new output in place ({exc.strerror or exc}) nor the old one "
                f"back: the new output is {written}, the old one {old}"
            ) from None
        raise StitchError(f"--out {target}: could not put the new output in place: {exc.strerror or exc}") from None
    if old.is_symlink():  # `--out` was a link: the folder it pointed to is left alone
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)
