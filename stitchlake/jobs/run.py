"""Run a job request on an engine: the CLI runs requests in-process (`LocalEngine`) or hands them, as JSON, to
`stitchlake/spark/submit.py`, which runs the very same handler with a `SparkEngine` (`jobs.specs` says which).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from stitchlake.errors import UsageError
from stitchlake.jobs.specs import SPECS

if TYPE_CHECKING:
    from stitchlake.engine import Engine
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.table.handle import TableHandle

R = TypeVar("R")
Progress = Callable[[str], None]

#: Each request class's handler (derived from `jobs.specs.SPECS`); Spark-only jobs have none.
JOBS: dict[type[JobRequest[Any]], Callable[[TableHandle, Any, Engine, Progress], Any]] = {
    spec.request: spec.handler for spec in SPECS.values() if spec.handler is not None
}


def _quiet(_message: str) -> None:
    pass


def run(table: TableHandle, request: JobRequest[R], engine: Engine, progress: Progress = _quiet) -> R:
    """Run `request` and return its service's result: the request's type argument (`IngestRequest` is a
    `JobRequest[IngestResult]`), which each handler returns."""
    handler = JOBS.get(type(request))
    if handler is None:
        raise UsageError(f"the {request.job} job runs only on Spark (a spark-submit job)")
    return cast("R", handler(table, request, engine, progress))
