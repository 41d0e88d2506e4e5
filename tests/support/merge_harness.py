"""pytest plugin for the JVM conformance tests (docs/spark-reader.md): the merge harness, one `MergeMain` JVM per
module (`harness`), the plan of a read as the JVM reader is handed it, the canonical rows both sides are compared in,
`compared` (every `Table.read` in a block merged by the JVM too) and the generated tables' settings."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import math
import os
import queue
import shutil
import struct
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Unpack

import pyarrow as pa
import pytest
from hypothesis import strategies as st

from stitchlake.api import Table
from stitchlake.errors import UsageError
from stitchlake.jobs.spark_conf import reader_jar
from stitchlake.reading.options import ReadKeywords
from stitchlake.spark import planner
from tests.support.jvm_session import end_through_stdin

JAR = reader_jar()


#: Generated tables in all (issue 35 asks `make test` for at least 1,000). A table with its writes and its ~14 reads
#: (each merged by Python and by the JVM) costs about 0.3 s on a quiet 2-core machine and 0.5 s in `make test` (both
#: cores busy), two thirds of it Python's writes and reads: about 9 minutes of test worker time in all, split
#: between this module and test_jvm_conformance_alters.py; `make conformance` runs 2,000.
EXAMPLES = int(os.environ.get("CONFORMANCE_EXAMPLES", "1000"))
EPOCH_DAY = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


#: The harness JVM: C1 only. Its requests are many and small, so C2's compiles never paid back: with them the JVM
#: burnt 2.5x the CPU (24.5 s against 9.6 s for ~900 merges) for 20% less merge time.
JAVA = ("java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


#: Rows per column batch: a task reads 4096, so a generated table's few-row files would each be one segment; at 3
#: every file of more than 3 rows is several, as large files are in a task, and the merge across segments is
#: compared too.
BATCH_ROWS = 3


class Harness:
    """One `MergeMain` JVM: plan documents in, the merged rows out, in order. `send` does not wait, so the JVM
    merges one read while Python writes the table's next step (a thread reads the answers: neither pipe can fill
    and stall the other side); `receive` takes the next answer."""

    def __init__(self) -> None:
        classpath = f"{JAR}{os.pathsep}{_spark_jars() / '*'}"
        self.process = subprocess.Popen(
            [*JAVA, "-cp", classpath, "io.stitchlake.spark.merge.MergeMain", "--batch-rows", str(BATCH_ROWS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_answers, name="merge-harness-answers", daemon=True).start()

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put("")  # the harness exited

    def send(self, plan: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"plan": plan}) + "\n")
        self.process.stdin.flush()

    def hashes(self, keys: list[list[Any]]) -> list[int]:
        """The JVM's bucket hash (`BucketHash`) of each key, asked and answered at once."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"hash": keys}) + "\n")
        self.process.stdin.flush()
        answer = self.receive()
        assert answer["ok"], answer
        return [int(h) for h in answer["hashes"]]

    def receive(self) -> dict[str, Any]:
        """The next answer, taken even when it is a failure (so the answers after it stay in step)."""
        line = self.answers.get(timeout=600)
        assert line, f"the merge harness exited ({self.process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        end_through_stdin(self.process, timeout=30)


def merged(answer: dict[str, Any]) -> list[Any]:
    """The rows of a harness answer; a failed merge fails the test with the JVM's error."""
    assert answer["ok"], f"the JVM merge failed: {answer['error']}\n{answer['trace']}"
    rows: list[Any] = answer["rows"]
    return rows


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    # `make setup` builds the jar and needs java: a missing one is a broken setup, never a reason to skip.
    if not JAR.is_file():
        pytest.fail(f"no stitchlake Spark reader jar at {JAR} (make jvm builds it)", pytrace=False)
    with zipfile.ZipFile(JAR) as jar:
        if "io/stitchlake/spark/merge/MergeMain.class" not in jar.namelist():
            pytest.fail(f"{JAR} was built without the merge (make jvm rebuilds it)", pytrace=False)
    if shutil.which("java") is None:
        pytest.fail("no java on PATH", pytrace=False)
    started = Harness()
    try:
        yield started
    finally:
        started.close()


