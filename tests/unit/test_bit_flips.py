"""A flipped bit anywhere in a file a read trusts is an error, never a wrong row with exit 0 (issue 24).

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_bit_flips.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stitchlake
from stitchlake.checksums import unseal
from stitchlake.errors import CorruptFileError, StitchError
from stitchlake.layout.names import LOG
from stitchlake.paths import ARCHIVE_DIR, TABLE_JSON
from tests.support.slices import newest_file, sliced_table


def test_files_from_before_checksums_still_read(tmp_path: Path) -> None:
    """A table written before checksums (no digest in its commits, no seal on its metadata) reads as before."""
    table = sliced_table(tmp_path, "parquet")
    expected = table.read().sort_by("k")
    meta = Path(table.path) / ".stitch"
    for path in [Path(table.path) / TABLE_JSON, *(meta / "timeline").iterdir()]:
        if path.is_file():
            path.write_bytes(json.dumps(_stripped(json.loads(unseal(path.read_bytes(), "test"))), indent=1).encode())
    for path in (Path(table.path) / ARCHIVE_DIR).iterdir():
        lines = [json.dumps(_stripped(json.loads(unseal(line, "test")))) for line in path.read_bytes().splitlines()]
        path.write_bytes("\n".join(lines).encode() + (b"\n" if path.suffix == ".jsonl" else b""))
    again = stitchlake.open(table.config)
    assert not any(f.checksum for f in again.view().live_files()), "no digest is left to check"
    assert again.read().sort_by("k").equals(expected)


def _stripped(value: object) -> object:
    """What a writer before checksums wrote: file entries without digests."""
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items() if k not in ("checksum", "erased_checksum")}
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


def test_a_changed_data_file_names_the_file_and_the_way_out(tmp_path: Path) -> None:
    table = sliced_table(tmp_path, "avro")
    path = Path(table.path) / newest_file(table, LOG)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(StitchError, match="checksum mismatch") as raised:
        stitchlake.open(table.config).read()
    assert str(path.name) in str(raised.value) and isinstance(raised.value, CorruptFileError)
