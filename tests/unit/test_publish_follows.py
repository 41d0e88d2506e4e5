"""Published tables follow the stitched table (issue 13 point 2): whatever takes rows out of a read (an erase, a
restore, an alter) republishes; publishes never race one another back to an older state; a format that failed
catches up; clean keeps what a running publish reads; tables never share a published table.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

import stitchlake
from stitchlake.api import Table
from stitchlake.errors import BusyError, ConflictError, StitchError
from stitchlake.io.published import iceberg_catalog
from stitchlake.jobs.results import plain
from stitchlake.services.alter import alter
from stitchlake.services.publish import PublishDeferred
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import PublishCommit, PublishPlan
from tests.support.published_history import MODEL, altered_document, history, rows_of
from tests.support.spark_fixtures import run_stitch
from tests.support.tables import batch, config

FAST = {"concurrency": {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}}}


def current_rows(table: Table) -> list[dict[str, Any]]:
    """What `stitch read --mode read_optimized` shows now: what every published table must show."""
    return rows_of(table.read(mode="read_optimized"))


def delta_rows(result: dict[str, Any], version: int | None = None) -> list[dict[str, Any]]:
    return rows_of(DeltaTable(result["location"], version=version).to_pyarrow_table())


def delta_writes(location: str) -> list[int]:
    """The versions of a Delta table that publishes wrote (vacuum and other bookkeeping versions left out)."""
    history = DeltaTable(location).history()
    return sorted(int(h["version"]) for h in history if h.get("operation") in ("WRITE", "CREATE TABLE"))


def iceberg_table(result: dict[str, Any]) -> Any:
    return iceberg_catalog(result["location"]).load_table(result["identifier"])


def keys_in_files(folder: str) -> set[int]:
    """Every key any data file under a published table's folder holds, whatever version lists it (a Delta
    checkpoint is Parquet too: the log's, left out)."""
    found: set[int] = set()
    for path in Path(folder.removeprefix("file://")).rglob("*.parquet"):
        if "_delta_log" in path.parts:
            continue
        found |= set(pq.read_table(path, columns=["k"]).column("k").to_pylist())
    return found


def erase_keys(*keys: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "p": pa.array(["even" if k % 2 == 0 else "odd" for k in keys])})


def test_an_erase_republishes_every_published_format_and_purge_leaves_no_trace_of_the_keys(tmp_path: Path) -> None:
    """Published by hand (no `publish.formats`): an erase republishes both formats anyway, since the published
    copies would otherwise still show the keys. With `--purge` each published table is recreated: no file under
    it, data, Delta log (its statistics) or Iceberg manifest, holds an erased value any more."""
    table = history(tmp_path / "t", retain_versions=5)
    secret = "SECRET-ALICE"  # sorts first: it is the minimum in every statistic of `status`
    more = batch(MODEL["orders"], [{"k": 3, "amount": 3, "status": secret, "ots": 50}])
    table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    table.compact()
    first = {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}
    folders = [first["delta"]["location"], first["iceberg"]["table_location"].removeprefix("file://")]
    assert all(secret in files_text(folder) for folder in folders), "the test must see the value before"

    erased = table.erase(erase_keys(1))
    assert {r.format for r in erased.published} == {"delta", "iceberg"}
    again = {r.format: plain(r) for r in erased.published}
    assert delta_rows(again["delta"]) == current_rows(table) == rows_of(iceberg_table(again["iceberg"]).scan())
    assert 1 not in {row["k"] for row in current_rows(table)}
    assert 1 in {row["k"] for row in delta_rows(first["delta"], first["delta"]["version"])}, "time travel, no purge"

    purged = table.erase(erase_keys(3), purge=True)
    last = {r.format: plain(r) for r in purged.published}
    assert delta_rows(last["delta"]) == current_rows(table) == rows_of(iceberg_table(last["iceberg"]).scan())
    # The Delta table's history was cut at the purge's version (the numbers go on, see the zombie test below):
    # no older version is readable, and no older log entry is left.
    assert last["delta"]["version"] > again["delta"]["version"]
    assert history_cut_at(last["delta"]["location"], last["delta"]["version"])
    with pytest.raises(Exception, match=r"[Vv]ersion|No files in log segment"):
        DeltaTable(last["delta"]["location"], version=first["delta"]["version"])
    for folder in folders:
        assert secret not in files_text(folder), f"a file under {folder} still holds the erased value"
    assert 3 not in keys_in_files(last["delta"]["location"])


