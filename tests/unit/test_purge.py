"""`stitch delete --purge` reaches every copy the table holds (issue 24): after it, no file under the table or the
published tables holds an erased person's values, quarantined rows and quarantined landing files included.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_purge.py).
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pyarrow as pa

import stitchlake
from tests.support.tables import write_table_yaml


def test_an_undecodable_avro_value_is_purged_though_its_key_is_no_text(tmp_path: Path) -> None:
    """An Avro value keeps its numbers as varints, not text: a key's digits never show in it, so a quarantined
    Avro value whose key is unknown is removed by any purge; a JSON value is searched for the key's text."""
    import fastavro

    from stitchlake.io import kafka
    from stitchlake.services.rewrites.purge import _rows_hit

    document = {
        "table": {"name": "people", "path": str(tmp_path / "table"), "key": {"k": "long"}, "buckets": 1},
        "streams": {"events": {"columns": {"email": "string", "ets": "long"}, "ordering": "ets"}},
    }
    cfg = write_table_yaml(tmp_path, document)
    table = stitchlake.open(str(cfg))
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "e",
            "fields": [{"name": "k", "type": "long"}, {"name": "email", "type": "string"}],
        }
    )
    encoded = io.BytesIO()
    fastavro.schemaless_writer(encoded, schema, {"k": 123456, "email": "person@example.org"})
    truncated = encoded.getvalue()[:-3]  # what a consumer cannot decode
    assert b"123456" not in truncated
    rows = pa.table(
        {
            kafka.TOPIC: ["t", "t"],
            kafka.PARTITION: ["0", "0"],
            kafka.OFFSET: ["1", "2"],
            kafka.VALUE: [truncated.decode("utf-8", "replace"), '{"k": 8, "email": "other@example.org"'],
            "_reason": ["undecodable", "undecodable"],
        }
    )
    hit = _rows_hit(table, rows, pa.table({"k": pa.array([123456], pa.int64())}))
    assert hit.tolist() == [True, False], "the Avro value goes; another key's JSON text stays"


def test_a_quarantined_row_of_an_erased_key_is_purged_whatever_partition_the_keys_file_names(tmp_path: Path) -> None:
    """A keys file may carry the partition columns; a row set aside for its partition value (null, unparsable)
    still holds the erased person's values, so only the key decides whether it goes."""
    from stitchlake.services.rewrites.purge import _rows_hit

    document = {
        "table": {
            "name": "people",
            "path": str(tmp_path / "table"),
            "key": {"k": "long"},
            "partition_by": {"day": "date"},
            "buckets": 1,
        },
        "streams": {"events": {"columns": {"email": "string", "ets": "long"}, "ordering": "ets"}},
    }
    table = stitchlake.open(str(write_table_yaml(tmp_path, document)))
    rows = pa.table(
        {
            "k": ["17", "18", "19"],
            "day": [None, "18/11/2026", "2026-11-20"],
            "email": ["a@example.org", "b@example.org", "c@example.org"],
            "_reason": ["null partition value day", "unparsable value in day", "other"],
        }
    )
    day = dt.date(2026, 11, 20)
    keys = pa.table({"k": pa.array([17, 18], pa.int64()), "day": pa.array([day, day], pa.date32())})
    assert _rows_hit(table, rows, keys).tolist() == [True, True, False]
