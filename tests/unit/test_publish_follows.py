"""Published tables follow the stitched table (issue 13 point 2): whatever takes rows out of a read (an erase, a
restore, an alter) republishes; publishes never race one another back to an older state; a format that failed
catches up; clean keeps what a running publish reads; tables never share a published table.
"""

from __future__ import annotations

import copy
import itertools
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from stitchlake.api import Table
from stitchlake.errors import BusyError, ConflictError
from stitchlake.io.published import iceberg_catalog
from stitchlake.jobs.results import plain
from stitchlake.services.publish import PublishDeferred
from stitchlake.services.published_state import published_formats, stale_formats
from stitchlake.services.upkeep.alter import alter
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import PublishPlan
from stitchlake.vocabulary import PublishFormat
from tests.support.published_history import (
    MODEL,
    altered_document,
    current_rows,
    delta_rows,
    erase_keys,
    history,
    history_cut_at,
    iceberg_table,
    keys_in_files,
    rows_of,
)
from tests.support.tables import batch, config

FAST = {"concurrency": {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}}}


def delta_writes(location: str) -> list[int]:
    """The versions of a Delta table that publishes wrote (vacuum and other bookkeeping versions left out)."""
    history = DeltaTable(location).history()
    return sorted(int(h["version"]) for h in history if h.get("operation") in ("WRITE", "CREATE TABLE"))


class EraseMeanwhile:
    """An erase with --purge run in a thread while a publish of Delta reads: `start` returns once the erase has
    committed, purged and is waiting for that publish to end (its own log line says so)."""

    def __init__(self, table: Table) -> None:
        import logging
        import threading

        self.table = table
        self.waiting = threading.Event()
        self.results: list[Any] = []
        self.thread = threading.Thread(target=self._erase, daemon=True)
        waiting = self.waiting

        class Seen(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.getMessage().startswith("waiting for publish"):
                    waiting.set()

        self.handler = Seen()
        logging.getLogger("stitchlake.services.publish").addHandler(self.handler)

    def _erase(self) -> None:
        try:
            self.results.append(self.table.erase(erase_keys(1), purge=True).result)
        except BaseException as exc:  # reported by `result`
            self.results.append(exc)
        finally:
            self.waiting.set()  # done without waiting (or failed): `start` must not wait for ever

    def start(self) -> None:
        self.thread.start()
        assert self.waiting.wait(300), "the erase never reached its republish"

    def result(self) -> Any:
        import logging

        self.thread.join(300)
        logging.getLogger("stitchlake.services.publish").removeHandler(self.handler)
        (outcome,) = self.results
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def test_an_erase_while_a_publish_runs_waits_for_it_and_leaves_the_change_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish of Delta has read when an erase with --purge completes: the erase's own republish waits for that
    publish, which, finding the table changed under it, publishes again: the newest version is the erased state,
    recreated, and the erase says that publish did it."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", formats=["delta"])
    original_read = getattr(publish_module, "read")  # noqa: B009 - patched where publishing reads
    erase = EraseMeanwhile(table)

    def erase_meanwhile(*args: Any, **kwargs: Any) -> Any:
        rows = original_read(*args, **kwargs)
        if not erase.thread.is_alive() and not erase.results:
            erase.start()
        return rows

    monkeypatch.setattr(publish_module, "read", erase_meanwhile)
    result = table.publish("delta").to_json()
    (deferred,) = erase.result().published
    assert isinstance(deferred, PublishDeferred), deferred
    assert deferred.format == "delta" and deferred.deferred.startswith("publish "), deferred
    assert history_cut_at(result["location"], result["version"]) and delta_rows(result) == current_rows(table)
    assert 1 not in keys_in_files(result["location"])
    data_files = [p for p in Path(table.path).rglob("*.parquet") if ".stitch" not in p.parts]
    assert data_files and not any(1 in pq.read_table(p, columns=["k"]).column("k").to_pylist() for p in data_files), (
        "the purge left an older slice holding the key for the running publish"
    )
    assert not table.timeline().pending()