def build_plan(
    table: Table,
    mode: str = "snapshot",
    as_of: str | None = None,
    columns: Sequence[str] | None = None,
    changes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `stitchlake.plan/2` document of a snapshot, time-travel or (`changes`: since, until, before_images)
    incremental read, from the planner process's own code (`stitchlake.spark.planner.plan`): the JVM merges
    exactly what the JVM reader would be handed."""
    options = {"path": str(table.storage.describe()), "mode": mode}
    if as_of is not None:
        options["as_of"] = as_of
    for name, value in (changes or {}).items():
        if value is not None and value is not False:
            options[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return planner.plan(options, columns, [], {})


def _canon(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_floating(kind):
        if math.isnan(value):
            return "NaN"
        if pa.types.is_float32(kind):
            return struct.unpack("<i", struct.pack("<f", value))[0]
        return struct.unpack("<q", struct.pack("<d", value))[0]
    if pa.types.is_timestamp(kind):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if pa.types.is_date(kind):
        return (value - EPOCH_DAY).days
    if pa.types.is_decimal(kind):
        return format(value, "f")
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return base64.b64encode(value).decode()
    if pa.types.is_map(kind):
        return [[_canon(k, kind.key_type), _canon(v, kind.item_type)] for k, v in value]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_canon(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return [_canon(value[kind.field(i).name], kind.field(i).type) for i in range(kind.num_fields)]
    return value


def canonical(result: pa.Table) -> list[str]:
    """A read's rows as sorted canonical JSON lines."""
    types = [field.type for field in result.schema]
    return sorted(
        json.dumps([_canon(v, t) for v, t in zip(row.values(), types, strict=True)]) for row in result.to_pylist()
    )


@dataclasses.dataclass
class Read:
    """One read to compare: what it was, and the Python merge's rows (canonical) for it."""

    mode: str
    as_of: str | None
    columns: Sequence[str] | None
    want: list[str]
    #: An incremental read's since, until and before_images (None: a snapshot read).
    changes: dict[str, Any] | None = None

    def compare(self, answer: dict[str, Any]) -> None:
        """The JVM merge of this read returned the Python merge's rows, cell by cell."""
        got = sorted(json.dumps(row) for row in merged(answer))
        what = f"changes {self.changes}" if self.changes else f"as_of={self.as_of}"
        assert got == self.want, (
            f"JVM merge differs from Python ({self.mode}, {what}, columns={self.columns}):\n"
            + "\n".join(f"  jvm only: {row}" for row in sorted(set(got) - set(self.want)))
            + "\n"
            + "\n".join(f"  python only: {row}" for row in sorted(set(self.want) - set(got)))
        )


@contextlib.contextmanager
def compared(harness: Harness, deferred: bool = False) -> Iterator[list[str]]:
    """Every snapshot, time-travel and read-optimized `Table.read` in the block is merged by the JVM too and must
    give the same rows: at once, or (`deferred`: a history that deletes no file) when the block ends, the JVM
    merging meanwhile. Files are not fsynced (scratch tables): the generated tables are many."""
    original = Table.read
    checked: list[str] = []
    waiting: list[Read] = []
    #: Plans sent in this block (their `as_of` aside: the JVM merges only the files a plan names), each with its read.
    sent: dict[str, Read] = {}

    def read(self: Table, mode: str = "snapshot", **options: Unpack[ReadKeywords]) -> pa.Table:
        result = original(self, mode, **options)
        if options.get("filter") is None:
            incremental = options.get("since") is not None or options.get("until") is not None
            changes = {n: options.get(n) for n in ("since", "until", "before_images")} if incremental else None
            asked = Read(mode, options.get("as_of"), options.get("columns"), canonical(result), changes)
            plan = build_plan(self, asked.mode, asked.as_of, asked.columns, changes)
            same = sent.setdefault(json.dumps({**plan, "as_of": None}, sort_keys=True, default=str), asked)
            if same is not asked:
                # A plan merged before (a history reads one state several ways: as of its last write and now, before
                # a compaction and after the write before it): the JVM's rows for it were compared with `same`'s
                # Python rows, so these must be those.
                assert asked.want == same.want, f"Python read one plan two ways ({same.as_of}, {asked.as_of})"
            else:
                harness.send(plan)  # merged meanwhile
                waiting.append(asked)
                if not deferred:
                    waiting.pop().compare(harness.receive())
            checked.append(mode)
        return result

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Table, "read", read)
            patch.setattr(os, "fsync", lambda fd: None)
            yield checked
    finally:
        answers = [harness.receive() for _ in waiting]  # every answer is taken, so the next block starts in step
    for pending, rows in zip(waiting, answers, strict=True):
        pending.compare(rows)


#: Generated tables per test: three streams with deletes and erases (merge_steps, in test_jvm_conformance.py), and
#: alters with text, decimal and nested columns (schema_changes, in test_jvm_conformance_alters.py: a module of its
#: own, so that the two run on both test workers at once); together EXAMPLES.
STEPS_EXAMPLES = max(1, EXAMPLES * 3 // 5)


HISTORY_EXAMPLES = max(1, EXAMPLES - STEPS_EXAMPLES)


#: Log formats a generated table is written with (the JVM reads Avro logs itself, nested values included).
LOG_FORMATS = st.sampled_from(["parquet", "avro"])


def in_scratch(harness: Harness, history: Callable[[Path], Table]) -> None:
    """Run a generated history in a scratch folder (not pytest's: the examples are many), every read compared,
    then an incremental read of the table's (`change_reads`), compared too."""
    root = Path(tempfile.mkdtemp(prefix="stitch-jvm-"))
    try:
        with compared(harness, deferred=True) as checked:
            change_reads(history(root))
        assert checked
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: Generated tables so far in this process: every second one gets an incremental read (`change_reads`).
_TABLES = itertools.count()


def change_reads(table: Table) -> None:
    """An incremental read over every second generated table's timeline, one of three kinds by the length of its
    timeline: everything up to its first third, from its middle on, or between its first and second-to-last
    instants with before-images (erases, compactions and rescales fall inside as the history put them). One read
    on every second table: one on each made the suite's longest work (the generated tables) 174 s longer in a
    full `make test` (640 s against 466 s), and 500 tables still cover each kind well over a hundred times. A range
    Python refuses the planner refuses too, in the same words."""
    times = [i.completed for i in table.timeline().completed()]
    if len(times) < 2 or next(_TABLES) % 2:
        return
    ranges: list[dict[str, Any]] = [
        {"until": times[len(times) // 3]},
        {"since": times[len(times) // 2]},
        {"since": times[0], "until": times[-2], "before_images": True},
    ]
    for changes in ranges[len(times) % 3 : len(times) % 3 + 1]:
        try:
            table.read(**changes)
        except UsageError as refused:
            with pytest.raises(UsageError) as planned:
                build_plan(table, changes=changes)
            assert str(planned.value) == str(refused)
