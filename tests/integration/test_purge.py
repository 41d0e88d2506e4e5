"""`stitch delete --purge` reaches every copy the table holds (issue 24): after it, no file under the table or the
published tables holds an erased person's values, quarantined rows and quarantined landing files included.

The scan decodes what it can (Parquet, Avro, gzip) and searches the rest as bytes, so a value inside a compressed
page counts as found. The erased keys themselves may stay in the erase's own record: change-feed readers learn of
the deletion from it. The markers below are the erased person's values, which must not.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from scripts import kafka_broker as broker
from stitchlake.paths import QUARANTINE_DIR
from tests.support.processes import run_stitch
from tests.support.tables import landing_stream, write_table_yaml

#: Values only key 7 (the person erased) ever had.
SECRETS = ("SECRET-ORDER-7", "SECRET-PAY-7", "SECRET-SHIP-7", "SECRET-MISSING-7", "SECRET-LATE-7")
SECRET_AMOUNT = 987654.321
#: A value of key 8, kept: its quarantined file must survive the purge (evidence is not deleted wholesale).
KEPT = "EVIDENCE-8"


def config(root: Path) -> Path:
    document: dict[str, Any] = {
        "table": {"name": "people", "path": "table", "key": {"k": "long"}, "buckets": 2},
        "streams": {
            "orders": landing_stream("orders", "parquet", {"amount": "double", "note": "string", "ots": "long"}, "ots"),
            "payments": landing_stream(
                "payments", "json", {"paid": "double", "pnote": "string", "pts": "timestamp"}, "pts", "ignore"
            ),
            "shipments": landing_stream("shipments", "csv", {"carrier": "string", "sno": "long"}),
        },
        "bad_rows": "quarantine",
        "publish": {"formats": ["delta", "iceberg"]},
        "spark": {"master": "local[1]", "conf": {"spark.driver.memory": "768m", "spark.ui.enabled": "false"}},
    }
    path = write_table_yaml(root, document)
    return path


def land(root: Path) -> None:
    orders = root / "landing" / "orders"
    payments = root / "landing" / "payments"
    shipments = root / "landing" / "shipments"
    for folder in (orders, payments, shipments):
        folder.mkdir(parents=True, exist_ok=True)
    notes = [SECRETS[0] if k == 7 else f"note-{k}" for k in range(20)]
    amounts = [SECRET_AMOUNT if k == 7 else float(k) for k in range(20)]
    pq.write_table(
        pa.table({"k": list(range(20)), "amount": amounts, "note": notes, "ots": [1] * 20}), orders / "o-1.parquet"
    )
    # Readable but lacking `ots`: set aside whole. One holds key 7, one only key 8 (kept by the purge).
    pq.write_table(pa.table({"k": [7, 3], "amount": [1.0, 2.0], "note": [SECRETS[3], "x"]}), orders / "o-2.parquet")
    pq.write_table(pa.table({"k": [8], "amount": [1.0], "note": [KEPT]}), orders / "o-3.parquet")
    lines = [{"k": k, "paid": 1.0, "pnote": f"p-{k}", "pts": "2026-11-20T10:00:00"} for k in range(20)]
    lines.append({"k": 7, "paid": 2.0, "pnote": SECRETS[1], "pts": "not a time"})  # a bad row: quarantined
    lines.append({"k": 9, "paid": 2.0, "pnote": "bad-9", "pts": "not a time"})
    (payments / "p-1.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (shipments / "s-1.csv").write_text("k,carrier,sno\n" + "".join(f"{k},c{k},{k}\n" for k in range(20)))
    # A CSV that cannot be split: set aside whole; its reader's error quotes the line (not kept on the timeline).
    (shipments / "s-2.csv.gz").write_bytes(gzip.compress(f"k,carrier,sno\n7,{SECRETS[2]},1,extra\n".encode()))


def found_secrets(folder: Path, secrets: tuple[str, ...] = SECRETS) -> dict[str, list[str]]:
    """Every marker of key 7 found in any file under `folder`, by file."""
    found: dict[str, list[str]] = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        texts = [path.read_bytes()]
        texts += _decoded(path)
        hits = sorted({s for s in secrets for t in texts if s.encode() in t})
        hits += ["amount"] if any(str(SECRET_AMOUNT).encode() in t for t in texts[1:]) else []
        if hits:
            found[str(path.relative_to(folder))] = hits
    return found


def _decoded(path: Path) -> list[bytes]:
    """A file's values as text, where it decodes: Parquet, Avro, gzip."""
    data = path.read_bytes()
    out = []
    with contextlib.suppress(Exception):
        out.append(json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str).encode())
    try:
        import fastavro

        out.append(json.dumps(list(fastavro.reader(io.BytesIO(data))), default=str).encode())
    except Exception:
        pass
    with contextlib.suppress(Exception):
        out.append(gzip.decompress(data))
    return out


