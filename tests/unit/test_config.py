"""Table config (design.md §10): every bad config is a ConfigError (exit 2) naming the file and the YAML path.

Configs are real YAML files in `tmp_path`, loaded with `load_config` exactly as the CLI does.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import json
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from stitchlake.config import (
    LockProvider,
    StoredColumn,
    StoredSchema,
    StoredStream,
    TableConfig,
    TableProperties,
    config_from_schema,
    load_config,
    parse_config,
    stored_schema,
)
from stitchlake.config.evolution import changes, same_schema
from stitchlake.config.locks import ZooKeeperLockSpec
from stitchlake.errors import ConfigError
from tests.support.tables import THREE_STREAMS

#: The example of design.md §10, verbatim.
DESIGN_EXAMPLE = """\
table:
  name: orders_wide
  path: warehouse/orders_wide          # or file:///..., s3://..., hdfs://...
  key: {order_id: long}                # record key: column -> type (one or more columns)
  partition_by: {order_date: date}     # optional, column -> type; every stream's source carries them
  buckets: 8                           # file groups per partition
  log_format: parquet                  # parquet | avro
streams:
  orders:
    columns:                           # name: type, or name: {type: T, default: V}
      customer_id: long
      amount: double
      currency: {type: string, default: EUR}
      order_ts: timestamp
    ordering: order_ts                 # optional, a column or a list; omitted = commit-time ordering
    nulls: overwrite                   # overwrite | ignore
    deletes: {column: op, values: [D]} # optional; 'op' is read from the source, not stored
    source: {format: parquet, path: landing/orders}   # parquet | json | csv | avro; optional for API-only writes
  payments:
    columns: {pay_status: string, paid_amount: double, pay_ts: timestamp}
    ordering: pay_ts
    source: {format: json, path: landing/payments}
bad_rows: fail                         # fail | quarantine  (null key, null ordering, type errors)
concurrency:
  mode: lock_free                      # lock_free | optimistic
  lock: {provider: filesystem, wait_s: 60}         # or {provider: zookeeper, hosts: "h1:2181,h2:2181"}
  heartbeat: {interval_s: 10, expire_s: 60}
