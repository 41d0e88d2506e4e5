"""The reader role: reads as of a time (usually the latest) and records the state its snapshot had, to be checked."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pyarrow.parquet as pq

from scripts.torture.tablefiles import instant_meta, list_timeline, read_checkpoint, sources_of
from scripts.torture.worker import WorkerBase


class Reader(WorkerBase):
    """`reader:N`: never killed by the storm; its every read is kept, for the oracle to check."""

    def snapshot(self) -> dict[str, Any] | None:
        """The completed instants, the checkpoint, and the active deltacommits past it, as one state.

        Listing first, then the checkpoint: an archive in between only moves instants from the listing into
        the checkpoint (its consumed files are a superset). A metadata file that vanished (archived, undone)
        means the state moved on: look again.
        """
        for _attempt in range(8):
            t0 = time.time()
            try:
                completed, _pending = list_timeline(self.table_dir)
                checkpoint = read_checkpoint(self.table_dir)
                horizon = checkpoint.horizon if checkpoint else ""
                metas = {
                    s.requested: instant_meta(self.table_dir, s)
                    for s in completed
                    if s.action == "deltacommit" and s.completed > horizon
                }
            except FileNotFoundError:
                continue
            return {
                "t0": t0,
                "t1": time.time(),
                "completed": completed,
                "horizon": horizon,
                "checkpoint_consumed": checkpoint.consumed if checkpoint else {},
                "metas": metas,
            }
        return None

    def read(self) -> None:
        """Read as of a completion time (usually the latest) and record the state that snapshot has."""
        snap = self.snapshot()
        done = [s for s in snap["completed"] if s.completed > snap["horizon"]] if snap else []
        if snap is None or not done:
            self.nap(0.1, 0.3)
            return
        self.observe_horizon(snap["t0"], snap["t1"], snap["horizon"] or None)
        draw = self.rng.random()
        mode = "latest" if draw < 0.6 else "past" if draw < 0.8 else "current"
        as_of = None
        if mode == "latest":
            as_of = done[-1].completed
        elif mode == "past":
            as_of = self.rng.choice(done).completed
        until = as_of or done[-1].completed
        visible = [
            {
                "requested": requested,
                "completed": seen.completed,
                "stream": meta.get("stream"),
                "sources": sources_of(meta),
            }
            for seen in done
            if seen.action == "deltacommit" and seen.completed <= until
            for requested, meta in [(seen.requested, snap["metas"][seen.requested])]
        ]
        self.done += 1
        name = f"{self.role.replace(':', '-')}-{os.getpid()}-{self.done:05d}"
        record: dict[str, Any] = {
            "name": name,
            "mode": mode,
            "as_of": as_of,
            "until": until,
            "horizon": snap["horizon"],
            "checkpoint_consumed": snap["checkpoint_consumed"],
            "visible": visible,
            "snapshot": [s.key() for s in snap["completed"]],
            "t0": snap["t0"],
            "t1": snap["t1"],
            "error": None,
        }
        try:
            data = self.table.read(as_of=as_of)
        except Exception as exc:
            record["error"] = {"type": type(exc).__name__, "message": str(exc)}
        else:
            moved = self.moved(snap, as_of)
            if moved == "current-moved":
                record["mode"] = moved
            record["moved"] = moved
            pq.write_table(data, self.work / "reads" / f"{name}.parquet")
            record["rows"] = data.num_rows
        path = self.work / "reads" / f"{name}.json"
        path.with_suffix(".tmp").write_text(json.dumps(record), encoding="utf-8")
        os.replace(path.with_suffix(".tmp"), path)
        self.nap(0.05, 0.3)

    def moved(self, snap: dict[str, Any], as_of: str | None) -> str | None:
        """Whether the state read may differ from the recorded one, and why (None: it is the recorded one).

        A restore undoes completed deltacommits "in the past", so even a read as of a fixed time may see fewer
        of them than the listing before it did; without as_of, a deltacommit completed meanwhile counts too.
        Archiving moves instants into the checkpoint and changes nothing.
        """
        after = self.snapshot()
        if after is None:
            return "undone during the read"
        changes = ("deltacommit", "erase")
        before = [s for s in snap["completed"] if s.action in changes and (as_of is None or s.completed <= as_of)]
        now = {s.requested for s in after["completed"] if s.action in changes}
        if any(s.completed > after["horizon"] and s.requested not in now for s in before):
            return "undone during the read"
        if as_of is None and now - {s.requested for s in snap["completed"]}:
            return "current-moved"
        return None
