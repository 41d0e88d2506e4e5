"""Jobs launched from Python (`stitchlake.jobs.launch` through `Table.ingest(engine=...)`): the CLI's behaviour without
the CLI. A real spark-submit runs; refusals arrive as the error classes whose exit codes the CLI prints.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_jobs_api.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pyarrow as pa
import pytest

import stitchlake
from stitchlake.config.choices import CleanPolicy
from stitchlake.engine import LocalEngine
from stitchlake.errors import UsageError
from stitchlake.jobs.launch import launch
from stitchlake.jobs.requests import (
    CleanRequest,
    CompactRequest,
    IngestRequest,
    RestoreRequest,
    SavepointRequest,
    StreamRequest,
)
from stitchlake.jobs.results import JobRun, PlannedRuns, plain
from stitchlake.jobs.run import JOBS
from stitchlake.jobs.specs import REQUESTS, decode, from_json, result_type
from stitchlake.services.publish import PublishDeferred, PublishResult
from stitchlake.services.rewrites.compaction import CompactionResult
from stitchlake.services.undo.restore import RestoreResult
from stitchlake.services.upkeep.clean import CleanResult
from stitchlake.services.writes.ingest import IngestResult
from stitchlake.timeline.savepoints import Savepoint
from stitchlake.vocabulary import PublishFormat, SavepointAction
from tests.support.tables import MODELS, batch, new_table

ORDERS = MODELS[0]


def test_job_results_survive_the_trip_through_the_result_file() -> None:
    """What a spark-submit job writes (`plain`) reads back (`decode`) as the very object, nested results too."""
    published = PublishResult("1", "2", PublishFormat.DELTA, "/p", "1", 3, "", 10, 0, "/p", "")
    inner = CompactionResult(
        "1", "2", 1, 10, 100, published=[published, PublishDeferred(PublishFormat.ICEBERG, "publish 5 runs")]
    )
    cases = [
        (CompactRequest(), CompactionResult("3", "4", 2, 20, 200, merged_files=5, resumed=[inner])),
        (CompactRequest(), None),
        (IngestRequest("orders"), IngestResult("orders", "spark", "5", "6", offsets=["t/0:1-2"], timings={"x": 1.5})),
        (CleanRequest(), CleanResult("7", "keep_latest_commits", deleted=["a"], finished=["restore 1"])),
        (SavepointRequest(SavepointAction.CREATE), Savepoint("8", "before", "2", "1", 4)),
        (RestoreRequest("before"), RestoreResult("9", "2", undone=["3"], deleted_files=1)),
    ]
    for request, result in cases:
        trip = json.loads(json.dumps(plain(result)))
        assert decode(request, trip) == result, request


def test_each_request_names_the_result_its_handler_returns() -> None:
    """A job's spec names its result type (read back from the result file); the request's type argument (what the
    type checker sees) and the in-process handler's return type are declared apart: all three must agree."""
    for request_class in REQUESTS.values():
        declared = result_type(request_class())
        named = {"None" if kind is type(None) else kind.__name__ for kind in get_args(declared) or (declared,)}
        (argument,) = get_args(request_class.__orig_bases__[0])  # type: ignore[attr-defined]
        assert named == {name.strip() for name in argument.__forward_arg__.split("|")}, request_class.__name__
        handler = JOBS.get(request_class)
        if handler is None:  # `stream` runs only under spark-submit
            continue
        returned = {name.strip() for name in handler.__annotations__["return"].split("|")}
        assert named == returned, (request_class.__name__, declared, returned)


def test_a_request_holds_its_choices_as_the_vocabulary_and_refuses_any_other_word() -> None:
    """A clean policy or savepoint action is checked where the request is made (the CLI, a scheduler), before any
    work; a request read back from its JSON (a spark-submit job's side) holds the same member again."""
    sent = CleanRequest("keep_latest_hours", 6)  # type: ignore[arg-type]  # as JSON or a caller gives it
    assert sent.policy is CleanPolicy.KEEP_LATEST_HOURS
    assert from_json(json.loads(json.dumps(sent.to_json()))) == sent
    assert from_json(json.loads(json.dumps(sent.to_json()))).policy is CleanPolicy.KEEP_LATEST_HOURS  # type: ignore[attr-defined]
    assert SavepointRequest("delete", savepoint="before").action is SavepointAction.DELETE  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="clean policy 'keep_everything' is not one of: keep_latest_commits, "):
        CleanRequest("keep_everything")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="savepoint action 'drop' is not one of: create, delete"):
        SavepointRequest("drop")  # type: ignore[arg-type]


