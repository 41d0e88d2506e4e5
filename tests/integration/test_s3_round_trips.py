"""Round trips on S3: commands wait for a number of request *waves* that does not grow with the timeline.

The bound, for a table with N active instants (no archive checkpoint yet), every request costing one round trip:

- `stitch read`: 1 (table.json) + 2 per timeline load (the instant listing and the archive listing; the CLI
  loads it 3 times: its own check, the reader's check, the read) + 1 wave of the N commit files + 1 wave of
  data files per READ_THREADS file slices = 9 waves for the 4 file groups here, whatever N is. A second read
  in the same process finds the completed instants' files in the process cache: 8 waves.
- `stitch timeline show`: 1 + 2 + 1 listing + 1 wave of commits = 5 waves.

Each wave of the table here holds up to 200 requests, issued 32 at a time; with the simulated 20 ms per request
a command's wall time is a fraction of a second instead of the ~8 s that 400 sequential round trips would take.
A split wave on a starved machine is noise that only adds waves, so a command gets up to three runs to show its
bound (`_fewest_waves`); a wave the code adds is in every run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from typer.testing import CliRunner

from stitchlake.cli.app import app
from stitchlake.storage import LocalStorage, storage_for
from tests.support.counting_storage import SCHEME, Recorder, install, uninstall
from tests.support.tables import MODELS, batch, new_table

pytestmark = pytest.mark.s3

INSTANTS = 200
LATENCY_S = 0.02
#: A read lists the timeline twice in a row (`Timeline.load_cut`: a listing is no atomic cut, and the second one
#: shows whether the first missed a completion): one wave of the nine before it.
READ_WAVES = 10
TIMELINE_WAVES = 5


def _row(index: int) -> dict[str, Any]:
    model = MODELS[index % 3]
    text = {"status", "note", "carrier"}
    return {"k": index, **{c: ("x" if c in text else index) for c in model.columns}}


@pytest.fixture(scope="module")
def table_200(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A table with 200 completed deltacommits (one small log file each) on S3, and the AWS_* variables for it.

    Written locally and then copied object by object (what a table is does not depend on where it lives), which
    takes seconds instead of 200 commits' worth of round trips.
    """
    from scripts import rgw
    from tests.support.s3_server import _bucket_name

    root = tmp_path_factory.mktemp("t200")
    table = new_table(root, buckets=2)
    for index in range(INSTANTS):
        table.write(MODELS[index % 3].name, batch(MODELS[index % 3], [_row(index)]))
    name = _bucket_name("round-trips")
    rgw.create_bucket(s3_server._rgw(), name)
    target = storage_for(f"s3://{name}/t200", s3_server.options())
    local = LocalStorage(table.path)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda info: target.write_bytes(info.path, local.read_bytes(info.path)), local.list_files()))
    yield f"{name}/t200", s3_server.env()
    rgw.delete_bucket(s3_server._rgw(), name)


@pytest.fixture
def location(table_200: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> str:
    """Where `table_200` is, with its AWS_* variables set for this test only (the module's table outlives a test's
    `monkeypatch`, so each test that reads it sets them)."""
    where, env = table_200
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return where


def _run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _fewest_waves(
    recorder: Recorder, attempt: Callable[[], dict[str, Any]], bound: int, tries: int = 3
) -> dict[str, Any]:
    """Run `attempt` until its waves are within `bound`, at most `tries` times; the recorder keeps the run with
    the fewest waves, and its result is returned.

    A wave ends when no request is in flight. On a starved machine all 32 requests of a thread pool can end before
    any worker starts its next one, which splits one pool batch into two waves (CI once saw the 200 commit reads
    as 40 + 160). That noise only ever adds waves; a wave the code really adds is there in every run.
    """
    best: tuple[int, dict[str, Any], list[tuple[int, str, str]], Counter[str]] | None = None
    for _ in range(tries):
        recorder.reset()
        result = attempt()
        if best is None or recorder.waves < best[0]:
            best = (recorder.waves, result, list(recorder.log), Counter(recorder.requests))
        if recorder.waves <= bound:
            break
    assert best is not None
    recorder.waves, recorder.log, recorder.requests = best[0], best[2], best[3]
    return best[1]


def test_read_and_timeline_show_at_200_instants_wait_for_a_bounded_number_of_waves(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stitchlake.timeline import timeline

    def cold(*args: str) -> Callable[[], dict[str, Any]]:
        def attempt() -> dict[str, Any]:
            monkeypatch.setattr(timeline, "_IMMUTABLE", type(timeline._IMMUTABLE)())  # a cold process
            return _run(*args)

        return attempt

    recorder = install(LATENCY_S)
    try:
        uri = f"{SCHEME}://{location}"
        read = _fewest_waves(recorder, cold("read", "--table", uri, "--limit", "0"), READ_WAVES)
        assert read["rows"] == INSTANTS
        commits = sum(1 for _wave, op, path in recorder.log if op == "GET" and path.endswith(".deltacommit"))
        data = sum(1 for _wave, op, path in recorder.log if op == "GET" and path.endswith(".parquet"))
        assert commits == INSTANTS and data == INSTANTS  # every file read once...
        assert recorder.waves <= READ_WAVES, "\n".join(recorder.waves_summary())  # ...in a few waves

        # The same process again: completed instants come from the cache.
        again = _fewest_waves(recorder, lambda: _run("read", "--table", uri, "--limit", "0"), READ_WAVES - 1)
        assert again["rows"] == INSTANTS
        assert not [path for _wave, op, path in recorder.log if path.endswith(".deltacommit")]
        assert recorder.waves <= READ_WAVES - 1, "\n".join(recorder.waves_summary())

        shown = _fewest_waves(recorder, cold("timeline", "show", "--table", uri, "--limit", "0"), TIMELINE_WAVES)
        assert len(shown["instants"]) == INSTANTS
        assert recorder.waves <= TIMELINE_WAVES, "\n".join(recorder.waves_summary())
        assert recorder.requests["GET"] == INSTANTS + 1  # table.json and each commit once
    finally:
        uninstall()


def test_a_sequential_reader_would_wait_for_every_file(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter itself: on local disk (no parallel waves) the same read is one wave per file."""
    from stitchlake.storage import s3

    recorder = install(0.0)
    monkeypatch.setattr(s3.S3Storage, "remote", False)  # as a local disk: no waves, no prefetch, no cache
    monkeypatch.setattr(s3.S3Storage, "prefetch", lambda self, files: None)
    try:
        assert _run("read", "--table", f"{SCHEME}://{location}", "--limit", "0")["rows"] == INSTANTS
        assert recorder.waves > INSTANTS
    finally:
        uninstall()
