"""Tables whose history holds much that a correct reader must not show, for the publishing tests: late events, an
update, a stream delete, an erase, a column default and an alter, then a compaction (`history`); and the native
readers' table (`typed_history`), with more types, published before and after an alter, and optionally purged; what
published copies hold. A pytest plugin too: `published`, `history`'s table published in both formats."""

from __future__ import annotations

import copy
import datetime
import decimal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from stitchlake.api import Table
from stitchlake.io.published import iceberg_catalog
from stitchlake.services.upkeep.alter import alter
from tests.support.tables import MODELS, THREE_STREAMS, batch, config, new_table

MODEL = {m.name: m for m in MODELS}


def placed(document: dict[str, Any], place: dict[str, Any] | None) -> dict[str, Any]:
    """`document` with the top-level sections of `place` laid over it (e.g. another table path and a storage:)."""
    for section, values in (place or {}).items():
        document[section] = {**document.get(section, {}), **values}
    return document


def altered_document(place: dict[str, Any] | None = None, **publish: Any) -> dict[str, Any]:
    """THREE_STREAMS with a column added to orders (with a default) by `stitch alter`."""
    document = placed(copy.deepcopy(THREE_STREAMS), place)
    document["streams"]["orders"]["columns"]["coupon"] = {"type": "string", "default": "none"}
    if publish:
        document["publish"] = publish
    return document


def history(root: Path, place: dict[str, Any] | None = None, **publish: Any) -> Table:
    """A table whose raw files hold much that a correct reader must not show."""
    table = new_table(root, placed(copy.deepcopy(THREE_STREAMS), place))
    orders, payments, shipments = MODEL["orders"], MODEL["payments"], MODEL["shipments"]
    table.write("orders", batch(orders, [{"k": k, "amount": k * 10, "status": "new", "ots": 5} for k in range(1, 8)]))
    table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "ok", "pts": 1} for k in (1, 2, 3)]))
    table.write("shipments", batch(shipments, [{"k": 1, "carrier": "dhl", "ship_no": 11}]))  # others: default
    table.write(
        "orders",
        batch(
            orders,
            [
                {"k": 1, "amount": 999, "status": "late", "ots": 1},  # late: loses
                {"k": 2, "amount": 25, "status": "paid", "ots": 9},  # update
                {"k": 6, "ots": 9, "deleted": True},  # only orders had key 6: gone
            ],
        ),
    )
    table.erase(pa.table({"k": pa.array([5], pa.int64()), "p": pa.array(["odd"])}))
    altered = Table(config(root, altered_document(place, **publish)))
    alter(altered)
    rows = batch(orders, [{"k": 7, "amount": 70, "status": "coupon", "ots": 9}])
    altered.write("orders", rows.append_column("coupon", pa.array(["XMAS"])))
    assert altered.compact().done is not None
    return altered


def rows_of(data: Any) -> list[dict[str, Any]]:
    table = data if isinstance(data, pa.Table) else data.to_arrow()
    return sorted(table.to_pylist(), key=lambda row: row["k"])


def expected_rows(table: Table, source: str) -> list[dict[str, Any]]:
    return rows_of(table.read(mode="read_optimized", as_of=source))


# ---------------------------------------------------------------- the native readers' table: more types, versions

#: Orders' columns of every other simple type a reader maps on its own: an exact decimal, an instant (UTC, µs), a
#: day, a double and a boolean (tests/integration/test_native_readers.py compares them cell by cell in Spark and Trino).
TYPED_COLUMNS = {
    "price": "decimal(10,2)",
    "placed_at": "timestamp",
    "due": "date",
    "weight": "double",
    "gift": "boolean",
}
TYPED_ARROW = {
    "price": pa.decimal128(10, 2),
    "placed_at": pa.timestamp("us", tz="UTC"),
    "due": pa.date32(),
    "weight": pa.float64(),
    "gift": pa.bool_(),
}


def typed_document(place: dict[str, Any] | None, coupon: bool, **publish: Any) -> dict[str, Any]:
    """THREE_STREAMS with the typed columns on orders (and, after the alter, `coupon` with a default)."""
    document = placed(copy.deepcopy(THREE_STREAMS), place)
    document["streams"]["orders"]["columns"].update(TYPED_COLUMNS)
    if coupon:
        document["streams"]["orders"]["columns"]["coupon"] = {"type": "string", "default": "none"}
    document["publish"] = publish
    return document