compaction: {inline: false, after_delta_commits: 5}
clean: {policy: keep_latest_commits, retain: 10}   # keep_latest_file_versions | keep_latest_hours
archive: {keep_instants: 200}
spark: {master: "local[*]", conf: {spark.driver.memory: 2g}}
"""


def _base() -> dict[str, Any]:
    """A small valid config as a Python document, for the bad-config cases to break one thing at a time."""
    return {
        "table": {
            "name": "orders_wide",
            "path": "warehouse/orders_wide",
            "key": {"order_id": "long"},
            "partition_by": {"order_date": "date"},
            "buckets": 8,
        },
        "streams": {
            "orders": {
                "columns": {"customer_id": "long", "amount": "double", "order_ts": "timestamp"},
                "ordering": "order_ts",
            },
            "payments": {
                "columns": {"pay_status": "string", "paid_amount": "double", "pay_ts": "timestamp"},
                "ordering": "pay_ts",
            },
        },
    }


def _write(tmp_path: Path, document: Any, name: str = "table.yaml") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False))
    return path


def _load_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.exit_code == 2
    return info.value


def test_the_base_document_is_valid(tmp_path: Path) -> None:
    """Guards the bad-config cases: each one must fail because of its own change, not the base."""
    config = load_config(_write(tmp_path, _base()))
    assert list(config.streams) == ["orders", "payments"]


# ---------------------------------------------------------------------------------------- bad configs

Mutation = Callable[[dict[str, Any]], object]


def _set(path: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split("|")
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


def _rename(path: str, new: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split("|")
        node = doc
        for key in parents:
            node = node[key]
        node[new] = node.pop(last)

    return mutate


def _add_stream(name: str, spec: dict[str, Any]) -> Mutation:
    return _set(f"streams|{name}", spec)


BAD_CASES: list[tuple[str, Mutation, list[str]]] = [
    ("unknown_top_level_key", _set("tabel", {"name": "x"}), ["tabel: unknown key"]),
    (
        "unknown_nested_key_typo",
        _rename("streams|orders|columns", "colums"),
        ["streams.orders.colums: unknown key"],
    ),
    ("unknown_lock_key", _set("concurrency", {"lock": {"provder": "filesystem"}}), ["concurrency.lock.provder"]),
    ("buckets_wrong_type", _set("table|buckets", "many"), ["table.buckets: must be a whole number"]),
    ("buckets_zero", _set("table|buckets", 0), ["table.buckets: must be >= 1, got 0"]),
    ("buckets_bool", _set("table|buckets", True), ["table.buckets"]),
    # true/false are never a number: `true` read as 1 would quietly change what a setting does.
    ("auto_local_max_mb_bool", _set("spark", {"auto_local_max_mb": False}), ["spark.auto_local_max_mb"]),
    (
        "files_per_trigger_bool",
        _set("streams|orders|source", {"format": "parquet", "path": "in", "files_per_trigger": True}),
        ["streams.orders.source.files_per_trigger"],
    ),
    (
        "files_per_trigger_fraction",
        _set("streams|orders|source", {"format": "parquet", "path": "in", "files_per_trigger": 2.5}),
        ["streams.orders.source.files_per_trigger"],
    ),
    (
        "trigger_interval_bool",
        _set("streams|orders|source", {"format": "parquet", "path": "in", "trigger_interval_s": True}),
        ["streams.orders.source.trigger_interval_s"],
    ),
    (
        "records_per_trigger_bool",
        _set("streams|orders|source", {"format": "kafka", "topic": "t", "records_per_trigger": True}),
        ["streams.orders.source.records_per_trigger"],
    ),
    (
        "read_timeout_bool",
        _set("streams|orders|source", {"format": "kafka", "topic": "t", "read_timeout_s": True}),
        ["streams.orders.source.read_timeout_s"],
    ),
    ("unknown_column_type", _set("streams|orders|columns|amount", "money"), ["streams.orders.columns.amount"]),
    ("bad_decimal_precision", _set("streams|orders|columns|amount", "decimal(39,2)"), ["streams.orders.columns"]),
    (
        "ordering_not_a_column",
        _set("streams|payments|ordering", "pay_tz"),
        [
            "streams.payments.ordering: 'pay_tz' is not a column of stream payments "
            "(columns: pay_status, paid_amount, pay_ts)"
        ],
    ),
    (
        "ordering_unorderable_type",
        lambda doc: (
            doc["streams"]["payments"]["columns"].update(pay_tags="array<string>"),
            doc["streams"]["payments"].update(ordering="pay_tags"),
        ),
        ["streams.payments.ordering", "'pay_tags' has type array<string>, which cannot order events"],
    ),
    ("ordering_empty_list", _set("streams|payments|ordering", []), ["streams.payments.ordering"]),
    ("ordering_twice", _set("streams|payments|ordering", ["pay_ts", "pay_ts"]), ["streams.payments.ordering"]),
    (
        "key_column_in_stream",
        _set("streams|orders|columns|order_id", "long"),
        ["streams.orders.columns.order_id", "key column"],
    ),
    (
        "partition_column_in_stream",
        _set("streams|payments|columns|order_date", "date"),
        ["streams.payments.columns.order_date", "partition column"],
    ),
    (
        "column_in_two_streams",
        _set("streams|payments|columns|amount", "double"),
        ["streams.payments.columns.amount", "already belongs to stream orders"],
    ),
    (
        "stream_name_with_path_separator",
        _add_stream("a/b", {"columns": {"x": "long"}}),
        ["streams.a/b", "'a/b' is not a valid stream name"],
    ),
    ("reserved_column_prefix", _set("streams|orders|columns|_sl_x", "long"), ["streams.orders.columns._sl_x"]),
    ("reserved_column_op", _set("streams|orders|columns|_op", "string"), ["streams.orders.columns._op", "reserved"]),
    ("key_of_float_type", _set("table|key", {"order_id": "double"}), ["table.key.order_id"]),
    ("nulls_sometimes", _set("streams|orders|nulls", "sometimes"), ["streams.orders.nulls", "'sometimes'"]),
    ("bad_rows_bad", _set("bad_rows", "drop"), ["bad_rows: 'drop' is not one of: fail, quarantine"]),
    (
        "zookeeper_without_hosts",
        _set("concurrency", {"lock": {"provider": "zookeeper"}}),
        ["concurrency.lock.hosts"],
    ),
    (
        "heartbeat_expire_too_short",
        _set("concurrency", {"heartbeat": {"interval_s": 10, "expire_s": 15}}),
        ["concurrency.heartbeat.expire_s", "twice interval_s"],
    ),
    ("no_streams", _set("streams", {}), ["streams: needs at least one stream"]),
    ("no_key", _set("table|key", {}), ["table.key"]),
    ("log_format_orc", _set("table|log_format", "orc"), ["table.log_format", "'orc'"]),
    (
        "source_format_xml",
        _set("streams|orders|source", {"format": "xml", "path": "landing"}),
        ["streams.orders.source.format"],
    ),
    ("bad_default", _set("streams|orders|columns|amount", {"type": "double", "default": "lots"}), ["amount.default"]),
    (
        "decimal_default_does_not_fit",
        _set("streams|orders|columns|amount", {"type": "decimal(4,2)", "default": "123.456"}),
        ["streams.orders.columns.amount.default"],
    ),
    (
        "date_default_with_a_time",
        _set("streams|orders|columns|shipped", {"type": "date", "default": dt.datetime(2024, 1, 1, 10, 0)}),
        ["streams.orders.columns.shipped.default"],
    ),
    (
        "delete_marker_is_a_stored_column",
        _set("streams|orders|deletes", {"column": "amount", "values": ["D"]}),
        ["streams.orders.deletes.column"],
    ),
    ("spark_conf_not_spark", _set("spark", {"conf": {"driver.memory": "2g"}}), ["spark.conf.driver.memory"]),
    (
        "csv_option_unknown",
        _set("streams|orders|source", {"format": "csv", "path": "landing", "options": {"header": "false"}}),
        ["streams.orders.source.options.header", "csv takes only: delimiter, quote, escape, null_values"],
    ),
    (
        "parquet_takes_no_options",
        _set("streams|orders|source", {"format": "parquet", "path": "landing", "options": {"delimiter": ";"}}),
        ["streams.orders.source.options.delimiter", "parquet takes none"],
    ),
    # A location no storage serves is refused when the config is read (`stitch validate` too), at its YAML path.
    (
        "landing_folder_on_s3a",
        _set("streams|orders|source", {"format": "parquet", "path": "s3a://bucket/landing"}),
        ["streams.orders.source.path", "s3a:// is not a supported storage", "write s3://"],
    ),
    ("table_on_hdfs", _set("table|path", "hdfs://nn/warehouse/t"), ["table.path", "HDFS is not implemented"]),
    (
        "publish_to_gcs",
        _set("publish", {"formats": ["delta"], "location": "gs://bucket/published"}),
        ["publish.location", "Google Cloud Storage is not implemented"],
    ),
    (
        "csv_delimiter_of_two_characters",
        _set("streams|orders|source", {"format": "csv", "path": "landing", "options": {"delimiter": ";;"}}),
        ["streams.orders.source.options.delimiter", "must be one character"],
    ),
]


@pytest.mark.parametrize(("mutation", "expected"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_config_names_file_and_yaml_path(tmp_path: Path, mutation: Mutation, expected: list[str]) -> None:
    document = _base()
    mutation(document)
    path = _write(tmp_path, document)
    error = _load_error(path)
    message = str(error)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "table:\n  name: t\n  path: x\n  key: {id: long\nstreams:\n  s: {columns: {a: long}}\n",
    )
    message = str(_load_error(path))
    assert str(path) in message
    assert "not valid YAML" in message
    assert "line 5" in message  # the flow mapping opened on line 4 runs into line 5


def test_tab_indented_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "table:\n\tname: t\n")
    message = str(_load_error(path))
    assert str(path) in message and "line 2" in message


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    """A stream block pasted twice must not silently drop the first one (typos are never ignored, §10)."""
    text = yaml.safe_dump(_base(), sort_keys=False)
    text += "streams:\n  shipments:\n    columns: {carrier: string}\n"
    path = _write(tmp_path, text)
    message = str(_load_error(path))
    assert str(path) in message
    assert "streams" in message and "duplicate" in message.lower()


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "table.yaml"
    message = str(_load_error(path))
    assert str(path) in message and "not found" in message


def test_config_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "- just\n- a list\n")
    message = str(_load_error(path))
    assert str(path) in message and "mapping" in message


def test_missing_env_variable_names_path_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STITCH_TEST_UNSET_VAR", raising=False)
    document = _base()
    document["table"]["path"] = "${STITCH_TEST_UNSET_VAR}/orders"
    path = _write(tmp_path, document)
    message = str(_load_error(path))
    assert "table.path" in message and "STITCH_TEST_UNSET_VAR" in message and str(path) in message


def test_missing_env_variable_inside_a_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STITCH_TEST_UNSET_VAR", raising=False)
    document = _base()
    document["streams"]["orders"]["deletes"] = {"column": "op", "values": ["D", "${STITCH_TEST_UNSET_VAR}"]}
    message = str(_load_error(_write(tmp_path, document)))
    assert "streams.orders.deletes.values[1]" in message


def test_yaml_object_construction_is_refused(tmp_path: Path) -> None:
    witness = tmp_path / "pwned"
    text = yaml.safe_dump(_base(), sort_keys=False)
    text += f'bad_rows: !!python/object/apply:os.system ["touch {witness}"]\n'
    path = _write(tmp_path, text)
    message = str(_load_error(path))
    assert str(path) in message
    assert not witness.exists()


def test_env_values_are_not_printed_in_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STITCH_TEST_SECRET_MODE", "hunter2")
    document = _base()
    document["bad_rows"] = "${STITCH_TEST_SECRET_MODE}"
    message = str(_load_error(_write(tmp_path, document)))
    assert "bad_rows" in message and "hunter2" not in message


def test_parse_config_without_file_still_names_yaml_path() -> None:
    document = _base()
    document["table"]["buckets"] = 0
    with pytest.raises(ConfigError) as info:
        parse_config(document, base=Path("/tmp"))
    assert str(info.value).startswith("table.buckets:")


def test_bad_config_cases_are_at_least_fourteen() -> None:
    assert len(BAD_CASES) >= 14


# ------------------------------------------------------------------------------------------ positives


def test_design_example_parses(tmp_path: Path) -> None:
    path = _write(tmp_path, DESIGN_EXAMPLE)
    config = load_config(path)
    assert isinstance(config, TableConfig)
    assert config.source_file == str(path)
    assert config.table.name == "orders_wide"
    assert config.table.path == str((tmp_path / "warehouse" / "orders_wide").resolve())
    assert config.table.key_names == ("order_id",)
    assert config.table.partition_names == ("order_date",)
    assert config.table.buckets == 8
    assert config.table.log_format == "parquet"
    orders = config.streams["orders"]
    assert orders.column_names == ("customer_id", "amount", "currency", "order_ts")
    assert orders.column("currency").default == "EUR"
    assert orders.ordering == ("order_ts",)
    assert orders.nulls == "overwrite"
    assert orders.deletes is not None and orders.deletes.column == "op" and orders.deletes.values == ("D",)
    assert orders.source is not None and orders.source.format == "parquet"
    assert orders.source.path == str((tmp_path / "landing" / "orders").resolve())
    payments = config.streams["payments"]
    assert payments.ordering == ("pay_ts",) and payments.deletes is None
    assert payments.source is not None and payments.source.format == "json"
    assert config.bad_rows == "fail"
    assert config.concurrency.mode == "lock_free"
    assert config.concurrency.lock.provider == "filesystem" and config.concurrency.lock.wait_s == 60.0
    assert (config.concurrency.heartbeat.interval_s, config.concurrency.heartbeat.expire_s) == (10.0, 60.0)
    assert config.compaction.inline is False and config.compaction.after_delta_commits == 5
    assert (config.clean.policy, config.clean.retain) == ("keep_latest_commits", 10)
    assert config.archive.keep_instants == 200
    assert config.spark.master == "local[*]" and dict(config.spark.conf) == {"spark.driver.memory": "2g"}
    assert [c.name for c in config.all_columns()] == [
        "order_id",
        "order_date",
        "customer_id",
        "amount",
        "currency",
        "order_ts",
        "pay_status",
        "paid_amount",
        "pay_ts",
    ]
    assert config.secret_paths == frozenset()


def test_zookeeper_provider_with_hosts(tmp_path: Path) -> None:
    document = _base()
    document["concurrency"] = {"lock": {"provider": "zookeeper", "hosts": "h1:2181,h2:2181"}}
    config = load_config(_write(tmp_path, document))
    lock = config.concurrency.lock
    assert isinstance(lock, ZooKeeperLockSpec) and lock.provider == LockProvider.ZOOKEEPER
    assert lock.hosts == "h1:2181,h2:2181" and lock.zk_path == "/stitchlake"


def test_env_expansion_and_secret_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STITCH_TEST_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("STITCH_TEST_ZK", "zk1:2181")
    monkeypatch.delenv("STITCH_TEST_UNSET_VAR", raising=False)
    document = _base()
    document["table"]["path"] = "${STITCH_TEST_WAREHOUSE}/orders"
    document["streams"]["orders"]["source"] = {
        "format": "csv",
        "path": "${STITCH_TEST_UNSET_VAR:-landing/default}",
    }
    document["concurrency"] = {"lock": {"provider": "zookeeper", "hosts": "${STITCH_TEST_ZK}"}}
    config = load_config(_write(tmp_path, document))
    assert config.table.path == str((tmp_path / "wh" / "orders").resolve())
    source = config.streams["orders"].source
    assert source is not None and source.path == str((tmp_path / "landing" / "default").resolve())
    assert isinstance(config.concurrency.lock, ZooKeeperLockSpec) and config.concurrency.lock.hosts == "zk1:2181"
    # Plain settings from the environment are not secrets: nothing is masked.
    assert not config.secret_paths and not config.secret_values
    monkeypatch.setenv("STITCH_TEST_ZK_TOKEN", "zk1:2181")
    document["concurrency"]["lock"]["hosts"] = "${STITCH_TEST_ZK_TOKEN}"  # a name that says "secret"
    document["secrets"] = ["STITCH_TEST_WAREHOUSE"]  # and one declared secret
    config = load_config(_write(tmp_path, document))
    assert config.secret_paths == {"table.path", "concurrency.lock.hosts"}
    assert config.secret_values == {str(tmp_path / "wh"), "zk1:2181"}


def test_declared_secrets_must_be_variable_names(tmp_path: Path) -> None:
    document = _base()
    document["secrets"] = "DB_PASS"
    with pytest.raises(ConfigError, match=r"secrets: must be a list of environment variable names"):
        load_config(_write(tmp_path, document))


def test_env_expansion_of_a_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STITCH_TEST_BUCKETS", "16")
    document = _base()
    document["table"]["buckets"] = "${STITCH_TEST_BUCKETS}"
    config = load_config(_write(tmp_path, document))
    assert config.table.buckets == 16
    assert not config.secret_paths


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_dir = tmp_path / "configs" / "nested"
    config_dir.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    document = _base()
    document["table"]["path"] = "../warehouse/orders"
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    document["streams"]["payments"]["source"] = {"format": "json", "path": str(tmp_path / "abs" / "pay")}
    path = _write(config_dir, document)
    monkeypatch.chdir(elsewhere)
    # a relative config path, itself relative to the (new) cwd
    config = load_config(os.path.relpath(path, elsewhere))
    assert config.table.path == str((tmp_path / "configs" / "warehouse" / "orders").resolve())
    orders_source = config.streams["orders"].source
    assert orders_source is not None
    assert orders_source.path == str((config_dir / "landing" / "orders").resolve())
    payments_source = config.streams["payments"].source
    assert payments_source is not None and payments_source.path == str((tmp_path / "abs" / "pay").resolve())
    assert not config.table.path.startswith(str(elsewhere))


def test_uri_paths_are_kept(tmp_path: Path) -> None:
    document = _base()
    document["table"]["path"] = "s3://bucket/warehouse/orders"
    config = load_config(_write(tmp_path, document))
    assert config.table.path == "s3://bucket/warehouse/orders"


def test_defaults_parse_to_typed_values(tmp_path: Path) -> None:
    text = """\
