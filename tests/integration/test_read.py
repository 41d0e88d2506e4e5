"""Readers (design.md §7): incremental, time travel, column pruning, filters, log formats and entry points.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_read.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

import stitchlake
from stitchlake.api import Table
from stitchlake.config import load_config
from tests.support.histories import apply, random_plan
from tests.support.reads import changes, expected_changes, sort, untimed
from tests.support.tables import ALL_COLUMNS, THREE_STREAMS, as_rows, new_table


@pytest.mark.parametrize("seed", [7, 11])
def test_incremental_read_is_the_diff_of_two_reference_states(tmp_path: Path, seed: int) -> None:
    table = new_table(tmp_path)
    history = apply(table, random_plan(seed))
    times = history.times
    for i, (first, since) in enumerate(times):
        before = history.expected(first)
        for second, until in times[i:]:
            got = changes(table.read(since=since, until=until))
            assert got == expected_changes(before, history.expected(second), ALL_COLUMNS), (
                f"changes in ({since}, {until}] (commits {first + 1}..{second})"
            )
        # `since` alone: until now.
        now = changes(table.read(since=since))
        assert now == expected_changes(before, history.expected(), ALL_COLUMNS)


def test_parquet_and_avro_logs_read_the_same(tmp_path: Path) -> None:
    plan = random_plan(23)
    tables = {fmt: new_table(tmp_path / fmt, log_format=fmt) for fmt in ("parquet", "avro")}
    histories = {fmt: apply(table, plan) for fmt, table in tables.items()}
    suffixes = {fmt: {p.name.split(".", 1)[1] for p in Path(t.path).rglob("*.log.*")} for fmt, t in tables.items()}
    assert suffixes == {"parquet": {"log.parquet"}, "avro": {"log.avro"}}
    parquet, avro = tables["parquet"], tables["avro"]
    assert as_rows(parquet.read()) == histories["parquet"].expected()
    assert sort(parquet.read()).equals(sort(avro.read()))
    times = list(zip(histories["parquet"].times, histories["avro"].times, strict=True))
    for (_, p_time), (_, a_time) in times:
        assert sort(parquet.read(as_of=p_time)).equals(sort(avro.read(as_of=a_time)))
        assert sort(untimed(parquet.read(since=p_time))).equals(sort(untimed(avro.read(since=a_time))))
    for ((_, p_since), (_, a_since)), ((_, p_until), (_, a_until)) in zip(times, times[2:], strict=False):
        got = untimed(parquet.read(since=p_since, until=p_until)), untimed(avro.read(since=a_since, until=a_until))
        assert sort(got[0]).equals(sort(got[1]))
    assert sort(parquet.read(columns=["k", "p", "note"], filter={"p": "odd"})).equals(
        sort(avro.read(columns=["k", "p", "note"], filter={"p": "odd"}))
    )


def test_module_read_by_config_or_folder_equals_table_read(tmp_path: Path) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    config_file = tmp_path / "wide.yaml"
    config_file.write_text(yaml.safe_dump(document))
    table = Table(load_config(config_file))
    table.init()
    history = apply(table, random_plan(5, steps=6))
    folder = tmp_path / "table"
    assert Path(table.path) == folder.resolve()
    by_folder = stitchlake.open(folder)
    by_folder_text = stitchlake.open(str(folder))
    mid = history.times[3][1]
    calls: list[dict[str, Any]] = [
        {},
        {"as_of": mid},
        {"since": history.times[1][1]},
        {"since": history.times[1][1], "until": mid},
        {"columns": ["k", "p", "carrier", "paid"]},
        {"filter": {"p": "even"}},
        {"filter": "k=3"},
    ]
    for kwargs in calls:
        expected = sort(table.read(**kwargs))
        assert sort(stitchlake.read(str(config_file), **kwargs)).equals(expected), kwargs
        assert sort(stitchlake.read(config_file, **kwargs)).equals(expected), kwargs
        assert sort(stitchlake.read(folder, **kwargs)).equals(expected), kwargs
        assert sort(stitchlake.read(table, **kwargs)).equals(expected), kwargs
        assert sort(by_folder.read(**kwargs)).equals(expected), kwargs
        assert sort(by_folder_text.read(**kwargs)).equals(expected), kwargs
    assert sort(stitchlake.read(folder, mode="read_optimized")).equals(sort(table.read(mode="read_optimized")))
    assert as_rows(stitchlake.read(folder)) == history.expected()
