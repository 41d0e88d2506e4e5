"""Seeded demo data for stitchlake: three streams of an order's life, plus the answer the table must give.

Writes landing files for `configs/demo.yaml` — orders as Parquet, payments as JSON lines, shipments as CSV — with
the awkward parts of real event streams on purpose: updates, deletes and re-creates, late and out-of-order
events (an older event landing in a later file), exact duplicates, payment events with null fields, and keys seen
by only one stream. Next to them it writes the ground truth (`truth.parquet`), computed here with pandas/numpy
from the events alone and never with stitchlake, so the demo can check the stitched table against it (`compare`).

    python -m scripts.demo_data --out demo --orders 300000 --days 3 --seed 7 --files-per-stream 6

Layout of DIR: `landing/{orders,payments,shipments}/part-NNNN.{parquet,json,csv}` (sorted name = arrival order),
`truth.parquet`, `expected_summary.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scripts import ROOT

if TYPE_CHECKING:
    import pandas as pd  # imported where used: the torture test's workers import this module for its constants

#: Default output folder: the repo's demo/ (git-ignored), which is where configs/demo.yaml points.
DEFAULT_OUT = ROOT / "demo"

US = 1_000_000
MINUTE = 60 * US
HOUR = 60 * MINUTE
DAY = 24 * HOUR
#: Orders are placed from this UTC midnight on (fixed, so a seed always gives the same files).
START_US = int(np.datetime64("2026-11-20T00:00:00", "us").astype(np.int64))
FIRST_ORDER_ID = 100_000_001

STREAMS = ("orders", "payments", "shipments")
EXTENSION = {"orders": "parquet", "payments": "json", "shipments": "csv"}
ORDERING = {"orders": "order_ts", "payments": "pay_ts", "shipments": "ship_ts"}
VALUE_COLUMNS = {
    "orders": ("customer_id", "amount", "currency", "order_ts"),
    "payments": ("pay_status", "paid_amount", "pay_ts"),
    "shipments": ("carrier", "ship_status", "ship_ts"),
}
TRUTH_COLUMNS = ("order_id", "order_date", *(c for s in STREAMS for c in VALUE_COLUMNS[s]))
#: Defaults from configs/demo.yaml: what a column reads when its stream never wrote the key (or deleted it).
DEFAULTS = {"currency": "EUR"}
TIMESTAMP = pa.timestamp("us", tz="UTC")
TRUTH_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("order_date", pa.date32()),
        ("customer_id", pa.int64()),
        ("amount", pa.float64()),
        ("currency", pa.string()),
        ("order_ts", TIMESTAMP),
        ("pay_status", pa.string()),
        ("paid_amount", pa.float64()),
        ("pay_ts", TIMESTAMP),
        ("carrier", pa.string()),
        ("ship_status", pa.string()),
        ("ship_ts", TIMESTAMP),
    ]
)

CURRENCIES = np.array(["EUR", "USD", "GBP", "SEK", "PLN"], dtype=object)
CARRIERS = np.array(["DHL", "UPS", "PostNL", "DPD", "GLS"], dtype=object)


# ------------------------------------------------------------------------------------------------ helpers


def _group_cumsum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running sum within runs of equal `group` (rows of a group are contiguous). Integers stay exact."""
    if len(values) == 0:
        return values.copy()
    total = np.cumsum(values)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    counts = np.diff(np.r_[starts, len(values)])
    return total - np.repeat(total[starts] - values[starts], counts)


def _exp_us(rng: np.random.Generator, mean_us: float, size: int) -> np.ndarray:
    """Exponential durations in whole microseconds (so µs timestamps carry sub-second noise)."""
    return rng.exponential(mean_us, size).astype(np.int64)


def _cents(rng: np.random.Generator, size: int) -> np.ndarray:
    """Order amounts: whole cents as doubles, so every value prints and parses back exactly."""
    return np.round(rng.lognormal(3.6, 0.8, size) * 100).clip(99, 2_000_000) / 100