def typed_orders(rows: list[dict[str, Any]], coupon: bool = False) -> pa.Table:
    """An orders batch with the typed columns (and `coupon`) filled from `rows` (missing: null)."""
    data = batch(MODEL["orders"], rows)
    for name, kind in TYPED_ARROW.items():
        data = data.append_column(name, pa.array([row.get(name) for row in rows], kind))
    if coupon:
        data = data.append_column("coupon", pa.array([row.get("coupon") for row in rows], pa.string()))
    return data


def typed_values(k: int) -> dict[str, Any]:
    """Values no reader can get right by accident: cents, a negative decimal, microseconds past the millisecond
    (half a millisecond and more: a reader keeping milliseconds rounds them up to the next second), days either
    side of the epoch, a double that is not a short decimal, both booleans."""
    return {
        "price": decimal.Decimal(f"{k * 1234}.{k:02d}") * (-1 if k == 3 else 1),
        "placed_at": datetime.datetime(2026, 3, 29, 1, 30, k, 999_500 + k, tzinfo=datetime.UTC),
        "due": datetime.date(1969, 12, 31) + datetime.timedelta(days=(k - 4) * 400),
        "weight": k / 3,
        "gift": k % 2 == 0,
    }


#: The points at which `typed_history` publishes, in order.
STEPS = ("before_alter", "altered", "compacted", "current", "purged")


@dataclass(frozen=True)
class TypedHistory:
    """The native readers' table and, by step (`STEPS`), what each format's publish reported and what `stitch read
    --mode read_optimized --as-of` the publish showed: `before_alter` (compacted, before `coupon` existed),
    `altered` (the alter's republish), `compacted` (a later compaction's publish), `current` (an erase's republish)
    and, when asked for, `purged` (an erase with `--purge`'s republish, which cuts the published history)."""

    table: Table
    published: dict[str, dict[str, dict[str, Any]]]
    expected: dict[str, list[dict[str, Any]]]

    def version(self, step: str, fmt: str) -> int:
        version: int = self.published[step][fmt]["version"]
        return version


def _by_format(results: Any) -> dict[str, dict[str, Any]]:
    return {result.format: result.to_json() for result in results}


def typed_history(
    root: Path, formats: tuple[str, ...], place: dict[str, Any] | None = None, purge: bool = False, **publish: Any
) -> TypedHistory:
    """Late events, an update, a stream delete and an erase, compacted and published (explicitly: `formats` are
    not configured yet); an alter adding `coupon` with a default, which republishes (now `publish.formats`);
    newer updates of keys 2 and 7 setting `coupon`, and a compaction, which publishes; an erase, which
    republishes; and, with `purge`, an erase with `--purge`, which republishes and cuts the published history."""
    table = new_table(root, typed_document(place, False, **publish))
    payments, shipments = MODEL["payments"], MODEL["shipments"]
    first = [{"k": k, "amount": k * 10, "status": "new", "ots": 5, **typed_values(k)} for k in range(1, 8)]
    first[3] = {"k": 4, "amount": 40, "status": "new", "ots": 5}  # the typed columns null
    table.write("orders", typed_orders(first))
    table.write("payments", batch(payments, [{"k": k, "paid": k, "note": "ok", "pts": 1} for k in (1, 2, 3)]))
    table.write("shipments", batch(shipments, [{"k": 1, "carrier": "dhl", "ship_no": 11}]))  # others: default
    table.write(
        "orders",
        typed_orders(
            [
                {"k": 1, "amount": 999, "status": "late", "ots": 1, **typed_values(9)},  # late: loses
                {"k": 2, "amount": 25, "status": "paid", "ots": 9, **typed_values(12)},  # update
                {"k": 6, "ots": 9, "deleted": True},  # only orders had key 6: gone
            ]
        ),
    )
    table.erase(erase_keys(5))
    assert table.compact().done is not None
    published = {"before_alter": {fmt: table.publish(fmt).to_json() for fmt in formats}}
    altered = Table(config(root, typed_document(place, True, formats=list(formats), **publish)))
    published["altered"] = _by_format(alter(altered).published)
    more = [
        {"k": 2, "amount": 2000, "status": "refund", "ots": 20, "coupon": "BACK", **typed_values(20)},
        {"k": 7, "amount": 70, "status": "coupon", "ots": 9, "coupon": "XMAS", **typed_values(7)},
    ]
    altered.write("orders", typed_orders(more, coupon=True))
    compaction = altered.compact().done
    assert compaction is not None
    published["compacted"] = _by_format(compaction.published)
    published["current"] = _by_format(altered.erase(erase_keys(3)).result.published)
    # Read before a purge: it makes the older states unreadable, in stitch as in the published tables.
    expected = {step: published_rows(altered, results[formats[0]]) for step, results in published.items()}
    if purge:
        published["purged"] = _by_format(altered.erase(erase_keys(4), purge=True).result.published)
        expected["purged"] = published_rows(altered, published["purged"][formats[0]])
    for step, results in published.items():
        assert set(results) == set(formats), f"{step}: every format published"
        assert len({results[fmt]["source"] for fmt in formats}) == 1, f"{step}: every format from one source"
    return TypedHistory(altered, published, expected)