table: {name: t, path: data, key: {id: long}}
streams:
  s:
    columns:
      d: {type: date, default: 2024-02-29}
      d_text: {type: date, default: "2024-03-01"}
      ts: {type: timestamp, default: 2024-01-01T10:00:00+02:00}
      ts_naive: {type: timestamp, default: "2024-01-01 10:00:00"}
      money: {type: "decimal(10, 2)", default: "12.30"}
      n: {type: long, default: -7}
      i: {type: int, default: "42"}
      x: {type: double, default: 1}
      flag: {type: boolean, default: true}
      cur: {type: string, default: EUR}
"""
    config = load_config(_write(tmp_path, text))
    stream = config.streams["s"]
    assert stream.column("d").default == dt.date(2024, 2, 29)
    assert type(stream.column("d").default) is dt.date
    assert stream.column("d_text").default == dt.date(2024, 3, 1)
    ts = stream.column("ts").default
    assert ts == dt.datetime(2024, 1, 1, 8, 0, tzinfo=dt.UTC) and ts.utcoffset() == dt.timedelta(0)
    assert stream.column("ts_naive").default == dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC)
    assert stream.column("money").type == "decimal(10,2)"
    money = stream.column("money").default
    assert isinstance(money, decimal.Decimal) and money == decimal.Decimal("12.30")
    assert stream.column("n").default == -7
    assert stream.column("i").default == 42 and isinstance(stream.column("i").default, int)
    assert stream.column("x").default == 1.0 and isinstance(stream.column("x").default, float)
    assert stream.column("flag").default is True
    assert stream.column("cur").default == "EUR"


def test_int_default_out_of_range(tmp_path: Path) -> None:
    text = (
        "table: {name: t, path: d, key: {id: long}}\nstreams: {s: {columns: {i: {type: int, default: 2147483648}}}}\n"
    )
    message = str(_load_error(_write(tmp_path, text)))
    assert "streams.s.columns.i.default" in message


def _full_config(tmp_path: Path) -> TableConfig:
    text = DESIGN_EXAMPLE.replace(
        "      order_ts: timestamp\n",
        "      order_ts: timestamp\n"
        "      promised: {type: date, default: 2024-01-31}\n"
        "      fee: {type: 'decimal(12,3)', default: '0.125'}\n"
        "      seen_at: {type: timestamp, default: '2024-01-01T00:00:00Z'}\n",
    ).replace("    ordering: pay_ts\n", "    ordering: [pay_ts, paid_amount]\n    nulls: ignore\n")
    return load_config(_write(tmp_path, text))


def test_table_properties_round_trip(tmp_path: Path) -> None:
    config = _full_config(tmp_path)
    stored = TableProperties(stored_schema(config), "id-1", "2026-01-01T00:00:00Z").to_json()
    assert next(iter(stored)) == "format_version", "readers check the version before anything else"
    where = str(tmp_path / "tbl" / ".stitch" / "table.json")
    properties = TableProperties.from_json(json.loads(json.dumps(stored)), where)  # as stored in table.json
    assert (properties.table_id, properties.created) == ("id-1", "2026-01-01T00:00:00Z")
    assert properties.to_json() == stored and properties.schema == stored_schema(config)
    table_dir = tmp_path / "tbl"
    again = config_from_schema(properties.schema, str(table_dir))
    assert stored_schema(again) == stored_schema(config)
    assert again.table.path == str(table_dir.resolve())
    assert again.table == config.with_path(again.table.path).table
    for name, stream in config.streams.items():
        other = again.streams[name]
        assert (other.columns, other.ordering, other.nulls, other.deletes) == (
            stream.columns,
            stream.ordering,
            stream.nulls,
            stream.deletes,
        )
    assert same_schema(properties.schema, stored_schema(again))


def test_table_properties_refuse_another_format_version_and_damage(tmp_path: Path) -> None:
    stored = stored_schema(_full_config(tmp_path)).to_json()
    where = str(tmp_path / "tbl" / ".stitch" / "table.json")
    with pytest.raises(ConfigError) as info:
        StoredSchema.from_json({**stored, "format_version": 99}, where)
    assert "table.json" in str(info.value) and "99" in str(info.value)
    damaged = {**stored, "streams": {"orders": {"columns": [{"name": "x"}], "ordering": [], "nulls": "ignore"}}}
    with pytest.raises(ConfigError, match=r"table.json: damaged table properties \(missing or malformed 'streams"):
        StoredSchema.from_json(damaged, where)


def test_a_config_that_contradicts_the_table_lists_every_difference(tmp_path: Path) -> None:
    existing = stored_schema(_full_config(tmp_path))
    payments = existing.streams["payments"]
    dropped = payments.columns[0].name
    proposed = replace(
        existing,
        buckets=16,
        key=(StoredColumn("order_id", "string"),),
        streams={
            **existing.streams,
            "orders": replace(existing.streams["orders"], ordering=()),
            "payments": replace(payments, nulls="overwrite", columns=payments.columns[1:]),
            "returns": StoredStream((StoredColumn("reason", "string"),), (), "ignore"),
        },
    )
    found = {c.path: c for c in changes(existing, proposed, set())}
    assert set(found) == {
        "table.buckets",
        "table.key",
        "streams.orders.ordering",
        "streams.payments.nulls",
        f"streams.payments.columns.{dropped}",
        "streams.returns",
    }
    assert str(found["table.buckets"]).startswith("table.buckets: table has 8, config says 16 — refused")
    assert found["table.key"].what == "table has {order_id: long}, config says {order_id: string}"
    assert found["streams.orders.ordering"].what.startswith('table has ["'), found["streams.orders.ordering"]
    assert found["streams.orders.ordering"].what.endswith("config says []")
    refused = {path for path, change in found.items() if not change.allowed}
    assert refused == {"table.buckets", "table.key", "streams.orders.ordering", "streams.payments.nulls"}
    assert changes(existing, copy.deepcopy(existing), set()) == []


def _kafka(**source: Any) -> dict[str, Any]:
    """The base document with stream orders reading a Kafka topic (`source` changes that source)."""
    document = _base()
    document["streams"]["orders"]["source"] = {"format": "kafka", "topic": "orders", "bootstrap_servers": "h:9092"}
    document["streams"]["orders"]["source"].update(source)
    return document


KAFKA_MISTAKES = [
    ({"topic": None}, "streams.orders.source.topic: is required for format: kafka"),
    ({"bootstrap_servers": None}, "streams.orders.source.bootstrap_servers: is required for format: kafka"),
    ({"path": "landing"}, "streams.orders.source.path: does not apply to format: kafka"),
    ({"options": {"group.id": "mine"}}, "streams.orders.source.options.group.id: is set by stitch"),
    ({"options": {"bootstrap.servers": "h:1"}}, "streams.orders.source.options.bootstrap.servers: is set by"),
    # Aborted transactions' records must never be ingested: read_uncommitted would let them in.
    (
        {"options": {"isolation.level": "read_uncommitted"}},
        "streams.orders.source.options.isolation.level: is set by stitch (read_committed",
    ),
    ({"value_format": "avro"}, "streams.orders.source.avro_schema: is required for value_format: avro"),
    ({"value_format": "xml"}, "streams.orders.source.value_format:"),
    ({"read_timeout_s": 0}, "streams.orders.source.read_timeout_s:"),
]
#: Client options that hold secrets, whether or not their names say so.
KAFKA_SECRET_OPTIONS = [
    "sasl.password",
    "ssl.keystore.password",
    "ssl.key.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
]


@pytest.mark.parametrize(("change", "message"), KAFKA_MISTAKES)
def test_a_kafka_source_mistake_names_its_yaml_path(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    document = _kafka(**change)
    source = document["streams"]["orders"]["source"]
    for key in [k for k, v in change.items() if v is None]:
        del source[key]
    error = str(_load_error(_write(tmp_path, document)))
    assert f"table.yaml: {message}" in error, error


@pytest.mark.parametrize("option", KAFKA_SECRET_OPTIONS)
def test_a_kafka_secret_written_in_the_file_is_refused_by_its_path(tmp_path: Path, option: str) -> None:
    literal = "-----BEGIN PRIVATE KEY----- hunter2"
    error = str(_load_error(_write(tmp_path, _kafka(options={"security.protocol": "SASL_SSL", option: literal}))))
    assert f"streams.orders.source.options.{option}: write ${{VAR}} and put the secret in the environment" in error
    assert "hunter2" not in error


def test_kafka_secrets_stay_references_and_are_resolved_in_each_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret option keeps its `${VAR}` (each process, an executor too, reads its own environment) and is masked
    by value and path; a plain option from the environment is expanded; a process without the variable is told
    which YAML path needs it."""
    from stitchlake.io.kafka import client_settings, environment

    monkeypatch.setenv("STITCH_TEST_KAFKA_KEY", "pem-s3cr3t-body")
    monkeypatch.setenv("STITCH_TEST_KAFKA_PROTOCOL", "SSL")
    options = {"ssl.key.pem": "${STITCH_TEST_KAFKA_KEY}", "security.protocol": "${STITCH_TEST_KAFKA_PROTOCOL}"}
    config = load_config(_write(tmp_path, _kafka(options=options)))
    source = config.streams["orders"].source
    assert source is not None and source.yaml_path == "streams.orders.source"
    assert source.options == {"ssl.key.pem": "${STITCH_TEST_KAFKA_KEY}", "security.protocol": "SSL"}
    assert config.secret_paths == {"streams.orders.source.options.ssl.key.pem"}
    assert config.secret_values == {"pem-s3cr3t-body"}
    assert "pem-s3cr3t-body" not in repr(config)
    assert client_settings(source)["ssl.key.pem"] == "pem-s3cr3t-body"
    assert client_settings(source)["isolation.level"] == "read_committed"
    assert environment(source) == {"STITCH_TEST_KAFKA_KEY": "pem-s3cr3t-body"}
    travelled = pickle.loads(pickle.dumps(config)).streams["orders"].source
    assert travelled is not None and travelled.yaml_path == "streams.orders.source"
    monkeypatch.delenv("STITCH_TEST_KAFKA_KEY")  # an executor whose environment lacks it
    with pytest.raises(ConfigError) as missing:
        client_settings(travelled)
    assert str(missing.value) == (
        "streams.orders.source.options.ssl.key.pem: environment variable STITCH_TEST_KAFKA_KEY is not set in this "
        "process"
    )