def test_an_erase_whose_running_publish_fails_publishes_the_erased_state_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erase with --purge completes before the running publish reads; the purge takes the files that read
    needs, so that publish fails. The erase used to leave the format to it (exit 0, `deferred`) and nobody
    published again: the Delta table kept the erased key. It waits for the publish to end and publishes itself."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", formats=["delta"])
    first = table.publish("delta").to_json()
    assert 1 in {row["k"] for row in delta_rows(first)}
    more = batch(MODEL["orders"], [{"k": 8, "amount": 80, "status": "new", "ots": 9}])
    table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    table.compact()
    original_read = getattr(publish_module, "read")  # noqa: B009 - patched where publishing reads
    erase = EraseMeanwhile(table)

    def erase_first(*args: Any, **kwargs: Any) -> Any:
        if not erase.thread.is_alive() and not erase.results:
            erase.start()
        return original_read(*args, **kwargs)

    monkeypatch.setattr(publish_module, "read", erase_first)
    with pytest.raises(Exception, match="purge"):
        table.publish("delta")
    (published,) = erase.result().published
    assert not isinstance(published, PublishDeferred), published
    result = published.to_json()
    assert history_cut_at(result["location"], result["version"]) and delta_rows(result) == current_rows(table)
    assert 1 not in keys_in_files(result["location"]), "a version of the published table still holds the key"
    assert not table.timeline().pending()


def test_an_erase_finds_a_published_format_whose_publishes_were_archived(tmp_path: Path) -> None:
    table = history(tmp_path / "t")
    result = table.publish("delta").to_json()
    for k in (10, 12, 14, 16):
        more = batch(MODEL["orders"], [{"k": k, "amount": k, "status": "x", "ots": 1}])
        table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    assert table.archive(keep=2).result.archived
    assert not table.timeline().completed([Action.PUBLISH]), "the publish is archived"
    erased = table.erase(erase_keys(2)).result
    assert [r.format for r in erased.published] == ["delta"]
    assert delta_rows(result) == current_rows(table)


def test_a_restore_republishes_the_restored_state(tmp_path: Path) -> None:
    table = history(tmp_path / "t", formats=["delta"])
    table.savepoint(name="before")
    before = current_rows(table)
    more = batch(MODEL["orders"], [{"k": 8, "amount": 80, "status": "new", "ots": 9}])
    table.write("orders", more.append_column("coupon", pa.array(["LATER"])))
    compacted = table.compact().done
    assert compacted is not None and delta_rows(plain(compacted.published[0])) != before
    restored = table.restore("before").result
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
    published = {str(r.format): plain(r) for r in result.published}
    assert set(published) == {"delta", "iceberg"}
    expected = current_rows(altered)
    assert expected and all(row["tip"] == 0 and "note" not in row for row in expected)
    assert {row["k"]: row["carrier"] for row in expected}[2] == "unknown", "the new default"
    assert delta_rows(published["delta"]) == expected
    assert rows_of(iceberg_table(published["iceberg"]).scan()) == expected
    order = list(expected[0])
    assert DeltaTable(published["delta"]["location"]).schema().to_arrow().names == order
    assert [f.name for f in iceberg_table(published["iceberg"]).schema().fields] == order, "added columns in place"
    assert altered.compact().done is None, "nothing to compact: the alter itself republished"


def test_a_second_publish_of_a_format_waits_and_an_overtaken_one_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a publish of a format runs, another of the same format is busy (exit 4); one presumed dead while it
    read (frozen past its heartbeat) finds a newer publish completed and refuses, so the newer state stands."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", FAST)
    running = Transaction.begin_planned(
        table, Action.PUBLISH, PublishPlan(format=PublishFormat.DELTA, location="x", source="")
    )
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
        plan = PublishPlan(format=PublishFormat.DELTA, location="x", source="")
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


