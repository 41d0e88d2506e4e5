"""Jobs launched from Python (`stitchlake.jobs.launch` through `Table.ingest(engine=...)`): the CLI's behaviour without
the CLI. A real spark-submit runs; refusals arrive as the error classes whose exit codes the CLI prints.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_jobs_api.py).
"""

from __future__ import annotations

import json
from typing import get_args

from stitchlake.jobs.requests import (
    CleanRequest,
    CompactRequest,
    IngestRequest,
    RestoreRequest,
    SavepointRequest,
)
from stitchlake.jobs.results import plain
from stitchlake.jobs.run import JOBS
from stitchlake.jobs.specs import REQUESTS, decode, result_type
from stitchlake.services.publish import PublishDeferred, PublishResult
from stitchlake.services.rewrites.compaction import CompactionResult
from stitchlake.services.undo.restore import RestoreResult
from stitchlake.services.upkeep.clean import CleanResult
from stitchlake.services.writes.ingest import IngestResult
from stitchlake.timeline.savepoints import Savepoint


def test_job_results_survive_the_trip_through_the_result_file() -> None:
    """What a spark-submit job writes (`plain`) reads back (`decode`) as the very object, nested results too."""
    published = PublishResult("1", "2", "delta", "/p", "1", 3, "", 10, 0, "/p", "")
    inner = CompactionResult("1", "2", 1, 10, 100, published=[published, PublishDeferred("iceberg", "publish 5 runs")])
    cases = [
        (CompactRequest(), CompactionResult("3", "4", 2, 20, 200, merged_files=5, resumed=[inner])),
        (CompactRequest(), None),
        (IngestRequest("orders"), IngestResult("orders", "spark", "5", "6", offsets=["t/0:1-2"], timings={"x": 1.5})),
        (CleanRequest(), CleanResult("7", "keep_latest_commits", deleted=["a"], finished=["restore 1"])),
        (SavepointRequest("create"), Savepoint("8", "before", "2", "1", 4)),
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