def _iso_ts(us: np.ndarray) -> np.ndarray:
    """µs since epoch -> '2026-11-20T10:00:00.123456Z' (UTC, always six fraction digits)."""
    text = np.datetime_as_string(us.astype("datetime64[us]"), unit="us")
    return np.char.add(text, "Z").astype(object)


def _iso_date(days: np.ndarray) -> np.ndarray:
    return np.datetime_as_string(days.astype("datetime64[D]"), unit="D").astype(object)


# ------------------------------------------------------------------------------------------------ events


@dataclass(frozen=True)
class Orders:
    """The per-order facts every stream derives its events from (one row per order)."""

    order_id: np.ndarray
    t0: np.ndarray  # µs, the time the order was placed: its first orders event
    order_date: np.ndarray  # days since epoch, the UTC date of t0
    customer_id: np.ndarray
    amount: np.ndarray
    currency: np.ndarray
    #: Marketplace orders never reach the orders stream: half are seen only by payments, half only by shipments.
    marketplace: np.ndarray
    paid_elsewhere: np.ndarray


def _orders(rng: np.random.Generator, n: int, days: int) -> Orders:
    # Ids increase with placement time, with gaps, as a real sequence would.
    t0 = START_US + np.sort(rng.integers(0, days * DAY, n))
    order_id = FIRST_ORDER_ID + np.cumsum(rng.integers(1, 4, n))
    marketplace = rng.random(n) < 0.02
    return Orders(
        order_id=order_id.astype(np.int64),
        t0=t0.astype(np.int64),
        order_date=(t0 // DAY).astype(np.int64),
        customer_id=rng.integers(1, max(n // 3, 2), n).astype(np.int64),
        amount=_cents(rng, n),
        currency=rng.choice(CURRENCIES, n, p=[0.7, 0.12, 0.1, 0.05, 0.03]),
        marketplace=marketplace,
        paid_elsewhere=marketplace & (rng.random(n) < 0.5),
    )


def _slots(present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order index, slot) for every True cell, ordered by order then slot: one event per cell."""
    order, slot = np.nonzero(present)
    return order, slot


def _orders_events(rng: np.random.Generator, o: Orders) -> tuple[pd.DataFrame, np.ndarray]:
    """Create, up to three updates, maybe a delete, maybe a re-create after it. Returns events and their kinds."""
    import pandas as pd

    n = len(o.order_id)
    in_stream = ~o.marketplace
    updates = rng.choice(4, n, p=[0.78, 0.16, 0.05, 0.01])
    deleted = in_stream & (rng.random(n) < 0.03)
    recreated = deleted & (rng.random(n) < 0.25)
    # slots: 0 create, 1-3 updates, 4 delete, 5 re-create
    present = np.column_stack(
        [
            in_stream,
            in_stream & (updates >= 1),
            in_stream & (updates >= 2),
            in_stream & (updates >= 3),
            deleted,
            recreated,
        ]
    )
    idx, slot = _slots(present)
    m = len(idx)
    gap = np.where(slot == 0, 0, US + _exp_us(rng, 25 * MINUTE, m))
    gap = np.where(slot == 4, MINUTE + _exp_us(rng, 3 * HOUR, m), gap)
    gap = np.where(slot == 5, MINUTE + _exp_us(rng, 6 * HOUR, m), gap)
    ts = o.t0[idx] + _group_cumsum(gap, idx)

    # Amount and currency: a snapshot per event; an update changes the amount (60%) or currency (10%).
    new_amount = (slot == 0) | (slot == 5) | ((slot >= 1) & (slot <= 3) & (rng.random(m) < 0.6))
    amount = pd.Series(np.where(new_amount, _cents(rng, m), np.nan))
    amount[slot == 0] = o.amount[idx[slot == 0]]
    amount = amount.groupby(idx).ffill().to_numpy()
    new_currency = (slot >= 1) & (slot <= 3) & (rng.random(m) < 0.1)
    currency = pd.Series(np.where(slot == 0, o.currency[idx], None), dtype=object)
    currency[new_currency] = rng.choice(CURRENCIES, int(new_currency.sum()))
    currency = currency.groupby(idx).ffill().to_numpy(dtype=object)
    is_delete = slot == 4
    amount[is_delete] = np.nan  # a delete carries the key, the customer and its time, nothing else
    currency[is_delete] = None
    op = np.where(is_delete, "D", np.where((slot == 0) | (slot == 5), "I", "U")).astype(object)
    events = pd.DataFrame(
        {
            "order_id": o.order_id[idx],
            "order_date": o.order_date[idx],
            "customer_id": o.customer_id[idx],
            "amount": amount,
            "currency": currency,
            "order_ts": ts,
            "op": op,
        }
    )
    return events, slot


def _payments_events(rng: np.random.Generator, o: Orders, deleted: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """pending -> paid | failed -> refunded, plus amount corrections that carry no status (nulls: ignore).

    Returns the events and, per order, whether it ended up paid and not refunded (those get shipped).
    """
    import pandas as pd

    n = len(o.order_id)
    pays = np.where(o.marketplace, ~o.paid_elsewhere, rng.random(n) < 0.8)
    pending = pays & (rng.random(n) < 0.35)
    paid = pays & (rng.random(n) < 0.88)
    refunded = paid & (rng.random(n) < np.where(deleted, 0.5, 0.04))
    adjusted = paid & (rng.random(n) < 0.03)
    # slots: 0 pending, 1 paid/failed, 2 refunded, 3 amount correction
    idx, slot = _slots(np.column_stack([pending, pays, refunded, adjusted]))
    m = len(idx)
    mean_gap = np.array([2 * MINUTE, 8 * MINUTE, 12 * HOUR, HOUR])[slot]
    ts = o.t0[idx] + _group_cumsum(US + (rng.exponential(1.0, m) * mean_gap).astype(np.int64), idx)
    status = np.array(["pending", "paid", "refunded", None], dtype=object)[slot]
    status[(slot == 1) & ~paid[idx]] = "failed"
    amount = o.amount[idx].copy()
    # Status-only notifications: a later event with the status set but no amount; `nulls: ignore` keeps the old.
    amount[(slot == 1) & ((~paid[idx]) | (rng.random(m) < 0.2))] = np.nan
    amount[(slot == 2) & (rng.random(m) < 0.5)] = np.nan
    amount[(slot == 2) & ~np.isnan(amount)] = 0.0
    corrected = slot == 3
    amount[corrected] = np.round(o.amount[idx[corrected]] * rng.uniform(0.9, 1.1, int(corrected.sum())), 2)
    events = pd.DataFrame(
        {
            "order_id": o.order_id[idx],
            "order_date": o.order_date[idx],
            "pay_status": status,
            "paid_amount": amount,
            "pay_ts": ts,
        }
    )
    return events, paid & ~refunded & ~o.marketplace


def _shipments_events(rng: np.random.Generator, o: Orders, pays: np.ndarray, shippable: np.ndarray) -> pd.DataFrame:
    """label_created -> in_transit -> delivered for paid orders, and a few cash-on-delivery ones with no payment."""
    import pandas as pd

    n = len(o.order_id)
    ships = (shippable & (rng.random(n) < 0.85)) | (~pays & (rng.random(n) < 0.05)) | o.paid_elsewhere
    transit = ships & (rng.random(n) < 0.6)
    delivered = transit & (rng.random(n) < 0.6)
    idx, slot = _slots(np.column_stack([ships, transit, delivered]))
    m = len(idx)
    minimum = np.array([HOUR, 2 * HOUR, 4 * HOUR])[slot]
    mean_gap = np.array([6 * HOUR, 12 * HOUR, 20 * HOUR])[slot]
    ts = o.t0[idx] + _group_cumsum(minimum + (rng.exponential(1.0, m) * mean_gap).astype(np.int64), idx)
    carrier = rng.choice(CARRIERS, n)[idx]
    carrier[(slot > 0) & (rng.random(m) < 0.04)] = None  # scanner events without a carrier: overwrite keeps null
    events = pd.DataFrame(
        {
            "order_id": o.order_id[idx],
            "order_date": o.order_date[idx],
            "carrier": carrier,
            "ship_status": np.array(["label_created", "in_transit", "delivered"], dtype=object)[slot],
            "ship_ts": ts,
        }
    )
    return events


@dataclass
class Arrived:
    """A stream's events in arrival order, with their landing file and position, and what was done to them."""

    events: pd.DataFrame  # arrival order; columns: the event's, plus `file` and `pos`
    late_injected: int
    duplicates: int
    duplicates_later_file: int


def _arrive(
    rng: np.random.Generator,
    events: pd.DataFrame,
    ordering: str,
    files: int,
    late_share: float,
    forced_late: np.ndarray | None = None,
) -> Arrived:
    """Give every event an arrival time (small delay; some hours late), add duplicates, and cut into files."""
    m = len(events)
    arrival = events[ordering].to_numpy() + US + _exp_us(rng, 90 * US, m)
    late = rng.random(m) < late_share
    if forced_late is not None:
        late |= forced_late
    arrival[late] = events[ordering].to_numpy()[late] + rng.integers(4 * HOUR, 30 * HOUR, int(late.sum()))
    if forced_late is not None:
        # Land after the event that follows it (for orders: the delete), however late that one was.
        following = np.flatnonzero(forced_late) + 1
        delay = rng.integers(HOUR, 20 * HOUR, len(following))
        arrival[forced_late] = np.maximum(arrival[forced_late], arrival[following] + delay)

    # Exact duplicates (at-least-once delivery): same content again, soon (same file) or much later.
    dup = np.flatnonzero(rng.random(m) < 0.015)
    later = rng.random(len(dup)) < 0.4
    dup_arrival = arrival[dup] + np.where(
        later, rng.integers(6 * HOUR, 30 * HOUR, len(dup)), rng.integers(1, 5 * MINUTE, len(dup))
    )
    rows = np.r_[np.arange(m), dup]
    arrival = np.r_[arrival, dup_arrival]
    order = np.lexsort((np.arange(len(rows)), arrival))
    out = events.iloc[rows[order]].reset_index(drop=True)
    out["pos"] = np.arange(len(out), dtype=np.int64)
    out["file"] = (out["pos"].to_numpy() * files // max(len(out), 1)).astype(np.int64)
    # Where did each duplicate land relative to its original?
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows))
    file_of = rank * files // max(len(rows), 1)
    later_file = int(np.count_nonzero(file_of[m:] > file_of[dup]))
    return Arrived(out, int(late.sum()), len(dup), later_file)


# ------------------------------------------------------------------------------------------------ writing


def _clear(folder: Path, extension: str) -> None:
    """Remove this generator's own earlier output (part-*.ext) so a smaller re-run leaves no stale files."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"part-*.{extension}"):
        old.unlink()


def _chunks(events: pd.DataFrame, files: int) -> list[tuple[int, pd.DataFrame]]:
    """Each landing file's rows, in arrival order; a file may be empty (tiny runs), but it is still written."""
    number = events["file"].to_numpy()
    return [(f, events[number == f]) for f in range(files)]


def _file_name(number: int, extension: str) -> str:
    return f"part-{number + 1:04d}.{extension}"


def _write_orders(events: pd.DataFrame, folder: Path, files: int) -> None:
    _clear(folder, "parquet")
    for number, chunk in _chunks(events, files):
        amount = chunk["amount"].to_numpy()
        table = pa.table(
            {
                "order_id": pa.array(chunk["order_id"].to_numpy(), pa.int64()),
                "order_date": pa.array(chunk["order_date"].to_numpy().astype("datetime64[D]"), pa.date32()),
                "customer_id": pa.array(chunk["customer_id"].to_numpy(), pa.int64()),
                "amount": pa.array(amount, pa.float64(), mask=np.isnan(amount)),
                "currency": pa.array(chunk["currency"].to_numpy(dtype=object), pa.string()),
                "order_ts": pa.array(chunk["order_ts"].to_numpy().astype("datetime64[us]"), TIMESTAMP),
                "op": pa.array(chunk["op"].to_numpy(dtype=object), pa.string()),
            }
        )
        pq.write_table(table, folder / _file_name(int(number), "parquet"))


def _write_payments(events: pd.DataFrame, folder: Path, files: int) -> None:
    _clear(folder, "json")
    for number, chunk in _chunks(events, files):
        dates = _iso_date(chunk["order_date"].to_numpy())
        stamps = _iso_ts(chunk["pay_ts"].to_numpy())
        status = ["null" if s is None else f'"{s}"' for s in chunk["pay_status"].to_numpy(dtype=object)]
        amount = ["null" if a != a else repr(float(a)) for a in chunk["paid_amount"].to_numpy()]
        lines = [
            f'{{"order_id": {k}, "order_date": "{d}", "pay_status": {s}, "paid_amount": {a}, "pay_ts": "{t}"}}\n'
            for k, d, s, a, t in zip(chunk["order_id"].to_numpy(), dates, status, amount, stamps, strict=True)
        ]
        (folder / _file_name(int(number), "json")).write_text("".join(lines), encoding="utf-8")


def _write_shipments(events: pd.DataFrame, folder: Path, files: int) -> None:
    import pandas as pd

    _clear(folder, "csv")
    for number, chunk in _chunks(events, files):
        frame = pd.DataFrame(
            {
                "order_id": chunk["order_id"].to_numpy(),
                "order_date": _iso_date(chunk["order_date"].to_numpy()),
                "carrier": chunk["carrier"].to_numpy(dtype=object),
                "ship_status": chunk["ship_status"].to_numpy(dtype=object),
                "ship_ts": _iso_ts(chunk["ship_ts"].to_numpy()),
            }
        )
        frame.to_csv(folder / _file_name(int(number), "csv"), index=False)


# ------------------------------------------------------------------------------------------------ truth


def _winners(events: pd.DataFrame, ordering: str) -> pd.DataFrame:
    """Per key, the event with the greatest (ordering value, arrival position): design.md §2's winning event."""
    ranked = events.sort_values(["order_id", ordering, "pos"], kind="stable")
    return ranked.drop_duplicates("order_id", keep="last").set_index("order_id")


def _ignore_nulls(events: pd.DataFrame, ordering: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """`nulls: ignore` without deletes: per column, the highest-version non-null value (pandas' last skips NA)."""
    ranked = events.sort_values(["order_id", ordering, "pos"], kind="stable")
    return ranked.groupby("order_id", sort=True)[list(columns)].last()


def _column(keys: np.ndarray, group: pd.DataFrame, name: str, kind: pa.DataType) -> pa.Array:
    """`group[name]` aligned to `keys`; keys the group lacks are null."""
    values = group[name].reindex(keys)
    if pa.types.is_timestamp(kind):
        raw = values.to_numpy(dtype="float64")
        missing = np.isnan(raw)
        stamps = np.where(missing, 0, raw).astype(np.int64).astype("datetime64[us]")
        return pa.array(stamps, kind, mask=missing)
    if pa.types.is_integer(kind):
        raw = values.to_numpy(dtype="float64")  # ids < 2**53: exact
        missing = np.isnan(raw)
        return pa.array(np.where(missing, 0, raw).astype(np.int64), kind, mask=missing)
    if pa.types.is_floating(kind):
        raw = values.to_numpy(dtype="float64")
        return pa.array(raw, kind, mask=np.isnan(raw))
    objects = values.to_numpy(dtype=object)
    return pa.array([None if v is None or v != v else v for v in objects], kind)


def ground_truth(orders: pd.DataFrame, payments: pd.DataFrame, shipments: pd.DataFrame) -> pa.Table:
    """The wide table design.md §2 promises for these events (each frame: the events with their arrival `pos`).

    orders: `nulls: overwrite` with deletes — the winner decides; a winning delete tombstones the group, so an
    older event cannot resurrect it and a newer one (the winner then) can. payments: `nulls: ignore`.
    shipments: overwrite. A key is in the table if any group is live; `currency` reads its default when the
    orders group is absent or deleted.
    """
    import pandas as pd

    order_win = _winners(orders, "order_ts")
    order_live = order_win[order_win["op"] != "D"]
    pay = _ignore_nulls(payments, "pay_ts", VALUE_COLUMNS["payments"])
    ship = _winners(shipments, "ship_ts")
    keys = np.unique(np.r_[order_live.index.to_numpy(), pay.index.to_numpy(), ship.index.to_numpy()]).astype(np.int64)

    dates = pd.concat(
        [
            orders[["order_id", "order_date"]],
            payments[["order_id", "order_date"]],
            shipments[["order_id", "order_date"]],
        ]
    )
    per_key = dates.drop_duplicates()
    if per_key["order_id"].duplicated().any():
        raise AssertionError("an order_id carries two different order_date values")
    date_of = per_key.set_index("order_id")["order_date"].reindex(keys).to_numpy().astype(np.int64)

    arrays: dict[str, pa.Array] = {
        "order_id": pa.array(keys, pa.int64()),
        "order_date": pa.array(date_of.astype("datetime64[D]"), pa.date32()),
    }
    for stream, group in (("orders", order_live), ("payments", pay), ("shipments", ship)):
        for name in VALUE_COLUMNS[stream]:
            arrays[name] = _column(keys, group, name, TRUTH_SCHEMA.field(name).type)
    absent = ~np.isin(keys, order_live.index.to_numpy())
    for name, default in DEFAULTS.items():
        column = arrays[name].to_numpy(zero_copy_only=False).astype(object)
        column[absent] = default
        arrays[name] = pa.array(column, TRUTH_SCHEMA.field(name).type)
    return pa.table([arrays[f.name] for f in TRUTH_SCHEMA], schema=TRUTH_SCHEMA)


# ------------------------------------------------------------------------------------------------ summary


def _late(events: pd.DataFrame, ordering: str) -> tuple[int, int]:
    """Events arriving after a newer event of the same key: (anywhere before it, in an earlier file)."""
    frame = events[["order_id", ordering, "pos", "file"]].sort_values(["order_id", "pos"], kind="stable")
    seen = frame.groupby("order_id")[ordering].cummax()
    before = seen.groupby(frame["order_id"]).shift(1)
    late = int((before > frame[ordering]).sum())
    per_file = frame.groupby(["order_id", "file"], sort=True)[ordering].max().reset_index()
    per_file["earlier"] = per_file.groupby("order_id")[ordering].cummax().groupby(per_file["order_id"]).shift(1)
    joined = frame.merge(per_file[["order_id", "file", "earlier"]], on=["order_id", "file"], how="left")
    return late, int((joined["earlier"] > joined[ordering]).sum())


def _older_after_delete(orders: pd.DataFrame) -> int:
    """Orders events older than a delete of their key that arrive after it: they must not resurrect it."""
    deletes = orders[orders["op"] == "D"].groupby("order_id").agg(d_ts=("order_ts", "max"), d_pos=("pos", "min"))
    joined = orders[orders["op"] != "D"].join(deletes, on="order_id", how="inner")
    return int(((joined["order_ts"] < joined["d_ts"]) & (joined["pos"] > joined["d_pos"])).sum())


def _summary(arrived: dict[str, Arrived], truth: pa.Table, params: dict[str, Any], seconds: float) -> dict[str, Any]:
    keys = {s: set(arrived[s].events["order_id"].unique().tolist()) for s in STREAMS}
    orders, payments = arrived["orders"].events, arrived["payments"].events
    winners = _winners(orders, "order_ts")
    late = {s: _late(arrived[s].events, ORDERING[s]) for s in STREAMS}
    truth_keys = set(truth.column("order_id").to_pylist())
    return {
        "params": params,
        "events": {s: len(arrived[s].events) for s in STREAMS},
        "events_total": sum(len(arrived[s].events) for s in STREAMS),
        "files_per_stream": params["files_per_stream"],
        "late": {s: late[s][0] for s in STREAMS},
        "late_in_later_file": {s: late[s][1] for s in STREAMS},
        "late_injected": {s: arrived[s].late_injected for s in STREAMS},
        "duplicates": {s: arrived[s].duplicates for s in STREAMS},
        "duplicates_in_later_file": {s: arrived[s].duplicates_later_file for s in STREAMS},
        "deletes": {
            "delete_events": int((orders["op"] == "D").sum()),
            "orders_deleted": int((winners["op"] == "D").sum()),
            "orders_recreated": int(orders[orders["op"] == "I"].groupby("order_id")["order_ts"].nunique().gt(1).sum()),
            "older_events_arriving_after_delete": _older_after_delete(orders),
        },
        "payments_nulls": {
            "pay_status_null": int(payments["pay_status"].isna().sum()),
            "paid_amount_null": int(payments["paid_amount"].isna().sum()),
            "status_set_amount_null": int((payments["pay_status"].notna() & payments["paid_amount"].isna()).sum()),
        },
        "keys": {
            **{s: len(keys[s]) for s in STREAMS},
            "only_payments": len(keys["payments"] - keys["orders"] - keys["shipments"]),
            "only_shipments": len(keys["shipments"] - keys["orders"] - keys["payments"]),
            "orders_without_payments": len(keys["orders"] - keys["payments"]),
            "truth": len(truth_keys),
            "deleted_and_absent": len(keys["orders"] - truth_keys),
        },
        "seconds": round(seconds, 2),
    }


# ------------------------------------------------------------------------------------------------ main


def generate(
    out: str | Path = DEFAULT_OUT, orders: int = 300_000, days: int = 3, seed: int = 7, files_per_stream: int = 6
) -> dict[str, Any]:
    """Write the landing files, `truth.parquet` and `expected_summary.json` under `out`; return the summary."""
    if orders < 1 or days < 1 or files_per_stream < 1:
        raise ValueError("--orders, --days and --files-per-stream must be at least 1")
    started = time.perf_counter()
    out = Path(out)
    rng = np.random.default_rng(seed)
    facts = _orders(rng, orders, days)
    order_events, order_slot = _orders_events(rng, facts)
    deleted = np.isin(facts.order_id, order_events.loc[order_events["op"] == "D", "order_id"].to_numpy())
    pay_events, shippable = _payments_events(rng, facts, deleted)
    pays = np.isin(facts.order_id, pay_events["order_id"].to_numpy())
    ship_events = _shipments_events(rng, facts, pays, shippable)

    # For some deletes, the event just before the delete arrives after it: it must not bring the order back.
    before_delete = np.r_[order_slot[1:] == 4, False] & (rng.random(len(order_slot)) < 0.35)
    arrived = {
        "orders": _arrive(rng, order_events, "order_ts", files_per_stream, 0.015, before_delete),
        "payments": _arrive(rng, pay_events, "pay_ts", files_per_stream, 0.03),
        "shipments": _arrive(rng, ship_events, "ship_ts", files_per_stream, 0.03),
    }
    landing = out / "landing"
    _write_orders(arrived["orders"].events, landing / "orders", files_per_stream)
    _write_payments(arrived["payments"].events, landing / "payments", files_per_stream)
    _write_shipments(arrived["shipments"].events, landing / "shipments", files_per_stream)

    truth = ground_truth(arrived["orders"].events, arrived["payments"].events, arrived["shipments"].events)
    pq.write_table(truth, out / "truth.parquet")
    params = {"orders": orders, "days": days, "seed": seed, "files_per_stream": files_per_stream}
    summary = _summary(arrived, truth, params, time.perf_counter() - started)
    (out / "expected_summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


# ------------------------------------------------------------------------------------------------ compare


def _normalise(table: pa.Table, name: str, kind: pa.DataType) -> pa.ChunkedArray:
    """A column of `table` in the truth's type: timestamps as UTC µs (naive ones are taken as UTC)."""
    column = table.column(name)
    if pa.types.is_timestamp(kind) and pa.types.is_timestamp(column.type) and column.type.tz is None:
        return column.cast(pa.timestamp("us")).cast(kind)
    return column if column.type == kind else column.cast(kind)


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)


def compare(actual: pa.Table, truth_path: str | Path, limit: int = 5) -> list[str]:
    """Differences between a stitched table and the truth, for humans; an empty list means they match.

    Rows are matched by order_id; floats compare exactly (they pass through unchanged); extra columns in
    `actual` (none are expected) are ignored.
    """
    import pyarrow.compute as pc

    truth = pq.read_table(truth_path)
    problems: list[str] = []
    missing_columns = [f.name for f in truth.schema if f.name not in actual.column_names]
    if missing_columns:
        return [f"columns missing from the table: {', '.join(missing_columns)}"]
    try:
        columns = {f.name: _normalise(actual, f.name, f.type) for f in truth.schema}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        return [f"a column has an unexpected type: {exc}"]
    actual = pa.table(columns)
    null_keys = actual.column("order_id").null_count
    if null_keys:
        problems.append(f"{null_keys} rows have a null order_id")
        actual = actual.filter(pc.is_valid(actual.column("order_id")))
    actual_ids = actual.column("order_id").to_numpy()
    truth_ids = truth.column("order_id").to_numpy()
    unique_ids, counts = np.unique(actual_ids, return_counts=True)
    if (counts > 1).any():
        repeated = unique_ids[counts > 1]
        problems.append(f"{len(repeated)} keys appear more than once, e.g. order_id {repeated[:limit].tolist()}")
    missing = np.setdiff1d(truth_ids, actual_ids)
    extra = np.setdiff1d(actual_ids, truth_ids)
    if len(missing):
        problems.append(f"{len(missing)} keys missing from the table, e.g. order_id {missing[:limit].tolist()}")
    if len(extra):
        problems.append(f"{len(extra)} keys in the table that should not be, e.g. order_id {extra[:limit].tolist()}")

    common = np.intersect1d(truth_ids, unique_ids)
    first = np.unique(actual_ids, return_index=True)[1]  # one row per key, for comparing cells
    actual_rows = first[np.searchsorted(unique_ids, common)]
    truth_rows = np.searchsorted(truth_ids, common)
    left = truth.take(pa.array(truth_rows))
    right = actual.take(pa.array(actual_rows))
    for name in truth.column_names[1:]:
        a, b = left.column(name), right.column(name)
        a_null, b_null = pc.is_null(a).to_numpy(zero_copy_only=False), pc.is_null(b).to_numpy(zero_copy_only=False)
        equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
        differs = ~((a_null & b_null) | equal)
        bad = np.flatnonzero(differs)
        if len(bad) == 0:
            continue
        shown = ", ".join(
            f"order_id {common[i]}: expected {_show(a[int(i)].as_py())}, got {_show(b[int(i)].as_py())}"
            for i in bad[:limit]
        )
        problems.append(f"column {name}: {len(bad)} cells differ ({shown})")
    return problems


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    events, keys, deletes = summary["events"], summary["keys"], summary["deletes"]
    print(f"demo data in {out} ({summary['seconds']} s)")
    for stream in STREAMS:
        print(
            f"  {stream:<9} {events[stream]:>9,} events in {summary['files_per_stream']} {EXTENSION[stream]} files,"
            f" {keys[stream]:>8,} keys, {summary['late'][stream]:>6,} late"
            f" ({summary['late_in_later_file'][stream]:,} in a later file), {summary['duplicates'][stream]:>6,} dups"
        )
    print(
        f"  {summary['events_total']:,} events; {deletes['delete_events']:,} deletes "
        f"({deletes['orders_recreated']:,} re-created, {deletes['older_events_arriving_after_delete']:,} older "
        f"events after a delete); {keys['only_payments']:,} payment-only and {keys['only_shipments']:,} "
        f"shipment-only keys"
    )
    print(f"  truth: {keys['truth']:,} keys -> {out / 'truth.parquet'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default: the repo's demo/)")
    parser.add_argument("--orders", type=int, default=300_000, help="orders (~3.3 events each over all streams)")
    parser.add_argument("--days", type=int, default=3, help="days over which orders are placed")
    parser.add_argument("--seed", type=int, default=7, help="random seed: same seed, same files")
    parser.add_argument("--files-per-stream", type=int, default=6, help="landing files per stream")
    args = parser.parse_args(argv)
    try:
        summary = generate(args.out, args.orders, args.days, args.seed, args.files_per_stream)
    except ValueError as exc:
        parser.error(str(exc))
    _print_summary(summary, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