# ------------------------------------------------------------------------------------------ the model


def test_configs_survive_pickling_and_secret_values_do_not_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configs travel to Spark executors; which secret values a config read is not part of what it says."""
    monkeypatch.setenv("STITCH_TEST_TOKEN", "tok-123456")
    document = _base()
    document["spark"] = {"conf": {"spark.auth": "${STITCH_TEST_TOKEN}"}}
    config = load_config(_write(tmp_path, document))
    assert config.secret_values == {"tok-123456"} and config.secret_paths == {"spark.conf.spark.auth"}
    again = pickle.loads(pickle.dumps(config))
    assert again == config and again.secret_values == config.secret_values
    assert config.model_copy(update={"secret_values": frozenset()}) == config
    assert "secret_values" not in repr(config)  # the values are kept out of repr (the conf is the caller's to mask)
    assert config.streams["orders"].nulls == "overwrite" and f"{config.bad_rows}" == "fail"
    assert json.dumps(stored_schema(config).to_json()) == json.dumps(stored_schema(again).to_json())


def test_a_short_secret_is_masked_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value too short to search for in free text is still never quoted back: it is known by its YAML path."""
    monkeypatch.setenv("STITCH_TEST_PASSWORD", "-5")
    document = _base()
    document["clean"] = {"retain": "${STITCH_TEST_PASSWORD}"}
    message = str(_load_error(_write(tmp_path, document)))
    assert "clean.retain: must be >= 1, got <secret from the environment>" in message


