"""The bad-input catalogue (issues 7, 12 and 16): every way a cron job can hand `stitch` something wrong.

This module holds the config, the table, `--json` failures and the file system; `test_bad_landing.py` holds the
landing files (unreadable, incomplete, compressed, re-delivered) and the bad-row policy, on the same template.

Each case runs the real `stitch` console script as a subprocess, as cron or Airflow would, and checks three
things: the exit code (design.md §8), a message that says what is wrong and where (the file, the column, the
YAML path), and that nothing changed — every file under the workspace (table, landing folders, configs) is
compared by sha256 of its path and content, and every folder by name.

The one exception is the lock provider's own bookkeeping: taking the filesystem lock rotates lease files
under `.stitch/locks/` (see `stitchlake.concurrency.lock`). Cases rejected only after an ingest has begun
its transaction (bad rows are found while reading) are allowed that, and nothing else; every other case
must leave even the lock folder alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from stitchlake.checksums import seal, unseal
from stitchlake.timeline.clock import to_millis
from stitchlake.timeline.instant import Action
from tests.support.bad_input import (
    INGEST_ORDERS,
    Case,
    check_refused,
    config_variant,
    landing,
    orders,
    refused_file,
    stitch,
    with_config,
    write_parquet,
)
from tests.support.cli import python
from tests.support.snapshots import LOCKS, snapshot

HEARTBEATS = ".stitch/heartbeats/"


# --------------------------------------------------------------------------------------------- helpers


#: Runs a command without the capabilities that let root ignore file permissions, so a test of "permission denied"
#: means the same as root (CI, containers) as for any other user. Empty when not root.
UNPRIVILEGED: tuple[str, ...] = (
    ("setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner") if os.geteuid() == 0 else ()
)


def without_key(columns: dict[str, Any]) -> dict[str, Any]:
    return {name: values for name, values in columns.items() if name != "k"}


def table_files(workspace: Path, suffix: str) -> list[Path]:
    return sorted(p for p in (workspace / "table").rglob(f"*{suffix}") if ".stitch" not in p.parts)


def completed_instant(workspace: Path) -> Path:
    return next(p for p in (workspace / "table/.stitch/timeline").iterdir() if "_" in p.name)


# ------------------------------------------------------------------------------------------ the catalogue


def config_text(name: str, text: str) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        (ws / name).write_text(textwrap.dedent(text))

    return setup


def truncate_a_log_file(ws: Path) -> None:
    log = table_files(ws, ".log.parquet")[0]
    log.write_bytes(log.read_bytes()[: log.stat().st_size // 2])


def garbage_in_timeline(ws: Path) -> None:
    completed_instant(ws).write_bytes(b"\x00garbage{{ not json")


def empty_timeline_file(ws: Path) -> None:
    completed_instant(ws).write_bytes(b"")


def wrong_shape_timeline(ws: Path) -> None:
    """A commit of the wrong shape, sealed as a writer would seal it (a bug, not damage: the checksum holds)."""
    path = completed_instant(ws)
    content = json.loads(unseal(path.read_bytes(), str(path)))
    path.write_bytes(seal(json.dumps({**content, "added": "p=odd/everything.parquet"}, indent=1).encode()))


def edited_timeline(ws: Path) -> None:
    """A completed instant changed by hand: its checksum no longer holds."""
    path = completed_instant(ws)
    path.write_bytes(path.read_bytes().replace(b'"rows": ', b'"rows": 1'))


def table_path_under_a_file(ws: Path) -> None:
    (ws / "not-a-folder").write_text("a file where a folder should be\n")
    config_variant("bad.yaml", lambda d: d["table"].update(path="not-a-folder/table"))(ws)


def table_path_is_a_file(ws: Path) -> None:
    (ws / "a-file").write_text("a file\n")
    config_variant("bad.yaml", lambda d: d["table"].update(path="a-file"))(ws)


def wrong_types_parquet(path: Path) -> None:
    write_parquet(path, orders([7], amount=pa.array([[1, 2]], pa.list_(pa.int64()))))


def alias_bomb(ws: Path) -> None:
    """Eleven levels of YAML aliases, five references each: a few hundred bytes that expand past 10^8 values."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    bomb = "bombs:\n" + textwrap.indent("\n".join(levels), "  ") + "\n"
    (ws / "bad.yaml").write_text((ws / "table.yaml").read_text() + bomb)


def stream_pasted_twice(ws: Path) -> None:
    text = (ws / "table.yaml").read_text()
    (ws / "bad.yaml").write_text(
        text.replace("streams:\n", "streams:\n  orders:\n    columns:\n      extra: long\n", 1)
    )


