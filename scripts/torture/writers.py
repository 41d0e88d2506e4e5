"""The roles that write data: a stream's writer (ingests over and over) and the eraser (erases keys it wrote)."""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq

from scripts.torture.common import staged_files
from scripts.torture.faults import optional_module
from scripts.torture.worker import WorkerBase, consumed_on_disk


def ingest_local(table: Any, stream: str) -> Any:
    """One in-process ingest of the stream (`stitch ingest --engine local`), wherever this version keeps it."""
    module = optional_module("stitchlake.ingest")
    if module is not None and hasattr(module, "ingest_local"):
        return module.ingest_local(table, stream)
    from stitchlake.engine import LocalEngine  # type: ignore[import-not-found, unused-ignore]
    from stitchlake.services.writes.ingest import ingest  # type: ignore[import-not-found, unused-ignore]

    return ingest(table, LocalEngine(), stream)


class Writer(WorkerBase):
    """`writer:STREAM[:N]`: ingests its stream's landing files, as cron would run `stitch ingest`."""

    def ingest(self) -> None:
        stream = self.role.split(":")[1]
        result = ingest_local(self.table, stream)
        if result.instant:
            self.log({"event": "commit", "instant": result.instant, "files": result.source_files})
            self.nap(0.0, 0.15)
        else:
            self.nap(0.05, 0.25)


class Eraser(WorkerBase):
    """`eraser`: erases keys the writers may be writing at the same time."""

    def erase(self) -> None:
        """Erase one to three keys of a landed orders file (`stitch delete --keys` a third of the time, in-process,
        else the service), while the writers may be writing them: the oracle drops their events committed before
        the erase and keeps those committed after it. Logs the keys before and the instant after."""
        import pyarrow as pa

        landed = [self.work / "landing" / "orders" / p.name for p in staged_files(self.work, "orders")]
        landed = [p for p in landed if p.exists()]  # landed so far: keys the table may hold
        if not landed:
            self.nap(0.2, 0.5)
            return
        # Keys of a file the table took already, when there is one: it holds them, so a read right after the erase
        # sees them gone (a file not taken yet is ingested after the erase, and its keys come back at once).
        taken = (consumed_on_disk(self.table_dir) or {}).get("orders", set())
        landed = [p for p in landed if p.name in taken] or landed
        ids = pq.read_table(self.rng.choice(landed), columns=["order_id"]).column("order_id").to_pylist()
        keys = sorted(set(self.rng.sample(ids, min(len(ids), self.rng.randint(1, 3)))))
        self.done += 1
        path = self.work / "erase-keys" / f"{os.getpid()}-{self.done}.parquet"
        path.parent.mkdir(exist_ok=True)
        wanted = pa.table({"order_id": pa.array(keys, pa.int64())})
        pq.write_table(wanted, path)
        self.log({"event": "erasing", "keys": keys, "file": path.name})
        if self.rng.random() < 0.3:
            done = self.cli("delete", "-c", self.config, "--keys", str(path), "--engine", "local")
            instant, erased = done.get("instant"), done.get("erased_keys")
        else:
            from stitchlake.services.rewrites.erase import erase

            result = erase(self.table, wanted)
            instant, erased = result.instant, result.erased_keys
        self.log({"event": "erase", "instant": instant, "keys": keys, "erased": erased})
        self.nap(0.5, 1.5)