# ------------------------------------------------------------------------------------- the JSON Schema

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_the_shipped_schema_is_what_the_model_generates() -> None:
    """configs/table.schema.json cannot drift: regenerate it with `python -m stitchlake.config --write`."""
    from stitchlake.config.jsonschema import render
    from stitchlake.config.yaml_schema import SHIPPED

    assert SHIPPED == CONFIGS / "table.schema.json"
    assert SHIPPED.read_text(encoding="utf-8") == render()
    schema = json.loads(render())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert list(schema["properties"]) == [*TableConfig.yaml_keys()]
    assert schema["required"] == ["table", "streams"]
    assert set(schema["$defs"]["TableSpec"]["properties"]) == {
        "name",
        "path",
        "key",
        "partition_by",
        "buckets",
        "log_format",
    }


@pytest.mark.parametrize("example", [*sorted(p.name for p in CONFIGS.glob("*.yaml")), "DESIGN_EXAMPLE"])
def test_example_configs_load_and_validate_against_the_schema(tmp_path: Path, example: str) -> None:
    path = _write(tmp_path, DESIGN_EXAMPLE) if example == "DESIGN_EXAMPLE" else CONFIGS / example
    load_config(path)
    schema = json.loads((CONFIGS / "table.schema.json").read_text(encoding="utf-8"))
    assert _schema_errors(schema, yaml.safe_load(path.read_text(encoding="utf-8"))) == []