def history_cut_at(location: str, version: int) -> bool:
    """Whether the Delta log at `location` starts at `version` (a checkpoint of it; no older entry is left)."""
    entries = [p.name for p in Path(location, "_delta_log").iterdir() if p.name[:1].isdigit()]
    return f"{version:020d}.checkpoint.parquet" in entries and all(int(e.split(".")[0]) >= version for e in entries)


def files_text(folder: str) -> str:
    """Every file under a folder, bytes decoded loosely: Parquet, JSON logs, Avro manifests and checkpoints."""
    return "".join(path.read_bytes().decode("latin-1") for path in Path(folder).rglob("*") if path.is_file())


def test_an_erase_while_a_publish_runs_leaves_it_to_that_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish of Delta is reading when an erase with --purge completes: the erase's own republish is busy and
    left to it (exit 0, `deferred`), and that publish, finding the table changed under it, publishes again:
    the newest version is the erased state, recreated."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", formats=["delta"])
    original_read = getattr(publish_module, "read")  # noqa: B009 - patched where publishing reads
    erasures: list[Any] = []

    def erase_meanwhile(*args: Any, **kwargs: Any) -> Any:
        rows = original_read(*args, **kwargs)
        if not erasures:
            erasures.append(table.erase(erase_keys(1), purge=True))
        return rows

    monkeypatch.setattr(publish_module, "read", erase_meanwhile)
    result = table.publish("delta").to_json()
    (erased,) = erasures
    (deferred,) = erased.published
    assert isinstance(deferred, PublishDeferred), deferred
    assert deferred.format == "delta" and deferred.deferred.startswith("publish ")
    assert history_cut_at(result["location"], result["version"]) and delta_rows(result) == current_rows(table)
    assert 1 not in keys_in_files(result["location"])
    data_files = [p for p in Path(table.path).rglob("*.parquet") if ".stitch" not in p.parts]
    assert data_files and not any(1 in pq.read_table(p, columns=["k"]).column("k").to_pylist() for p in data_files), (
        "the purge left an older slice holding the key for the running publish"
    )
    assert not table.timeline().pending()


def test_an_erase_finds_a_published_format_whose_publishes_were_archived(tmp_path: Path) -> None:
    table = history(tmp_path / "t")
    result = table.publish("delta").to_json()
    for k in (10, 12, 14, 16):
        more = batch(MODEL["orders"], [{"k": k, "amount": k, "status": "x", "ots": 1}])
        table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    assert table.archive(keep=2).archived
    assert not table.timeline().completed([Action.PUBLISH]), "the publish is archived"
    erased = table.erase(erase_keys(2))
    assert [r.format for r in erased.published] == ["delta"]
    assert delta_rows(result) == current_rows(table)


def test_a_restore_republishes_the_restored_state(tmp_path: Path) -> None:
    table = history(tmp_path / "t", formats=["delta"])
    table.savepoint(name="before")
    before = current_rows(table)
    more = batch(MODEL["orders"], [{"k": 8, "amount": 80, "status": "new", "ots": 9}])
    table.write("orders", more.append_column("coupon", pa.array(["LATER"])))
    compacted = table.compact()
    assert compacted is not None and delta_rows(plain(compacted.published[0])) != before
    restored = table.restore("before")
    (published,) = restored.published
    assert current_rows(table) == before == delta_rows(plain(published))


