"""One record per job (`JobSpec`): its request, handler, result type, preflight and work estimate.

The request table (`REQUESTS`, which a spark-submit job reads its request back with), the handler table
(`jobs.run.JOBS`) and result decoding (`decode`) are all derived from `SPECS`, and `jobs.launch.launch` runs any
request from it: adding a job is a request class, a handler and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from pydantic import TypeAdapter

from stitchlake.errors import UsageError
from stitchlake.jobs import handlers
from stitchlake.jobs.requests import (
    ArchiveRequest,
    CleanRequest,
    CompactRequest,
    EraseRequest,
    IngestRequest,
    JobRequest,
    RescaleRequest,
    RestoreRequest,
    RollbackRequest,
    SavepointRequest,
    SparkReadRequest,
    StreamRequest,
)
from stitchlake.jobs.results import SparkReadResult
from stitchlake.services.rewrites.compaction import CompactionResult
from stitchlake.services.rewrites.erase import EraseResult
from stitchlake.services.rewrites.rescale import RescaleResult
from stitchlake.services.undo.restore import RestoreResult
from stitchlake.services.undo.rollback import RollbackResult
from stitchlake.services.upkeep.archive import ArchiveResult
from stitchlake.services.upkeep.clean import CleanResult
from stitchlake.services.writes.ingest import IngestResult
from stitchlake.services.writes.streaming import StreamResult
from stitchlake.timeline.savepoints import Savepoint

if TYPE_CHECKING:
    from stitchlake.engine import Engine
    from stitchlake.table.handle import TableHandle
    from stitchlake.table.transaction import Transaction

Q = TypeVar("Q", bound=JobRequest[Any])
R = TypeVar("R")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Preflight:
    """What a job found before any JVM starts: the bytes of work (`auto` picks the engine by them), or `idle` and
    the result to hand back at once when there is nothing to do."""

    work: int = 0
    idle: bool = False
    result: Any = None


def no_work(_table: TableHandle, _request: Any) -> Preflight:
    """Metadata-only jobs, and jobs whose work is deletes (`clean`): `auto` runs them in this process."""
    return Preflight()


@dataclass(frozen=True)
class JobSpec(Generic[Q, R]):
    """One job: how it is asked for, run, answered and sized."""

    request: type[Q]
    #: The result type its handler returns (a class, or a union with None): how a spark-submit result reads back.
    result: Any
    #: Runs the request on an engine; None: the job runs only under spark-submit (`stream`).
    handler: Callable[[TableHandle, Q, Engine, Progress], R] | None
    #: Refusals before any JVM starts, and the work estimate.
    preflight: Callable[[TableHandle, Q], Preflight] = no_work
    #: Takes the job's instant before a JVM starts, so an overlapping run is refused in well under a second.
    claim: Callable[[TableHandle, Q], Transaction] | None = None

    @property
    def job(self) -> str:
        return self.request.job


# --------------------------------------------------------------------------------------------- preflights


def _ingest_preflight(table: TableHandle, request: IngestRequest) -> Preflight:
    """Busy (exit 4), changed landing files (exit 5) and nothing pending are found here, before any JVM."""
    from stitchlake.services.offsets import estimate_bytes, plan
    from stitchlake.services.writes.ingest import (
        nothing_to_do,
        pending_files,
        preflight,
        refuse_other_source_options,
    )

    stream = request.stream
    kafka = refuse_other_source_options(
        table,
        stream,
        file_options=bool(request.sources or request.max_files or request.reingest_changed),
        kafka_options=request.max_records is not None or request.reset_offsets is not None,
    )
    pending: Any
    if kafka:
        pending = preflight(table, stream, partial(plan, table, stream, request.max_records, request.reset_offsets))
        work = estimate_bytes(pending.ranges) if pending else 0
    else:
        sources = list(request.sources) or None
        files = partial(pending_files, table, stream, sources, request.max_files, request.reingest_changed)
        pending = preflight(table, stream, files)[0]
        work = sum(f.size for f in pending)
    if not pending:
        return Preflight(idle=True, result=nothing_to_do(stream, "none"))
    return Preflight(work)


def _ingest_claim(table: TableHandle, request: IngestRequest) -> Transaction:
    from stitchlake.services.writes.ingest import claim

    return claim(table, request.stream)


def _stream_preflight(table: TableHandle, request: StreamRequest) -> Preflight:
    from stitchlake.services.writes.streaming import refuse_unfit_request

    refuse_unfit_request(table, request.stream, request.files_per_trigger, request.records_per_trigger)
    return Preflight()


def _compact_work(table: TableHandle, request: CompactRequest) -> Preflight:
    from stitchlake.services.rewrites.compaction import plan_bytes

    return Preflight(plan_bytes(table, request.instant))


def _rescale_work(table: TableHandle, request: RescaleRequest) -> Preflight:
    from stitchlake.services.rewrites.rescale import plan_bytes

    return Preflight(plan_bytes(table, request.instant))


def _erase_work(table: TableHandle, _request: EraseRequest) -> Preflight:
    """An erase rewrites every file group committed before it: the table's size."""
    return Preflight(sum(f.bytes for f in table.view().live_files()))


