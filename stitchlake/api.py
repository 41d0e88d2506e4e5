"""The public table handle: everything a Python user does to a table, as methods (`stitchlake.open(...)`).

It adds the services to the core `stitchlake.table.handle.TableHandle`. Each job method (ingest, compact, rescale,
clean, erase, and the metadata-only savepoint, restore, rollback, archive) runs as `stitch ... --engine E` does
(`stitchlake.jobs.launch`) and returns one shape whatever the engine: the run (`JobRun`: result, where it ran, how
long) or, for the jobs that plan, the runs (`PlannedRuns`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from stitchlake.errors import UsageError
from stitchlake.table.handle import TableHandle, open_table
from stitchlake.vocabulary import CompactionStrategy, EngineChoice, PublishFormat, ReadMode, SavepointAction

if TYPE_CHECKING:
    from collections.abc import Callable

    import duckdb
    import pyarrow as pa

    from stitchlake.config import TableConfig
    from stitchlake.config.choices import CleanPolicy
    from stitchlake.engine import Engine
    from stitchlake.jobs.requests import JobRequest
    from stitchlake.jobs.results import JobRun, PlannedRuns
    from stitchlake.reading.options import ReadKeywords
    from stitchlake.reading.scan import Scan
    from stitchlake.services.inspect.status import StatusReport
    from stitchlake.services.publish import PublishResult
    from stitchlake.services.rewrites.compaction import CompactionResult
    from stitchlake.services.rewrites.erase import EraseResult
    from stitchlake.services.rewrites.rescale import RescaleResult
    from stitchlake.services.undo.restore import RestoreResult
    from stitchlake.services.undo.rollback import RollbackResult
    from stitchlake.services.upkeep.archive import ArchiveResult
    from stitchlake.services.upkeep.clean import CleanResult
    from stitchlake.services.upkeep.savepoint import Savepoint
    from stitchlake.services.writes.ingest import IngestResult
    from stitchlake.services.writes.streaming import StreamResult
    from stitchlake.writing.writer import WriteResult


T = TypeVar("T")


def _retried(retries: int, attempt: Callable[[], T]) -> T:
    """A launched job, run again after a conflict (exit 3: nothing was published) up to `retries` times, as the
    CLI's `--retries` does (`stitchlake.jobs.launch.with_retries`: waits doubling, with jitter)."""
    from stitchlake.jobs import launch

    return launch.with_retries(retries, attempt)[0]


def _launched(table: Table, request: JobRequest[T], engine: Engine | EngineChoice | str, retries: int) -> JobRun[T]:
    from stitchlake.jobs.launch import launch

    return _retried(retries, lambda: launch(table, request, engine))


def _launch_erase(
    table: Table, keys: pa.Table | str, purge: bool, engine: Engine | EngineChoice | str
) -> JobRun[EraseResult]:
    """An erase job reads its keys from a file: an Arrow table is written to a temporary one first."""
    import tempfile
    from pathlib import Path

    import pyarrow.parquet as pq

    from stitchlake.jobs.launch import launch
    from stitchlake.jobs.requests import EraseRequest

    if isinstance(keys, str):
        return launch(table, EraseRequest(keys, purge), engine)
    with tempfile.TemporaryDirectory(prefix="stitch-erase-") as folder:
        path = str(Path(folder) / "keys.parquet")
        pq.write_table(keys, path)
        return launch(table, EraseRequest(path, purge), engine)


