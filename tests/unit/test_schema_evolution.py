"""Tables that change (issue 11): `stitch alter`, reads across schema versions, nested columns, any ordering type.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest:
tests/integration/test_schema_evolution.py).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

import stitchlake
from stitchlake.errors import BusyError, ConfigError
from stitchlake.types import arrow_type
from tests.support.schema_changes import (
    BASE,
    NESTED_AVRO,
    add_extra,
    add_stream_c,
    add_z,
    arrow_rows,
    column_types,
    drop_w,
    widen_v,
)
from tests.support.tables import instant_at, new_table_file, write_table_yaml


def test_reads_as_of_every_version_return_exactly_its_columns(tmp_path: Path) -> None:
    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    times = []
    for change in (None, add_stream_c, add_extra, widen_v, drop_w):
        if change is not None:
            change(document)
            from stitchlake.services.upkeep.alter import alter

            alter(stitchlake.open(write_table_yaml(tmp_path, document)))
            table = stitchlake.open(tmp_path / "table.yaml")
        row = {"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a", "extra": "e1"}
        result = table.write("a", arrow_rows(document, "a", [row]))
        times.append((result.completed, copy.deepcopy(document)))
    for at, then in times:
        got = stitchlake.read(str(tmp_path / "table"), as_of=at)
        assert got.column_names == ["k", *[c for s in then["streams"].values() for c in s["columns"]]]
        assert got.schema.field("v").type == arrow_type(column_types(then, "a")["v"])
    # The table opened from its folder (no YAML) has the current schema; restore takes an alter back.
    assert "w" not in stitchlake.read(str(tmp_path / "table")).column_names


def test_an_ingest_begun_before_an_alter_publishes_readable_files(tmp_path: Path) -> None:
    """Decided: a write that began under schema N publishes after an alter to N+1, recording N: its files are
    read under N+1 like any older file (every compatible change reads old files)."""
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.services.writes.ingest import claim

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    txn = claim(table, "a")  # the writer began under version 0
    add_extra(document)
    widen_v(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    from stitchlake.writing.writer import write

    result = write(table, "a", arrow_rows(BASE, "a", [{"k": 1, "op": "I", "v": 7, "s": "p", "ts": "a"}]), txn=txn)
    assert table.timeline().commit(instant_at(table, result.instant)).schema_version == 0  # type: ignore[attr-defined]
    rows = stitchlake.read(str(tmp_path / "table.yaml")).to_pylist()
    assert rows == [
        {"k": 1, "v": 7, "s": "p", "ts": "a", "extra": "dflt", "w": None, "d": None, "tags": None, "info": None}
    ]


def test_an_alter_waits_for_a_restore_and_a_restore_takes_it_back(tmp_path: Path) -> None:
    from stitchlake.services.undo.restore import begin_restore, restore
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.services.upkeep.savepoint import create

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    create(table, name="before")
    add_stream_c(document)
    with_c = copy.deepcopy(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    table = stitchlake.open(tmp_path / "table.yaml")
    table.write("c", arrow_rows(document, "c", [{"k": 2, "op": "I", "c1": 0.5}]))
    pending = begin_restore(table, "before")
    add_z(document)
    with pytest.raises(BusyError, match="nothing can alter the table"):
        alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    pending.heartbeat.stop(delete=True)  # type: ignore[union-attr]
    from stitchlake.services.undo.recovery import rollback_failed

    # The crashed restore is finished with the config of the table as it stands (the YAML with z is ahead of it).
    rollback_failed(stitchlake.open(write_table_yaml(tmp_path, with_c, name="with_c.yaml")))
    # The table is back at schema version 0: the YAML with stream c (and z) is ahead of it now.
    with pytest.raises(ConfigError, match="ahead of the table"):
        stitchlake.open(tmp_path / "table.yaml").read()
    assert stitchlake.read(str(tmp_path / "table")).column_names == ["k", "v", "s", "ts", "w", "d", "tags", "info"]
    assert callable(restore)  # the one-shot form is what `stitch savepoint restore` runs


def test_a_savepoint_made_after_an_alter_pins_it_and_a_restore_names_the_alters_it_undoes(tmp_path: Path) -> None:
    """`stitch savepoint create` after an alter pinned the commit before it, so restoring "now" undid the alter
    without a word (a dropped stream's keys back, the deployed YAML ahead of the table). The default target is the
    latest instant a restore would undo, the alter too; a restore that does undo an alter says so."""
    from stitchlake.services.undo.restore import restore
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.services.upkeep.savepoint import create

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    create(table, name="before")
    add_stream_c(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    table = stitchlake.open(tmp_path / "table.yaml")
    altered = table.timeline().latest_completed()
    assert altered is not None and altered.action == "alter"
    assert create(table, name="after").savepoint_of == altered.completed
    assert "undid alter" not in restore(table, "after").message
    assert "c1" in stitchlake.open(tmp_path / "table.yaml").read().column_names  # the YAML still matches the table
    undone = restore(stitchlake.open(tmp_path / "table.yaml"), "before").message
    assert f"undid alter {altered.requested}" in undone, undone


def test_a_restore_does_not_name_a_crashed_alter_it_rolled_back(tmp_path: Path) -> None:
    """An alter that crashed before completing changed no schema: the restore rolls it back with the rest, and
    saying it "undid alter" would send the operator to revert a YAML the table never took."""
    from stitchlake.services.undo.restore import restore
    from stitchlake.services.upkeep.savepoint import create
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.instant import Action
    from stitchlake.timeline.metadata import AlterPlan

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    create(table, name="before")
    table.write("a", arrow_rows(document, "a", [{"k": 2, "op": "I", "v": 2, "s": "q", "ts": "a"}]))
    schema = table.schema_history()[-1]
    crashed = Transaction.begin_planned(
        table,
        Action.ALTER,
        plan=lambda _t, _r: AlterPlan(schema_version=schema.version + 1, properties=schema.properties, changes=()),
    )
    assert crashed is not None and crashed.heartbeat is not None
    crashed.heartbeat.stop(delete=True)  # the alter's process died before its commit
    message = restore(stitchlake.open(tmp_path / "table.yaml"), "before").message
    assert "undid alter" not in message, message
    assert stitchlake.open(tmp_path / "table.yaml").read().column("k").to_pylist() == [1]
    assert stitchlake.open(tmp_path / "table.yaml").timeline().get(crashed.time) is None


def test_adding_back_a_dropped_stream_is_refused_not_bringing_its_rows_back(tmp_path: Path) -> None:
    """A dropped stream's files stay (time travel reads them): a stream added back under its name, with any columns,
    took them into reads again, and the keys only it wrote came back with no change row. Refused as a reused column
    name is."""
    from stitchlake.services.upkeep.alter import alter

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    add_stream_c(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    stitchlake.open(tmp_path / "table.yaml").write("c", arrow_rows(document, "c", [{"k": 9, "op": "I", "c1": 0.5}]))
    del document["streams"]["c"]
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    assert stitchlake.open(tmp_path / "table.yaml").read().column("k").to_pylist() == [1]
    document["streams"]["c"] = {"columns": {"c2": "double"}}
    with pytest.raises(ConfigError, match="stream 'c' was dropped in an earlier schema version"):
        alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    del document["streams"]["c"]
    assert stitchlake.open(write_table_yaml(tmp_path, document)).read().column("k").to_pylist() == [1]


def test_incremental_reads_across_an_alter(tmp_path: Path) -> None:
    from stitchlake.services.upkeep.alter import alter

    document = copy.deepcopy(BASE)
    table, _ = new_table_file(tmp_path, document)
    first = table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    add_extra(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    table = stitchlake.open(tmp_path / "table.yaml")
    table.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 2, "s": "p", "ts": "b", "extra": "e1"}]))
    table.write("a", arrow_rows(document, "a", [{"k": 2, "op": "I", "v": 3, "s": "q", "ts": "a"}]))
    changes = table.read(since=first.completed).sort_by("k").to_pylist()
    assert [(r["k"], r["v"], r["extra"], r["_op"]) for r in changes] == [(1, 2, "e1", "U"), (2, 3, None, "I")]


def test_nested_columns_from_json_parquet_and_avro_landing_files(tmp_path: Path) -> None:
    import fastavro
    import pyarrow.parquet as pq

    document = copy.deepcopy(BASE)
    document["bad_rows"] = "fail"
    for fmt in ("json", "parquet", "avro"):
        document["streams"]["n"]["source"] = {"format": fmt, "path": f"landing/{fmt}"}
        root = tmp_path / fmt
        root.mkdir()
        landing = root / "landing" / fmt
        landing.mkdir(parents=True)
        rows = [
            {"k": 1, "tags": ["x", "y"], "info": {"x": 1, "y": "u"}},
            {"k": 2, "tags": [], "info": None},
        ]
        if fmt == "json":
            (landing / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif fmt == "parquet":
            pq.write_table(
                arrow_rows(BASE, "n", [{**r, "op": "I"} for r in rows]).drop_columns(["op"]), landing / "f.parquet"
            )
        else:
            with open(landing / "f.avro", "wb") as handle:
                fastavro.writer(handle, fastavro.parse_schema(NESTED_AVRO), rows)
        table, _ = new_table_file(root, document)
        assert table.ingest("n").result.rows == 2, fmt
        got = {r["k"]: (r["tags"], r["info"]) for r in table.read(columns=["k", "tags", "info"]).to_pylist()}
        assert got == {1: (["x", "y"], {"x": 1, "y": "u"}), 2: ([], None)}, fmt


def test_a_handle_derives_its_config_again_only_when_the_schema_history_changed(tmp_path: Path) -> None:
    """`require` (every table call makes one) keeps each schema version's derived config while the history and the
    bucket count stay the same, and derives them again when another process altered the table, or a restore took
    the alter back and a different alter made the same version number."""
    from stitchlake.services.undo.restore import restore
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.services.upkeep.savepoint import create

    document = copy.deepcopy(BASE)
    new_table_file(tmp_path, document)
    folder = stitchlake.open(str(tmp_path / "table"))  # no YAML: it follows the table's schema as it is
    folder.require()
    kept = folder.config
    folder.require()
    assert folder.config is kept  # nothing changed: nothing derived again

    # Changes go through configs (a folder's handle only reads), each another handle, as another process's.
    first = stitchlake.open(write_table_yaml(tmp_path, copy.deepcopy(document), name="first.yaml"))
    first.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    create(first, name="before")
    add_extra(document)
    alter(stitchlake.open(write_table_yaml(tmp_path, document)))
    folder.require()
    assert folder.schema_version == 1 and "extra" in folder.config.streams["a"].column_names

    restore(stitchlake.open(tmp_path / "table.yaml"), "before")
    folder.require()
    assert folder.schema_version == 0 and "extra" not in folder.config.streams["a"].column_names

    other = copy.deepcopy(BASE)
    add_z(other)  # version 1 again, with another column
    alter(stitchlake.open(write_table_yaml(tmp_path, other)))
    folder.require()
    columns = folder.config.streams["b"].column_names
    assert folder.schema_version == 1 and "z" in columns and "extra" not in folder.config.streams["a"].column_names

    from stitchlake.services.rewrites.rescale import rescale

    rescale(stitchlake.open(tmp_path / "table.yaml"), 3)  # the same history, another bucket count
    folder.require()
    assert folder.config.table.buckets == 3 and folder.routing.default == 3


def test_a_nan_default_is_the_same_default_in_the_config_and_in_the_table(tmp_path: Path) -> None:
    """NaN is unequal to itself, so a config with `default: nan` was always 'ahead of the table': every command
    refused it and asked for an alter that changed nothing."""
    document = copy.deepcopy(BASE)
    columns = document["streams"]["a"]["columns"]
    columns["wn"] = {"type": "double", "default": "nan"}
    columns["xn"] = {"type": "float", "default": "-inf"}
    _table, path = new_table_file(tmp_path, document)
    again = stitchlake.open(path)
    again.require()
    assert again.schema_version == 0


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (lambda d: d["streams"]["b"]["columns"].update(V="int"), "streams.b.columns.V: 'V' and 'v' differ only"),
        (lambda d: d["streams"]["a"]["columns"].update(K="int"), "streams.a.columns.K: 'K' and 'k' differ only"),
        (lambda d: d["streams"].update(A={"columns": {"x": "int"}}), "streams.A: 'A' and 'a' differ only in case"),
        (lambda d: d["table"].update(partition_by={"K": "string"}), "table.partition_by.K: 'K' and 'k' differ"),
        # A stream's meta columns are `_sl__<stream>__...`: `a`'s would take in those of `a__eu` and of `a_`.
        (lambda d: d["streams"].update(a__eu={"columns": {"x": "int"}}), "streams.a__eu: stream 'a__eu' begins with"),
        (lambda d: d["streams"].update(a_={"columns": {"x": "int"}}), "streams.a_: stream 'a_' begins with stream 'a'"),
    ],
    ids=["columns", "column-and-key", "streams", "partition-and-key", "stream-prefix", "stream-underscore"],
)
def test_names_that_clash_are_refused_when_made_and_kept_where_a_table_has_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, refusal: str
) -> None:
    """Spark's reader, Trino and the published tables match names without case: `v` and `V` cannot both be read
    there; and stream `a__eu`'s meta columns would be read as stream `a`'s (the JVM reader failed, compactions
    mixed their versions). A new table with such names is refused, and so is an alter adding one; a table made
    before the check (here: made with it switched off) keeps opening, reading and writing."""
    from stitchlake.services.upkeep.alter import alter
    from stitchlake.table import handle

    document = copy.deepcopy(BASE)
    change(document)
    path = write_table_yaml(tmp_path / "new", document)
    with pytest.raises(ConfigError, match=re.escape(refusal)) as made:
        stitchlake.open(path).init()
    assert made.value.yaml_path == refusal.partition(": ")[0] and made.value.file == str(path)
    assert not (tmp_path / "new" / "table").exists()

    new_table_file(tmp_path / "altered", copy.deepcopy(BASE))
    with pytest.raises(ConfigError) as caught:
        alter(stitchlake.open(write_table_yaml(tmp_path / "altered", document)))
    where, _, said = refusal.partition(": ")
    assert f"{where}: add" in str(caught.value) and said in str(caught.value), caught.value
    assert caught.value.yaml_path is not None and caught.value.file is not None

    monkeypatch.setattr(handle, "refuse_name_clashes", lambda _config: None)
    _made, config = new_table_file(tmp_path / "old", document)
    monkeypatch.undo()
    again = stitchlake.open(config)
    rows = 0
    if "partition_by" not in document["table"]:
        again.write("a", arrow_rows(document, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a", "K": 2}]))
        rows = 1
    assert again.read().num_rows == rows and stitchlake.open(str(tmp_path / "old" / "table")).read().num_rows == rows
