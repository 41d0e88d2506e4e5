"""Jobs launched from Python (`stitchlake.jobs.launch` through `Table.ingest(engine=...)`): the CLI's behaviour
without the CLI. A real spark-submit runs; refusals arrive as the error classes whose exit codes the CLI prints."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from spark_fixtures import write_config

import stitchlake
from stitchlake.errors import BusyError, UsageError
from stitchlake.services.ingest import claim

pytestmark = pytest.mark.spark


def _table(folder: Path, landing: Path, auto_local_max_mb: int | None = None) -> stitchlake.api.Table:
    config = write_config(folder, landing)
    if auto_local_max_mb is not None:
        document = yaml.safe_load(config.read_text(encoding="utf-8"))
        document["spark"]["auto_local_max_mb"] = auto_local_max_mb
        config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    table = stitchlake.open(str(config))
    table.init()
    return table


def test_ingest_on_spark_and_auto_from_python_match_the_in_process_table(demo_data: Path, tmp_path: Path) -> None:
    landing = demo_data / "landing"
    reference = _table(tmp_path / "reference", landing)
    for stream in ("orders", "payments"):
        assert reference.ingest(stream, engine="local")["engine"] == "local"

    table = _table(tmp_path / "launched", landing, auto_local_max_mb=0)  # any work is "large": auto picks Spark
    on_spark = table.ingest("orders", engine="spark")
    assert on_spark["engine"] == "spark" and on_spark["instant"] and on_spark["rows"] > 0, on_spark
    assert Path(on_spark["log"]).is_file(), "the Spark log of the job is named"
    auto = table.ingest("payments", engine="auto")
    assert auto["engine"] == "spark" and auto["instant"], auto
    again = table.ingest("orders", engine="auto")
    assert again["instant"] is None and again["message"] == "nothing to ingest for stream orders", again
    assert table.read().sort_by("order_id").equals(reference.read().sort_by("order_id"))

    small = _table(tmp_path / "small", landing)  # the default limit: the demo's few kB run in this process
    assert small.ingest("shipments", engine="auto")["engine"] == "local"


def test_refusals_arrive_as_the_errors_of_the_cli_exit_codes(demo_data: Path, tmp_path: Path) -> None:
    table = _table(tmp_path, demo_data / "landing")
    held = claim(table, "orders")  # another live writer of the stream
    try:
        with pytest.raises(BusyError) as busy:
            table.ingest("orders", engine="spark")
        assert busy.value.exit_code == 4
    finally:
        held.abort()
    with pytest.raises(UsageError) as usage:
        table.ingest("orders", engine="spark", max_records=10)  # a Kafka option for a stream of files
    assert usage.value.exit_code == 2
    with pytest.raises(UsageError, match="unknown engine 'sparkle'"):
        table.ingest("orders", engine="sparkle")
    assert not table.timeline().pending(), "a refused launch leaves no instant behind"
    assert table.compact(engine="local") == {"scheduled": None, "result": None, "resumed": [], "published": []}


def test_a_job_that_published_before_its_stop_reached_it_is_not_reported_aborted(
    demo_data: Path, tmp_path: Path
) -> None:
    """A stop can reach the CLI while its job commits: the commit stands, and the message must not say "aborted"
    (an operator would re-run and find nothing to do)."""
    from stitchlake.cli.app import _interrupted
    from stitchlake.engine import LocalEngine
    from stitchlake.errors import Terminated
    from stitchlake.jobs.launch import abort_unless_published
    from stitchlake.jobs.requests import IngestRequest
    from stitchlake.jobs.run import run

    table = _table(tmp_path, demo_data / "landing")
    held = claim(table, "orders")
    try:
        run(table, IngestRequest("orders", instant=held.time), LocalEngine())  # the job's driver publishes it
        stop = Terminated("terminated by SIGTERM")
        assert abort_unless_published(table, held, stop) is False
    finally:
        held.finish_here()
    published = table.timeline().get(held.time)
    assert published is not None and published.is_completed, "the published instant stands"
    assert "aborted" not in _interrupted(stop) and held.time in _interrupted(stop), _interrupted(stop)

    pending = claim(table, "payments")
    stop = Terminated("terminated by SIGTERM")
    assert abort_unless_published(table, pending, stop) is True
    assert _interrupted(stop) == "; the running instant was aborted"
    assert table.timeline().get(pending.time) is None or not table.timeline().pending()
