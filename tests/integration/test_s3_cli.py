"""The CLI on S3: a config whose `storage:` block reads the credentials from `${VAR}`s, `--table s3://...`, and
secrets that never show: not in output, not in errors, not in any object of the table, not in a pickled storage.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from stitchlake.storage import storage_for
from tests.support.cli import invoke
from tests.support.tables import MODELS, THREE_STREAMS, batch, orders_rows, write_table_yaml

pytestmark = pytest.mark.s3
ORDERS = MODELS[0]
SECRET_VARS = ("STITCH_TEST_S3_KEY", "STITCH_TEST_S3_SECRET")


@pytest.fixture
def s3_config(s3_bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A config on the test bucket whose credentials come from variables with no AWS_* in the environment."""
    for name in list(__import__("os").environ):
        if name.startswith("AWS_") and "CHECKSUM" not in name:
            monkeypatch.delenv(name)
    monkeypatch.setenv("STITCH_TEST_S3_ENDPOINT", s3_bucket.server.endpoint)
    monkeypatch.setenv("STITCH_TEST_S3_KEY", s3_bucket.server.access_key)
    monkeypatch.setenv("STITCH_TEST_S3_SECRET", s3_bucket.server.secret_key)
    document = json.loads(json.dumps(THREE_STREAMS))
    document["table"]["path"] = f"{s3_bucket.url}/warehouse/wide"
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": f"{s3_bucket.url}/landing/orders"}
    document["storage"] = {
        "endpoint": "${STITCH_TEST_S3_ENDPOINT}",
        "region": s3_bucket.server.region,
        "access_key_id": "${STITCH_TEST_S3_KEY}",
        # The variable's name does not say "secret": the field makes its value one all the same.
        "secret_access_key": "${STITCH_TEST_S3_SECRET}",
        "allow_http": True,
    }
    path = write_table_yaml(tmp_path, document, "wide.yaml")
    return path, document["table"]["path"], s3_bucket.server.secret_key


def test_cli_on_s3_with_a_storage_block_keeps_its_secret(s3_config: tuple[Path, str, str], s3_bucket: Any) -> None:
    config, location, secret = s3_config
    landing = storage_for(f"{s3_bucket.url}/landing", s3_bucket.options)
    sink = io.BytesIO()
    pq.write_table(batch(ORDERS, orders_rows(range(12))), sink)
    landing.write_bytes("orders/part-0001.parquet", sink.getvalue())

    outputs = []
    for args in (
        ("init", "-c", str(config)),
        ("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json"),
        ("ingest", "-c", str(config), "--stream", "orders", "--engine", "local", "--json"),
        ("compact", "-c", str(config), "--engine", "local", "--json"),
        ("clean", "-c", str(config), "--engine", "local", "--json"),
        ("status", "-c", str(config), "--json"),
        ("timeline", "show", "-c", str(config), "--json"),
        ("read", "-c", str(config), "--json", "--limit", "0"),
    ):
        done = invoke(*args)
        assert done.exit_code == 0, f"{args}: {done.output}"
        outputs.append(done.output)
    assert json.loads(outputs[1])["rows"] == 12 and json.loads(outputs[2])["rows"] == 0
    assert json.loads(outputs[-1])["rows"] == 12
    assert all(secret not in text for text in outputs)

    # The table's own files never hold the secret; nor does the storage object Spark would ship.
    table_storage = storage_for(location, s3_bucket.options)
    names = list(table_storage.walk_files())
    assert ".stitch/table.json" in names
    assert all(secret.encode() not in table_storage.read_bytes(name) for name in names)
    from stitchlake.api import open as open_table

    table = open_table(str(config))
    assert secret.encode() not in pickle.dumps(table.storage)
    assert secret not in repr(table.config) and "secret" not in repr(table.storage)


def test_table_uri_and_refusals(s3_config: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    config, location, secret = s3_config
    assert invoke("init", "-c", str(config)).exit_code == 0
    # --table has no config: the client takes the standard AWS variables.
    assert invoke("timeline", "show", "--table", location).exit_code != 0  # no credentials at all
    monkeypatch.setenv("AWS_ENDPOINT_URL", __import__("os").environ["STITCH_TEST_S3_ENDPOINT"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", __import__("os").environ["STITCH_TEST_S3_KEY"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    done = invoke("read", "--table", location, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["rows"] == 0

    # Wrong credentials: a failure that names the object and not the secret.
    monkeypatch.setenv("STITCH_TEST_S3_SECRET", "not-the-secret-0123456789")
    refused = invoke("read", "-c", str(config))
    assert refused.exit_code == 1 and f"{location}/.stitch/" in refused.output
    assert "not-the-secret-0123456789" not in refused.output and secret not in refused.output

    # A secret written into the file is refused, and so are stores we do not implement.
    document = yaml.safe_load(config.read_text())
    document["storage"]["secret_access_key"] = "written-in-the-file"
    config.write_text(yaml.safe_dump(document))
    written = invoke("validate", "-c", str(config))
    assert written.exit_code == 2 and "storage.secret_access_key" in written.output
    assert "written-in-the-file" not in written.output
    document["storage"]["secret_access_key"] = "${STITCH_TEST_S3_SECRET}"
    document["table"]["path"] = "hdfs://namenode/warehouse/wide"
    config.write_text(yaml.safe_dump(document))
    hdfs = invoke("init", "-c", str(config))
    assert hdfs.exit_code == 2 and "hdfs:// is not a supported storage" in hdfs.output