def test_a_late_delta_commit_is_refused_whatever_the_version_it_loaded_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta-rs retries a commit whose version another writer took, on top of it, when the two do not remove the
    same files: a publish that found no table yet (or loaded a version with no file) and committed late, after
    another publish, put its older state on top of the newer one, or both together. It commits the version after
    the one it loaded, or none."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", FAST)
    original_check = getattr(publish_module, "_refuse_if_overtaken")  # noqa: B009 - patched where it runs
    landed = pa.table({"k": pa.array([0], pa.int64()), "p": pa.array(["even"])})
    where: list[str] = []

    def another_publish_right_after_the_check(txn: Any, fmt: Any) -> None:
        original_check(txn, fmt)
        if not where:
            where.append(str(txn.plan.location))
            write_deltalake(where[0], landed, mode="overwrite", partition_by=["p"])  # made it first

    monkeypatch.setattr(publish_module, "_refuse_if_overtaken", another_publish_right_after_the_check)
    with pytest.raises(ConflictError, match=r"appeared at .* after this publish found none"):
        table.publish("delta")
    assert DeltaTable(where[0]).to_pyarrow_table().column("k").to_pylist() == [0], "the other publish stands"


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
            assert table.compact().done is not None
            cleaned.append(table.clean(policy="keep_latest_file_versions", retain=1).result)
        return original_read(*args, **kwargs)

    cleaned: list[Any] = []
    monkeypatch.setattr(publish_module, "read", compacted_and_cleaned_meanwhile)
    result = table.publish("delta").to_json()
    # The first round published the state as of its own time (its files were kept), then found the table changed
    # and published again.
    first_round, second_round = delta_writes(result["location"])[-2:]
    assert delta_rows(result, first_round) == expected
    assert second_round == result["version"] and delta_rows(result) == current_rows(table) != expected


def test_a_publish_location_inside_the_table_is_refused_when_the_config_is_read(tmp_path: Path) -> None:
    document = copy.deepcopy(altered_document(location="table/published"))
    with pytest.raises(Exception, match=r"publish\.location.*inside the table folder"):
        config(tmp_path, document)
    assert config(tmp_path, altered_document(location="table/.stitch/published")).publish.location
    # one place written two ways is one place: a `file://` URI on either side
    inside = (tmp_path / "table" / "published").as_uri()
    with pytest.raises(Exception, match=r"publish\.location.*inside the table folder"):
        config(tmp_path, altered_document(location=inside))
    uri_table = altered_document(location=str(tmp_path / "table" / "published"))
    uri_table["table"]["path"] = (tmp_path / "table").as_uri()
    with pytest.raises(Exception, match=r"publish\.location.*inside the table folder"):
        config(tmp_path, uri_table)


def test_reading_helpers_take_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = history(tmp_path / "t")
    result = table.publish("iceberg").to_json()
    monkeypatch.chdir(tmp_path)
    relative = str(Path(result["location"]).relative_to(tmp_path))
    assert rows_of(iceberg_catalog(relative).load_table(result["identifier"]).scan()) == current_rows(table)
    assert result["catalog"] == f"sqlite:///{result['location']}/catalog.db"


