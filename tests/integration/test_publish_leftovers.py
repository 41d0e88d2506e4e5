"""What a publish leaves when it stops half-way (issue 26 point 5, left over from issue 13): an interrupted publish
says that the version it committed exists; Iceberg data files a crashed publish wrote are swept by the next
publish; and a publish presumed dead that resumes after `erase --purge` recreated the published table cannot
write into it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stitchlake.timeline.instant import Action
from tests.support.published_history import (
    altered_document,
    current_rows,
    data_files,
    history,
    iceberg_table,
    published_version,
    read_published,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_publish_interrupted_after_its_commit_says_that_the_version_exists(tmp_path: Path, fmt: str) -> None:
    """`stitch publish` gets SIGTERM right after the format's commit: it exits 143, its instant is rolled back, and
    its message says which version of the published table exists anyway; the next publish supersedes it."""
    table = history(tmp_path / "t")
    document = altered_document()
    document["table"]["path"] = table.path
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    code = (
        "import os, signal, sys\n"
        f"import stitchlake.io.published.{fmt} as publish\n"
        "from stitchlake.cli.app import main\n"
        f"name = 'write_{fmt}'\n"
        "original = getattr(publish, name)\n"
        "def then_terminated(*args, **kwargs):\n"
        "    made = original(*args, **kwargs)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return made\n"
        "setattr(publish, name, then_terminated)\n"
        f"sys.argv = ['stitch', 'publish', '-c', {str(path)!r}, '-f', {fmt!r}, '--json']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr
    error = json.loads(done.stdout)["error"]
    location = f"{table.path}/.stitch/published/{fmt}"
    found = {"location": location, "identifier": "stitchlake.wide"}
    version = published_version(fmt, found)
    assert error.startswith("terminated by SIGTERM; the running instant was aborted"), error
    assert f"{fmt} version {version} at {location} was committed before publish" in error, error
    assert "exists and readers see it" in error and "the next publish" in error
    timeline = table.timeline()
    assert not timeline.pending() and not timeline.completed([Action.PUBLISH]), "the instant was rolled back"
    assert read_published(fmt, found) == current_rows(table), "the version it committed is there"

    result = table.publish(fmt).to_json()
    assert result["version"] != version and published_version(fmt, found) == result["version"]
    assert read_published(fmt, result) == current_rows(table)


def test_iceberg_data_files_left_by_a_crashed_publish_are_removed_by_the_next_publish(tmp_path: Path) -> None:
    """The process dies after pyiceberg wrote the new version's data files and before the catalog committed it:
    no snapshot lists them. The next publish deletes them (and counts them in `removed_files`)."""
    table = history(tmp_path / "t")
    first = table.publish("iceberg").to_json()
    folder = first["table_location"]
    before = set(data_files(folder))
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from pathlib import Path\n"
        "from pyiceberg.catalog.sql import SqlCatalog\n"
        "from tests.support.tables import config\n"
        "from tests.support.published_history import altered_document\n"
        "from stitchlake.api import Table\n"
        "def die(*args, **kwargs):\n"
        "    os._exit(9)\n"
        "SqlCatalog.commit_table = die\n"
        f"Table(config(Path({str(tmp_path / 't')!r}), altered_document())).publish('iceberg')\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=300).returncode == 9
    left = set(data_files(folder)) - before
    assert left, "the crashed publish wrote data files"
    assert published_version("iceberg", first) == first["version"], "and committed nothing"
    found = iceberg_table(first)
    listed = {
        task.file.file_path.removeprefix("file://")
        for snapshot in found.snapshots()
        for task in found.scan(snapshot_id=snapshot.snapshot_id).plan_files()
    }
    assert not {str(path) for path in left} & listed

    second = table.publish("iceberg").to_json()
    assert not set(data_files(folder)) & left, "the crashed publish's files were removed"
    assert second["removed_files"] >= len(left)
    assert read_published("iceberg", second) == current_rows(table)
