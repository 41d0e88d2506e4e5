"""Jobs launched from Python (`stitchlake.jobs.launch` through `Table.ingest(engine=...)`): the CLI's behaviour
without the CLI. A real spark-submit runs; refusals arrive as the error classes whose exit codes the CLI prints."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stitchlake.errors import BusyError, ConfigError, ConflictError, UsageError
from stitchlake.jobs import launch
from stitchlake.jobs.requests import (
    IngestRequest,
)
from stitchlake.services.rewrites.compaction import CompactionResult
from stitchlake.services.rewrites.erase import EraseResult
from stitchlake.services.upkeep.clean import CleanResult
from stitchlake.services.writes.ingest import IngestResult, claim
from stitchlake.services.writes.streaming import StreamResult
from tests.support.spark_fixtures import demo_table

pytestmark = pytest.mark.spark


def test_ingest_on_spark_and_auto_from_python_match_the_in_process_table(demo_data: Path, tmp_path: Path) -> None:
    landing = demo_data / "landing"
    _, reference = demo_table(tmp_path / "reference", landing)
    for stream in ("orders", "payments"):
        assert reference.ingest(stream, engine="local").engine == "local"

    # Any work is "large": auto picks Spark.
    _, table = demo_table(tmp_path / "launched", landing, spark={"auto_local_max_mb": 0})
    on_spark = table.ingest("orders", engine="spark")
    # The spark-submit job's result file is read back into the service's own type.
    assert isinstance(on_spark.result, IngestResult), on_spark
    assert on_spark.engine == "spark" and on_spark.result.instant and on_spark.result.rows > 0, on_spark
    assert on_spark.log is not None and Path(on_spark.log).is_file(), "the Spark log of the job is named"
    assert on_spark.job_seconds is not None and 0 < on_spark.job_seconds <= on_spark.seconds
    shown = on_spark.to_json()  # the CLI's --json: the result's fields beside where and how long
    assert shown["instant"] == on_spark.result.instant and shown["engine"] == "spark" and shown["log"] == on_spark.log
    auto = table.ingest("payments", engine="auto")
    assert auto.engine == "spark" and auto.result.instant, auto
    again = table.ingest("orders", engine="auto")
    assert again.result.instant is None and again.result.message == "nothing to ingest for stream orders", again
    assert table.read().sort_by("order_id").equals(reference.read().sort_by("order_id"))

    _, small = demo_table(tmp_path / "small", landing)  # the default limit: the demo's few kB run in this process
    assert small.ingest("shipments", engine="auto").engine == "local"


def test_refusals_arrive_as_the_errors_of_the_cli_exit_codes(demo_data: Path, tmp_path: Path) -> None:
    _, table = demo_table(tmp_path, demo_data / "landing")
    held = claim(table, "orders")  # another live writer of the stream
    try:
        for engine in ("spark", "auto"):  # auto picks this process for the demo's few kB: refused all the same
            with pytest.raises(BusyError) as busy:
                table.ingest("orders", engine=engine)
            assert busy.value.exit_code == 4, engine
    finally:
        held.abort()
    with pytest.raises(UsageError) as usage:
        table.ingest("orders", engine="spark", max_records=10)  # a Kafka option for a stream of files
    assert usage.value.exit_code == 2
    with pytest.raises(UsageError, match="engine 'sparkle' is not one of: "):
        table.ingest("orders", engine="sparkle")
    assert not table.timeline().pending(), "a refused launch leaves no instant behind"
    nothing = table.compact(engine="local")
    assert nothing.last is None and nothing.scheduled is None and nothing.published == [], nothing
    assert nothing.to_json() == {"result": None, "scheduled": None, "resumed": [], "published": []}


def test_erase_clean_compact_and_rescale_launch_from_python_by_engine_name(demo_data: Path, tmp_path: Path) -> None:
    """The other heavy jobs take engine names too; an erase given Arrow keys reaches a spark-submit job."""
    _, table = demo_table(tmp_path, demo_data / "landing")
    for stream in ("orders", "payments", "shipments"):
        table.ingest(stream, engine="local")
    before = table.read()
    gone = before.column("order_id").to_pylist()[:3]
    erased = table.erase(pa.table({"order_id": pa.array(gone, pa.int64())}), engine="spark")
    assert isinstance(erased.result, EraseResult) and erased.engine == "spark", erased
    assert erased.result.erased_keys == 3 and erased.result.completed, erased
    assert set(gone).isdisjoint(table.read().column("order_id").to_pylist())
    assert table.read().num_rows == before.num_rows - 3

    compacted = table.compact(engine="local")
    assert isinstance(compacted.done, CompactionResult) and compacted.scheduled == compacted.done.instant
    assert compacted.to_json()["result"]["instant"] == compacted.done.instant
    rescaled = table.rescale(2, engine="auto")
    assert rescaled.done is not None and rescaled.done.buckets == 2 and rescaled.done.whole_table, rescaled
    assert table.layout().default == 2, "a whole-table rescale makes the handle route by the new count"
    cleaned = table.clean(retain=1, engine="auto")
    assert isinstance(cleaned.result, CleanResult) and cleaned.engine == "local" and cleaned.result.deleted
    assert (
        table.read()
        .sort_by("order_id")
        .equals(before.filter(pc.invert(pc.is_in(before["order_id"], pa.array(gone)))).sort_by("order_id"))
    )


def test_a_stream_is_followed_from_python_as_stitch_stream_does(demo_data: Path, tmp_path: Path) -> None:
    """`Table.stream` launches the Structured Streaming job (`stitch stream`); `available_now` ingests what is there
    in micro-batches and stops, each batch exactly once, so the table equals an in-process ingest."""
    landing = demo_data / "landing"
    _, reference = demo_table(tmp_path / "reference", landing)
    ingested = reference.ingest("orders", engine="local").result
    _, table = demo_table(tmp_path / "streamed", landing)
    run = table.stream("orders", available_now=True, files_per_trigger=1)
    assert isinstance(run.result, StreamResult) and run.engine == "spark", run
    assert run.result.batches >= 2 and run.result.rows == ingested.rows, (run, ingested)
    assert table.read().sort_by("order_id").equals(reference.read().sort_by("order_id"))
    with pytest.raises(ConfigError, match="unknown stream"):
        table.stream("nope", available_now=True)


def test_a_conflict_is_run_again_up_to_the_retries_given(demo_data: Path, tmp_path: Path) -> None:
    """`retries` (the CLI's `--retries`) runs a job again after a conflict, which published nothing; once spent,
    the conflict is raised (exit 3). Retries go only with a launched job (an engine name)."""
    outcomes: list[BaseException | str] = [ConflictError("first"), ConflictError("second"), "done"]

    def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert launch.with_retries(2, attempt) == ("done", 2)
    outcomes[:] = [ConflictError("only")]
    with pytest.raises(ConflictError, match="only"):
        launch.with_retries(0, attempt)
    _, table = demo_table(tmp_path, demo_data / "landing")
    assert table.ingest("orders", engine="local", retries=2).result.instant, "no conflict: one run"


def test_a_job_that_published_before_its_stop_reached_it_is_not_reported_aborted(
    demo_data: Path, tmp_path: Path
) -> None:
    """A stop can reach the CLI while its job commits: the commit stands, and the message must not say "aborted"
    (an operator would re-run and find nothing to do)."""
    from stitchlake.cli.app import interruption_note
    from stitchlake.engine import LocalEngine
    from stitchlake.errors import Terminated
    from stitchlake.jobs.launch import abort_unless_published
    from stitchlake.jobs.run import run

    _, table = demo_table(tmp_path, demo_data / "landing")
    held = claim(table, "orders")
    try:
        run(table, IngestRequest("orders", instant=held.time), LocalEngine())  # the job's driver publishes it
        stop = Terminated("terminated by SIGTERM")
        assert abort_unless_published(table, held, stop) is False
    finally:
        held.finish_here()
    published = table.timeline().get(held.time)
    assert published is not None and published.is_completed, "the published instant stands"
    assert "aborted" not in interruption_note(stop) and held.time in interruption_note(stop), interruption_note(stop)

    pending = claim(table, "payments")
    stop = Terminated("terminated by SIGTERM")
    assert abort_unless_published(table, pending, stop) is True
    assert interruption_note(stop) == "; the running instant was aborted"
    assert table.timeline().get(pending.time) is None or not table.timeline().pending()