def flip_a_byte_in_a_log_file(ws: Path) -> None:
    """One bit-rotted byte in the middle of a log file's `amount` values (a page its checksum covers)."""
    log = table_files(ws, ".log.parquet")[0]
    meta = pq.ParquetFile(log).metadata
    chunk = next(
        meta.row_group(0).column(i)
        for i in range(meta.num_columns)
        if meta.row_group(0).column(i).path_in_schema == "amount"
    )
    data = bytearray(log.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0xFF
    log.write_bytes(bytes(data))


def rewrite_ingested_landing_file(ws: Path) -> None:
    """The template's ingested landing file, delivered again under its name with one more row."""
    write_parquet(ws / "landing/orders/0001.parquet", orders([1, 2, 3, 4, 5]))


INGEST_PAYMENTS = ("ingest", "-c", "table.yaml", "-s", "payments", "--engine", "local")


CATALOGUE = [
    # ---- the config file
    Case(
        "malformed-yaml",
        config_text("bad.yaml", "table:\n  name: wide\n  path: [table\n"),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml", "not valid YAML at line 4"),
    ),
    Case(
        "duplicate-yaml-key",
        config_text("bad.yaml", "table:\n  name: wide\n  name: other\n"),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml", "line 3", "duplicate key 'name'"),
    ),
    Case(
        "unknown-config-key",
        config_variant("bad.yaml", lambda d: d["table"].update(bukets=3)),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: table.bukets: unknown key", "allowed here: name, path, key, partition_by, buckets"),
    ),
    Case(
        "wrong-type-in-config",
        config_variant("bad.yaml", lambda d: d["table"].update(buckets="many")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: table.buckets: must be a whole number, got text",),
    ),
    Case(
        "unknown-column-type",
        config_variant("bad.yaml", lambda d: d["streams"]["orders"]["columns"].update(amount="money")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.columns.amount: unknown type 'money'",),
    ),
    Case(
        "missing-config-file",
        lambda ws: None,
        with_config(INGEST_ORDERS, "nope.yaml"),
        2,
        ("nope.yaml: config file not found",),
    ),
    Case(
        "unset-environment-variable",
        config_variant("bad.yaml", lambda d: d["table"].update(path="${STITCH_TEST_NOT_SET}/table")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: table.path: environment variable STITCH_TEST_NOT_SET is not set",),
    ),
    Case(
        "config-contradicts-table",
        config_variant("bad.yaml", lambda d: d["table"].update(buckets=3)),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml contradicts the table at {ws}/table", "table.buckets: table has 2, config says 3"),
    ),
    Case(
        "stream-name-with-path-separator",
        config_variant("bad.yaml", lambda d: d["streams"].update({"../orders": d["streams"].pop("orders")})),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.../orders: '../orders' is not a valid stream name",),
    ),
    Case(
        "stream-argument-with-path-separator",
        lambda ws: None,
        ("ingest", "-c", "table.yaml", "-s", "../orders", "--engine", "local"),
        2,
        ("unknown stream '../orders' (streams: orders, payments, shipments, readings, clicks)",),
    ),
    # ---- where the table lives
    Case(
        "unwritable-table-path",
        table_path_under_a_file,
        ("init", "-c", "bad.yaml"),
        2,
        ("table.path: cannot create the table at {ws}/not-a-folder/table", "Not a directory"),
    ),
    Case(
        "table-path-is-a-file",
        table_path_is_a_file,
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("no stitchlake table at {ws}/a-file", "stitch init"),
    ),
    # ---- landing files
    refused_file(
        "source-missing-key-column",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, without_key(orders([5]))),
        ("{ws}/landing/orders/0002.parquet: missing column k needed by stream orders", "found: p, amount"),
    ),
    refused_file(
        "null-keys",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, orders([5, None])),
        ("1 bad row (null key k: 1 row)", "{ws}/landing/orders/0002.parquet row 1 (null key k)", "nothing was written"),
    ),
    refused_file(
        "uncastable-values",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, orders([5, 6], amount=["12", "twelve"])),
        ("{ws}/landing/orders/0002.parquet row 1 (unparsable value 'twelve' in amount)", "bad_rows: quarantine"),
    ),
    refused_file(
        "uncastable-csv-value",
        "landing/payments/0001.csv",
        b"k,p,paid\n1,odd,1.5\n2,even,1,5\n",
        ("{ws}/landing/payments/0001.csv",),
    ),
    refused_file(
        "column-of-an-impossible-type",
        "landing/orders/0002.parquet",
        wrong_types_parquet,
        ("{ws}/landing/orders/0002.parquet: column amount has type list<", "cannot be converted to long"),
    ),
    refused_file(
        "corrupt-parquet-source",
        "landing/orders/0002.parquet",
        b"PAR1 this is not really parquet",
        ("{ws}/landing/orders/0002.parquet: cannot read parquet file",),
    ),
    refused_file(
        "invalid-json-line",
        "landing/shipments/0001.json",
        b'{"k": 1, "p": "odd", "carrier": "dhl"}\n{"k": 2, "p": \n',
        ("{ws}/landing/shipments/0001.json: line 2 is not valid JSON",),
    ),
    Case(
        "source-file-of-the-wrong-format",
        landing("elsewhere/payments.json", b'{"k": 1, "p": "odd", "paid": 1.0}\n'),
        (*INGEST_PAYMENTS, "--source", "elsewhere/payments.json"),
        2,
        ("source file {ws}/elsewhere/payments.json is not a csv file",),
    ),
    Case(
        "source-folder-missing",
        lambda ws: shutil.rmtree(ws / "landing/payments"),
        INGEST_PAYMENTS,
        2,
        ("source path {ws}/landing/payments does not exist",),
    ),
    # ---- damage inside the table
    Case(
        "truncated-log-file",
        truncate_a_log_file,
        ("read", "-c", "table.yaml"),
        1,
        ("{ws}/table/p=", ".log.parquet: checksum mismatch"),
    ),
    Case(
        "truncated-log-file-read-to-a-file",
        truncate_a_log_file,
        ("read", "-c", "table.yaml", "--out", "out.parquet"),
        1,
        (".log.parquet: checksum mismatch",),
    ),
    Case(
        "garbage-in-timeline-file-read",
        garbage_in_timeline,
        ("read", "-c", "table.yaml"),
        1,
        ("{ws}/table/.stitch/timeline/", ".deltacommit: damaged: it does not start with a checksum header"),
    ),
    Case(
        "garbage-in-timeline-file-ingest",
        garbage_in_timeline,
        INGEST_ORDERS,
        1,
        ("{ws}/table/.stitch/timeline/", ".deltacommit: damaged: it does not start with a checksum header"),
    ),
    Case(
        "garbage-in-timeline-file-status",
        garbage_in_timeline,
        ("status", "-c", "table.yaml"),
        1,
        ("damaged: it does not start with a checksum header",),
    ),
    Case(
        "empty-completed-instant-file",
        empty_timeline_file,
        ("read", "-c", "table.yaml"),
        1,
        ("{ws}/table/.stitch/timeline/", "completed instant file is empty"),
    ),
    Case(
        "timeline-file-of-the-wrong-shape",
        wrong_shape_timeline,
        ("read", "-c", "table.yaml", "--json"),
        1,
        ("added: Input should be a valid tuple (damaged timeline)",),
    ),
    Case(
        "timeline-file-edited-by-hand",
        edited_timeline,
        ("read", "-c", "table.yaml"),
        1,
        ("{ws}/table/.stitch/timeline/", ".deltacommit: checksum mismatch", "put it back from a backup"),
    ),
    # ---- config mistakes (issue 16 and the rest of each section)
    Case(
        "yaml-alias-bomb",
        alias_bomb,
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: the config expands to more than 100,000 values", "write the values out instead"),
    ),
    Case(
        "unknown-top-level-key",
        config_variant("bad.yaml", lambda d: d.update(stremas={})),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: stremas: unknown key (allowed here: table, streams, bad_rows, concurrency",),
    ),
    Case(
        "unknown-stream-key",
        config_variant("bad.yaml", lambda d: d["streams"]["orders"].update(colums={"x": "long"})),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.colums: unknown key (allowed here: columns, ordering",),
    ),
    Case(
        "unknown-source-key",
        config_variant("bad.yaml", lambda d: d["streams"]["orders"]["source"].update(fromat="csv")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.source.fromat: unknown key (allowed here: format, path, options",),
    ),
    Case(
        "unknown-column-key",
        config_variant(
            "bad.yaml", lambda d: d["streams"]["orders"]["columns"].update(amount={"type": "long", "defualt": 0})
        ),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.columns.amount.defualt: unknown key (allowed here: type, default",),
    ),
    Case(
        "unknown-lock-key",
        config_variant("bad.yaml", lambda d: d["concurrency"]["lock"].update(wait=5)),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: concurrency.lock.wait: unknown key (allowed here: provider, wait_s",),
    ),
    Case(
        "ordering-names-a-column-of-another-stream",
        config_variant("bad.yaml", lambda d: d["streams"]["orders"].update(ordering="paid")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.ordering: 'paid' is not a column of stream orders (columns: amount, status, ots)",),
    ),
    Case(
        "stream-pasted-twice",
        stream_pasted_twice,
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: not valid YAML at line", "found duplicate key 'orders'"),
    ),
    Case(
        "column-in-two-streams",
        config_variant("bad.yaml", lambda d: d["streams"]["payments"]["columns"].update(amount="long")),
        with_config(INGEST_PAYMENTS, "bad.yaml"),
        2,
        ("bad.yaml: streams.payments.columns.amount: 'amount' already belongs to stream orders",),
    ),
    Case(
        "default-of-the-wrong-type",
        config_variant(
            "bad.yaml", lambda d: d["streams"]["orders"]["columns"].update(amount={"type": "long", "default": "lots"})
        ),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: streams.orders.columns.amount.default: not a valid long",),
    ),
    Case(
        "unset-environment-variable-deep-in-the-config",
        config_variant("bad.yaml", lambda d: d.update(spark={"conf": {"spark.executor.memory": "${STITCH_TEST_MEM}"}})),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: spark.conf.spark.executor.memory: environment variable STITCH_TEST_MEM is not set",),
        env={"STITCH_TEST_MEM": None},
    ),
    Case(
        "secrets-entry-not-a-variable-name",
        config_variant("bad.yaml", lambda d: d.update(secrets=["DB PASSWORD"])),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: secrets: must be a list of environment variable names, e.g. [DB_PASS]",),
    ),
    Case(
        "secret-written-into-the-config",
        config_variant("bad.yaml", lambda d: d.update(storage={"secret_access_key": "hunter2-in-the-file"})),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: storage.secret_access_key: write ${VAR} and put the secret in the environment",),
        hidden=("hunter2-in-the-file",),
    ),
    Case(
        "clock-skew-of-zero",
        config_variant("bad.yaml", lambda d: d["concurrency"].update(max_clock_skew_s=0)),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: concurrency.max_clock_skew_s: must be > 0, got 0",),
    ),
    Case(
        "storage-section-not-a-mapping",
        config_variant("bad.yaml", lambda d: d.update(storage="s3")),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: storage: must be a mapping, got text",),
    ),
    Case(
        "spark-section-a-list",
        config_variant("bad.yaml", lambda d: d.update(spark=["local[2]"])),
        with_config(INGEST_ORDERS, "bad.yaml"),
        2,
        ("bad.yaml: spark: must be a mapping, got a list",),
    ),
    Case(
        # ${VAR} values are settings unless their names say secret: the region is shown, the token masked.
        "plain-variables-shown-and-secret-ones-masked",
        config_variant(
            "bad.yaml",
            lambda d: d["streams"]["payments"]["source"].update(
                path="landing/${STITCH_TEST_REGION}-${STITCH_TEST_API_TOKEN}"
            ),
        ),
        with_config(INGEST_PAYMENTS, "bad.yaml"),
        2,
        ("source path {ws}/landing/euwest1-<secret from the environment> does not exist", "create the folder"),
        env={"STITCH_TEST_REGION": "euwest1", "STITCH_TEST_API_TOKEN": "tok-s3cr3t-4242"},
        hidden=("tok-s3cr3t-4242",),
    ),
    # ---- the table itself (issue 16)
    Case(
        "init-after-table-json-was-deleted",
        lambda ws: (ws / "table/.stitch/table.json").unlink(),
        ("init", "-c", "table.yaml"),
        2,
        ("{ws}/table holds a stitchlake timeline but no .stitch/table.json", "back from a backup"),
    ),
    Case(
        "table-inside-another-table",
        config_variant("bad.yaml", lambda d: d["table"].update(path="table/inner")),
        ("init", "-c", "bad.yaml"),
        2,
        ("table.path: {ws}/table/inner is inside the stitchlake table at {ws}/table", "pick a folder outside it"),
    ),
    Case(
        "flipped-byte-in-a-log-file",
        flip_a_byte_in_a_log_file,
        ("read", "-c", "table.yaml"),
        1,
        ("{ws}/table/p=", ".log.parquet: checksum mismatch", "put it back from a backup"),
    ),
    Case(
        "landing-file-changed-after-it-was-ingested",
        rewrite_ingested_landing_file,
        INGEST_ORDERS,
        5,
        (
            "landing file {ws}/landing/orders/0001.parquet of stream orders changed after it was ingested",
            "deliver it under a new name. --reingest-changed ingests the whole file again as new events",
        ),
    ),
    # ---- --json: stdout is one failure object a scheduler can read, with where the problem is
    Case(
        "json-failure-bad-config",
        config_variant("bad.yaml", lambda d: d["streams"]["orders"].update(ordering="paid")),
        (*with_config(INGEST_ORDERS, "bad.yaml"), "--json"),
        2,
        ("bad.yaml: streams.orders.ordering: 'paid' is not a column of stream orders",),
        fields={"error_type": "ConfigError"},
    ),
    refused_file(
        "json-failure-bad-input-file",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, without_key(orders([5]))),
        ("{ws}/landing/orders/0002.parquet: missing column k", "fix or replace the file"),
        fields={"file": "{ws}/landing/orders/0002.parquet", "column": "k", "error_type": "InputRejected"},
    ),
    refused_file(
        "json-failure-bad-rows",
        "landing/orders/0002.parquet",
        lambda p: write_parquet(p, orders([5, None])),
        ("1 bad row (null key k: 1 row)",),
        fields={"file": "{ws}/landing/orders/0002.parquet", "column": "k"},
    ),
    Case(
        "json-failure-changed-landing-file",
        rewrite_ingested_landing_file,
        (*INGEST_ORDERS, "--json"),
        5,
        ("changed after it was ingested",),
        fields={"file": "{ws}/landing/orders/0001.parquet"},
    ),
]


@pytest.mark.parametrize("case", CATALOGUE, ids=[case.id for case in CATALOGUE])
def test_bad_input_is_refused_clearly_and_changes_nothing(case: Case, workspace: Path) -> None:
    check_refused(case, workspace)


def test_table_in_a_read_only_folder_is_refused(workspace: Path) -> None:
    """As root, `stitch` runs without the capabilities that let root write into a read-only folder (`UNPRIVILEGED`),
    as any other user runs it."""
    folder = workspace / "read-only"
    folder.mkdir()
    config_variant("bad.yaml", lambda d: d["table"].update(path="read-only/table"))(workspace)
    folder.chmod(0o555)
    try:
        before = snapshot(workspace)
        done = stitch("init", "-c", "bad.yaml", cwd=workspace, runner=UNPRIVILEGED)
        assert done.returncode == 2, done.stderr
        assert f"table.path: cannot create the table at {folder}/table" in done.stderr
        assert "Permission denied" in done.stderr
        assert snapshot(workspace) == before
    finally:
        folder.chmod(0o755)


# -------------------------------------------------------------------------------------- nothing to do


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_empty_source_folder_is_nothing_to_ingest(workspace: Path, engine: str) -> None:
    """Exit 0 and one plain line; no summary of zeros that reads as if an ingest happened (and no Spark)."""
    before = snapshot(workspace)
    done = stitch("ingest", "-c", "table.yaml", "-s", "payments", "--engine", engine, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "nothing to ingest for stream payments\n"
    assert done.stderr == ""
    assert snapshot(workspace) == before

    as_json = stitch("ingest", "-c", "table.yaml", "-s", "payments", "--engine", engine, "--json", cwd=workspace)
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout.count("\n") == 1
    document = json.loads(as_json.stdout)
    assert document["message"] == "nothing to ingest for stream payments"
    assert document["instant"] is None and document["rows"] == 0 and document["source_files"] == 0
    assert snapshot(workspace) == before


def test_already_ingested_files_are_nothing_to_ingest(workspace: Path) -> None:
    before = snapshot(workspace)
    done = stitch(*INGEST_ORDERS, cwd=workspace)
    assert (done.returncode, done.stdout) == (0, "nothing to ingest for stream orders\n"), done.stderr
    assert snapshot(workspace) == before


# ------------------------------------------------------------------------------------ the clock stepping back

#: Runs `stitch` with this process's wall clock ahead (an hour unless STITCH_TEST_AHEAD_S says), as a host whose
#: clock is later corrected.
CLOCK_AHEAD = """
import os, sys, time
ahead = int(os.environ.get("STITCH_TEST_AHEAD_S", "3600"))
real_time, real_time_ns = time.time, time.time_ns
time.time = lambda: real_time() + ahead
time.time_ns = lambda: real_time_ns() + ahead * 1_000_000_000
from stitchlake.cli.app import main
sys.argv = ["stitch", *sys.argv[1:]]
main()
"""


def shipment(ws: Path, name: str, carrier: str) -> None:
    (ws / "landing/shipments" / name).write_text(json.dumps({"k": 1, "p": "odd", "carrier": carrier}) + "\n")


def stitch_ahead(seconds: int, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`stitch` on a host whose clock is `seconds` ahead."""
    return python("-c", CLOCK_AHEAD, *args, cwd=cwd, env={"STITCH_TEST_AHEAD_S": str(seconds)})


def test_a_clock_stepping_back_never_makes_instant_times_go_back(workspace: Path) -> None:
    """Ingest once with the wall clock an hour ahead, then with the real one (the clock stepped back an hour).

    The second instant must still come after the first: times are drawn under the lock from the greatest time
    on the timeline, not from the clock alone. Shipments have no ordering column, so the merge itself proves
    it: the later arrival must win, which it would not if its commit time went back.
    """
    shipment(workspace, "0001.json", "early-but-future-clock")
    ahead = stitch_ahead(3600, "ingest", "-c", "table.yaml", "-s", "shipments", "--engine", "local", cwd=workspace)
    assert ahead.returncode == 0, ahead.stderr
    shipment(workspace, "0002.json", "later-with-real-clock")
    now = stitch("ingest", "-c", "table.yaml", "-s", "shipments", "--engine", "local", "--json", cwd=workspace)
    assert now.returncode == 0, now.stderr
    second = json.loads(now.stdout)

    timeline = stitchlake.open(workspace / "table.yaml").timeline()
    commits = timeline.completed([Action.DELTACOMMIT])
    assert len(commits) == 3  # the template's orders commit, then the two shipments commits
    first = commits[1]
    assert to_millis(first.requested) > to_millis(commits[0].completed or "") + 3_000_000  # really an hour ahead
    assert second["instant"] > (first.completed or "")
    # The real clock is an hour behind, so the time was drawn from the timeline: exactly one ms after it.
    assert to_millis(second["instant"]) == to_millis(first.completed or "") + 1
    times = [t for i in timeline.instants for t in (i.requested, i.completed)]
    assert len(set(times)) == len(times)
    assert [i.completed for i in commits] == sorted(i.completed or "" for i in commits)

    read = stitch("read", "-c", "table.yaml", "--where", "k=1", "--json", cwd=workspace)
    assert read.returncode == 0, read.stderr
    assert [r["carrier"] for r in json.loads(read.stdout)["records"]] == ["later-with-real-clock"]


# ------------------------------------------------------------------------------------- a second writer

HOLD_STREAM = """
import sys
import stitchlake
from stitchlake.services.writes.ingest import claim
txn = claim(stitchlake.open(sys.argv[1]), sys.argv[2])
print(txn.time, flush=True)
sys.stdin.readline()
txn.abort()
"""


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_second_writer_of_a_stream_is_busy(workspace: Path, engine: str) -> None:
    """A live writer holds `orders` (a real transaction with a real heartbeat); an overlapping cron run of
    the same stream exits 4 at once, naming the live instant, and writes nothing (on Spark: before starting it).
    """
    write_parquet(workspace / "landing/orders/0002.parquet", orders([5, 6]))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STREAM, str(workspace / "table.yaml"), "orders"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        live = holder.stdout.readline().strip()
        assert len(live) == 17, "the holder did not start its transaction"
        # The holder's heartbeat keeps beating and the second run takes the lock: everything else must hold.
        ignore = (LOCKS, HEARTBEATS)
        before = snapshot(workspace, ignore)
        done = stitch("ingest", "-c", "table.yaml", "-s", "orders", "--engine", engine, cwd=workspace)
        assert done.returncode == 4, done.stderr
        assert f"stream orders is already being written by instant {live}" in done.stderr
        assert f"pid {holder.pid}" in done.stderr and "run again after it finishes" in done.stderr
        assert done.stdout == ""
        # With --json, a scheduler reads the same refusal from stdout.
        as_json = stitch("ingest", "-c", "table.yaml", "-s", "orders", "--engine", engine, "--json", cwd=workspace)
        assert as_json.returncode == 4, as_json.stderr
        assert as_json.stdout.count("\n") == 1
        failure = json.loads(as_json.stdout)
        assert (failure["ok"], failure["exit_code"], failure["error_type"]) == (False, 4, "BusyError")
        assert f"already being written by instant {live}" in failure["error"]
        assert snapshot(workspace, ignore) == before
        assert not (workspace / "table/.stitch/logs").exists()  # on Spark: refused before spark-submit

        # Another stream is not blocked: writers of different streams are lock-free.
        (workspace / "landing/payments/0001.csv").write_text("k,p,paid\n5,odd,2.5\n")
        other = stitch(*INGEST_PAYMENTS, cwd=workspace)
        assert other.returncode == 0, other.stderr
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=600) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    # With the first writer gone, the same run goes through.
    again = stitch(*INGEST_ORDERS, cwd=workspace)
    assert again.returncode == 0, again.stderr
    assert "ingested 1 file(s), 2 rows into stream orders" in again.stdout


def test_an_instant_far_ahead_of_the_clock_is_refused_naming_it(workspace: Path) -> None:
    """A host three days ahead wrote an instant; writers on a host with the right clock refuse to date every new
    instant after it, naming its time, the setting, and what to do (issue 16)."""
    shipment(workspace, "0001.json", "from-a-host-in-the-future")
    ahead = stitch_ahead(
        3 * 86_400, "ingest", "-c", "table.yaml", "-s", "shipments", "--engine", "local", cwd=workspace
    )
    assert ahead.returncode == 0, ahead.stderr
    future = max(p.name for p in (workspace / "table/.stitch/timeline").iterdir() if "_" in p.name)
    completed = future.split(".")[0].split("_")[1]
    shipment(workspace, "0002.json", "now")
    before = snapshot(workspace, (LOCKS,))
    done = stitch("ingest", "-c", "table.yaml", "-s", "shipments", "--engine", "local", cwd=workspace)
    assert done.returncode == 1, done.stderr
    assert f"the timeline's newest time {completed}" in done.stderr
    assert "Fix the clock (NTP) and run again" in done.stderr and "concurrency.max_clock_skew_s" in done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr and done.stdout == ""
    assert snapshot(workspace, (LOCKS,)) == before


#: Runs `stitch` while another process rolls back the stream's last commit the moment this one writes.
ROLLBACK_MEANWHILE = """
import sys
import stitchlake
import stitchlake.engine as engine
from stitchlake.services.undo.rollback import rollback
from stitchlake.timeline.instant import Action
original = engine.write_file_groups
def rollback_meanwhile(*args, **kwargs):
    table = stitchlake.open("table.yaml")
    rollback(table, table.timeline().completed([Action.DELTACOMMIT])[-1].requested)
    return original(*args, **kwargs)
engine.write_file_groups = rollback_meanwhile
from stitchlake.cli.app import main
sys.argv = ["stitch", *sys.argv[1:]]
main()
"""


def test_a_conflict_is_one_json_failure_with_exit_3_and_loses_nothing(workspace: Path) -> None:
    write_parquet(workspace / "landing/orders/0002.parquet", orders([5, 6]))
    done = python("-c", ROLLBACK_MEANWHILE, *INGEST_ORDERS, "--json", cwd=workspace)
    assert done.returncode == 3, done.stderr
    assert done.stdout.count("\n") == 1
    failure = json.loads(done.stdout)
    assert (failure["ok"], failure["exit_code"], failure["error_type"]) == (False, 3, "ConflictError")
    assert "nothing was published — run again" in failure["error"] and failure["error"] in done.stderr
    # Retrying is safe: the rolled-back file and the refused one are both ingested, once.
    again = stitch(*INGEST_ORDERS, cwd=workspace)
    assert again.returncode == 0, again.stderr
    assert "ingested 2 file(s), 6 rows into stream orders" in again.stdout


def test_a_config_failure_in_json_carries_its_yaml_path(workspace: Path) -> None:
    config_variant("bad.yaml", lambda d: d["streams"]["orders"].update(ordering="paid"))(workspace)
    done = stitch(*with_config(INGEST_ORDERS, "bad.yaml"), "--json", cwd=workspace)
    assert done.returncode == 2
    assert json.loads(done.stdout).get("yaml_path") == "streams.orders.ordering"


# ------------------------------------------------------------------------------------- the file system
# Simulated as root: a tmpfs too small for the write (disk full), `chattr +i` (permission), a read-only bind
# mount, and a file where a folder must go. Each skips where the machine does not allow it.


@pytest.fixture
def mount() -> Iterator[Callable[..., None]]:
    """`mount(*args)` runs mount(8) (skipping the test where that is not allowed); all unmounted afterwards."""
    targets: list[str] = []

    def run(*args: str) -> None:
        try:
            done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30, check=False)
        except OSError as exc:
            pytest.skip(f"cannot mount here ({exc})")
        if done.returncode != 0:
            pytest.skip(f"cannot mount here ({done.stderr.strip()})")
        targets.append(args[-1])

    yield run
    for target in reversed(targets):
        subprocess.run(["umount", target], capture_output=True, timeout=30, check=False)


def assert_explained(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == 1, done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr and done.stdout == ""


def test_a_full_disk_is_explained_and_a_retry_after_freeing_space_succeeds(workspace: Path, mount: Any) -> None:
    small = workspace / "small"
    small.mkdir()
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small))
    shutil.copytree(workspace / "table", small / "table")
    config_variant("small.yaml", lambda d: d["table"].update(path="small/table"))(workspace)
    keys = list(range(10, 5010))
    write_parquet(workspace / "landing/orders/0002.parquet", orders(keys, status=[os.urandom(16).hex() for _ in keys]))
    room = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
    (small / "filler").write_bytes(bytes(room - 60_000))  # room for the timeline, not for the data
    done = stitch(*with_config(INGEST_ORDERS, "small.yaml"), cwd=workspace)
    assert_explained(done, "no space left on device", "free some space and run again", "nothing was published")
    assert len(stitchlake.open(workspace / "small.yaml").timeline().completed()) == 1
    (small / "filler").unlink()
    again = stitch(*with_config(INGEST_ORDERS, "small.yaml"), cwd=workspace)
    assert again.returncode == 0, again.stderr
    assert "ingested 1 file(s), 5000 rows into stream orders" in again.stdout
    assert f"{small}/table" in done.stderr, "the message names the file that did not fit"
    leftovers = [p for p in (small / "table").rglob("*.tmp")]
    assert not leftovers, f"a failed write left temporary files: {leftovers}"


def test_permission_denied_names_the_path_and_what_to_do(workspace: Path) -> None:
    timeline = workspace / "table/.stitch/timeline"
    try:
        immutable = subprocess.run(["chattr", "+i", str(timeline)], capture_output=True, timeout=30, check=False)
    except OSError as exc:
        pytest.skip(f"no chattr here ({exc})")
    if immutable.returncode != 0:
        pytest.skip(f"chattr +i is not allowed here ({immutable.stderr!r})")
    try:
        write_parquet(workspace / "landing/orders/0002.parquet", orders([5, 6]))
        before = snapshot(workspace, (LOCKS,))
        done = stitch(*INGEST_ORDERS, cwd=workspace)
        assert_explained(done, f"operation not permitted: {timeline}/", "needs read and write access")
        as_json = stitch(*INGEST_ORDERS, "--json", cwd=workspace)
        assert as_json.returncode == 1
        failure = json.loads(as_json.stdout)
        assert failure["ok"] is False and failure["file"].startswith(f"{timeline}/")
        assert snapshot(workspace, (LOCKS,)) == before
    finally:
        subprocess.run(["chattr", "-i", str(timeline)], capture_output=True, timeout=30, check=False)
    assert stitch(*INGEST_ORDERS, cwd=workspace).returncode == 0


def test_a_table_on_a_read_only_file_system_is_read_but_not_written(workspace: Path, mount: Any) -> None:
    table = workspace / "table"
    mount("--bind", str(table), str(table))
    mount("-o", "remount,bind,ro", str(table))
    write_parquet(workspace / "landing/orders/0002.parquet", orders([5, 6]))
    before = snapshot(workspace)
    read = stitch("read", "-c", "table.yaml", "--json", cwd=workspace)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["rows"] == 4
    done = stitch(*INGEST_ORDERS, cwd=workspace)
    assert_explained(done, f"read-only file system: {table}/", "the table folder must be on a writable file system")
    assert snapshot(workspace) == before


def test_a_file_where_a_folder_must_go_is_named_with_what_to_do(workspace: Path) -> None:
    """A new partition's folder is taken by a file: the run stops naming it (no traceback, even from the abort
    that cannot delete under it), publishes nothing, and succeeds once the file is moved away."""
    write_parquet(workspace / "landing/orders/0002.parquet", orders([5, 6], p=["new", "odd"]))
    (workspace / "table/p=new").write_text("a file in the way\n")
    done = stitch(*INGEST_ORDERS, cwd=workspace)
    assert_explained(done, f"{workspace}/table/p=new", "a file is where stitch needs a folder: move it away")
    assert len(stitchlake.open(workspace / "table.yaml").timeline().completed()) == 1
    (workspace / "table/p=new").unlink()
    again = stitch(*INGEST_ORDERS, cwd=workspace)
    assert again.returncode == 0, again.stderr
    assert "ingested 1 file(s), 2 rows into stream orders" in again.stdout


# ------------------------------------------------------------------------------------------- the Python API
