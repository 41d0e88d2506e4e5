"""The demo generator: its landing files are readable, realistic on purpose, and its truth is right.

The truth is checked against a brute-force model written here in plain Python over the events read back from
the landing files (not the generator's internals), so a shared mistake would have to be made twice.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from scripts import demo_data
from tests.support.demo_landing import FILES, landing_files, read_files

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC


# ------------------------------------------------------------------------------------ reading the files back


def _date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(value)


def _stamp(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return dt.datetime.fromisoformat(value).astimezone(UTC)


def _read_events(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every stream's events in arrival order (sorted file name, then row), with `file` and `pos` added."""
    events: dict[str, list[dict[str, Any]]] = {}
    readers = {
        "orders": ("parquet", pq.read_table),
        "payments": ("json", pajson.read_json),
        "shipments": (
            "csv",
            lambda p: pacsv.read_csv(
                p,
                convert_options=pacsv.ConvertOptions(
                    column_types={
                        "order_id": pa.int64(),
                        "carrier": pa.string(),
                        "ship_status": pa.string(),
                        "ship_ts": pa.string(),
                        "order_date": pa.string(),
                    },
                    strings_can_be_null=True,
                ),
            ),
        ),
    }
    for stream, (extension, read) in readers.items():
        rows: list[dict[str, Any]] = []
        for number, path in enumerate(landing_files(out, stream, extension)):
            for row in read(path).to_pylist():
                row["order_date"] = _date(row["order_date"])
                ordering = demo_data.ORDERING[stream]
                row[ordering] = _stamp(row[ordering])
                row["file"] = number
                row["pos"] = len(rows)
                rows.append(row)
        events[stream] = rows
    return events