def _read_preflight(table: TableHandle, request: SparkReadRequest) -> Preflight:
    """A Spark read is planned here first, by the planner `stitch read` uses: a bad time, column, filter or mode
    is refused with the local read's words, before any JVM starts."""
    from stitchlake.reading.options import ReadOptions
    from stitchlake.reading.reader import scan

    options = ReadOptions(
        request.mode,
        request.as_of,
        request.since,
        request.until,
        request.columns,
        list(request.where) or None,
        request.before_images,
    )
    planned = scan(table, options)
    if request.out is not None:
        from pathlib import Path

        from stitchlake.reading.output_folder import check_out_folder, check_out_schema

        check_out_folder(Path(request.out))
        check_out_schema(planned.schema, request.out_format or "parquet", Path(request.out))
    return Preflight()


# ------------------------------------------------------------------------------------------------- the jobs


_JOBS: tuple[JobSpec[Any, Any], ...] = (
    JobSpec(IngestRequest, IngestResult, handlers.run_ingest, _ingest_preflight, _ingest_claim),
    JobSpec(CompactRequest, CompactionResult | None, handlers.run_compact, _compact_work),
    JobSpec(RescaleRequest, RescaleResult | None, handlers.run_rescale, _rescale_work),
    JobSpec(CleanRequest, CleanResult, handlers.run_clean),
    JobSpec(EraseRequest, EraseResult, handlers.run_erase, _erase_work),
    JobSpec(RollbackRequest, RollbackResult, handlers.run_rollback),
    JobSpec(SavepointRequest, Savepoint, handlers.run_savepoint),
    JobSpec(RestoreRequest, RestoreResult, handlers.run_restore),
    JobSpec(ArchiveRequest, ArchiveResult, handlers.run_archive),
    JobSpec(StreamRequest, StreamResult, None, _stream_preflight),
    JobSpec(SparkReadRequest, SparkReadResult, None, _read_preflight),
)
#: Every job, by name.
SPECS: dict[str, JobSpec[Any, Any]] = {spec.job: spec for spec in _JOBS}

#: Each job's request class, by name.
REQUESTS: dict[str, type[JobRequest[Any]]] = {job: spec.request for job, spec in SPECS.items()}


def spec_of(request: JobRequest[Any]) -> JobSpec[Any, Any]:
    return SPECS[request.job]


def from_json(data: dict[str, Any]) -> JobRequest[Any]:
    """A request from its JSON form (as written by `JobRequest.to_json`)."""
    cls = REQUESTS.get(str(data.get("job")))
    if cls is None:
        raise UsageError(f"unknown job {data.get('job')!r} (jobs: {', '.join(REQUESTS)})")
    known = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
    return cls(**values)


def result_type(request: JobRequest[Any]) -> Any:
    """The type a job's run returns, to read it back from a spark-submit result file."""
    return spec_of(request).result


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def decode(request: JobRequest[R], data: Any) -> R:
    """A job's result from its JSON form, as the type its run returned."""
    return cast("R", _adapter(result_type(request)).validate_python(data))