class Table(TableHandle):
    """A stitched table and every action on it."""

    def write(
        self,
        stream: str,
        data: pa.Table,
        *,
        source: str = "input",
        exclusive: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> WriteResult:
        """Write one batch of `stream` as one deltacommit (`stitchlake.writing.writer`); `metadata` is kept with it."""
        from stitchlake.writing.writer import write

        return write(self, stream, data, source=source, exclusive=exclusive, metadata=metadata)

    def read(self, mode: ReadMode | str = ReadMode.SNAPSHOT, **options: Unpack[ReadKeywords]) -> pa.Table:
        """Read the table into one Arrow table (see `stitchlake.reading`): the whole result in memory, which is the
        caller's choice; `scan` streams the same rows one file slice at a time."""
        from stitchlake.reading.options import ReadOptions
        from stitchlake.reading.reader import read

        return read(self, ReadOptions(mode, **options))

    def scan(self, mode: ReadMode | str = ReadMode.SNAPSHOT, **options: Unpack[ReadKeywords]) -> Scan:
        """The rows `read` returns, as a stream of Arrow record batches one file slice at a time (memory bounded by
        the largest file groups, not the table): iterate it, take `.reader()`, or hand it to anything that reads
        the Arrow C stream interface (DuckDB, Polars, `pyarrow.parquet.ParquetWriter` via the reader)."""
        from stitchlake.reading.options import ReadOptions
        from stitchlake.reading.reader import scan

        return scan(self, ReadOptions(mode, **options))

    def publish(self, format: PublishFormat | str) -> PublishResult:
        """Publish the compacted state as the next version of a Delta Lake or Iceberg table (`services.publish`)."""
        from stitchlake.services.publish import publish

        return publish(self, format)

    def to_duckdb(
        self, connection: duckdb.DuckDBPyConnection | None = None, name: str | None = None, **read_options: Any
    ) -> duckdb.DuckDBPyConnection:
        """Register the table, read as `read` reads it, in a DuckDB connection (`stitchlake.reading.sql`): each query
        streams it one file slice at a time."""
        from stitchlake.reading.options import ReadOptions
        from stitchlake.reading.sql import to_duckdb

        return to_duckdb(self, connection, name, ReadOptions(**read_options))

    def sql(self, query: str, **read_options: Any) -> pa.Table:
        """Run SQL over the table, named `t` or by its own name, with DuckDB (`stitchlake.reading.sql`), and over its
        metadata tables (`t$files`, ...: `stitchlake.services.inspect.metadata_tables`). The table is streamed through
        DuckDB; the result is returned whole."""
        from stitchlake.reading.options import ReadOptions
        from stitchlake.reading.sql import query as run_query
        from stitchlake.services.inspect.metadata_tables import sql_tables

        return run_query(self, query, ReadOptions(**read_options), tables=sql_tables(self))

    def metadata_table(self, name: str) -> pa.Table:
        """One metadata table (`timeline`, `files`, `file_groups`, `streams`, `savepoints`, `rescales`) as Arrow,
        from metadata only (docs/operations.md, "Metadata tables")."""
        from stitchlake.services.inspect.metadata_tables import build

        return build(self, name)

    def ingest(
        self,
        stream: str,
        sources: list[str] | None = None,
        max_files: int | None = None,
        reingest_changed: bool = False,
        engine: Engine | EngineChoice | str = EngineChoice.local,
        max_records: int | None = None,
        reset_offsets: str | None = None,
        retries: int = 0,
    ) -> JobRun[IngestResult]:
        """Ingest the stream's new landing files (or Kafka records) exactly once, as `stitch ingest --engine E`
        does (`stitchlake.jobs.launch`; default: in this process): on Spark the claim is taken before the JVM
        starts and undone if the job fails or is interrupted. The run says what it did (`.result`), where and how
        long (`to_json()` is the CLI's `--json`); errors are the `stitchlake.errors` classes of the CLI's exit
        codes; `retries` runs it again after a conflict (exit 3) as `--retries` does.
        """
        from stitchlake.jobs.requests import IngestRequest

        request = IngestRequest(
            stream,
            tuple(sources or ()),
            max_files,
            reingest_changed,
            max_records=max_records,
            reset_offsets=reset_offsets,
        )
        return _launched(self, request, engine, retries)

    def stream(
        self,
        stream: str,
        *,
        available_now: bool = False,
        files_per_trigger: int | None = None,
        trigger_interval_s: float | None = None,
        records_per_trigger: int | None = None,
        checkpoint: str | None = None,
    ) -> JobRun[StreamResult]:
        """Follow the stream's source with a Structured Streaming job on Spark, as `stitch stream` does
        (`stitchlake.jobs.launch.launch`): it runs until the process is stopped, or with `available_now` until
        what is there now is ingested."""
        from stitchlake.jobs.launch import launch
        from stitchlake.jobs.requests import StreamRequest

        request = StreamRequest(
            stream,
            files_per_trigger=files_per_trigger,
            trigger_interval_s=trigger_interval_s,
            records_per_trigger=records_per_trigger,
            available_now=available_now,
            checkpoint=checkpoint,
        )
        return launch(self, request, EngineChoice.spark)

    def compact(
        self,
        strategy: CompactionStrategy | str | None = None,
        engine: Engine | EngineChoice | str = EngineChoice.local,
        retries: int = 0,
    ) -> PlannedRuns[CompactionResult]:
        """Run pending plans nobody runs, then schedule and run a compaction, as `stitch compact --engine E` does
        (`stitchlake.jobs.launch.compact`): the runs, of which `.done` is what the last one did (None: nothing
        needed compacting; a configured format that a failed publish left behind then catches up, `.published`).
        Again after a conflict up to `retries` times."""
        from stitchlake.jobs import launch

        return _retried(retries, lambda: launch.compact(self, strategy=strategy, engine=engine))

    def rescale(
        self,
        buckets: int,
        partitions: list[str] | None = None,
        engine: Engine | EngineChoice | str = EngineChoice.local,
    ) -> PlannedRuns[RescaleResult]:
        """Rewrite every file group of the table (or of `partitions`, by path) into `buckets` buckets, as one
        instant (pending rescales nobody runs go first), as `stitch rescale --engine E` does
        (`stitchlake.jobs.launch.rescale`); `.done` is None when they already have that count."""
        from stitchlake.jobs import launch

        return launch.rescale(self, buckets, partitions=tuple(partitions or ()), engine=engine)

    def clean(
        self,
        policy: CleanPolicy | str | None = None,
        retain: int | None = None,
        dry_run: bool = False,
        engine: Engine | EngineChoice | str = EngineChoice.local,
    ) -> JobRun[CleanResult]:
        """Roll back failed writes, then delete what the retention policy allows (as `stitch clean --engine E`)."""
        from stitchlake.config.choices import clean_policy
        from stitchlake.jobs.requests import CleanRequest

        request = CleanRequest(clean_policy(policy) if policy else None, retain, dry_run)
        return _launched(self, request, engine, 0)

    def erase(
        self,
        keys: pa.Table | str,
        purge: bool = False,
        engine: Engine | EngineChoice | str = EngineChoice.local,
        retries: int = 0,
    ) -> JobRun[EraseResult]:
        """Key-level erase of the given keys (an Arrow table of the key columns, or a Parquet, CSV or JSON-lines
        file; see `stitchlake.services.rewrites.erase`), as `stitch delete --engine E` does, again after a conflict
        up to `retries` times."""
        return _retried(retries, lambda: _launch_erase(self, keys, purge, engine))

    def savepoint(
        self, name: str | None = None, instant: str | None = None, engine: EngineChoice | str = EngineChoice.local
    ) -> JobRun[Savepoint]:
        """Pin the state as of a completed instant (default: the latest), as `stitch savepoint create` does. Like
        every metadata-only job it runs in this process (`spark` is refused, exit 2)."""
        from stitchlake.jobs.requests import SavepointRequest

        return _launched(self, SavepointRequest(SavepointAction.CREATE, name=name, instant=instant), engine, 0)

    def delete_savepoint(self, savepoint: str, engine: EngineChoice | str = EngineChoice.local) -> JobRun[Savepoint]:
        """Let a pinned state go (by name or instant), as `stitch savepoint delete` does."""
        from stitchlake.jobs.requests import SavepointRequest

        return _launched(self, SavepointRequest(SavepointAction.DELETE, savepoint=savepoint), engine, 0)

    def restore(
        self, savepoint: str, force: bool = False, engine: EngineChoice | str = EngineChoice.local
    ) -> JobRun[RestoreResult]:
        """Bring the table back to a savepoint's state, as `stitch savepoint restore` does."""
        from stitchlake.jobs.requests import RestoreRequest

        return _launched(self, RestoreRequest(savepoint, force), engine, 0)

    def rollback(
        self, instant: str | None = None, stream: str | None = None, engine: EngineChoice | str = EngineChoice.local
    ) -> JobRun[RollbackResult]:
        """Roll back one instant, or one stream's latest deltacommit, or (neither) every failed write, as `stitch
        rollback --instant/--stream/--failed` does."""
        from stitchlake.jobs.requests import RollbackRequest

        if instant and stream:
            raise UsageError("give an instant or a stream to roll back, not both")
        request = RollbackRequest(instant, failed=not instant and not stream, stream=stream)
        return _launched(self, request, engine, 0)

    def archive(
        self, keep: int | None = None, engine: EngineChoice | str = EngineChoice.local
    ) -> JobRun[ArchiveResult]:
        """Move completed instants past the newest `keep` into the archive, as `stitch archive` does."""
        from stitchlake.jobs.requests import ArchiveRequest

        return _launched(self, ArchiveRequest(keep), engine, 0)

    def status(self) -> StatusReport:
        """The health report of `stitch status` (`to_json()` is its `--json`)."""
        from stitchlake.services.inspect.status import status

        return status(self)


def open(target: str | os.PathLike[str] | TableConfig) -> Table:
    """A table handle from a config file path, a table folder (read only: a folder carries none of the config's
    runtime settings, such as the lock its writers share), or a TableConfig."""
    return open_table(target, Table)