def test_an_erase_whose_republish_a_pending_restore_refuses_fails_instead_of_asking_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase waits only for a publish of the same format. Busy for another reason (a restore whose process
    died, still pending), it asked again at once, for ever, each time under the table lock; now the erase stands
    and its republish fails (exit 1: run `stitch publish` again)."""
    import stitchlake.services.publish as publish_module
    from stitchlake.errors import StitchError
    from stitchlake.timeline.metadata import RestorePlan, UndoTarget

    table = history(tmp_path / "t")
    table.publish("delta")  # by hand: the compaction below leaves it stale
    more = batch(MODEL["orders"], [{"k": 8, "amount": 80, "status": "new", "ots": 9}])
    table.write("orders", more.append_column("coupon", pa.array([None], pa.string())))
    table.compact()
    done = table.timeline().completed()[-1]
    target = UndoTarget(done.requested, done.action, done.state, done.completed)
    Transaction.begin(table, Action.RESTORE, RestorePlan(targets=(target,), savepoint="x"), heartbeat=False)
    original = publish_module.publish
    attempts: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append("publish")
        assert len(attempts) <= 3, "the erase asks again and again"
        return original(*args, **kwargs)

    monkeypatch.setattr(publish_module, "publish", counted)
    with pytest.raises(StitchError, match="erase X completed, but publishing failed"):
        publish_module.publish_after(table, "erase X", wait_busy=True)


def test_a_failed_republish_names_the_formats_to_publish_again_those_the_config_no_longer_lists_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase republishes every format the table has published; when that failed, the message said "run `stitch
    publish` again", which publishes `publish.formats` only: a format published by hand kept the erased keys."""
    import stitchlake.services.publish as publish_module
    from stitchlake.errors import StitchError

    table = history(tmp_path / "t", formats=["delta"])
    table.publish("iceberg")  # by hand: not in publish.formats
    original = publish_module.publish

    def iceberg_down(target: Any, fmt: Any, *args: Any, **kwargs: Any) -> Any:
        if str(fmt) == "iceberg":
            raise StitchError("the catalog is down")
        return original(target, fmt, *args, **kwargs)

    monkeypatch.setattr(publish_module, "publish", iceberg_down)
    with pytest.raises(StitchError) as failed:
        table.erase(pa.table({"k": pa.array([2], pa.int64())}))
    assert "run `stitch publish -f iceberg` again" in str(failed.value), failed.value
    monkeypatch.setattr(publish_module, "publish", original)
    assert stale_formats(table, published_formats(table)) == ["iceberg"]
    table.publish("iceberg")  # what the message says
    identifier = table.timeline().commit(table.timeline().completed([Action.PUBLISH])[-1]).identifier  # type: ignore[attr-defined]
    published = rows_of(
        iceberg_catalog(str(tmp_path / "t" / "table" / ".stitch" / "published" / "iceberg"))
        .load_table(identifier)
        .scan()
    )
    assert 2 not in [row["k"] for row in published]


