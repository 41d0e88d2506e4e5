"""Ingest a stream's landing files exactly once (DESIGN §6, issue "ingest on Spark").

Each completed deltacommit records the source files it consumed; a run ingests only files no completed
instant of the stream has consumed. A re-run after success finds nothing and exits 0; a re-run after a crash
ingests exactly the files the crashed run did not commit. Only one live writer per stream is allowed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from stitchlake.errors import ConflictError, UsageError
from stitchlake.io.sources import ROW_BITS, SourceFile, discover
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.timeline import Timeline
from stitchlake.transaction import ConflictCheck, Transaction

if TYPE_CHECKING:
    from stitchlake.batch import Batch
    from stitchlake.table import Table


@dataclass
class IngestResult:
    """What an ingest run did, for the terminal summary and `--json`."""

    stream: str
    engine: str
    instant: str | None = None
    completed: str | None = None
    source_files: int = 0
    rows: int = 0
    bad_rows: int = 0
    quarantine: str | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def consumed(table: Table, timeline: Timeline, stream: str) -> set[str]:
    """Names of the source files completed instants of `stream` consumed (archived ones included)."""
    from stitchlake.services.archive import load_checkpoint

    names: set[str] = set()
    checkpoint = load_checkpoint(table.storage)
    if checkpoint:
        names.update(checkpoint.get("consumed", {}).get(stream, []))
    for instant in timeline.completed([Action.DELTACOMMIT]):
        if checkpoint and (instant.completed or "") <= checkpoint.get("completed", ""):
            continue
        names |= sources_of(timeline.metadata(instant), stream)
    return names


def sources_of(metadata: dict[str, Any], stream: str) -> set[str]:
    """The landing files a deltacommit of `stream` consumed (none for another stream's)."""
    if metadata.get("stream") != stream:
        return set()
    return {item["name"] for item in metadata.get("sources", [])}


def pending_files(
    table: Table, stream: str, paths: list[str] | None = None, max_files: int | None = None
) -> list[SourceFile]:
    """Landing files of `stream` not consumed yet, in arrival order, at most `max_files`."""
    spec = table.config.stream(stream)
    if spec.source is None:
        raise UsageError(f"stream {stream} has no `source:` in the config; add one (format and path) or pass --source")
    done = consumed(table, table.timeline(), stream)
    todo = [f for f in discover(spec.source, paths) if f.name not in done]
    return todo[:max_files] if max_files else todo


def concat_batches(batches: list[Batch]) -> Batch:
    import numpy as np
    import pyarrow as pa

    from stitchlake.batch import Batch

    bads = [b.bad for b in batches if b.bad is not None and b.bad.num_rows]
    return Batch(
        rows=pa.concat_tables([b.rows for b in batches]),
        pos=np.concatenate([b.pos for b in batches]),
        deleted=np.concatenate([b.deleted for b in batches]),
        bad=pa.concat_tables(bads, promote_options="permissive") if bads else None,
    )


def still_pending(stream: str, sources: list[str]) -> ConflictCheck:
    """Exactly-once at publish time: none of the landing files named `sources` may have been ingested by a
    commit that completed meanwhile (both engines publish through this check).

    The busy check at begin keeps live writers of a stream apart, but a writer frozen past its heartbeat's expiry
    is presumed dead, so a second one may ingest the same files; whichever publishes second must not.
    """
    names = set(sources)

    def check(timeline: Timeline, instant: Instant) -> None:
        for other in timeline.completed([Action.DELTACOMMIT], since=instant.requested):
            taken = names & sources_of(timeline.metadata(other), stream)
            if taken:
                raise ConflictError(
                    f"landing file(s) {', '.join(sorted(taken)[:3])} of stream {stream} were ingested by instant "
                    f"{other.requested} of another process while it ran; nothing was published — run again"
                )

    return check


def begin(table: Table, stream: str) -> Transaction:
    """Start the stream's deltacommit, refusing (exit 4) while another live writer of the stream runs."""
    return Transaction.begin(table, Action.DELTACOMMIT, {"stream": stream}, exclusive_stream=stream)


def preflight(
    table: Table, stream: str, paths: list[str] | None = None, max_files: int | None = None
) -> IngestResult | None:
    """Cheap checks before starting Spark: busy stream (exit 4 at once) or nothing pending (no JVM at all).

    The job repeats both checks under its own transaction; this only spares a cron run the start-up cost.
    """
    from stitchlake.transaction import refuse_if_stream_busy

    table.require()
    refuse_if_stream_busy(table, table.timeline(), stream)
    if not pending_files(table, stream, paths, max_files):
        return nothing_to_do(stream, "spark")
    return None


def nothing_to_do(stream: str, engine: str) -> IngestResult:
    return IngestResult(stream=stream, engine=engine, message=f"nothing to ingest for stream {stream}")


def ingest_local(
    table: Table, stream: str, paths: list[str] | None = None, max_files: int | None = None
) -> IngestResult:
    """Ingest in-process: read each pending file, validate it, write one deltacommit."""
    import time

    import numpy as np

    from stitchlake.batch import prepare, required_columns
    from stitchlake.io.sources import read_source
    from stitchlake.write import write

    started = time.time()
    table.require()
    spec = table.config.stream(stream)
    if not pending_files(table, stream, paths, max_files):
        return nothing_to_do(stream, "local")
    txn = begin(table, stream)
    try:
        todo = pending_files(table, stream, paths, max_files)
        if not todo:
            txn.abort()
            return nothing_to_do(stream, "local")
        assert spec.source is not None
        txn.conflict_check = still_pending(stream, [f.name for f in todo])
        columns = [c.name for c in required_columns(table.config, spec)]
        if spec.deletes:
            columns.append(spec.deletes.column)
        batches = []
        for ordinal, file in enumerate(todo):
            data = read_source(spec.source, file, columns)
            positions = (np.int64(ordinal) << ROW_BITS) | np.arange(data.num_rows, dtype=np.int64)
            batches.append(prepare(table.config, spec, data, source=file.path, pos=positions))
        result = write(
            table, stream, concat_batches(batches), txn=txn, metadata={"sources": [f.to_json() for f in todo]}
        )
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        txn.abort()
        if refused is not None:
            raise refused from exc
        raise
    return IngestResult(
        extra=inline_compaction(table),
        stream=stream,
        engine="local",
        instant=result.instant,
        completed=result.completed,
        source_files=len(todo),
        rows=result.rows,
        bad_rows=result.bad_rows,
        quarantine=result.quarantine,
        files=len(result.files),
        bytes=result.bytes,
        seconds=time.time() - started,
        message=f"ingested {len(todo)} file(s), {result.rows} rows into stream {stream}",
    )


def inline_compaction(table: Table, run: Any = None) -> dict[str, Any]:
    """Compact right after an ingest when `compaction.inline` says enough deltacommits piled up."""
    from dataclasses import asdict

    from stitchlake.services.compaction import compact, inline_due

    if not inline_due(table):
        return {}
    result = run(table) if run is not None else compact(table)
    return {"compaction": asdict(result) if result is not None else None}
