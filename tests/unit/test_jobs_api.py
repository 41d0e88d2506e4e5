"""Jobs launched from Python (`stitchlake.jobs.launch` through `Table.ingest(engine=...)`): the CLI's behaviour without
the CLI. A real spark-submit runs; refusals arrive as the error classes whose exit codes the CLI prints.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_jobs_api.py).
"""

from __future__ import annotations

import json
from typing import get_args

from stitchlake.jobs.requests import (
    REQUESTS,
    CleanRequest,
    CompactRequest,
    IngestRequest,
    RestoreRequest,
    SavepointRequest,
)
from stitchlake.jobs.results import decode, plain, result_type
from stitchlake.jobs.run import JOBS
from stitchlake.services.clean import CleanResult
from stitchlake.services.compaction import CompactionResult
from stitchlake.services.ingest import IngestResult
from stitchlake.services.publish import PublishDeferred, PublishResult
from stitchlake.services.restore import RestoreResult
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
    """A request's type argument (read back from the result file) and its in-process handler's return type are
    declared apart: they must agree for every job the handlers run."""
    for request_class in REQUESTS.values():
        declared = result_type(request_class())
        handler = JOBS.get(request_class)
        if handler is None:  # `stream` runs only under spark-submit
            continue
        returned = {name.strip() for name in handler.__annotations__["return"].split("|")}
        named = {"None" if kind is type(None) else kind.__name__ for kind in get_args(declared) or (declared,)}
        assert named == returned, (request_class.__name__, declared, returned)
