"""The benchmark workload (issue 6): three streams of an order's life, seeded, with the answer they must give.

Every key gets 1-3 events in each stream; 10% of events arrive late (hours after newer events of their key),
2% are exact duplicates arriving later, 2% of value cells are null. Each stream's events, in arrival order,
are cut into 4 batches, and the streams take turns: 12 batches = 12 deltacommits, so every file slice of an
uncompacted table has 12 logs. The ground truth is computed here with numpy alone, never with stitchlake.

    orders    (nulls: overwrite)  customer_id long, amount double, currency string, order_ts timestamp
    payments  (nulls: ignore)     pay_status string, paid_amount double, pay_ts timestamp
    shipments (nulls: overwrite)  carrier string, ship_status string, ship_ts timestamp
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: The aggregation every benchmark asks of the stitched table (`make bench`, `make bench-peers`), `{view}` its name.
QUERY = (
    "SELECT currency, count(*) AS orders, sum(paid_amount) AS paid, "
    "sum(CASE WHEN ship_status = 'delivered' THEN 1 ELSE 0 END) AS delivered FROM {view} GROUP BY currency"
)
US = 1_000_000
HOUR = 3600 * US
START_US = int(np.datetime64("2026-11-20T00:00:00", "us").astype(np.int64))
TIMESTAMP = pa.timestamp("us", tz="UTC")
STREAMS = ("orders", "payments", "shipments")
ORDERING = {"orders": "order_ts", "payments": "pay_ts", "shipments": "ship_ts"}
NULLS = {"orders": "overwrite", "payments": "ignore", "shipments": "overwrite"}
BATCHES_PER_STREAM = 4
LATE = 0.10
DUPLICATES = 0.02
NULL_CELLS = 0.02

#: name -> (arrow type, dictionary for strings or None)
COLUMNS: dict[str, dict[str, tuple[pa.DataType, tuple[str, ...] | None]]] = {
    "orders": {
        "customer_id": (pa.int64(), None),
        "amount": (pa.float64(), None),
        "currency": (pa.string(), ("EUR", "USD", "GBP", "SEK", "PLN")),
        "order_ts": (TIMESTAMP, None),
    },
    "payments": {
        "pay_status": (pa.string(), ("pending", "authorised", "paid", "failed", "refunded")),
        "paid_amount": (pa.float64(), None),
        "pay_ts": (TIMESTAMP, None),
    },
    "shipments": {
        "carrier": (pa.string(), ("DHL", "UPS", "PostNL", "DPD", "GLS", "FedEx")),
        "ship_status": (pa.string(), ("label_created", "in_transit", "out_for_delivery", "delivered")),
        "ship_ts": (TIMESTAMP, None),
    },
}
TRUTH_SCHEMA = pa.schema(
    [pa.field("order_id", pa.int64())] + [pa.field(n, t) for s in STREAMS for n, (t, _) in COLUMNS[s].items()]
)


def table_document(path: str, log_format: str = "parquet", buckets: int = 4) -> dict[str, Any]:
    """The benchmark table's config (as parsed YAML)."""
    streams: dict[str, Any] = {}
    for stream in STREAMS:
        columns = {name: _type_name(kind) for name, (kind, _) in COLUMNS[stream].items()}
        streams[stream] = {"columns": columns, "ordering": ORDERING[stream], "nulls": NULLS[stream]}
    return {
        "table": {
            "name": "bench_wide",
            "path": path,
            "key": {"order_id": "long"},
            "buckets": buckets,
            "log_format": log_format,
        },
        "streams": streams,
        "bad_rows": "fail",
        "archive": {"keep_instants": 100_000},
        "spark": {
            "master": "local[2]",
            "conf": {
                "spark.driver.memory": "2g",
                "spark.sql.shuffle.partitions": "4",
                "spark.ui.enabled": "false",
            },
        },
    }


def _type_name(kind: pa.DataType) -> str:
    if pa.types.is_timestamp(kind):
        return "timestamp"
    return {pa.int64(): "long", pa.float64(): "double", pa.string(): "string"}[kind]


@dataclass
class Workload:
    keys: int
    seed: int
    #: (stream, batch) in commit order.
    batches: list[tuple[str, pa.Table]]
    truth: pa.Table
    stats: dict[str, Any]