def test_a_stop_during_the_publish_after_a_compaction_says_the_compaction_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a completed compaction republished printed "the running instant was aborted": an operator
    would run it again, or think the table unchanged. It says the compaction stands and what to run."""
    from typer.testing import CliRunner

    import stitchlake.services.publish as publish_module
    from stitchlake.cli.app import app
    from tests.support.tables import write_table_yaml

    history(tmp_path / "t", formats=["delta"])
    yaml_file = write_table_yaml(tmp_path / "t", altered_document(formats=["delta"]))
    table = Table(config(tmp_path / "t", altered_document(formats=["delta"])))
    table.write(
        "orders",
        batch(MODEL["orders"], [{"k": 9, "amount": 9, "status": "new", "ots": 9}]).append_column(
            "coupon", pa.array([None], pa.string())
        ),
    )

    def stopped(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(publish_module, "read", stopped)
    ran = CliRunner().invoke(app, ["compact", "-c", str(yaml_file), "--engine", "local", "--json"])
    failure = json.loads(ran.stdout)
    compaction = table.timeline().latest_completed([Action.COMPACTION])
    assert ran.exit_code == 130 and compaction is not None
    assert "aborted" not in failure["error"], failure
    assert f"completed before the stop: compaction {compaction.requested} stands" in failure["error"], failure
    assert "run `stitch publish -f delta`" in failure["error"], failure
    # and `stitch status` shows the published table behind, with what to run, until it is published
    shown = json.loads(CliRunner().invoke(app, ["status", "-c", str(yaml_file), "--json"]).stdout)
    assert [(f["format"], f["stale"]) for f in shown["published"]] == [("delta", True)], shown["published"]
    assert any("published delta is behind the table" in w and "stitch publish -f delta" in w for w in shown["warnings"])
    from stitchlake.services.inspect.report import report

    page = report(table)  # the operator's page: the warning with its command, and the formats' section
    assert "Published formats" in page.sections and "behind the table" in page.html
    assert any(w.commands == ["stitch publish -f delta"] for w in page.warnings), page.warnings
    monkeypatch.undo()
    table.publish("delta")
    assert "behind the table" not in report(table).html
    shown = json.loads(CliRunner().invoke(app, ["status", "-c", str(yaml_file), "--json"]).stdout)
    assert [(f["format"], f["stale"]) for f in shown["published"]] == [("delta", False)]
    assert not any("published" in w for w in shown["warnings"]), shown["warnings"]


def test_an_erase_names_the_published_tables_no_publish_reaches_after_a_move(tmp_path: Path) -> None:
    """After `publish.location` (or the Iceberg namespace) changed, publishes went to the new place and the old
    published tables kept every row, an erase's keys too, with not a word from `delete --purge`. The erase names
    them (they are the operator's to delete); a new namespace makes Iceberg stale, as a new location does."""
    root = tmp_path / "t"
    table = history(root, formats=["delta", "iceberg"])
    table.publish("delta")
    table.publish("iceberg")
    old_delta = root / "table" / ".stitch" / "published" / "delta"
    moved = Table(config(root, altered_document(formats=["delta", "iceberg"], location=str(tmp_path / "elsewhere"))))
    assert stale_formats(moved, [PublishFormat.DELTA, PublishFormat.ICEBERG]) == ["delta", "iceberg"]
    renamed = Table(config(root, altered_document(formats=["delta", "iceberg"], iceberg_namespace="other")))
    assert stale_formats(renamed, [PublishFormat.DELTA, PublishFormat.ICEBERG]) == ["iceberg"]

    done = moved.erase(pa.table({"k": pa.array([2], pa.int64())}), purge=True).result
    name = table.config.table.name
    assert done.left_behind == [f"delta {old_delta}", f"iceberg stitchlake.{name} at {old_delta.parent / 'iceberg'}"]
    assert 2 in [row["k"] for row in rows_of(DeltaTable(str(old_delta)).to_pyarrow_table())], "it holds the key"
    now = DeltaTable(str(tmp_path / "elsewhere" / name / "delta")).to_pyarrow_table()
    assert 2 not in [row["k"] for row in rows_of(now)]
    shutil.rmtree(old_delta.parent)  # the operator deletes them
    assert moved.erase(pa.table({"k": pa.array([3], pa.int64())})).result.left_behind == []


def test_a_publish_archived_off_the_timeline_still_counts_and_another_spelling_of_its_place_is_no_move(
    tmp_path: Path,
) -> None:
    """Once its last publish was archived, a format read as "never published": `stitch status` warned that it was
    behind and to publish it, every compaction republished it, unchanged. And a location spelled another way
    (`file://`, a trailing slash) is the same place: named "left behind", the live published table would be the one
    an operator deletes."""
    from stitchlake.services.inspect.status import status

    root = tmp_path / "t"
    table = history(root, formats=["delta"])
    table.publish("delta")
    for number in range(6):
        table.write("shipments", batch(MODEL["shipments"], [{"k": 1, "carrier": f"c{number}", "ship_no": number}]))
    table.archive(keep=3)
    assert not table.timeline().completed([Action.PUBLISH]), "the publish is in the archive now"
    shown = status(table)
    assert [(f.format, f.stale, f.last_publish is not None) for f in shown.published] == [("delta", False, True)]
    assert not any("published" in w for w in shown.warnings), shown.warnings
    table.compact()  # a change to the published rows after the archived publish: behind, rightly
    assert [f.stale for f in status(table).published] == [False], "the compaction republished it"

    here = str(tmp_path / "pub")
    spelled = [here, here + "/", Path(here).as_uri()]
    for first, then in itertools.pairwise(spelled):
        placed = Table(config(root, altered_document(formats=["delta"], location=first)))
        placed.publish("delta")
        again = Table(config(root, altered_document(formats=["delta"], location=then)))
        assert stale_formats(again, [PublishFormat.DELTA]) == [], (first, then)
        left = again.erase(pa.table({"k": pa.array([3], pa.int64())})).result.left_behind
        assert left == [f"delta {root / 'table' / '.stitch' / 'published' / 'delta'}"], (first, then, left)


def test_an_iceberg_table_is_its_catalog_and_name_whatever_publish_location_says(tmp_path: Path) -> None:
    """A publish recorded where its Iceberg table was but not in which catalog. Pointing `publish.iceberg_catalog`
    at another catalog made no format behind and named nothing left behind: the old catalog's table kept every row,
    an erase's keys too. And with a catalog given, a new `publish.location` changed nothing (the catalog says where
    its tables live), yet the erase named the live table as left behind, for the operator to delete."""
    root = tmp_path / "t"
    first = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'first.db'}"}
    second = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'second.db'}"}
    table = history(root, formats=["iceberg"], iceberg_catalog=first)
    table.publish("iceberg")
    name = table.config.table.name

    placed = Table(config(root, altered_document(formats=["iceberg"], iceberg_catalog=first, location=str(tmp_path))))
    assert stale_formats(placed, [PublishFormat.ICEBERG]) == []
    assert placed.erase(pa.table({"k": pa.array([3], pa.int64())})).result.left_behind == []

    other = Table(config(root, altered_document(formats=["iceberg"], iceberg_catalog=second)))
    assert stale_formats(other, [PublishFormat.ICEBERG]) == ["iceberg"]
    done = other.erase(pa.table({"k": pa.array([2], pa.int64())}), purge=True).result
    assert [getattr(p, "catalog", None) for p in done.published] == [second["uri"]]
    assert done.left_behind == [f"iceberg stitchlake.{name} in catalog {first['uri']}"]
    assert iceberg_catalog(str(tmp_path), first).table_exists(("stitchlake", name)), "the operator's to drop"