def test_the_table_methods_return_one_shape_whatever_the_engine(tmp_path: Path) -> None:
    """A job method returns its run on every engine: the default (this process), an engine name, or an `Engine`
    object the caller made (its name says where it ran); the planning jobs return their runs."""
    table = new_table(tmp_path)
    table.write(ORDERS.name, batch(ORDERS, [{"k": k, "amount": k, "status": "new", "ots": 1} for k in range(8)]))

    class Counted(LocalEngine):
        name = "counted"

    here = table.clean(retain=1)
    assert isinstance(here, JobRun) and here.engine == "local" and isinstance(here.result, CleanResult)
    compacted = table.compact(engine=Counted())
    assert isinstance(compacted, PlannedRuns) and compacted.last is not None and compacted.last.engine == "counted"
    assert compacted.done is not None and compacted.done.instant
    assert table.compact().done is None, "nothing left to compact: no run"
    erased = table.erase(pa.table({"k": pa.array([1, 2], pa.int64())}), engine="local")
    assert isinstance(erased, JobRun) and erased.result.erased_keys == 2
    rescaled = table.rescale(3, engine=Counted())
    assert isinstance(rescaled, PlannedRuns) and rescaled.done is not None and rescaled.done.buckets == 3
    assert sorted(table.read(columns=["k"]).column("k").to_pylist()) == [0, 3, 4, 5, 6, 7]
    with pytest.raises(UsageError, match="the stream job runs only as a spark-submit job"):
        launch(table, StreamRequest(ORDERS.name), Counted())


def test_the_metadata_only_methods_launch_as_the_cli_does_and_return_their_run(tmp_path: Path) -> None:
    """savepoint, restore, rollback and archive went straight to their services and returned bare results, and a
    table opened from its folder alone (no lock settings) was let change: now they launch like every job."""
    table = new_table(tmp_path)
    rows = [{"k": k, "amount": k, "status": "new", "ots": 1} for k in range(4)]
    first = table.write(ORDERS.name, batch(ORDERS, rows))
    pinned = table.savepoint("before")
    assert isinstance(pinned, JobRun) and pinned.engine == "local" and isinstance(pinned.result, Savepoint)
    assert pinned.result.name == "before" and pinned.result.of_instant == first.instant
    second = table.write(ORDERS.name, batch(ORDERS, [{**row, "amount": 100} for row in rows]))
    restored = table.restore("before")
    assert isinstance(restored.result, RestoreResult) and restored.result.undone == [second.instant]
    assert sorted(table.read(columns=["amount"]).column("amount").to_pylist()) == [0, 1, 2, 3]
    assert table.delete_savepoint("before").result.name == "before"
    third = table.write(ORDERS.name, batch(ORDERS, rows[:1]))
    assert table.rollback(stream=ORDERS.name).result.rolled_back == [third.instant]
    assert table.rollback().result.rolled_back == [], "neither an instant nor a stream: the failed writes"
    assert isinstance(table.archive(keep=1), JobRun)
    with pytest.raises(UsageError, match="savepoint is metadata only"):
        table.savepoint("again", engine="spark")
    with pytest.raises(UsageError, match="opened from its folder"):
        stitchlake.open(table.path).archive()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"files_per_trigger": 0}, "files_per_trigger must be more than 0, got 0"),
        ({"records_per_trigger": -5}, "records_per_trigger must be more than 0, got -5"),
        ({"trigger_interval_s": 0}, "trigger_interval_s must be more than 0"),
        ({"available_now": True, "trigger_interval_s": 5}, "give one or the other"),
    ],
)
def test_a_stream_request_out_of_the_clis_bounds_is_refused_from_the_api_too(
    options: dict[str, Any], message: str
) -> None:
    """Only the CLI checked these: through the API 0 fell back to the config in silence, a negative records budget
    planned nothing for ever, and available_now with an interval dropped the interval."""
    with pytest.raises(UsageError, match=message):
        StreamRequest(ORDERS.name, **options)