@pytest.mark.spark
def test_purge_leaves_no_erased_value_anywhere_under_the_table_or_the_published_tables(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    land(tmp_path)
    assert run_stitch("init", "-c", str(cfg)).returncode == 0
    for stream in ("orders", "payments", "shipments"):
        done = run_stitch("ingest", "-c", str(cfg), "--stream", stream, "--engine", "local", "--json")
        assert done.returncode == 0, done.stderr
    table = stitchlake.open(str(cfg))
    quarantined = [
        f for c in table.timeline().completed() for f in getattr(table.timeline().commit(c), "quarantined_files", ())
    ]
    assert len(quarantined) == 3, quarantined
    assert not any(SECRETS[2] in q.reason for q in quarantined), "the reader's quote of the line is not kept"
    assert run_stitch("savepoint", "create", "-c", str(cfg), "--name", "before").returncode == 0
    # A late event of key 7 after the savepoint, a Spark ingest (a job log under the table), then a compaction
    # and a publish: every place a value can be.
    (tmp_path / "landing" / "orders" / "o-4.parquet").parent.mkdir(exist_ok=True)
    pq.write_table(
        pa.table({"k": [7, 2], "amount": [3.0, 4.0], "note": [SECRETS[4], "n"], "ots": [2, 2]}),
        tmp_path / "landing" / "orders" / "o-4.parquet",
    )
    done = run_stitch("ingest", "-c", str(cfg), "--stream", "orders", "--engine", "spark", timeout=600)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "table" / ".stitch" / "logs").iterdir()), "the Spark job left its log"
    assert run_stitch("compact", "-c", str(cfg), "--engine", "local").returncode == 0
    published = [tmp_path / "table" / ".stitch" / "published"]
    before = found_secrets(tmp_path / "table")
    assert any(QUARANTINE_DIR in p for p in before), f"the test must see quarantined copies first: {before}"
    assert any(p.startswith(".stitch/published") for p in before), "and published ones"

    keys = tmp_path / "erase.csv"
    keys.write_text("k\n7\n")
    done = run_stitch("delete", "-c", str(cfg), "--keys", str(keys), "--purge", "--json", "--engine", "local")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["erased_keys"] == 1 and result["purged_savepoints"] == [result["purged_savepoints"][0]]
    assert len(result["purged_quarantine"]) == 3, result["purged_quarantine"]
    assert result["purged_logs"], "the job log written before the erase went"

    for folder in [tmp_path / "table", *published]:
        left = found_secrets(folder)
        assert not left, f"erased values left under {folder}: {left}"
    kept = [p for p in (tmp_path / "table" / QUARANTINE_DIR).rglob("*") if p.is_file()]
    assert any(KEPT.encode() in p.read_bytes() for p in kept), (
        "a quarantined file without the key is evidence, and stays"
    )
    rows = {r["k"]: r for r in stitchlake.open(str(cfg)).read().to_pylist()}
    assert 7 not in rows and rows[8]["note"] == "note-8" and rows[2]["note"] == "n"
    bad_left = pq.read_table(next((tmp_path / "table" / QUARANTINE_DIR).rglob("rows-*.parquet")))
    assert bad_left.column("k").to_pylist() == ["9"], "the other bad row is kept"


#: Kafka values of key 7 that do not decode (kept raw in `_value`) or decode into a bad row.
KAFKA_SECRETS = ("SECRET-RAW-7", "SECRET-CLICK-7", "SECRET-BAD-7")