def test_a_change_archived_while_its_publish_stays_on_the_timeline_still_makes_the_format_behind(
    tmp_path: Path,
) -> None:
    """A compaction that completed while a publish ran (after its read) completed before it, so an archive can
    take the compaction and keep the publish: the active timeline then showed no change after the publish, and the
    format read as current while it lacked the compaction's state."""
    root = tmp_path / "t"
    table = history(root)
    from stitchlake.services.published_state import published_location

    plan = PublishPlan(format=PublishFormat.DELTA, location=published_location(table, PublishFormat.DELTA), source="")
    running = Transaction.begin_planned(table, Action.PUBLISH, plan)
    assert running is not None
    table.write("shipments", batch(MODEL["shipments"], [{"k": 2, "carrier": "ups", "ship_no": 22}]))
    done = table.compact().done
    assert done is not None and (done.completed or "") > running.time
    from stitchlake.timeline.metadata import PublishCommit

    running.complete(PublishCommit(format=PublishFormat.DELTA, location=plan.location, source=""))
    assert stale_formats(table, [PublishFormat.DELTA]) == ["delta"]
    table.write("shipments", batch(MODEL["shipments"], [{"k": 3, "carrier": "dpd", "ship_no": 33}]))  # logs only
    table.archive(keep=2)
    kept = [i.action for i in table.timeline().completed()]
    assert kept == [Action.PUBLISH, Action.DELTACOMMIT], "the compaction is archived, its publish is not"
    assert stale_formats(table, [PublishFormat.DELTA]) == ["delta"]
