"""How a `nulls: ignore` stream's column versions are stored (design.md §3): in a table of format 2 only where a
column's value came from another event than its row's version, in format 1 wherever a value is; both read alike."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake
from stitchlake.checksums import unseal
from stitchlake.paths import TABLE_JSON
from stitchlake.services.inspect.status import status
from stitchlake.services.upkeep.alter import alter
from tests.support.histories import NOTE_POS, PAID_POS, column_version_history, contest_compacted, shown_payments
from tests.support.tables import THREE_STREAMS, created_in_format, new_table_file


def base_file(table: Any) -> pa.Table:
    (path,) = [p for p in Path(table.path).rglob("*.parquet") if ".log." not in p.name]
    return pq.read_table(path)


def format_of(table: Any) -> int:
    return int(json.loads(unseal(Path(table.path, TABLE_JSON).read_bytes(), TABLE_JSON))["format_version"])


def test_a_format_2_table_writes_a_columns_version_only_where_it_is_not_its_rows(tmp_path: Path) -> None:
    table, first_log = column_version_history(tmp_path, 2)
    assert format_of(table) == 2, "new tables are created in format 2"
    assert first_log == [{"k": 1, PAID_POS: 0, NOTE_POS: None}, {"k": 2, PAID_POS: None, NOTE_POS: None}]
    assert shown_payments(table) == [(1, 15, "new"), (2, 20, "only")]
    want = contest_compacted(table)
    assert shown_payments(table) == want
    base = base_file(table).sort_by("k")
    assert base.select(["k", PAID_POS, NOTE_POS]).to_pylist() == [
        {"k": 1, PAID_POS: 0, NOTE_POS: None},  # paid came from the second write, its row's version from the first
        {"k": 2, PAID_POS: None, NOTE_POS: None},
    ]


def test_a_format_1_table_keeps_writing_every_version_and_reads_the_same(tmp_path: Path) -> None:
    table, first_log = column_version_history(tmp_path, 1)
    assert format_of(table) == 1
    assert first_log == [{"k": 1, PAID_POS: 0, NOTE_POS: 1}, {"k": 2, PAID_POS: 2, NOTE_POS: 2}]
    assert shown_payments(table) == [(1, 15, "new"), (2, 20, "only")]
    want = contest_compacted(table)
    assert shown_payments(table) == want
    assert base_file(table).column(NOTE_POS).null_count == 0


@pytest.mark.parametrize("version", [1, 2])
def test_an_alter_keeps_the_tables_format(tmp_path: Path, version: int) -> None:
    """An older stitchlake keeps reading a format 1 table a newer one altered: the alter records format 1 again."""
    document = copy.deepcopy(THREE_STREAMS)
    with created_in_format(version):
        _, config = new_table_file(tmp_path, document)
    document["streams"]["orders"]["columns"]["extra"] = "string"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    alter(stitchlake.open(config))
    altered = stitchlake.open(config)
    (record,) = [v for v in altered.schema_history() if v.version == 1]
    assert record.properties.format_version == version
    assert altered.sparse_column_versions is (version == 2)
    assert status(altered).format_version == version, "`stitch status` tells an operator which format it is"
