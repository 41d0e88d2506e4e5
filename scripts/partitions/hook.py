"""What runs inside a writer host: the stitch CLI with its fault point armed, batches of commands, Kafka's
topic and records, and a Spark read."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from scripts.partitions.settings import DISARMED, GO, GOING, KAFKA_PARTITIONS, POINT_ENV, SIGNAL_DIR_ENV, STREAMS

# ============================================================================================ the hook


def install_hook(point: str, signal_dir: str) -> None:
    """Stop this process (SIGSTOP) the first time it reaches `point`, after saying so in `signal_dir`, until the
    round releases it.

    It wraps functions of the code under test and calls them unchanged; a wrapped name that moved is an
    AttributeError here, never a point that silently tests nothing.
    """
    import stitchlake.engine as engine
    import stitchlake.table.transaction as txn
    import stitchlake.writing.writer as writer
    from stitchlake.concurrency.heartbeat import Heartbeat

    fired = [False]

    def stop_here(args: tuple[Any, ...] = ()) -> None:
        if fired[0] or Path(signal_dir, DISARMED).exists():  # reached after the round let its writer go
            return
        fired[0] = True
        instants = [str(a.requested) for a in args if hasattr(a, "requested")]  # write_completed's Instant
        said = {"point": point, "argv": sys.argv[:2], "instant": instants[0] if instants else None}
        pid = os.getpid()
        partial = Path(signal_dir, f"{pid}.at.partial")
        partial.write_text(json.dumps(said), encoding="utf-8")
        partial.rename(Path(signal_dir, f"{pid}.at"))  # whole when the round sees it
        # Stopped until the round lets this process go: a SIGCONT from anything else (a process group's signals, a
        # stray continue) must not let a writer the round believes frozen publish behind its back.
        while not Path(signal_dir, f"{pid}{GO}").exists():
            os.kill(pid, signal.SIGSTOP)
        Path(signal_dir, f"{pid}{GOING}").touch()

    def wrap(owner: Any, name: str, before: bool, skip: int = 0) -> None:
        original = getattr(owner, name)
        passes = [0]

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            passes[0] += 1
            due = passes[0] > skip
            if before and due:
                stop_here(args)
            out = original(*args, **kwargs)
            if not before and due:
                stop_here(args)
            return out

        setattr(owner, name, wrapped)

    if point == "begin":  # the requested instant is written, the lock held
        wrap(txn, "write_requested", before=False)
    elif point == "mark":  # a marker is written, its data file not yet (engines mark through `engine.marker`)
        wrap(txn.Transaction, "mark", before=False)
        wrap(engine, "create_marker", before=False)
    elif point == "write":  # a data file is about to be written
        wrap(writer, "write_table_file", before=True)
    elif point == "publish":  # every file written, the lock held, the completed instant not yet
        wrap(txn, "write_completed", before=True)
    elif point == "heartbeat":  # about to renew the beat (the first one is written when the instant begins)
        wrap(Heartbeat, "_write", before=True, skip=1)
        original = getattr(writer, "write_table_file")  # noqa: B009 - imported there, not exported

        def slow_write(*args: Any, **kwargs: Any) -> Any:
            """A small ingest is done within one beat: hold the data write until the beat renews (or 5 s)."""
            deadline = time.monotonic() + 5.0
            while not fired[0] and time.monotonic() < deadline:
                time.sleep(0.05)
            return original(*args, **kwargs)

        setattr(writer, "write_table_file", slow_write)  # noqa: B010
    else:
        raise SystemExit(f"unknown point {point!r}")


def hooked_main(argv: list[str]) -> None:
    """`python -m scripts.partitions hooked -- <stitch args>`: the stitch CLI with the point of
    $STITCH_PARTITIONS_POINT armed."""
    point = os.environ.get(POINT_ENV)
    if point:
        install_hook(point, os.environ[SIGNAL_DIR_ENV])
    from stitchlake.cli.app import main

    sys.argv = ["stitch", *argv]
    main()


def batch_main(argv: list[str]) -> None:
    """`python -m scripts.partitions batch '<json list of stitch argument lists>'`: run them one after the other in
    this process.

    The same CLI a client runs, without a new interpreter per command; prints one JSON list of
    {args, exit, out, start, end} (monotonic clock, comparable between processes).
    """
    from stitchlake.cli.app import app

    results = []
    for args in json.loads(argv[0]):
        buffer = io.StringIO()
        start = time.monotonic()
        code = 0
        with contextlib.redirect_stdout(buffer):
            try:
                app(args=args, prog_name="stitch", standalone_mode=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        results.append({"args": args, "exit": code, "out": buffer.getvalue(), "start": start, "end": time.monotonic()})
    print(json.dumps(results))


def kafka_main(argv: list[str]) -> None:
    """`python -m scripts.partitions kafka topic <bootstrap> <topic>` or `... produce <bootstrap> <topic> <json
    [[partition, value], ...]>`: run on the ctl host, the only side of the harness that reaches the broker's address."""
    from scripts import kafka_broker

    what, bootstrap, topic = argv[:3]
    if what == "topic":
        kafka_broker.create_topic(bootstrap, topic, KAFKA_PARTITIONS)
    elif what == "produce":
        records = [(int(partition), value.encode()) for partition, value in json.loads(argv[3])]
        kafka_broker.produce(bootstrap, topic, records)
    else:
        raise SystemExit(f"unknown kafka command {what!r}")


def spark_read_main(argv: list[str]) -> None:
    """`python -m scripts.partitions spark-read <table>`: the table through Spark local[2] (the stitchlake data
    source), as one JSON object {"ok", "records"} like `stitch read --json`."""
    from pyspark.sql import SparkSession

    from stitchlake.jobs.spark_conf import DEFAULT_CONF, reader_conf
    from stitchlake.spark.session import register

    builder = SparkSession.builder.master("local[2]").appName("partitions")
    settings = {**DEFAULT_CONF, "spark.ui.enabled": "false", "spark.pyspark.python": sys.executable}
    # The reader a stitchlake session gets: the JVM reader (which hands an S3 table to the Python source when the
    # session has no s3a file system, saying so).
    for key, value in {**settings, **reader_conf(settings)}.items():
        builder = builder.config(key, value)
    session = register(builder.getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        frame = session.read.format("stitchlake").load(argv[0])
        records = [row.asDict() for row in frame.select("k", *(f"v{s}" for s in STREAMS)).collect()]
    finally:
        session.stop()
    print(json.dumps({"ok": True, "records": records}))
