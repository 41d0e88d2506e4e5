"""Published tables follow the stitched table (issue 13 point 2): whatever takes rows out of a read (an erase, a
restore, an alter) republishes; publishes never race one another back to an older state; a format that failed
catches up; clean keeps what a running publish reads; tables never share a published table.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_publish_follows.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

import stitchlake
from stitchlake.errors import StitchError
from stitchlake.jobs.results import plain
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import PublishCommit
from tests.support.processes import run_stitch
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
from tests.support.tables import batch


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

    erased = table.erase(erase_keys(1)).result
    assert {r.format for r in erased.published} == {"delta", "iceberg"}
    again = {str(r.format): plain(r) for r in erased.published}
    assert delta_rows(again["delta"]) == current_rows(table) == rows_of(iceberg_table(again["iceberg"]).scan())
    assert 1 not in {row["k"] for row in current_rows(table)}
    assert 1 in {row["k"] for row in delta_rows(first["delta"], first["delta"]["version"])}, "time travel, no purge"

    purged = table.erase(erase_keys(3), purge=True).result
    last = {str(r.format): plain(r) for r in purged.published}
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


def files_text(folder: str) -> str:
    """Every file under a folder, bytes decoded loosely: Parquet, JSON logs, Avro manifests and checkpoints."""
    return "".join(path.read_bytes().decode("latin-1") for path in Path(folder).rglob("*") if path.is_file())


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
        assert stitchlake.open(str(path)).compact().done is None
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
    assert typo.returncode == 2
    assert "publish format 'parquet' is not one of: delta, iceberg" in json.loads(typo.stdout)["error"]
    assert not table.timeline().completed([Action.PUBLISH]) and not table.timeline().pending()

    done = run_stitch("publish", "-c", str(path), "-f", "iceberg", "-f", "delta", "--json")
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error.startswith("iceberg: ") and error.endswith("(published: delta)"), error
    assert rows_of(DeltaTable(f"{table.path}/.stitch/published/delta").to_pyarrow_table()) == current_rows(table)


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
