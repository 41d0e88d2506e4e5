"""Jobs a scheduler can trust (issue 12): SIGTERM, SIGKILL and overlapping runs of `stitch ingest`.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_signals.py).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stitchlake.storage.local import LocalStorage
from tests.support.spark_fixtures import demo_table
from tests.support.tables import claimed


def _raise_sigterm_after_creating(suffix: str) -> Callable[..., bool]:
    original = LocalStorage.put_if_absent

    def put_if_absent(self: LocalStorage, path: str, data: bytes, ready: Callable[[], None] | None = None) -> bool:
        created = original(self, path, data, ready)
        if created and path.endswith(suffix):
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, before the create returns
        return created

    return put_if_absent


@pytest.mark.parametrize("where", ["requested", "inflight", "between-claim-and-spark-job"])
def test_sigterm_wherever_it_lands_around_the_claim_aborts_the_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    from scripts.demo_data import generate
    from stitchlake.cli.app import _terminate, app
    from stitchlake.jobs import launch

    generate(tmp_path / "data", orders=200, days=1, seed=3, files_per_stream=2)
    config, table = demo_table(tmp_path, tmp_path / "data" / "landing")
    engine = "local"
    if where == "requested":
        monkeypatch.setattr(LocalStorage, "put_if_absent", _raise_sigterm_after_creating(".deltacommit.requested"))
    elif where == "inflight":
        monkeypatch.setattr(LocalStorage, "put_if_absent", _raise_sigterm_after_creating(".deltacommit.inflight"))
    else:
        engine = "spark"  # claimed by the command before spark-submit; the signal lands before the job starts
        real_execute = launch.execute  # what `launch.launch` calls

        def execute(*args: Any, **kwargs: Any) -> Any:
            assert claimed(table), "the claim was taken before the job"
            signal.raise_signal(signal.SIGTERM)
            return real_execute(*args, **kwargs)

        monkeypatch.setattr(launch, "execute", execute)
    previous = signal.signal(signal.SIGTERM, _terminate)  # as `stitch` installs it (stitchlake.cli.app.main)
    try:
        done = CliRunner().invoke(app, ["ingest", "-c", str(config), "-s", "orders", "--engine", engine, "--json"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    monkeypatch.undo()
    assert done.exit_code == 143, done.output
    failure = json.loads(done.stdout)
    assert failure["ok"] is False and "SIGTERM" in failure["error"]
    assert not table.timeline().pending(), "the instant was aborted on the way out"
    assert not list((Path(table.path) / ".stitch" / "heartbeats").glob("*")), "no heartbeat outlives the run"
    rerun = CliRunner().invoke(app, ["ingest", "-c", str(config), "-s", "orders", "--engine", "local", "--json"])
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.stdout)["source_files"] == 2