def _events(rng: np.random.Generator, stream: str, ids: np.ndarray, t0: np.ndarray) -> tuple[pa.Table, int, int]:
    """A stream's events in arrival order; returns them with the number of late and duplicate events."""
    n = len(ids)
    counts = rng.integers(1, 4, n)
    owner = np.repeat(np.arange(n), counts)
    m = len(owner)
    # Strictly increasing event times per key: distinct, so the winner never depends on a tie.
    gaps = rng.integers(1, 4 * HOUR, m)
    starts = np.cumsum(counts) - counts
    total = np.cumsum(gaps)
    ts = t0[owner] + total - np.repeat(total[starts] - gaps[starts], counts)
    arrival = ts + rng.integers(US, 120 * US, m)
    late = rng.random(m) < LATE
    arrival[late] += rng.integers(6 * HOUR, 36 * HOUR, int(late.sum()))
    dup = np.flatnonzero(rng.random(m) < DUPLICATES)
    rows = np.r_[np.arange(m), dup]
    arrival = np.r_[arrival, arrival[dup] + rng.integers(US, 24 * HOUR, len(dup))]
    order = np.argsort(arrival, kind="stable")
    rows = rows[order]

    columns: dict[str, pa.Array] = {"order_id": pa.array(ids[owner[rows]], pa.int64())}
    ordering = ORDERING[stream]
    for name, (kind, dictionary) in COLUMNS[stream].items():
        if name == ordering:
            columns[name] = pa.array(ts[rows].astype("datetime64[us]"), TIMESTAMP)
            continue
        null = (rng.random(m) < NULL_CELLS)[rows]  # per event, so a duplicate repeats its original's nulls
        if dictionary is not None:
            codes = rng.integers(0, len(dictionary), m)[rows]
            values = pa.DictionaryArray.from_arrays(
                pa.array(codes.astype(np.int32), mask=null), pa.array(dictionary)
            ).cast(pa.string())
        elif pa.types.is_floating(kind):
            values = pa.array(np.round(rng.lognormal(3.6, 0.8, m) * 100)[rows] / 100, kind, mask=null)
        else:
            values = pa.array(rng.integers(1, max(n // 3, 2), m)[rows], kind, mask=null)
        columns[name] = values
    return pa.table(columns), int(late.sum()), len(dup)


def _winners(keys: np.ndarray, ts: np.ndarray, valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per key (sorted unique), the row with the greatest ts among `valid` rows: (keys, rows)."""
    rows = np.arange(len(keys)) if valid is None else np.flatnonzero(valid)
    order = rows[np.lexsort((ts[rows], keys[rows]))]
    last = np.r_[keys[order][1:] != keys[order][:-1], True]
    return keys[order][last], order[last]


def ground_truth(ids: np.ndarray, events: dict[str, pa.Table]) -> pa.Table:
    """One row per key: per stream the latest event's values (overwrite) or latest non-null value (ignore)."""
    keys = np.sort(ids)
    out: dict[str, pa.Array] = {"order_id": pa.array(keys, pa.int64())}
    for stream in STREAMS:
        table = events[stream]
        owner = table.column("order_id").to_numpy()
        ts = table.column(ORDERING[stream]).cast(pa.int64()).to_numpy()
        if NULLS[stream] == "overwrite":
            found, rows = _winners(owner, ts)
            assert np.array_equal(found, keys), "every key has an event in every stream"
            for name in COLUMNS[stream]:
                out[name] = table.column(name).take(pa.array(rows)).combine_chunks()
            continue
        for name, (kind, _) in COLUMNS[stream].items():
            column = table.column(name)
            valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
            found, rows = _winners(owner, ts, valid)
            position = np.searchsorted(keys, found)
            index = np.full(len(keys), -1, dtype=np.int64)
            index[position] = rows
            out[name] = column.take(pa.array(index, mask=index < 0)).combine_chunks().cast(kind)
    return pa.table([out[f.name] for f in TRUTH_SCHEMA], schema=TRUTH_SCHEMA)


def generate(keys: int, seed: int = 6, batches_per_stream: int = BATCHES_PER_STREAM) -> Workload:
    """`keys` keys' events, cut into `batches_per_stream` landing files per stream (fewer only for smoke runs)."""
    rng = np.random.default_rng(seed)
    ids = (1_000_000_000 + np.cumsum(rng.integers(1, 4, keys))).astype(np.int64)
    t0 = START_US + rng.integers(0, 48 * HOUR, keys)
    events: dict[str, pa.Table] = {}
    stats: dict[str, Any] = {"keys": keys, "seed": seed, "events": {}, "late": {}, "duplicates": {}}
    for stream in STREAMS:
        events[stream], late, dups = _events(rng, stream, ids, t0)
        stats["events"][stream] = events[stream].num_rows
        stats["late"][stream] = late
        stats["duplicates"][stream] = dups
    stats["events_total"] = sum(stats["events"].values())
    batches: list[tuple[str, pa.Table]] = []
    for number in range(batches_per_stream):
        for stream in STREAMS:
            table = events[stream]
            start = table.num_rows * number // batches_per_stream
            end = table.num_rows * (number + 1) // batches_per_stream
            batches.append((stream, table.slice(start, end - start)))
    return Workload(keys, seed, batches, ground_truth(ids, events), stats)


# ------------------------------------------------------------------------------ chunked, for tables that grow

#: Keys per chunk of the chunked workload: one chunk's events (~6 per key) and truth are all it holds at once.
CHUNK_KEYS = 1_000_000
FIRST_ID = 1_000_000_000
#: The fingerprint's weight of a row, `order_id % WEIGHT_MODULUS + 1`: ties every value to its key, so values
#: swapped between keys change it (a plain sum would not notice).
WEIGHT_MODULUS = 1009
FINGERPRINT_BITS = 64


@dataclass
class Chunk:
    """One key range of the chunked workload: its keys' events (per stream, in arrival order) and their truth."""

    index: int
    events: dict[str, pa.Table]
    truth: pa.Table
    last_id: int
    stats: dict[str, Any]

    def batches(self, stream: str) -> list[pa.Table]:
        """The stream's events cut into BATCHES_PER_STREAM batches by arrival, as `generate` cuts them."""
        table = self.events[stream]
        cuts = [table.num_rows * number // BATCHES_PER_STREAM for number in range(BATCHES_PER_STREAM + 1)]
        return [table.slice(start, end - start) for start, end in itertools.pairwise(cuts)]


def generate_chunk(keys: int, seed: int, index: int, first_id: int = FIRST_ID) -> Chunk:
    """The `index`th key range of a chunked workload: `keys` keys after `first_id`, with their own seeded generator.

    Same distributions as `generate` (keys 1-3 apart, 1-3 events per key and stream, 10% late, 2% duplicates,
    2% null cells, start times over 48 hours); every chunk's arrivals span the same hours, so batch b of every
    chunk together is batch b of the whole workload, cut by arrival as `generate` cuts it.
    """
    rng = np.random.default_rng([seed, index])
    ids = (first_id + np.cumsum(rng.integers(1, 4, keys))).astype(np.int64)
    t0 = START_US + rng.integers(0, 48 * HOUR, keys)
    events: dict[str, pa.Table] = {}
    stats: dict[str, Any] = {"events": {}, "late": {}, "duplicates": {}}
    for stream in STREAMS:
        events[stream], late, dups = _events(rng, stream, ids, t0)
        stats["events"][stream] = events[stream].num_rows
        stats["late"][stream] = late
        stats["duplicates"][stream] = dups
    return Chunk(index, events, ground_truth(ids, events), int(ids[-1]), stats)


def chunk_sizes(keys: int, chunk_keys: int = CHUNK_KEYS) -> list[int]:
    return [min(chunk_keys, keys - start) for start in range(0, keys, chunk_keys)]


def landing_name(batch: int, chunk: int) -> str:
    """Landing files of the chunked workload sort by batch, then chunk: `stitch ingest --max-files <chunks>`
    takes exactly one batch."""
    return f"part-{batch + 1:04d}-{chunk:05d}.parquet"


def save_chunked(keys: int, seed: int, folder: Path, chunk_keys: int = CHUNK_KEYS) -> dict[str, Any]:
    """Write the chunked workload one chunk at a time (bounded memory, whatever `keys` is): landing files
    `landing/<stream>/part-<batch>-<chunk>.parquet`, the truth as `truth/part-<chunk>.parquet`, and return its
    stats with the truth's `fingerprint` (see `fingerprint`), summed over chunks."""
    stats: dict[str, Any] = {"keys": keys, "seed": seed, "chunks": 0, "events": {}, "late": {}, "duplicates": {}}
    totals: dict[str, int] = {}
    first_id = FIRST_ID
    (folder / "truth").mkdir(parents=True, exist_ok=True)
    for stream in STREAMS:
        (folder / "landing" / stream).mkdir(parents=True, exist_ok=True)
    for index, size in enumerate(chunk_sizes(keys, chunk_keys)):
        chunk = generate_chunk(size, seed, index, first_id)
        first_id = chunk.last_id
        for stream in STREAMS:
            for batch, rows in enumerate(chunk.batches(stream)):
                pq.write_table(rows, folder / "landing" / stream / landing_name(batch, index))
            for kind in ("events", "late", "duplicates"):
                stats[kind][stream] = stats[kind].get(stream, 0) + chunk.stats[kind][stream]
        pq.write_table(chunk.truth, folder / "truth" / f"part-{index:05d}.parquet")
        for name, value in fingerprint(chunk.truth).items():
            totals[name] = (totals.get(name, 0) + value) % (1 << FINGERPRINT_BITS)
        stats["chunks"] += 1
        del chunk
    stats["events_total"] = sum(stats["events"].values())
    stats["fingerprint"] = totals
    return stats


def _image(name: str, column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A column's exact integer image and its validity: longs as they are, doubles in cents, timestamps in µs
    from START_US, strings as their 1-based position in the column's dictionary."""
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    kind, dictionary = next(spec for stream in STREAMS for n, spec in COLUMNS[stream].items() if n == name)
    if dictionary is not None:
        codes = pc.index_in(column, value_set=pa.array(dictionary)).to_numpy(zero_copy_only=False)
        return np.nan_to_num(codes, nan=-1).astype(np.int64) + 1, valid
    if pa.types.is_floating(kind):
        values = pc.fill_null(column, 0.0).to_numpy(zero_copy_only=False)
        return np.round(values * 100).astype(np.int64), valid
    if pa.types.is_timestamp(kind):
        return pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False) - START_US, valid
    return pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64), valid


def fingerprint(truth: pa.Table) -> dict[str, int]:
    """Exact integer aggregates of every cell (mod 2^64): the row count, the key sum, and per value column its
    count, the sum of its integer image and that sum weighted by the row's key (`FINGERPRINT_SQL` computes the same
    over a stitched table). Equal fingerprints mean equal tables but for a negligible chance; unlike a sample,
    they need neither table in memory, so a 30M-key answer is checked in bounded memory."""
    mask = (1 << FINGERPRINT_BITS) - 1
    keys = truth.column("order_id").to_numpy()
    weights = keys % WEIGHT_MODULUS + 1
    out = {"rows": truth.num_rows, "keys": int(keys.sum(dtype=np.uint64)) & mask}
    for name in (f.name for f in TRUTH_SCHEMA if f.name != "order_id"):
        values, valid = _image(name, truth.column(name))
        kept, weight = values[valid].astype(np.uint64), weights[valid].astype(np.uint64)
        out[f"{name}_count"] = int(valid.sum())
        out[f"{name}_sum"] = int(kept.sum(dtype=np.uint64)) & mask
        out[f"{name}_weighted"] = int((kept * weight).sum(dtype=np.uint64)) & mask
    return out


def fingerprint_sql(view: str = "t") -> str:
    """The query computing `fingerprint` over a stitched table (DuckDB; HUGEINT sums, reduced mod 2^64 after)."""
    weight = f"CAST(order_id % {WEIGHT_MODULUS} + 1 AS HUGEINT)"
    parts = ["count(*) AS rows", "sum(CAST(order_id AS HUGEINT)) AS keys"]
    for name in (f.name for f in TRUTH_SCHEMA if f.name != "order_id"):
        kind, dictionary = next(spec for stream in STREAMS for n, spec in COLUMNS[stream].items() if n == name)
        if dictionary is not None:
            values = ", ".join(f"'{v}'" for v in dictionary)
            image = f"CAST(list_position([{values}], {name}) AS HUGEINT)"
        elif pa.types.is_floating(kind):
            image = f"CAST(round({name} * 100) AS HUGEINT)"
        elif pa.types.is_timestamp(kind):
            image = f"CAST(epoch_us({name}) - {START_US} AS HUGEINT)"
        else:
            image = f"CAST({name} AS HUGEINT)"
        parts += [f"count({name}) AS {name}_count", f"sum({image}) AS {name}_sum"]
        parts.append(f"sum({image} * {weight}) AS {name}_weighted")
    return f"SELECT {', '.join(parts)} FROM {view}"


def fingerprint_of_row(row: dict[str, Any]) -> dict[str, int]:
    """A `fingerprint_sql` result row, reduced as `fingerprint` reduces (mod 2^64; a sum of no rows is 0)."""
    mask = (1 << FINGERPRINT_BITS) - 1
    return {name: int(value or 0) & mask for name, value in row.items()}


def save(workload: Workload, folder: Path) -> None:
    """Landing files `landing/<stream>/part-NNNN.parquet` (arrival order) and `truth.parquet`."""
    counters = dict.fromkeys(STREAMS, 0)
    for stream, batch in workload.batches:
        target = folder / "landing" / stream
        target.mkdir(parents=True, exist_ok=True)
        counters[stream] += 1
        pq.write_table(batch, target / f"part-{counters[stream]:04d}.parquet")
    pq.write_table(workload.truth, folder / "truth.parquet")


def load(folder: Path, keys: int, seed: int) -> Workload:
    """The saved workload, in commit order (streams take turns)."""
    batches = [(s, pq.read_table(path)) for s, path in landing_files(folder)]
    return Workload(keys, seed, batches, pq.read_table(folder / "truth.parquet"), {})


def landing_files(folder: Path) -> list[tuple[str, Path]]:
    """The saved landing files in commit order: streams take turns, batch by batch."""
    per_stream = {s: sorted((folder / "landing" / s).glob("part-*.parquet")) for s in STREAMS}
    count = len(per_stream[STREAMS[0]])
    if any(len(files) != count for files in per_stream.values()):
        raise ValueError(f"{folder}: the streams have different numbers of landing files")
    return [(s, per_stream[s][n]) for n in range(count) for s in STREAMS]


def load_truth(folder: Path) -> pa.Table:
    return pq.read_table(folder / "truth.parquet")


def differences(actual: pa.Table, truth: pa.Table, columns: list[str] | None = None, limit: int = 3) -> list[str]:
    """How `actual` (any row order) differs from the truth; empty when they are equal cell by cell."""
    names = ["order_id", *(columns or [f.name for f in TRUTH_SCHEMA if f.name != "order_id"])]
    missing = [n for n in names if n not in actual.column_names]
    if missing:
        return [f"columns missing: {', '.join(missing)}"]
    if actual.num_rows != truth.num_rows:
        return [f"{actual.num_rows} rows, expected {truth.num_rows}"]
    ordered = _normalise_subset(actual, names)
    ordered = ordered.take(pc.sort_indices(ordered.column("order_id")))
    expected = truth.select(names)
    if ordered.equals(expected):
        return []
    problems = []
    for name in names:
        left, right = ordered.column(name), expected.column(name)
        if left.equals(right):
            continue
        same = pc.fill_null(pc.equal(left, right), False).to_numpy(zero_copy_only=False)
        both_null = (pc.is_null(left).to_numpy(zero_copy_only=False)) & (
            pc.is_null(right).to_numpy(zero_copy_only=False)
        )
        bad = np.flatnonzero(~(same | both_null))
        shown = ", ".join(
            f"order_id {expected.column('order_id')[int(i)]}: got {left[int(i)]}, expected {right[int(i)]}"
            for i in bad[:limit]
        )
        problems.append(f"column {name}: {len(bad)} cells differ ({shown})")
    return problems or ["tables differ (types or chunking)"]


def _normalise_subset(table: pa.Table, names: list[str]) -> pa.Table:
    columns = []
    for name in names:
        column = table.column(name)
        kind = TRUTH_SCHEMA.field(name).type
        columns.append(column if column.type == kind else column.cast(kind))
    return pa.table(columns, names=names)
