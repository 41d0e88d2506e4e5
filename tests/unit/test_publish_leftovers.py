"""What a publish leaves when it stops half-way (issue 26 point 5, left over from issue 13): an interrupted publish
says that the version it committed exists; Iceberg data files a crashed publish wrote are swept by the next publish;
and a publish presumed dead that resumes after `erase --purge` recreated the published table cannot write into it.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest:
tests/integration/test_publish_leftovers.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from stitchlake.concurrency.heartbeat import is_expired
from stitchlake.errors import ConflictError
from stitchlake.services.publish import PublishResult
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from tests.support.published_history import (
    current_rows,
    data_files,
    erase_keys,
    history,
    iceberg_table,
    published_version,
    read_published,
)

FAST = {"concurrency": {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}}}


def keys_in(files: list[Path]) -> set[int]:
    import pyarrow.parquet as pq

    return {k for path in files for k in pq.read_table(path, columns=["k"]).column("k").to_pylist()}


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_zombie_publish_that_resumes_after_a_purge_cannot_write_into_the_recreated_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """A publish passes its last check before the commit, then freezes past its heartbeat (presumed dead). An
    erase of key 1 with `--purge` recreates the published table meanwhile. The zombie then resumes with the rows
    it read, key 1 among them: its commit is refused (exit 3), the published table shows the purged state, and
    once the next publish has run no file under it holds key 1."""
    import stitchlake.services.publish as publish_module

    table = history(tmp_path / "t", FAST)
    first = table.publish(fmt).to_json()
    assert 1 in {row["k"] for row in read_published(fmt, first)}
    original_check = getattr(publish_module, "_refuse_if_overtaken")  # noqa: B009 - patched where it runs
    purged: list[Any] = []
    zombie: list[Transaction] = []

    def frozen_after_the_check(txn: Transaction, chosen: Any) -> None:
        original_check(txn, chosen)
        if zombie:  # the erase's own republish, or a later publish
            return
        zombie.append(txn)
        assert txn.heartbeat is not None
        txn.heartbeat.stop(delete=True)
        txn.heartbeat = None
        expire_s = table.config.concurrency.heartbeat.expire_s
        deadline = time.monotonic() + 60
        while not is_expired(table.storage, txn.time, expire_s):
            assert time.monotonic() < deadline, "the frozen publish never looked dead"
            time.sleep(0.05)
        purged.append(table.erase(erase_keys(1), purge=True).result)

    monkeypatch.setattr(publish_module, "_refuse_if_overtaken", frozen_after_the_check)
    with pytest.raises(ConflictError):
        table.publish(fmt)
    monkeypatch.undo()
    (erased,) = purged
    (done,) = [r for r in erased.published if r.format == fmt]
    assert isinstance(done, PublishResult), "the zombie looked dead: the purge republished at once"
    republished = done.to_json()
    assert published_version(fmt, first) == republished["version"], "the zombie committed nothing"
    assert read_published(fmt, republished) == current_rows(table)
    assert 1 not in {row["k"] for row in current_rows(table)}

    folder = first["location"] if fmt == "delta" else republished["table_location"]
    result = table.publish(fmt).to_json()
    assert read_published(fmt, result) == current_rows(table)
    assert 1 not in keys_in(data_files(folder)), "what the zombie wrote was swept"
    assert not table.timeline().pending()


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_purge_archived_before_its_republish_still_leaves_no_older_published_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """`erase --purge` commits but its republish fails (the command says: run `stitch publish` again); the table
    goes on and is archived before that publish runs. The publish must still recreate the published table, whose
    older versions hold the keys: it looked for purges on the active timeline only, and kept them."""
    import stitchlake.services.rewrites.erase as erase_module
    from tests.support.tables import MODELS, batch

    table = history(tmp_path / "t", FAST)
    first = table.publish(fmt).to_json()
    assert 1 in {row["k"] for row in read_published(fmt, first)}

    def publish_fails(*_args: Any, **_kwargs: Any) -> Any:
        raise ConflictError("the publish after the erase failed")

    monkeypatch.setattr(erase_module, "publish_after", publish_fails)
    with pytest.raises(ConflictError, match="the publish after the erase failed"):
        erase_module.erase(table, erase_keys(1), purge=True)
    monkeypatch.undo()
    orders = MODELS[0]
    for n in range(12):
        table.write("orders", batch(orders, [{"k": 2, "amount": n, "status": "later", "ots": 20 + n}]))
    table.archive(keep=3)
    assert not table.timeline().completed([Action.ERASE]), "the purge is archived"
    result = table.publish(fmt).to_json()
    assert read_published(fmt, result) == current_rows(table)
    folder = first["location"] if fmt == "delta" else result["table_location"]
    assert 1 not in keys_in(data_files(folder)), "an older published version still holds the purged key"


def test_a_purge_whose_iceberg_republish_fails_leaves_no_table_rather_than_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge's republish drops the published Iceberg table (its history holds the keys) and makes it anew. It was
    created, then its rows appended in a second commit: until then, and for good when the append failed, readers
    found an empty table and every query answered nothing, without an error. The SQL catalog stages the create
    now: the table comes with its rows, or not at all (an error a reader sees), and the next publish makes it."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.table import Transaction as IcebergTransaction

    table = history(tmp_path / "t", FAST)
    first = table.publish("iceberg").to_json()
    original = IcebergTransaction.append

    def storage_fails(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("the store refused the data file")

    monkeypatch.setattr(IcebergTransaction, "append", storage_fails)
    with pytest.raises(Exception, match="the store refused the data file"):
        table.erase(erase_keys(1), purge=True)
    with pytest.raises(NoSuchTableError):
        iceberg_table(first)  # no table: never one that looks like an empty result
    monkeypatch.setattr(IcebergTransaction, "append", original)
    result = table.publish("iceberg").to_json()
    assert read_published("iceberg", result) == current_rows(table)
    assert 1 not in {row["k"] for row in read_published("iceberg", result)}