def _brute_force(events: dict[str, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """design.md §2, one event at a time: max version per key and stream, per column for `nulls: ignore`."""
    by_key: dict[str, dict[int, list[dict[str, Any]]]] = {s: defaultdict(list) for s in events}
    dates: dict[int, dt.date] = {}
    for stream, rows in events.items():
        for row in rows:
            by_key[stream][row["order_id"]].append(row)
            dates[row["order_id"]] = row["order_date"]

    def version(stream: str, row: dict[str, Any]) -> tuple[Any, ...]:
        return (row[demo_data.ORDERING[stream]], row["pos"])

    table: dict[int, dict[str, Any]] = {}
    for key in sorted(dates):
        out: dict[str, Any] = {"order_id": key, "order_date": dates[key]}
        live = False
        # orders: overwrite, deletes tombstone the group
        rows = by_key["orders"].get(key, [])
        winner = max(rows, key=lambda r: version("orders", r)) if rows else None
        if winner is not None and winner["op"] != "D":
            live = True
            out.update({c: winner[c] for c in demo_data.VALUE_COLUMNS["orders"]})
        else:
            out.update({c: None for c in demo_data.VALUE_COLUMNS["orders"]})
            out["currency"] = "EUR"
        # payments: ignore nulls, per column the newest non-null value
        rows = by_key["payments"].get(key, [])
        if rows:
            live = True
        for column in demo_data.VALUE_COLUMNS["payments"]:
            best = None
            for row in rows:
                if row[column] is not None and (best is None or version("payments", row) > version("payments", best)):
                    best = row
            out[column] = None if best is None else best[column]
        # shipments: overwrite, no deletes
        rows = by_key["shipments"].get(key, [])
        winner = max(rows, key=lambda r: version("shipments", r)) if rows else None
        if winner is not None:
            live = True
        for column in demo_data.VALUE_COLUMNS["shipments"]:
            out[column] = None if winner is None else winner[column]
        if live:
            table[key] = out
    return table


# ------------------------------------------------------------------------------------------------ tests


def test_files_exist_in_three_formats_and_read_back(generated: tuple[Path, dict[str, Any]]) -> None:
    out, summary = generated
    for stream, extension in demo_data.EXTENSION.items():
        files = landing_files(out, stream, extension)
        assert [f.name for f in files] == [f"part-{i:04d}.{extension}" for i in range(1, FILES + 1)]
        assert len(read_files(files, extension)) == summary["events"][stream]
    orders = pq.read_table(landing_files(out, "orders", "parquet")[0])
    assert orders.schema.field("order_ts").type == pa.timestamp("us", tz="UTC")
    assert orders.schema.field("order_date").type == pa.date32()
    assert set(orders.column_names) == {"order_id", "order_date", "customer_id", "amount", "currency", "order_ts", "op"}
    payments = pajson.read_json(landing_files(out, "payments", "json")[0])
    assert set(payments.column_names) == {"order_id", "order_date", "pay_status", "paid_amount", "pay_ts"}
    assert all(s.endswith("Z") and "T" in s for s in payments.column("pay_ts").to_pylist())
    header = landing_files(out, "shipments", "csv")[0].read_text().splitlines()[0]
    assert header == "order_id,order_date,carrier,ship_status,ship_ts"
    assert (out / "truth.parquet").is_file() and (out / "expected_summary.json").is_file()


def test_truth_matches_brute_force_model(generated: tuple[Path, dict[str, Any]]) -> None:
    out, summary = generated
    truth = pq.read_table(out / "truth.parquet")
    assert truth.schema == demo_data.TRUTH_SCHEMA
    assert truth.column_names == list(demo_data.TRUTH_COLUMNS)
    ids = truth.column("order_id").to_pylist()
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    expected = _brute_force(_read_events(out))
    actual = {row["order_id"]: row for row in truth.to_pylist()}
    assert actual.keys() == expected.keys()
    mismatches = [(k, actual[k], expected[k]) for k in expected if actual[k] != expected[k]]
    assert not mismatches, mismatches[:3]
    assert summary["keys"]["truth"] == len(expected)


def test_the_hard_cases_really_occur(generated: tuple[Path, dict[str, Any]]) -> None:
    out, _ = generated
    events = _read_events(out)
    truth = {row["order_id"]: row for row in pq.read_table(out / "truth.parquet").to_pylist()}

    def content(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(v for k, v in row.items() if k not in ("file", "pos"))

    for stream, rows in events.items():
        ordering = demo_data.ORDERING[stream]
        newest: dict[int, dt.datetime] = {}
        newest_file: dict[int, tuple[int, dt.datetime]] = {}
        late = late_in_later_file = 0
        for row in rows:
            key = row["order_id"]
            if key in newest and newest[key] > row[ordering]:
                late += 1
            seen = newest_file.get(key)
            if seen is not None and seen[0] < row["file"] and seen[1] > row[ordering]:
                late_in_later_file += 1
            newest[key] = max(newest.get(key, row[ordering]), row[ordering])
            if seen is None or seen[1] < row[ordering]:
                newest_file[key] = (row["file"], row[ordering])
        assert late > 0 and late_in_later_file > 0, stream

        # Exact duplicates, some in a later file; otherwise the ordering value is unique per key (no ties).
        first_file: dict[tuple[Any, ...], int] = {}
        duplicates = later = 0
        by_version: dict[tuple[int, dt.datetime], tuple[Any, ...]] = {}
        for row in rows:
            body = content(row)
            if body in first_file:
                duplicates += 1
                later += row["file"] > first_file[body]
            else:
                first_file[body] = row["file"]
            version = (row["order_id"], row[ordering])
            assert by_version.setdefault(version, body) == body, f"{stream}: a tie between different events"
        assert duplicates > 0 and later > 0, stream

    # Deletes: tombstoned orders are gone (unless another stream keeps the key), an older event arriving after
    # the delete does not resurrect, a newer one (re-create) does.
    orders = events["orders"]
    deletes = {r["order_id"]: r for r in orders if r["op"] == "D"}
    assert deletes
    older_after = [
        r
        for r in orders
        if r["order_id"] in deletes
        and r["op"] != "D"
        and r["order_ts"] < deletes[r["order_id"]]["order_ts"]
        and r["pos"] > deletes[r["order_id"]]["pos"]
    ]
    assert older_after
    recreated = [r for r in orders if r["order_id"] in deletes and r["order_ts"] > deletes[r["order_id"]]["order_ts"]]
    assert recreated and all(truth[r["order_id"]]["customer_id"] is not None for r in recreated)
    gone = [
        k for k, r in deletes.items() if not any(o["order_id"] == k and o["order_ts"] > r["order_ts"] for o in orders)
    ]
    assert any(k not in truth for k in gone)
    assert any(k in truth and truth[k]["amount"] is None and truth[k]["currency"] == "EUR" for k in gone)

    # Payments with null fields, where `nulls: ignore` keeps an older amount.
    payments = events["payments"]
    assert any(r["pay_status"] is None for r in payments)
    status_only = [r for r in payments if r["pay_status"] is not None and r["paid_amount"] is None]
    assert any(
        any(
            p["order_id"] == r["order_id"] and p["pay_ts"] < r["pay_ts"] and p["paid_amount"] is not None
            for p in payments
        )
        for r in status_only
    )

    # Keys seen by one stream only, and orders without payments.
    keys = {stream: {r["order_id"] for r in rows} for stream, rows in events.items()}
    assert keys["payments"] - keys["orders"] - keys["shipments"]
    assert keys["shipments"] - keys["orders"] - keys["payments"]
    assert keys["orders"] - keys["payments"]
    assert any(
        truth[k]["currency"] == "EUR" and truth[k]["customer_id"] is None for k in keys["payments"] - keys["orders"]
    )

    # order_date is the order's date, the same in every stream.
    dates: dict[int, set[dt.date]] = defaultdict(set)
    for rows in events.values():
        for row in rows:
            dates[row["order_id"]].add(row["order_date"])
    assert all(len(d) == 1 for d in dates.values())
    first_ts: dict[int, dt.datetime] = {}
    for row in orders:
        first_ts[row["order_id"]] = min(first_ts.get(row["order_id"], row["order_ts"]), row["order_ts"])
    assert all(next(iter(dates[k])) == ts.date() for k, ts in first_ts.items())


def test_summary_counts_match_the_files(generated: tuple[Path, dict[str, Any]]) -> None:
    out, summary = generated
    events = _read_events(out)
    assert summary["events"] == {s: len(rows) for s, rows in events.items()}
    assert summary["deletes"]["delete_events"] == sum(r["op"] == "D" for r in events["orders"])
    assert summary["keys"]["payments"] == len({r["order_id"] for r in events["payments"]})
    assert all(summary[name][s] > 0 for name in ("late", "late_in_later_file", "duplicates") for s in events)


def test_compare_reports_differences(generated: tuple[Path, dict[str, Any]]) -> None:
    out, _ = generated
    path = out / "truth.parquet"
    truth = pq.read_table(path)
    assert demo_data.compare(truth, path) == []
    # Column order, extra columns and naive-UTC timestamps do not matter.
    shuffled = truth.select(list(reversed(truth.column_names))).append_column("_extra", pa.nulls(len(truth)))
    naive = shuffled.set_column(
        shuffled.column_names.index("pay_ts"), "pay_ts", shuffled.column("pay_ts").cast(pa.timestamp("us"))
    )
    assert demo_data.compare(naive, path) == []

    amounts = truth.column("amount").to_pylist()
    row = next(i for i, v in enumerate(amounts) if i > 0 and v is not None)
    amounts[row] = amounts[row] + 0.01
    perturbed = truth.set_column(truth.column_names.index("amount"), "amount", pa.array(amounts, pa.float64()))
    perturbed = perturbed.slice(1)  # drop the first key
    extra = truth.slice(0, 1).set_column(0, "order_id", pa.array([1], pa.int64()))
    perturbed = pa.concat_tables([perturbed, extra])
    problems = demo_data.compare(perturbed, path)
    text = "\n".join(problems)
    assert "1 keys missing" in text and str(truth.column("order_id")[0].as_py()) in text
    assert "1 keys in the table that should not be" in text
    assert "column amount: 1 cells differ" in text
    assert len(demo_data.compare(truth.drop_columns(["ship_ts"]), path)) == 1
    nulled = truth.set_column(
        truth.column_names.index("currency"),
        "currency",
        pc.if_else(pc.equal(truth["currency"], "EUR"), None, truth["currency"]),
    )
    assert any(line.startswith("column currency:") for line in demo_data.compare(nulled, path))
