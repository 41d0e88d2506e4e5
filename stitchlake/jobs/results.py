"""What a launched job hands back: the service's own typed result, where it ran and how long it took.

Results stay objects from the service to whoever launched the job (the CLI, `Table.ingest(engine=...)`, a
scheduler's Python operator). They become JSON only at the two edges: the spark-submit result file, read back into
the same type by `jobs.specs.decode`, and the CLI's `--json`, written by `to_json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic_core import to_jsonable_python

if TYPE_CHECKING:
    from stitchlake.services.publish import Published

R = TypeVar("R")

#: Jobs whose result may be None (nothing was pending): `--json` nests it under `result`.
NESTED_RESULTS = frozenset({"compact", "rescale"})


def plain(value: Any) -> Any:
    """`value` (dataclasses, lists, dicts of them) as JSON-ready data."""
    return to_jsonable_python(value)


@dataclass
class SparkReadResult:
    """What `stitch read --engine spark` read: `rows` in all, and either the sample's rows (`shown`, in the
    request's sample file) or the folder Spark wrote them to (`out`: `files` part files of `bytes` in all).
    `reader`: which Spark reader merged them (`jvm`, or `python`: the fallback when the JVM reader is absent)."""

    rows: int
    columns: list[str]
    reader: str
    shown: int = 0
    out: str | None = None
    format: str | None = None
    files: int = 0
    bytes: int = 0


@dataclass
class JobRun(Generic[R]):
    """One job's run: `result` is what its service returned; `engine` where it ran (`local`, `spark`; `none`
    when nothing was pending); `seconds` the wall time waited, `job_seconds` the job's own part after the JVM
    started and `log` its Spark log (on Spark only)."""

    job: str
    result: R
    engine: str
    seconds: float = 0.0
    job_seconds: float | None = None
    log: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The CLI's `--json`: the result's fields, with where and how long beside them."""
        body = plain(self.result)
        data: dict[str, Any] = {"result": body} if self.job in NESTED_RESULTS else dict(body)
        data["engine"] = self.engine
        data["seconds"] = self.seconds
        if self.job_seconds is not None:
            data["job_seconds"] = self.job_seconds
        if self.log is not None:
            data["log"] = self.log
        return data


@dataclass
class PlannedRuns(Generic[R]):
    """A service that plans, then runs its plan (compaction, rescale): the plans left pending that ran first
    (`resumed`, oldest first), the plan this call made (`scheduled`) and the last run. `last_resumed`: nothing new
    was planned and the last run was a pending plan too. `published`: nothing was run, and these configured
    formats caught up with the table (compaction only)."""

    scheduled: str | None = None
    last: JobRun[R | None] | None = None
    resumed: list[JobRun[R | None]] = field(default_factory=list)
    last_resumed: bool = False
    published: list[Published] | None = None

    @classmethod
    def of_resumed(cls, resumed: list[JobRun[R | None]]) -> PlannedRuns[R]:
        """Nothing new was planned: the last pending plan run is the answer (none: nothing ran)."""
        return cls(None, resumed[-1], resumed[:-1], last_resumed=True) if resumed else cls()

    @property
    def done(self) -> R | None:
        """What the last run did; None when nothing ran."""
        return self.last.result if self.last is not None else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = self.last.to_json() if self.last is not None else {"result": None}
        data["scheduled"] = self.scheduled
        data["resumed"] = [run.to_json() for run in self.resumed]
        if self.published is not None:
            data["published"] = plain(self.published)
        return data
