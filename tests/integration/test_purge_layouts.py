"""`delete --purge` after a rescale (issue 34.1): a key lived in another file group before the rescale than after
it, and the purge must find every file that may hold it under every bucket count in the table's history.

A table of 1 bucket per partition (and one without partitions) gets base files and logs, is rescaled to 4, gets
more logs, and then keys are purged one at a time, some whose bucket under 4 is 0 (the group they had under 1)
and some whose bucket moved. Afterwards no file under the table holds an erased key's values (every Parquet and
Avro value read back, every other file's bytes searched) and no read as of any earlier time returns them: such a
read is refused, since the files it needs were purged. On local disk and on the S3 server.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stitchlake.api import Table
from stitchlake.errors import UsageError
from stitchlake.layout.bucket import bucket_of
from tests.support.processes import run_stitch
from tests.support.s3_server import Place
from tests.support.tables import THREE_STREAMS, new_table, partition_of, write_table_yaml

KEYS = 48


def marker(key: int, what: str) -> str:
    """A value only `key` ever has: found anywhere after its purge, it is a copy the purge missed."""
    return f"VAL-{key:03d}-{what}-END"


#: The columns each written stream gets: a number, a text holding the `marker` a purge must remove, and its ordering.
WRITTEN = {"orders": ("amount", "status", "ots"), "payments": ("paid", "note", "pts")}


def written(stream: str, keys: list[int], round_: int, partitioned: bool) -> pa.Table:
    """A batch of `stream` for `keys` in write round `round_`, each key's text the marker `o1`, `p2`... that
    `leftovers` looks for (`p` only where the table is partitioned)."""
    number, text, ordering = WRITTEN[stream]
    columns: dict[str, Any] = {
        "k": pa.array(keys, pa.int64()),
        number: pa.array([k * 10 + round_ for k in keys], pa.int64()),
        text: pa.array([marker(k, f"{stream[0]}{round_}") for k in keys], pa.string()),
        ordering: pa.array([round_] * len(keys), pa.int64()),
        "op": pa.array(["I"] * len(keys), pa.string()),
    }
    if partitioned:
        columns["p"] = pa.array([partition_of(k) for k in keys], pa.string())
    return pa.table(columns)


def erased_keys() -> list[int]:
    """Keys of both partitions, most moving away from group 0 under 4 buckets, then some staying in it (as under 1):
    a purge of a staying key also removes its whole old group, so the moving ones go first."""
    buckets = bucket_of([pa.array(range(KEYS), pa.int64())], 4)
    stay = [k for k in range(KEYS) if buckets[k] == 0][:2]
    move = [k for k in range(KEYS) if buckets[k] != 0][:5]
    assert len(stay) == 2 and {partition_of(k) for k in move} == {"even", "odd"}
    return move + stay


def values_in(data: bytes) -> list[bytes]:
    """A file's bytes and, where it decodes as Parquet or Avro, every value in it as text."""
    out = [data]
    with contextlib.suppress(Exception):
        out.append(json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str).encode())
    with contextlib.suppress(Exception):
        import fastavro

        out.append(json.dumps(list(fastavro.reader(io.BytesIO(data))), default=str).encode())
    return out


def leftovers(table: Table, keys: list[int]) -> dict[str, list[int]]:
    """Files under the table (listed through its storage: local disk or S3) holding a value of an erased key."""
    wanted = {k: [marker(k, w).encode() for w in ("o1", "o2", "p1", "p2")] for k in keys}
    found: dict[str, list[int]] = {}
    for path in table.storage.walk_files(""):
        texts = values_in(table.storage.read_bytes(path))
        hits = [k for k, markers in wanted.items() if any(m in t for m in markers for t in texts)]
        if hits:
            found[path] = hits
    return found


def returned(table: Table, keys: list[int], as_of: str | None) -> list[int] | None:
    """Erased keys a read as of `as_of` returns, or None when the read is refused."""
    assert as_of is not None
    try:
        rows = table.read(as_of=as_of)
    except UsageError as exc:
        assert "purged" in str(exc), str(exc)
        return None
    return sorted(set(keys) & set(rows.column("k").to_pylist()))


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_purge_after_a_rescale_reaches_every_layout_in_history(place: Place, partitioned: bool) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    if not partitioned:
        document["table"].pop("partition_by")
    table = new_table(place.root, document, path=place.table, buckets=1)
    every = list(range(KEYS))
    times = [table.write("orders", written("orders", every, 1, partitioned)).completed]
    times.append(table.write("payments", written("payments", every, 1, partitioned)).completed)
    compacted = table.compact().done
    assert compacted is not None
    times.append(table.write("orders", written("orders", every, 2, partitioned)).completed)  # logs under 1 bucket
    rescaled = table.rescale(4).done
    assert rescaled is not None and rescaled.buckets == 4
    times.append(table.write("payments", written("payments", every, 2, partitioned)).completed)  # logs under 4 buckets
    erased = erased_keys()
    before = leftovers(table, erased)
    assert {k for hits in before.values() for k in hits} == set(erased), "every erased key has copies to purge"
    assert any(returned(table, erased, t) for t in times[:3]), "and time travel returns them before the purge"

    for count, key in enumerate(erased):  # one at a time, as a user answering one request after another
        keys = pa.table({"k": pa.array([key], pa.int64())})
        if place.backend == "local" and count == 0:
            keys_file = place.root / "erase.csv"
            keys_file.write_text(f"k\n{key}\n")
            config = write_table_yaml(
                place.root, {**document, "table": {**document["table"], "path": place.table, "buckets": 4}}
            )
            done = run_stitch("delete", "-c", str(config), "--keys", str(keys_file), "--purge", "--json")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["erased_keys"] == 1
        else:
            result = table.erase(keys, purge=True).result
            assert result.erased_keys == 1, key
        assert not leftovers(table, [key]), f"key {key}: values left after its purge"

    assert not leftovers(table, erased)
    for as_of in [*times, rescaled.instant]:
        assert not returned(table, erased, as_of), f"as of {as_of} an erased key came back"
    now = {r["k"]: r for r in table.read().to_pylist()}
    assert set(now) == set(every) - set(erased)
    assert all(r["status"] == marker(k, "o2") and r["note"] == marker(k, "p2") for k, r in now.items())
