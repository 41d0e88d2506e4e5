"""Conformance across alters (issue 35): the generated tables of test_schema_evolution, each read merged by the JVM
too and compared cell by cell (test_jvm_conformance.py has the harness and the other cases), and a table whose
columns, ordering columns among them, are widened twice (float -> double, int -> long, decimal precision up) over
files of every schema version. A module of its own so that `make test`'s two workers run it and the other generated
tables at once: together they are the longest work of the suite.
"""

from __future__ import annotations

import copy
import decimal
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import stitchlake
from stitchlake.services.upkeep.alter import alter
from tests.support import merge_rules as rules
from tests.support import schema_changes as evolution
from tests.support.merge_harness import HISTORY_EXAMPLES, LOG_FORMATS, Harness, compared, in_scratch
from tests.support.tables import CONCURRENCY, created_in_format, new_table_file, stream_doc, write_table_yaml

#: Every test here starts a JVM (the merge harness).
pytestmark = pytest.mark.spark


@settings(max_examples=HISTORY_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=evolution.histories(), log_format=LOG_FORMATS)
def test_generated_tables_across_alters_match(harness: Harness, plan: list[tuple[str, Any]], log_format: str) -> None:
    """Random writes, compactions and alters (an added column with a default, an int widened to long, a stream
    added and one dropped, a dropped column, a changed default), text and decimal orderings, nested columns, Parquet
    or Avro logs; every read under each schema version compared."""
    in_scratch(harness, lambda root: evolution.run_history(root, plan, log_format))


# ------------------------------------------------------------------------------------------------ widened columns

#: The extreme floats: the greatest finite one, the least subnormal, and 0.1 as a float (0.10000000149011612 as a
#: double: greater than the double 0.1, so an event written before the widening beats a later 0.1).
F32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
F32_TINY = struct.unpack("<f", struct.pack("<I", 1))[0]
F32_TENTH = struct.unpack("<f", struct.pack("<f", 0.1))[0]
NAN = float("nan")
INF = float("inf")

#: Schema version 0 of the widening table: stream f ordered by a float (overwrite, deletes), stream d by a decimal
#: (nulls: ignore, so column versions hold the decimal too), stream i by an int and a decimal. `widened` alters it.
WIDENING: dict[str, Any] = {
    "table": {"name": "widening", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "f": stream_doc({"fo": "float", "fv": "float", "iv": "int"}, "fo"),
        "d": stream_doc({"dq": "decimal(8,3)", "dv": "decimal(18,2)", "gv": "float"}, "dq", "ignore"),
        "i": stream_doc({"io": "int", "dn": "decimal(5,1)", "label": "string"}, ["io", "dn"], deletes=False),
    },
    "concurrency": CONCURRENCY,
}
#: Per schema version after 0, the columns it widens: every float to double, int to long and decimal precision up
#: across Parquet's storage sizes (int32, int64, and past 18 digits, where Spark's decimals leave a long); version 2
#: widens the decimals again, so the table holds files of three schema versions.
WIDENINGS = [
    {
        "f": {"fo": "double", "fv": "double", "iv": "long"},
        "d": {"dq": "decimal(12,3)", "dv": "decimal(30,2)", "gv": "double"},
        "i": {"io": "long", "dn": "decimal(9,1)"},
    },
    {"d": {"dq": "decimal(20,3)", "dv": "decimal(38,2)"}, "i": {"dn": "decimal(38,1)"}},
]


def widened(version: int) -> dict[str, Any]:
    """WIDENING's document at schema version `version` (0, 1 or 2)."""
    document = copy.deepcopy(WIDENING)
    for step in WIDENINGS[:version]:
        for stream, columns in step.items():
            document["streams"][stream]["columns"].update(columns)
    return document


def _d(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)