def test_an_alter_republishes_its_schema_and_defaults_without_waiting_for_a_compaction(tmp_path: Path) -> None:
    """An alter that adds a column with a default, changes a default and drops a column: the configured formats
    show the new schema at once (nothing new to compact), and a publish by hand reads with it too."""
    root = tmp_path / "t"
    history(root, formats=["delta", "iceberg"])
    document = altered_document(formats=["delta", "iceberg"])
    streams = document["streams"]
    streams["payments"]["columns"]["tip"] = {"type": "long", "default": 0}
    streams["shipments"]["columns"]["carrier"] = {"type": "string", "default": "unknown"}
    del streams["payments"]["columns"]["note"]
    altered = Table(config(root, document))
    result = alter(altered)
    published = {r.format: plain(r) for r in result.published}
    assert set(published) == {"delta", "iceberg"}
    expected = current_rows(altered)
    assert expected and all(row["tip"] == 0 and "note" not in row for row in expected)
    assert {row["k"]: row["carrier"] for row in expected}[2] == "unknown", "the new default"
    assert delta_rows(published["delta"]) == expected
    assert rows_of(iceberg_table(published["iceberg"]).scan()) == expected
    order = list(expected[0])
    assert DeltaTable(published["delta"]["location"]).schema().to_arrow().names == order
    assert [f.name for f in iceberg_table(published["iceberg"]).schema().fields] == order, "added columns in place"
    assert altered.compact() is None, "nothing to compact: the alter itself republished"


def test_a_second_publish_of_a_format_waits_and_an_overtaken_one_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a publish of a format runs, another of the same format is busy (exit 4); one presumed dead while it
    read (frozen past its heartbeat) finds a newer publish completed and refuses, so the newer state stands."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", FAST)
    running = Transaction.begin_planned(table, Action.PUBLISH, PublishPlan(format="delta", location="x", source=""))
    assert running is not None
    with pytest.raises(BusyError, match=r"publish \d+ of delta is running"):
        table.publish("delta")
    table.publish("iceberg")  # another format is another table
    running.abort()

    begun: list[Transaction] = []
    original_begin = Transaction.begin_planned.__func__  # type: ignore[attr-defined]
    original_read = getattr(publish_module, "read")  # noqa: B009 - patched where publishing reads

    def remember(cls: Any, *args: Any, **kwargs: Any) -> Any:
        txn = original_begin(cls, *args, **kwargs)
        begun.append(txn)
        return txn

    def frozen_while_reading(*args: Any, **kwargs: Any) -> Any:
        rows = original_read(*args, **kwargs)
        if len(begun) == 1:  # the first publish freezes past its heartbeat; a second one runs meanwhile
            first = begun[0]
            assert first.heartbeat is not None
            first.heartbeat.stop(delete=True)
            first.heartbeat = None
            time.sleep(0.5)
            newer.append(table.publish("delta").to_json())
        return rows

    newer: list[dict[str, Any]] = []
    monkeypatch.setattr(Transaction, "begin_planned", classmethod(remember))
    monkeypatch.setattr(publish_module, "read", frozen_while_reading)
    with pytest.raises(ConflictError, match=r"began while publish \d+ read the table; nothing was published"):
        table.publish("delta")
    (second,) = newer
    found = DeltaTable(second["location"])
    assert found.version() == second["version"], "the overtaken publish committed no version on top"
    assert not table.timeline().pending()
    monkeypatch.undo()

    # A newer publish still running (begun while this one was presumed dead) overtakes it just the same.
    def newer_still_running(*args: Any, **kwargs: Any) -> Any:
        rows = original_read(*args, **kwargs)
        plan = PublishPlan(format="delta", location="x", source="")
        still_running.append(Transaction.begin_planned(table, Action.PUBLISH, plan, heartbeat=False))
        return rows

    still_running: list[Any] = []
    monkeypatch.setattr(publish_module, "read", newer_still_running)
    with pytest.raises(ConflictError, match="began while publish"):
        table.publish("delta")
    assert DeltaTable(second["location"]).version() == second["version"]
    still_running[0].abort()
    monkeypatch.undo()

    # Another publisher's commit landing right after the check conflicts with the version loaded before it.
    original_check = getattr(publish_module, "_refuse_if_overtaken")  # noqa: B009 - patched where it runs

    def commit_right_after_the_check(txn: Any, fmt: Any) -> None:
        original_check(txn, fmt)
        landed = pa.table({"k": pa.array([0], pa.int64()), "p": pa.array(["even"])})
        write_deltalake(second["location"], landed, mode="overwrite", schema_mode="overwrite", partition_by=["p"])

    monkeypatch.setattr(publish_module, "_refuse_if_overtaken", commit_right_after_the_check)
    with pytest.raises(ConflictError, match="another writer committed to the published delta table meanwhile"):
        table.publish("delta")


