"""Writers the service tests run in processes of their own (a writer on another host, say), each a function of
keyword arguments that `spawn` calls by name in a fresh interpreter; and the labelled writes they make."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import stitchlake
from stitchlake.api import Table
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan
from stitchlake.writing.writer import WriteResult, write
from tests.support.histories import MODEL
from tests.support.tables import (
    batch,
)

#: Commit-metadata key under which every write of this file records its batch recipe.
SPEC = "test_batch"


def rows_from(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a labelled batch, regenerated from its recipe (the same in the writer and in the test)."""
    rng = random.Random(f"{spec['stream']}/{spec['seed']}/{spec.get('number', 0)}")
    if "keys" in spec:
        keys = list(spec["keys"])
    elif spec.get("all"):
        keys = list(range(spec["lo"], spec["hi"]))
    else:
        keys = [rng.randrange(spec["lo"], spec["hi"]) for _ in range(spec["size"])]
    rows = []
    for key in keys:
        if spec.get("avoid3") and key % 3 == 0:
            key += 1
        row: dict[str, Any] = {"k": key, "deleted": rng.random() < spec.get("deletes", 0.1)}
        if spec["stream"] == "orders":
            row |= {"amount": rng.choice([None, 1, 2, 3]), "status": rng.choice(["a", "b", None])}
            row["ots"] = rng.randint(0, 40)
        elif spec["stream"] == "payments":
            row |= {"paid": rng.choice([None, 10, 20]), "note": rng.choice(["x", "y", None])}
            row["pts"] = rng.randint(0, 40)
        else:
            row |= {"carrier": rng.choice(["dhl", "ups", None]), "ship_no": rng.choice([None, 7, 8])}
        rows.append(row)
    return rows


def write_spec(table: Table, spec: dict[str, Any]) -> WriteResult:
    """One labelled deltacommit through the ordinary write path."""
    data = batch(MODEL[spec["stream"]], rows_from(spec))
    return write(table, spec["stream"], data, metadata={SPEC: spec})


def writer_main(config: str, spec: dict[str, Any], stop: str | None = None, pause_s: float = 0.0) -> None:
    """A stream writer process: labelled batches until the file `stop` exists, `pause_s` apart (a micro-batch
    interval; it only keeps the amount of data, and so the test's run time, small)."""
    table = stitchlake.open(config)
    number = 0
    while not (stop and Path(stop).exists()):
        write_spec(table, {**spec, "number": number})
        number += 1
        time.sleep(pause_s)


def paused_writer_main(config: str, spec: dict[str, Any]) -> None:
    """A live writer caught mid-ingest: it has begun its deltacommit and written its log files, then waits
    for a line on stdin before publishing. Its heartbeat stays fresh all along, like a slow Spark job's."""
    from stitchlake.writing.batch import prepare
    from stitchlake.writing.writer import write_file_groups

    table = stitchlake.open(config)
    stream = table.config.stream(spec["stream"])
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=stream.name))
    try:
        prepared = prepare(table.config, stream, batch(MODEL[stream.name], rows_from(spec)))
        files = write_file_groups(table, stream, prepared, txn.time, txn.mark)
        print(json.dumps({"instant": txn.time, "files": [f.path for f in files]}), flush=True)
        sys.stdin.readline()
        txn.complete(
            DeltaCommit(stream=stream.name, added=tuple(files), rows=prepared.rows.num_rows, extra={SPEC: spec})
        )
    except BaseException as exc:
        txn.abort()
        print(json.dumps({"error": str(exc)}), flush=True)
        raise SystemExit(1) from None
    print(json.dumps({"completed": txn.instant.completed}), flush=True)


def crashed_compaction_main(config: str, instant: str) -> None:
    """A compaction run that takes over its plan (heartbeat, inflight) and dies that very moment."""
    from stitchlake.services.rewrites.compaction import start_run

    start_run(stitchlake.open(config), instant)
    os.kill(os.getpid(), signal.SIGKILL)


def crashed_restore_main(config: str, savepoint: str) -> None:
    """A restore that has recorded its plan (requested, inflight, heartbeat) and dies before undoing anything."""
    from stitchlake.services.undo.restore import begin_restore

    begin_restore(stitchlake.open(config), savepoint)
    os.kill(os.getpid(), signal.SIGKILL)