#: Per schema version, its steps in order: the events written under it, (stream, rows), or ("compact", []). Version 0
#: leaves a base file and a log of each stream; the later ones logs, which the last compaction merges with them.
WIDENING_WRITES: list[list[tuple[str, list[dict[str, Any]]]]] = [
    [
        (
            "f",
            [
                {"k": 1, "fo": F32_TENTH, "fv": NAN, "iv": -(2**31)},
                {"k": 2, "fo": -0.0, "fv": -0.0, "iv": 2**31 - 1},
                {"k": 3, "fo": F32_MAX, "fv": F32_MAX, "iv": 0},
                {"k": 4, "fo": -INF, "fv": -INF},
                {"k": 5, "fo": F32_TINY, "fv": F32_TINY, "iv": 1},
                {"k": 6, "fo": 2.5, "fv": INF, "iv": 2},
                {"k": 7, "fo": -F32_MAX, "fv": -F32_MAX, "iv": 3},
            ],
        ),
        (
            "d",
            [
                {"k": 1, "dq": _d("99999.999"), "dv": _d("9999999999999999.99"), "gv": NAN},
                {"k": 2, "dq": _d("-99999.999"), "dv": _d("-9999999999999999.99"), "gv": -0.0},
                {"k": 3, "dq": _d("0.001"), "dv": _d("1.00"), "gv": F32_TINY},
                {"k": 4, "dq": _d("5.000"), "dv": None, "gv": F32_MAX},
            ],
        ),
        (
            "i",
            [
                {"k": 1, "io": 2**31 - 1, "dn": _d("9999.9"), "label": "max int"},
                {"k": 2, "io": -(2**31), "dn": _d("-9999.9"), "label": "min int"},
                {"k": 3, "io": 0, "dn": _d("0.1"), "label": "tenth"},
            ],
        ),
        ("compact", []),
        (
            "f",
            [
                {"k": 3, "fo": 1.0, "fv": 1.0},  # older than the greatest float: loses
                {"k": 9, "fo": -F32_TINY, "fv": F32_TENTH, "iv": -1},
                {"k": 10, "fo": F32_TENTH, "fv": -F32_TINY, "iv": 2**31 - 1},
                {"k": 11, "fo": F32_TENTH, "fv": F32_MAX, "iv": 7},
            ],
        ),
        (
            "d",
            [
                {"k": 3, "dq": _d("0.002"), "dv": None, "gv": None},  # newer, but dv and gv stay
                {"k": 7, "dq": _d("-0.001"), "dv": _d("0.99"), "gv": F32_TENTH},
                {"k": 12, "dq": _d("1.500"), "dv": _d("2.00"), "gv": F32_TENTH},
            ],
        ),
        ("i", [{"k": 4, "io": 5, "dn": _d("-0.1"), "label": "in a log"}]),
    ],
    [
        (
            "f",
            [
                {"k": 1, "fo": 0.1, "fv": 1.0},  # the double 0.1 is less than the float 0.1: loses
                {"k": 2, "fo": 0.0, "fv": 5e-324, "iv": 2**40},  # -0.0 and 0.0 tie: the later commit wins
                {"k": 3, "fo": 1e300, "fv": -1e300, "iv": -(2**62)},  # beyond any float
                {"k": 4, "fo": -1e300, "fv": NAN, "op": "D"},  # above -inf: its delete wins
                {"k": 5, "fo": 5e-324, "fv": 1.0},  # below the least float: loses
                {"k": 6, "fo": 2.5, "fv": -INF, "iv": 2**63 - 1},  # a tie again
                {"k": 8, "fo": -0.0, "fv": NAN, "iv": -(2**63)},
                {"k": 9, "fo": -0.0, "fv": 0.1},  # above the least negative float: wins
                {"k": 10, "fo": 0.1, "fv": 0.1},  # below the float 0.1 again: loses
                {"k": 11, "fo": F32_TENTH, "fv": F32_MAX, "iv": 7},  # the same values again, now doubles
            ],
        ),
        (
            "d",
            [
                {"k": 1, "dq": _d("100000.000"), "dv": None, "gv": 0.1},  # beyond decimal(8,3); dv stays
                {"k": 2, "dq": _d("-99999.999"), "dv": _d("-99999999999999999.99"), "gv": None},  # a tie
                {"k": 3, "dq": _d("0.000"), "dv": _d("2.00"), "gv": 1e300},  # older: loses
                {"k": 4, "dq": _d("5.000"), "op": "D"},  # a tie: its delete wins
                {"k": 5, "dq": _d("999999999.999"), "dv": _d("0.01"), "gv": -0.0},
                {"k": 12, "dq": _d("1.500"), "dv": _d("2.00"), "gv": F32_TENTH},  # the same again
            ],
        ),
        (
            "i",
            [
                {"k": 1, "io": 2**31, "dn": _d("-1.0"), "label": "past int"},
                {"k": 2, "io": -(2**31), "dn": _d("-9999.8"), "label": "min int, greater decimal"},
                {"k": 3, "io": 0, "dn": _d("0.1"), "label": "tenth again"},  # a tie: the later commit
                {"k": 4, "io": 5, "dn": _d("-0.1"), "label": "a tie with a log"},
            ],
        ),
    ],
    [
        (
            "d",
            [
                {"k": 1, "dq": _d("100000.000"), "dv": _d("99999999999999999999999999999999999.99"), "gv": NAN},
                {"k": 5, "dq": _d("99999999999999999.999"), "dv": None, "gv": None},
                {"k": 6, "dq": _d("-99999999999999999.999"), "dv": _d("-0.01"), "gv": INF},
            ],
        ),
        (
            "i",
            [
                {"k": 2, "io": -(2**31), "dn": _d("-9999.9"), "label": "min int again"},  # older: loses
                {"k": 3, "io": 0, "dn": _d("9999999999999999999999999999999999999.9"), "label": "widest"},
            ],
        ),
        ("f", [{"k": 5, "fo": F32_TINY, "fv": -0.0}, {"k": 7, "fo": -1e300, "fv": 0.0}]),  # a tie; older
    ],
]


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
@pytest.mark.parametrize("table_format", [1, 2])
def test_columns_widened_by_alters_read_alike_from_files_of_every_schema_version(
    harness: Harness, tmp_path: Path, table_format: int, log_format: str
) -> None:
    """Floats widened to double, ints to long and decimals to more digits (twice), ordering columns among them (a
    float, a decimal in a `nulls: ignore` stream, an int and a decimal together): base files and logs of each
    schema version, compacted and not, read under each later one, as of every instant and incrementally, with NaN,
    -0.0 against 0.0, infinities, the extreme floats and decimals, and ties and near-ties across the widening."""
    document = widened(0)
    document["table"]["log_format"] = log_format
    with created_in_format(table_format):
        table, config = new_table_file(tmp_path, document)
    with compared(harness) as checked:
        for version, writes in enumerate(WIDENING_WRITES):
            if version:
                document = widened(version)
                document["table"]["log_format"] = log_format
                write_table_yaml(tmp_path, document)
                alter(stitchlake.open(config))
                table = stitchlake.open(config)
                table.read()  # only files of older versions, read as the widened table
                before = table.timeline().completed()[-1].completed
            for stream, events in writes:
                if stream == "compact":
                    table.compact()
                    table.read()
                else:
                    table.write(stream, rules.batch_for(table, stream, events))
            table.read()
            table.read(columns=["k", "fo", "dq", "io", "dn"])
            table.read(mode="read_optimized")  # the base file of version 0 alone
            if version == 1:
                # The changes the widened version's writes made: a value written again, now wider, is no change.
                changes = table.read(since=before, until=table.timeline().completed()[-1].completed)
        times = [t for i in table.timeline().completed() if (t := i.completed) is not None]
        for time in times:
            table.read(as_of=time)
        table.compact()  # one base file merged from files of all three versions
        rows = {r["k"]: r for r in table.read().to_pylist()}
        table.read(mode="read_optimized")
        table.read(since=times[0])
        table.read(since=times[2], before_images=True)
        table.read(since=times[len(times) // 2], until=times[-1], before_images=True)
    assert len(checked) >= 25
    # The cases are what they say (the Python merge, which the JVM's rows equal).
    assert rows[1]["fo"] == F32_TENTH and rows[1]["fv"] != rows[1]["fv"]  # the float 0.1 beat the double 0.1
    assert rows[2]["fo"] == 0.0 and rows[2]["iv"] == 2**40  # 0.0 after -0.0: a tie, the later commit
    assert rows[4]["fo"] is None and rows[4]["dq"] is None  # deleted: a later ordering value in f, a tie in d
    assert rows[4]["label"] == "a tie with a log"
    assert rows[1]["dv"] == _d("99999999999999999999999999999999999.99") and rows[1]["gv"] != rows[1]["gv"]
    assert rows[2]["label"] == "min int, greater decimal" and rows[3]["label"] == "widest"
    assert 11 not in changes.column("k").to_pylist() and 12 not in changes.column("k").to_pylist()
    assert rows[10]["fo"] == F32_TENTH and rows[10]["fv"] == -F32_TINY and rows[9]["fv"] == 0.1