@pytest.mark.parametrize("caller", ["cli", "api"])
def test_one_failing_format_does_not_stop_the_other_and_the_next_compact_catches_up(
    tmp_path: Path, caller: str
) -> None:
    """The Iceberg catalog is unreachable: the compaction stands, Delta is published anyway, and once the catalog
    is fixed `stitch compact` (or `Table.compact`; nothing new to compact) publishes the Iceberg table it missed."""
    root = tmp_path / "t"
    table = history(root)
    path = tmp_path / "wide.yaml"
    broken = altered_document(
        formats=["iceberg", "delta"], iceberg_catalog={"type": "rest", "uri": "http://127.0.0.1:9"}
    )
    broken["table"]["path"] = table.path
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    more = batch(MODEL["orders"], [{"k": 8, "amount": 80, "status": "new", "ots": 9}])
    table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    done = run_stitch("compact", "-c", str(path), "--engine", "local", "--json")
    assert done.returncode == 1, done.stdout
    failure = json.loads(done.stdout)
    assert "completed, but publishing failed" in failure["error"] and "iceberg" in failure["error"]
    assert "(published: delta)" in failure["error"]
    delta_location = f"{table.path}/.stitch/published/delta"
    assert rows_of(DeltaTable(delta_location).to_pyarrow_table()) == current_rows(table)

    fixed = altered_document(formats=["iceberg", "delta"])
    fixed["table"]["path"] = table.path
    path.write_text(yaml.safe_dump(fixed), encoding="utf-8")
    if caller == "api":
        assert stitchlake.open(str(path)).compact() is None
        timeline = table.timeline()
        commits = [timeline.commit(i) for i in timeline.completed([Action.PUBLISH])]
        newest = [c for c in commits if isinstance(c, PublishCommit) and c.format == "iceberg"][-1]
        found = {"location": newest.location, "identifier": newest.identifier}
        assert rows_of(iceberg_table(found).scan()) == current_rows(table)
    else:
        caught_up = run_stitch("compact", "-c", str(path), "--engine", "local", "--json")
        assert caught_up.returncode == 0, caught_up.stdout
        report = json.loads(caught_up.stdout)
        assert report["result"] is None and [r["format"] for r in report["published"]] == ["iceberg"]
        assert rows_of(iceberg_table(report["published"][0]).scan()) == current_rows(table)
    assert json.loads(run_stitch("compact", "-c", str(path), "--engine", "local", "--json").stdout)["published"] == []


def test_stitch_publish_tries_every_format_and_a_typo_publishes_nothing(tmp_path: Path) -> None:
    """`stitch publish -f iceberg -f delta` with the Iceberg catalog unreachable: Delta is published anyway and
    the failure names what was published (exit 1). A format name that does not exist is refused (exit 2) before
    any format is published."""
    table = history(tmp_path / "t")
    path = tmp_path / "wide.yaml"
    broken = altered_document(iceberg_catalog={"type": "rest", "uri": "http://127.0.0.1:9"})
    broken["table"]["path"] = table.path
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")

    typo = run_stitch("publish", "-c", str(path), "-f", "delta", "-f", "parquet", "--json")
    assert typo.returncode == 2 and "unknown publish format 'parquet'" in json.loads(typo.stdout)["error"]
    assert not table.timeline().completed([Action.PUBLISH]) and not table.timeline().pending()

    done = run_stitch("publish", "-c", str(path), "-f", "iceberg", "-f", "delta", "--json")
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error.startswith("iceberg: ") and error.endswith("(published: delta)"), error
    assert rows_of(DeltaTable(f"{table.path}/.stitch/published/delta").to_pyarrow_table()) == current_rows(table)