def erase_keys(*keys: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "p": pa.array(["even" if k % 2 == 0 else "odd" for k in keys])})


def current_rows(table: Table) -> list[dict[str, Any]]:
    """What `stitch read --mode read_optimized` shows now: what every published table must show."""
    return rows_of(table.read(mode="read_optimized"))


def iceberg_table(result: dict[str, Any]) -> Any:
    """The Iceberg table a publish (its result as JSON) wrote."""
    return iceberg_catalog(result["location"]).load_table(result["identifier"])


def published_rows(table: Table, result: dict[str, Any]) -> list[dict[str, Any]]:
    """What a publish wrote, as `stitch read --mode read_optimized --as-of` the publish's own instant shows it
    (its source's rows under the schema in force then)."""
    return rows_of(table.read(mode="read_optimized", as_of=result["instant"]))


def delta_rows(result: dict[str, Any], version: int | None = None) -> list[dict[str, Any]]:
    return rows_of(DeltaTable(result["location"], version=version).to_pyarrow_table())


def keys_in_files(folder: str) -> set[int]:
    """Every key any data file under a published table's folder holds, whatever version lists it (a Delta
    checkpoint is Parquet too: the log's, left out)."""
    found: set[int] = set()
    for path in Path(folder.removeprefix("file://")).rglob("*.parquet"):
        if "_delta_log" in path.parts:
            continue
        found |= set(pq.read_table(path, columns=["k"]).column("k").to_pylist())
    return found


def history_cut_at(location: str, version: int) -> bool:
    """Whether the Delta log at `location` starts at `version` (a checkpoint of it; no older entry is left)."""
    entries = [p.name for p in Path(location, "_delta_log").iterdir() if p.name[:1].isdigit()]
    return f"{version:020d}.checkpoint.parquet" in entries and all(int(e.split(".")[0]) >= version for e in entries)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, dict[str, Any]]:
    """`history`'s table published once in each format (module scope: the tests only read it)."""
    table = history(tmp_path_factory.mktemp("publish"))
    return table, {fmt: table.publish(fmt).to_json() for fmt in ("delta", "iceberg")}


def published_version(fmt: str, result: dict[str, Any]) -> int:
    """The published table's current version: Delta's, or Iceberg's current snapshot id."""
    if fmt == "delta":
        return int(DeltaTable(result["location"]).version())
    return int(iceberg_table(result).current_snapshot().snapshot_id)


def read_published(fmt: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    if fmt == "delta":
        return rows_of(DeltaTable(result["location"]).to_pyarrow_table())
    return rows_of(iceberg_table(result).scan().to_arrow())


def data_files(folder: str) -> list[Path]:
    """The Parquet data files under a published table's folder (a Delta checkpoint left out)."""
    found = Path(folder.removeprefix("file://")).rglob("*.parquet")
    return sorted(path for path in found if "_delta_log" not in path.parts)