def test_purge_removes_the_erased_keys_undecodable_kafka_values(kafka_broker: str, tmp_path: Path) -> None:
    """A Kafka value that does not decode is quarantined raw, without a key column (or with a null key beside
    decoded bad rows): the purge finds the key's text in it, as in a quarantined text file, and removes the row."""
    topics = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("events", "clicks")}
    for topic in topics.values():
        broker.create_topic(kafka_broker, topic, 1)

    def kafka(name: str) -> dict[str, Any]:
        return {"format": "kafka", "topic": topics[name], "bootstrap_servers": kafka_broker, "read_timeout_s": 120}

    document: dict[str, Any] = {
        "table": {"name": "people", "path": "table", "key": {"k": "long"}, "buckets": 2},
        "streams": {
            "events": {"columns": {"note": "string", "ets": "long"}, "ordering": "ets", "source": kafka("events")},
            "clicks": {"columns": {"page": "string", "cts": "long"}, "ordering": "cts", "source": kafka("clicks")},
        },
        "bad_rows": "quarantine",
    }
    cfg = write_table_yaml(tmp_path, document)
    good = [json.dumps({"k": k, "note": f"n-{k}", "ets": 1}).encode() for k in (1, 2, 7)]
    # `events`: a decoded bad row of key 7 beside undecodable values, so the quarantined rows have a key column
    # that is null for the undecodable ones.
    events = [*good, json.dumps({"k": 7, "note": KAFKA_SECRETS[2], "ets": "soon"}).encode()]
    events += [b'{"k": 7, "note": "' + KAFKA_SECRETS[0].encode() + b'"', b'{"k": 8, "note": "EVIDENCE-8"']
    broker.produce(kafka_broker, topics["events"], [(0, value) for value in events])
    # `clicks`: only undecodable values are bad, so the quarantined rows have no key column at all.
    clicks = [json.dumps({"k": 1, "page": "home", "cts": 1}).encode(), b'{"k": 7, "page": "SECRET-CLICK-7", "cts"']
    clicks.append(b'{"k": 8, "page": "EVIDENCE-CLICK-8"')
    broker.produce(kafka_broker, topics["clicks"], [(0, value) for value in clicks])
    assert run_stitch("init", "-c", str(cfg)).returncode == 0
    for stream in ("events", "clicks"):
        done = run_stitch("ingest", "-c", str(cfg), "--stream", stream, "--engine", "local", "--json")
        assert done.returncode == 0, done.stderr
    quarantine = tmp_path / "table" / QUARANTINE_DIR
    assert set(found_secrets(quarantine, KAFKA_SECRETS)) == {
        str(p.relative_to(quarantine)) for p in quarantine.rglob("rows-*.parquet")
    }, "the test must see both quarantined row files hold key 7's values first"
    shapes = sorted("k" in pq.read_schema(p).names for p in quarantine.rglob("rows-*.parquet"))
    assert shapes == [False, True], "one row file without a key column, one with a key null for undecodable values"

    keys = tmp_path / "erase.csv"
    keys.write_text("k\n7\n")
    done = run_stitch("delete", "-c", str(cfg), "--keys", str(keys), "--purge", "--json", "--engine", "local")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["erased_keys"] == 1 and len(result["purged_quarantine"]) == 2, result

    left = found_secrets(tmp_path / "table", KAFKA_SECRETS)
    assert not left, f"erased values left under the table: {left}"
    kept = pa.concat_tables(
        [pq.read_table(p) for p in quarantine.rglob("rows-*.parquet")], promote_options="permissive"
    ).to_pylist()
    assert sorted(r["_value"] for r in kept) == sorted(b.decode() for b in (events[-1], clicks[-1])), (
        "another key's undecodable values are evidence, and stay"
    )


def test_purge_rolls_back_a_crashed_write_whose_files_hold_an_erased_key(tmp_path: Path) -> None:
    """A write of key 3 crashed right before its commit (killed: no abort ran), its heartbeat expired, and nobody
    rolled it back yet: its log file under the table held key 3's values, and `erase --purge` left it (it purges
    the files of commits). The purge first rolls back failed writes, as `stitch clean` does."""
    import subprocess
    import sys
    import time

    import stitchlake.services.undo.rollback as rollback_module
    from tests.support.tables import MODELS, THREE_STREAMS, batch

    fast = {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}, "lock": {"expire_s": 1}}  # it dies holding the lock
    document = {**THREE_STREAMS, "concurrency": fast}
    config = write_table_yaml(tmp_path, document)
    table = stitchlake.open(config)
    table.init()
    orders = MODELS[0]
    rows = [{"k": k, "amount": 1000 + k, "status": "secret", "ots": 1} for k in (1, 2, 3)]
    table.write("orders", batch(orders, rows))
    crash = (
        "import os, sys; sys.path.insert(0, sys.argv[2])\n"
        "import stitchlake, stitchlake.table.transaction as tx\n"
        "from tests.support.tables import MODELS, batch\n"
        "tx.write_completed = lambda *a, **k: os._exit(9)  # dies right before its commit\n"
        "stitchlake.open(sys.argv[1]).write('orders', batch(MODELS[0], [{'k': 3, 'amount': 3333, "
        "'status': 'SECRET-3', 'ots': 2}]))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    assert subprocess.run([sys.executable, "-c", crash, str(config), root], check=False).returncode == 9
    (pending,) = table.timeline().pending()
    while not rollback_module.expired(table, pending):  # its heartbeat stopped with it: wait until it says so
        time.sleep(0.1)
    held = [
        p
        for p in Path(table.path).rglob("*.parquet")
        if ".stitch" not in p.parts and "SECRET-3" in str(pq.read_table(p).to_pylist())
    ]
    assert held, "the crashed write left its file"

    table.erase(pa.table({"k": pa.array([3], pa.int64())}), purge=True)
    for path in Path(table.path).rglob("*.parquet"):
        if ".stitch" not in path.parts:
            assert 3 not in pq.read_table(path, columns=["k"]).column("k").to_pylist(), path
    assert not table.timeline().pending()
