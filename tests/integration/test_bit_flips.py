"""A flipped bit anywhere in a file a read trusts is an error, never a wrong row with exit 0 (issue 24).

Avro's deflate blocks carry no checksum, and Parquet's page checksums leave the footer and page headers bare, so
a flipped bit could once change an ordering value, let an older event win or drop a key without a word. Every
byte a read trusts is now covered by a digest: data files by the one their commit recorded, metadata files by
their own (`stitchlake.checksums`). These tests flip one bit at every byte offset of a base file, a Parquet log,
an Avro log, a completed instant file, table.json and an archive checkpoint, and read the table after each flip.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import stitchlake
from stitchlake.api import Table
from stitchlake.errors import StitchError
from stitchlake.layout.names import BASE, LOG
from stitchlake.paths import ARCHIVE_DIR, TABLE_JSON
from stitchlake.timeline.instant import Action
from tests.support.slices import newest_file, sliced_table

#: Files larger than this are flipped at a dense sample of offsets (every header and footer byte, and this many
#: in between), so the test stays quick; the tables are sliced_table small enough that most files are flipped whole.
WHOLE_FILE_BYTES = 1500


def offsets(size: int, seed: int) -> Iterator[int]:
    if size <= WHOLE_FILE_BYTES:
        yield from range(size)
        return
    edge = WHOLE_FILE_BYTES // 5
    yield from range(edge)
    yield from sorted(random.Random(seed).sample(range(edge, size - edge), WHOLE_FILE_BYTES - 2 * edge))
    yield from range(size - edge, size)


def read_after_each_flip(table: Table, relative: str) -> tuple[int, int]:
    """Flip one bit at each offset of `relative` (under the table), read, put the byte back. Returns how many
    reads failed and how many returned the right rows; a wrong answer fails the test at once."""
    path = Path(table.path) / relative
    original = path.read_bytes()
    expected = stitchlake.open(table.config).read().sort_by([("k", "ascending"), ("p", "ascending")])
    failed = right = 0
    try:
        for offset in offsets(len(original), len(original)):
            damaged = bytearray(original)
            damaged[offset] ^= 1 << (offset % 8)
            path.write_bytes(bytes(damaged))
            try:
                got = stitchlake.open(table.config).read()
            except StitchError:
                failed += 1
                continue
            sorted_rows = got.sort_by([("k", "ascending"), ("p", "ascending")])
            assert sorted_rows.equals(expected), (
                f"{relative}: bit {offset % 8} of byte {offset} flipped gave wrong rows"
            )
            right += 1
    finally:
        path.write_bytes(original)
    assert stitchlake.open(table.config).read().sort_by([("k", "ascending"), ("p", "ascending")]).equals(expected)
    return failed, right


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
def test_a_flipped_bit_in_a_data_file_is_an_error_never_a_wrong_row(tmp_path: Path, log_format: str) -> None:
    table = sliced_table(tmp_path, log_format)
    for kind in (LOG, BASE) if log_format == "parquet" else (LOG,):
        path = newest_file(table, kind)
        assert path.endswith(".log.avro" if kind == LOG and log_format == "avro" else ".parquet")
        failed, _right = read_after_each_flip(table, path)
        assert failed > 0, "every flip was harmless: the test did not reach the file"


def test_a_flipped_bit_in_metadata_is_an_error_never_a_wrong_row(tmp_path: Path) -> None:
    table = sliced_table(tmp_path, "parquet")
    timeline = table.timeline()
    deltacommit = timeline.completed([Action.DELTACOMMIT])[-1]
    completed_file = f".stitch/timeline/{deltacommit.requested}_{deltacommit.completed}.deltacommit"
    assert (Path(table.path) / completed_file).exists()
    checkpoints = sorted((Path(table.path) / ARCHIVE_DIR).glob("checkpoint.*.json"))
    assert checkpoints, "the table was archived"
    for relative in (completed_file, TABLE_JSON, checkpoints[-1].relative_to(table.path).as_posix()):
        failed, right = read_after_each_flip(table, relative)
        assert failed > right, f"{relative}: most flips must be refused, not read past"