def test_the_schema_accepts_what_the_loader_accepts_and_refuses_typos(tmp_path: Path) -> None:
    """Text numbers, any-case types, `${VAR}` in any value are fine for the loader, so for the schema too."""
    schema = json.loads((CONFIGS / "table.schema.json").read_text(encoding="utf-8"))
    document = _base()
    document["table"]["buckets"] = "${STITCH_TEST_BUCKETS:-8}"
    document["table"]["name"] = "orders_${YEAR:-2026}"
    document["streams"]["orders"]["columns"]["amount"] = {"type": " Decimal(10, 2) ", "default": "1.50"}
    document["streams"]["orders"]["nulls"] = "${NULLS:-ignore}"
    document["compaction"] = {"inline": "TRUE", "min_log_files": "3"}
    document["concurrency"] = {"lock": {"wait_s": "2.5"}, "heartbeat": {"interval_s": 1, "expire_s": 2}}
    document["secrets"] = ["DB_PASS"]
    load_config(_write(tmp_path, document))
    assert _schema_errors(schema, document) == []
    for mutation, where in [
        (_rename("streams|orders|columns", "colums"), "streams.orders"),
        (_set("bad_rows", "drop"), "bad_rows"),
        (_set("table|buckets", 0), "table.buckets"),
        (_set("streams|orders|columns|amount", "money"), "streams.orders.columns.amount"),
        (_set("streams|a/b", {"columns": {"x": "long"}}), "streams"),
        (_set("spark", {"conf": {"driver.memory": "2g"}}), "spark.conf"),
    ]:
        broken = _base()
        mutation(broken)
        assert any(error.startswith(where) for error in _schema_errors(schema, broken)), (where, broken)