def test_clean_keeps_the_files_a_running_publish_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction and an aggressive clean land between a publish's start and its read: the slices it reads (as of
    its own time) are no longer the latest, and clean must still leave them."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t")
    expected = current_rows(table)
    original_read = getattr(publish_module, "read")  # noqa: B009 - patched where publishing reads

    def compacted_and_cleaned_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not cleaned:
            more = batch(MODEL["orders"], [{"k": 2, "amount": 2222, "status": "later", "ots": 99}])
            table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
            assert table.compact() is not None
            cleaned.append(table.clean(policy="keep_latest_file_versions", retain=1))
        return original_read(*args, **kwargs)

    cleaned: list[Any] = []
    monkeypatch.setattr(publish_module, "read", compacted_and_cleaned_meanwhile)
    result = table.publish("delta").to_json()
    # The first round published the state as of its own time (its files were kept), then found the table changed
    # and published again.
    first_round, second_round = delta_writes(result["location"])[-2:]
    assert delta_rows(result, first_round) == expected
    assert second_round == result["version"] and delta_rows(result) == current_rows(table) != expected


def test_tables_sharing_a_publish_location_never_share_a_published_table(tmp_path: Path) -> None:
    shared = str(tmp_path / "published")
    one = history(tmp_path / "one", location=shared)
    two = history(tmp_path / "two", {"table": {"name": "other"}}, location=shared)
    first, second = one.publish("delta").to_json(), two.publish("delta").to_json()
    assert first["location"] == f"{shared}/wide/delta" and second["location"] == f"{shared}/other/delta"
    assert delta_rows(first) == current_rows(one) and delta_rows(second) == current_rows(two)
    # A third table of the same name and location is refused, not mixed into the first one's published table.
    three = history(tmp_path / "three", location=shared)
    with pytest.raises(StitchError, match="published Delta table of another stitched table"):
        three.publish("delta")
    assert delta_rows(first) == current_rows(one)


def test_a_publish_killed_after_its_delta_commit_is_superseded_by_the_next(tmp_path: Path) -> None:
    """The process dies between the format's commit and the publish instant's completion: the Delta version it
    made is not on the timeline, recovery rolls the instant back (the published table untouched), and the next
    publish makes the next version."""
    table = history(tmp_path / "t")
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from pathlib import Path\n"
        "from tests.support.tables import config\n"
        "from tests.support.published_history import altered_document\n"
        "import stitchlake.io.published.delta as publish\n"
        "from stitchlake.api import Table\n"
        "original = publish.write_delta\n"
        "def then_die(*args, **kwargs):\n"
        "    original(*args, **kwargs)\n"
        "    os._exit(9)\n"
        "publish.write_delta = then_die\n"
        f"Table(config(Path({str(tmp_path / 't')!r}), altered_document())).publish('delta')\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 9
    location = f"{table.path}/.stitch/published/delta"
    orphan = DeltaTable(location).version()
    assert [i.action for i in table.timeline().pending()] == [Action.PUBLISH]
    result = table.publish("delta").to_json()  # the dead publish does not hold it up
    assert result["version"] == orphan + 1 and delta_rows(result) == current_rows(table)
    table.clean()
    assert not table.timeline().pending() and DeltaTable(location).version() == result["version"]


def test_a_publish_location_inside_the_table_is_refused_when_the_config_is_read(tmp_path: Path) -> None:
    document = copy.deepcopy(altered_document(location="table/published"))
    with pytest.raises(Exception, match=r"publish\.location.*inside the table folder"):
        config(tmp_path, document)
    assert config(tmp_path, altered_document(location="table/.stitch/published")).publish.location


def test_reading_helpers_take_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = history(tmp_path / "t")
    result = table.publish("iceberg").to_json()
    monkeypatch.chdir(tmp_path)
    relative = str(Path(result["location"]).relative_to(tmp_path))
    assert rows_of(iceberg_catalog(relative).load_table(result["identifier"]).scan()) == current_rows(table)
    assert result["catalog"] == f"sqlite:///{result['location']}/catalog.db"
