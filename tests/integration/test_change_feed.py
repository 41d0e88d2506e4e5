"""Change feeds worth their name (issue 13 point 5): commit times, the streams that carried a key, before-images.

A hand-made history whose answers are known: an update, a late event that loses, a stream delete, a payment, and
an erase, read as changes in Python, through `stitch read` and through Spark.
"""

from __future__ import annotations

import json
from typing import Any

from stitchlake.api import Table
from tests.support.processes import run_stitch
from tests.support.small_histories import FEED
from tests.support.tables import MODELS

MODEL = {m.name: m for m in MODELS}


def test_stitch_read_before_images_from_the_command_line(history: tuple[Table, dict[str, str]]) -> None:
    table, t = history
    done = run_stitch(
        "read", "--table", table.path, "--since", t["t0"], "--until", t["t2"], "--before-images", "--json"
    )
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)["records"]
    expected = table.read(since=t["t0"], until=t["t2"], before_images=True).to_pylist()
    assert [(r["k"], r["_op"], r["amount"], r["_streams"]) for r in records] == [
        (r["k"], r["_op"], r["amount"], r["_streams"]) for r in expected
    ]


def test_spark_change_reads_carry_the_same_feed(spark: Any, history: tuple[Table, dict[str, str]]) -> None:
    table, t = history
    for before_images in (False, True):
        frame = (
            spark.read.format("stitchlake")
            .option("since", t["t0"])
            .option("until", t["t3"])
            .option("before_images", str(before_images).lower())
            .load(table.path)
        )
        assert frame.columns[-3:] == FEED
        got = sorted(tuple(r.asDict().values()) for r in frame.collect())
        expected = table.read(since=t["t0"], until=t["t3"], before_images=before_images).to_pylist()
        assert got == sorted(tuple(r.values()) for r in expected), before_images