def _schema_errors(schema: dict[str, Any], value: Any, node: dict[str, Any] | None = None, at: str = "") -> list[str]:
    """A small JSON Schema (2020-12) checker for the keywords the generated schema uses (no `jsonschema` here).

    An unknown keyword fails the test, so the schema cannot start using one this checker would ignore.
    """
    node = schema if node is None else node
    errors: list[str] = []
    types = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
    }
    for keyword, rule in node.items():
        if keyword in ("$schema", "$defs", "title", "description", "default"):
            continue
        if keyword == "$ref":
            errors += _schema_errors(schema, value, schema["$defs"][rule.rsplit("/", 1)[1]], at)
        elif keyword == "type":
            if not any(types[name](value) for name in ([rule] if isinstance(rule, str) else rule)):
                errors.append(f"{at}: not of type {rule}")
        elif keyword == "anyOf":
            if all(_schema_errors(schema, value, option, at) for option in rule):
                errors.append(f"{at}: matches none of anyOf")
        elif keyword == "enum":
            if value not in rule:
                errors.append(f"{at}: not one of {rule}")
        elif keyword == "pattern":
            if isinstance(value, str) and not re.search(rule, value):
                errors.append(f"{at}: does not match {rule}")
        elif keyword in ("minimum", "exclusiveMinimum", "maximum"):
            if (
                types["number"](value)
                and not {
                    "minimum": value >= rule,
                    "exclusiveMinimum": value > rule,
                    "maximum": value <= rule,
                }[keyword]
            ):
                errors.append(f"{at}: breaks {keyword} {rule}")
        elif keyword in ("minItems", "minProperties"):
            if isinstance(value, list | dict) and len(value) < rule:
                errors.append(f"{at}: fewer than {rule}")
        elif keyword == "uniqueItems":
            if isinstance(value, list) and len({json.dumps(v) for v in value}) != len(value):
                errors.append(f"{at}: repeats an item")
        elif keyword == "items":
            if isinstance(value, list):
                for i, item in enumerate(value):
                    errors += _schema_errors(schema, item, rule, f"{at}[{i}]")
        elif keyword == "required":
            if isinstance(value, dict):
                errors += [f"{at}.{key}: is required".lstrip(".") for key in rule if key not in value]
        elif keyword == "properties":
            if isinstance(value, dict):
                for key, item in value.items():
                    if key in rule:
                        errors += _schema_errors(schema, item, rule[key], f"{at}.{key}".lstrip("."))
        elif keyword == "propertyNames":
            if isinstance(value, dict):
                for key in value:
                    errors += _schema_errors(schema, key, rule, f"{at}.{key}".lstrip("."))
        elif keyword == "additionalProperties":
            if isinstance(value, dict):
                for key, item in value.items():
                    if key not in node.get("properties", {}):
                        where = f"{at}.{key}".lstrip(".")
                        errors += (
                            [f"{where}: not allowed"] if rule is False else _schema_errors(schema, item, rule, where)
                        )
        else:
            raise AssertionError(f"the schema uses {keyword!r}, which this checker does not know")
    return errors


def test_alter_commits_and_the_archive_hold_a_schema_in_its_stored_form(tmp_path: Path) -> None:
    """Every file holds one shape of a schema (a column's default only when it has one), and reads it back."""
    from stitchlake.timeline.archive import Checkpoint, SchemaVersion
    from stitchlake.timeline.metadata import AlterCommit, dump, load

    schema = stored_schema(_full_config(tmp_path))
    stored = schema.to_json()
    commit = dump(AlterCommit(schema_version=1, properties=schema, changes=("x",)))
    checkpoint = dump(Checkpoint("20260101000000000", schemas=(SchemaVersion(1, "20260101000000000", schema),)))
    assert commit["properties"] == stored == checkpoint["schemas"][0]["properties"]
    assert any("default" in c for s in stored["streams"].values() for c in s["columns"]), "the config has defaults"
    assert all("default" not in c for c in stored["key"]), "no `default: null` where there is none"
    assert load(AlterCommit, json.loads(json.dumps(commit))).properties == schema
    assert load(Checkpoint, json.loads(json.dumps(checkpoint))).schemas[0].properties == schema


