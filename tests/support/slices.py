"""A table whose newest slices hold a base file and logs of two streams, and its newest file of a kind: what the
bit-flip tests of both tiers damage."""

from __future__ import annotations

import copy
import random
from pathlib import Path

from stitchlake.api import Table
from tests.support.tables import MODELS, THREE_STREAMS, batch, new_table


def sliced_table(root: Path, log_format: str) -> Table:
    """A table whose newest slices hold a base file and logs of two streams (one with `nulls: ignore`)."""
    document = copy.deepcopy(THREE_STREAMS)
    document["table"]["log_format"] = log_format
    table = new_table(root, document, buckets=1)
    for number, stream in enumerate((0, 1, 2, 0)):
        table.write(MODELS[stream].name, batch(MODELS[stream], rows_for(stream, range(number * 3, 24), number)))
    table.compact()
    table.archive(keep=2)
    for number, stream in enumerate((1, 0), start=10):
        table.write(MODELS[stream].name, batch(MODELS[stream], rows_for(stream, range(number, 30), number)))
    return table


def newest_file(table: Table, kind: str) -> str:
    latest = [f for s in table.view().latest_slices(None) for f in s.files if f.kind == kind]
    assert latest, f"no {kind} file in the latest slices"
    return latest[-1].path


def rows_for(stream: int, keys: range, seed: int) -> list[dict[str, object]]:
    chance = random.Random(seed)
    model = MODELS[stream]
    out: list[dict[str, object]] = []
    for k in keys:
        row: dict[str, object] = {"k": k}
        for column in model.columns:
            if column in ("status", "note", "carrier"):
                row[column] = chance.choice(["a", "bb", None, "ccc"])
            else:
                row[column] = chance.randrange(1000)
        row["deleted"] = chance.random() < 0.05
        out.append(row)
    return out
