"""The nine ways to lose or corrupt data an adversarial trial found (issue 16), one test each, at the mechanism.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_hardening.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

import stitchlake
from stitchlake.errors import LockLost, StitchError
from stitchlake.paths import ARCHIVE_DIR
from stitchlake.services.upkeep.archive import archive
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.archive import archived_instants, load_checkpoint
from tests.support.tables import QUARANTINING, new_table_file

STITCH = Path(sys.executable).parent / "stitch"


def test_an_archive_frozen_past_its_lease_never_moves_the_checkpoint_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, config = new_table_file(tmp_path, {**QUARANTINING, "archive": {"keep_instants": 10}})
    for key in range(40):
        table.write("payments", pa.table({"k": [key], "paid": [float(key)], "pts": [1.0]}))
    before = table.read()
    storage = table.storage
    original = type(storage).put_if_absent
    rival_done: list[Any] = []

    def frozen_then_resumed(self: Any, path: str, data: bytes, ready: Any = None) -> bool:
        if path.startswith(ARCHIVE_DIR) and not rival_done:
            # While this archive is frozen past its lease, a second archive takes the lock and goes further.
            rival = threading.Thread(target=lambda: rival_done.append(archive(stitchlake.open(config), keep=10)))
            rival_done.append(None)
            rival.start()
            rival.join()
        return original(self, path, data, ready)

    monkeypatch.setattr(type(storage), "put_if_absent", frozen_then_resumed)
    # The frozen one would keep more instants: its horizon is older than the rival's.
    with pytest.raises((LockLost, StitchError)):
        archive(table, keep=25)
    monkeypatch.undo()
    rival = rival_done[-1]
    assert rival is not None and rival.archived > 0
    checkpoint = load_checkpoint(storage)
    assert checkpoint is not None and checkpoint.horizon == rival.horizon, "the checkpoint moved backwards"
    fresh = stitchlake.open(config)
    assert fresh.read().sort_by("k").equals(before.sort_by("k")), "instants were lost between the two horizons"
    archived = {entry.instant.requested for entry in archived_instants(storage)}
    active = {instant.requested for instant in fresh.timeline().completed()}
    assert len(archived | active) == 40


def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    bomb = "spark:\n  conf:\n    spark.bomb: ${X}\n" + "bombs:\n" + textwrap.indent("\n".join(levels), "  ") + "\n"
    path = tmp_path / "bomb.yaml"
    path.write_text(yaml.safe_dump(QUARANTINING) + bomb)
    done = subprocess.run(
        [str(STITCH), "read", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "X": "1"},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "aliases" in done.stderr


def test_only_secret_like_environment_values_are_masked_and_data_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = json.loads(json.dumps(QUARANTINING))
    document["table"]["name"] = "wide_${YEAR}"
    document["spark"] = {"conf": {"spark.hadoop.fs.s3a.secret.key": "${MY_SECRET_KEY}"}}
    monkeypatch.setenv("YEAR", "2026")
    monkeypatch.setenv("MY_SECRET_KEY", "s3cr3t-value-2026")
    table, config = new_table_file(tmp_path, document)
    table.write("payments", pa.table({"k": [2026], "paid": [2026.0], "pts": [1.0]}))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(STITCH), *args], capture_output=True, text=True, timeout=600, check=False)
        assert "s3cr3t-value-2026" not in done.stdout + done.stderr
        return done

    read = run("read", "-c", str(config), "--json")
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["records"] == [{"k": 2026, "amount": None, "ots": None, "paid": 2026.0, "pts": 1.0}]
    shown = run("timeline", "show", "-c", str(config), "--json")
    instants = json.loads(shown.stdout)["instants"]
    assert instants and all(item["instant"].startswith("20") for item in instants)
    assert "secret from the environment" not in shown.stdout
    assert "wide_2026" in run("init", "-c", str(config)).stdout


def test_a_savepoint_or_erase_presumed_dead_while_frozen_refuses_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from stitchlake.services.rewrites import erase as erase_module
    from stitchlake.services.undo.recovery import rollback_failed
    from stitchlake.services.upkeep import savepoint as savepoint_module

    table, config = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1, 2], "paid": [1.0, 2.0], "pts": [1.0, 1.0]}))
    original = Transaction.begin_planned.__func__  # type: ignore[attr-defined]

    def frozen(cls: Any, *args: Any, **kwargs: Any) -> Any:
        txn = original(cls, *args, **kwargs)
        if txn is not None and txn.heartbeat is not None:
            txn.heartbeat.stop(delete=False)  # frozen: no more beats
            time.sleep(3.5)  # past concurrency.heartbeat.expire_s
            rollback_failed(stitchlake.open(config))  # another process rolls the "dead" instant back
        return txn

    monkeypatch.setattr(Transaction, "begin_planned", classmethod(frozen))
    with pytest.raises(StitchError, match="by another process while it ran; nothing was published"):
        savepoint_module.create(table, name="frozen")
    with pytest.raises(StitchError, match="by another process while it ran; nothing was published"):
        erase_module.erase(table, pa.table({"k": [1]}))
    monkeypatch.undo()
    assert table.read().num_rows == 2