@pytest.mark.parametrize(
    ("written", "read_as"),
    [
        ("country: {type: string, default: NO}", "`NO` reads as false in YAML 1.1"),
        ("zip: {type: string, default: 0755}", "`0755` reads as 493"),
        ("at: {type: string, default: 12:30}", "`12:30` reads as 750"),
        ("code: {type: long, default: 0x1F}", "`0x1F` reads as 31"),
        ("on: string", "`on` reads as true"),
        ("code: {type: long, default: 0x_}", "not valid YAML: invalid literal for int()"),  # typed, not buildable
    ],
)
def test_plain_scalars_only_yaml_1_1_reads_as_other_than_text_are_refused(
    tmp_path: Path, written: str, read_as: str
) -> None:
    """PyYAML reads YAML 1.1: a string column's default `NO` (Norway) was stored as "False", `0755` as "493", a delete
    marker `yes` as "true" (rows marked `yes` then updated instead of deleting). Refused, saying what it read; quoted,
    the text is kept as written, and true, false and plain numbers read as before."""
    path = tmp_path / "table.yaml"
    head = "table: {name: t, path: table, key: {k: long}}\nstreams:\n  s:\n    columns:\n"
    path.write_text(f"{head}      {written}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(read_as)):
        load_config(path)
    path.write_text(
        f"{head}      country: {{type: string, default: 'NO'}}\n      flag: {{type: string, default: true}}\n"
        "      n: {type: long, default: 1_000}\n    deletes: {column: op, values: ['yes', D]}\n",
        encoding="utf-8",
    )
    stream = load_config(path).stream("s")
    assert [c.default for c in stream.columns] == ["NO", "True", 1000]
    assert stream.deletes is not None and stream.deletes.values == ("yes", "D")


@pytest.mark.parametrize(
    "block", ["source: {format: csv, path: landing, options: {null_values: }}", "spark: {conf: {spark.x: }}"]
)
def test_a_setting_with_no_value_is_refused_not_read_as_the_word_none(tmp_path: Path, block: str) -> None:
    """`null_values:` with nothing after it is YAML's null, which became the text "None": the CSV then read the
    word None as null and every empty field as text."""
    path = tmp_path / "table.yaml"
    stream = "  s:\n    columns: {v: string}\n" + (f"    {block}\n" if block.startswith("source") else "")
    tail = f"{block}\n" if block.startswith("spark") else ""
    path.write_text(f"table: {{name: t, path: table, key: {{k: long}}}}\nstreams:\n{stream}{tail}", encoding="utf-8")
    with pytest.raises(ConfigError, match="has no value: write '' for the empty text"):
        load_config(path)


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("concurrency", {"lock": {"wait_s": float("inf")}}, "concurrency.lock.wait_s: must be <= 31536000"),
        ("concurrency", {"heartbeat": {"interval_s": 1e300, "expire_s": 2e300}}, "heartbeat.interval_s: must be <="),
        ("publish", {"formats": ["delta", "iceberg", "delta"]}, "publish.formats: names delta more than once"),
    ],
    ids=["infinite lease", "interval past a year", "a format twice"],
)
def test_settings_that_cannot_mean_what_they_say_are_refused(
    tmp_path: Path, section: str, value: dict[str, Any], message: str
) -> None:
    """An infinite lease held a dead writer's stream for good, an interval of 1e300 s overflowed after the
    publish it guarded, and `formats: [delta, delta]` published each compaction twice."""
    document = copy.deepcopy(THREE_STREAMS)
    document[section] = value
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_a_secret_with_a_fallback_written_in_the_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`${SECRET:-hunter2}` passed: the fallback is the file's own text, copied with the config, and never masked
    (it came from no variable). A secret comes from the environment only."""
    monkeypatch.delenv("NOPE_SECRET", raising=False)
    document = copy.deepcopy(THREE_STREAMS)
    document["storage"] = {"secret_access_key": "${NOPE_SECRET:-hunter2xyz}"}
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"storage.secret_access_key: a secret is read from the environment only"
    ) as refused:
        load_config(path)
    assert "hunter2xyz" not in str(refused.value)


def test_a_csv_escape_equal_to_the_quote_or_the_delimiter_is_refused(tmp_path: Path) -> None:
    """pyarrow takes the escape for "the next character is text": equal to the quote, no quoted value ever closed
    and the rest of the file was read into one cell."""
    from stitchlake.config import SourceSpec

    for options in ({"escape": '"'}, {"quote": "'", "escape": "'"}, {"delimiter": ";", "escape": ";"}, {"escape": ","}):
        with pytest.raises(ValueError, match="must differ from the quote and the delimiter"):
            SourceSpec.model_validate({"format": "csv", "path": str(tmp_path), "options": options})
    with pytest.raises(ValueError, match="must be an ASCII character, got '§'"):  # pyarrow refused it per file
        SourceSpec.model_validate({"format": "csv", "path": str(tmp_path), "options": {"delimiter": "§"}})


def test_a_kafka_setting_written_true_or_false_reaches_the_client_as_true_or_false() -> None:
    """Settings blocks keep their values as text; YAML's booleans are the words the clients take."""
    from stitchlake.config import SourceSpec

    source = SourceSpec.model_validate(
        {
            "format": "kafka",
            "topic": "t",
            "bootstrap_servers": "127.0.0.1:9092",
            "options": {"enable.ssl.certificate.verification": False, "check.crcs": True},
        }
    )
    assert source.options == {"enable.ssl.certificate.verification": "false", "check.crcs": "true"}
