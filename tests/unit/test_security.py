"""Security basics (issue 7): safe YAML, no shell anywhere a process starts, nothing escapes the table folder, and
secrets from `${ENV}` are never printed or stored.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_security.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import stitchlake
from stitchlake.config import parse_config
from stitchlake.errors import ConfigError, StitchError
from stitchlake.jobs.launch import target_args
from stitchlake.jobs.requests import IngestRequest
from stitchlake.jobs.spark_submit import JobFiles, build_argv, spark_properties, write_properties
from stitchlake.storage import LocalStorage
from tests.support.security import BASE, HOSTILE, SECRET, process_calls, shell_problems
from tests.support.tables import write_table_yaml


def test_the_config_loader_is_a_safe_loader() -> None:
    """Belt and braces: whatever the CLI does, `load_config` itself must never construct Python objects."""
    import yaml as pyyaml

    from stitchlake.config import _unique_key_loader

    loader = _unique_key_loader()
    assert issubclass(loader, pyyaml.SafeLoader)
    assert not issubclass(loader, pyyaml.FullLoader | pyyaml.UnsafeLoader)


def test_the_scan_catches_shell_strings(tmp_path: Path) -> None:
    """The checker itself: each spelling of a shell command line is reported, an argv list without one is not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os, subprocess as sp\nfrom subprocess import run\n"
        "sp.run('ls -l', check=True)\nrun(['ls'], shell=True)\nos.system('ls')\n"
        "sp.Popen(f'ls {x}')\nsp.check_output('ls ' + x)\nrun(args='ls %s' % x)\nrun(['ls'], shell=False)\n"
    )
    assert len(process_calls(bad)) == 7
    assert [problem.split(":")[1] for problem in shell_problems(bad)] == ["3", "4", "5", "6", "7", "8"]


def test_spark_submit_argv_keeps_hostile_config_values_whole(tmp_path: Path) -> None:
    """The master and the config path reach spark-submit as single argv elements, exactly as written; spark.conf
    values do not reach the command line at all (they go to a private properties file)."""
    folder = tmp_path / HOSTILE
    master = "local[1]; $(touch PWNED) `touch PWNED2` && echo"
    note = "a b; $(touch PWNED3) | cat"
    document = {**BASE, "spark": {"master": master, "conf": {"spark.stitchtest.note": note}}}
    table = stitchlake.open(write_table_yaml(folder, document))
    files = JobFiles(
        tmp_path / "job.log", tmp_path / "result.json", tmp_path / "spark.properties", tmp_path / "request.json"
    )
    argv = build_argv(table.config, "ingest", target_args(table, IngestRequest(stream="orders")), files)
    assert isinstance(argv, list) and all(isinstance(part, str) for part in argv)
    assert argv[argv.index("--master") + 1] == master
    assert argv[argv.index("--config") + 1] == str((folder / "table.yaml").resolve())
    assert not any(note in part for part in argv)
    write_properties(files.properties, spark_properties(table.config))
    assert "spark.stitchtest.note=a b; $(touch PWNED3) | cat" in files.properties.read_text()
    assert not list(tmp_path.rglob("PWNED*"))


def test_executors_on_a_cluster_get_the_kafka_secrets_by_name_in_the_private_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kafka source's secret options stay `${VAR}` and every process resolves them, so executors on other hosts
    need the variables: they go as `spark.executorEnv.*` into the 0600 properties file (never the argv), Spark is
    told to redact them by name, and a variable the config gives executors itself (a Kubernetes secret) is left to
    it. A local master forwards nothing (its workers inherit the environment)."""
    monkeypatch.setenv("STITCH_TEST_KAFKA_PASS", SECRET)
    monkeypatch.setenv("STITCH_TEST_KAFKA_OAUTH", "clientSecret=oauth-S3cr3t")
    document = json.loads(json.dumps(BASE))
    document["streams"]["orders"]["source"] = {
        "format": "kafka",
        "topic": "orders",
        "bootstrap_servers": "127.0.0.1:9",
        "options": {
            "sasl.password": "${STITCH_TEST_KAFKA_PASS}",
            "sasl.oauthbearer.config": "${STITCH_TEST_KAFKA_OAUTH}",
        },
    }
    document["spark"] = {"master": "spark://host:7077"}
    table = stitchlake.open(write_table_yaml(tmp_path, document))
    properties = spark_properties(table.config)
    forwarded = {k: v for k, v in properties.items() if k.startswith("spark.executorEnv.")}
    assert forwarded == {
        "spark.executorEnv.STITCH_TEST_KAFKA_PASS": SECRET,
        "spark.executorEnv.STITCH_TEST_KAFKA_OAUTH": "clientSecret=oauth-S3cr3t",
    }
    redaction = re.compile(properties["spark.redaction.regex"].replace("(?i)", ""), re.IGNORECASE)
    assert all(redaction.search(key) for key in forwarded)
    assert redaction.search("spark.hadoop.fs.s3a.secret.key"), "Spark's own default is kept"
    files = JobFiles(tmp_path / "job.log", tmp_path / "result.json", tmp_path / "spark.properties", tmp_path / "r.json")
    argv = build_argv(table.config, "ingest", target_args(table, IngestRequest(stream="orders")), files)
    assert not [part for part in argv if "S3cr3t" in part]
    write_properties(files.properties, properties)
    assert files.properties.stat().st_mode & 0o777 == 0o600

    document["spark"]["conf"] = {"spark.kubernetes.executor.secretKeyRef.STITCH_TEST_KAFKA_PASS": "kafka:password"}
    table = stitchlake.open(write_table_yaml(tmp_path, document))
    assert [k for k in spark_properties(table.config) if k.startswith("spark.executorEnv.")] == [
        "spark.executorEnv.STITCH_TEST_KAFKA_OAUTH"
    ]
    document["spark"] = {"master": "local[2]"}
    table = stitchlake.open(write_table_yaml(tmp_path, document))
    local = spark_properties(table.config)
    assert not [k for k in local if "executorEnv" in k] and "spark.redaction.regex" not in local


ESCAPING_NAMES = ["../orders", "..", ".", "a/b", "a\\b", "/etc", "x y", "~root", "$(touch PWNED)"]


@pytest.mark.parametrize("name", ESCAPING_NAMES)
@pytest.mark.parametrize("where", ["stream", "partition column", "key column", "column", "table"])
def test_names_that_could_leave_the_table_folder_are_refused(tmp_path: Path, name: str, where: str) -> None:
    document = json.loads(json.dumps(BASE))
    if where == "stream":
        document["streams"][name] = document["streams"].pop("orders")
        path = f"streams.{name}"
    elif where == "partition column":
        document["table"]["partition_by"] = {name: "string"}
        path = f"table.partition_by.{name}"
    elif where == "key column":
        document["table"]["key"] = {name: "long"}
        path = f"table.key.{name}"
    elif where == "column":
        document["streams"]["orders"]["columns"][name] = "long"
        path = f"streams.orders.columns.{name}"
    else:
        document["table"]["name"] = name
        path = "table.name"
    with pytest.raises(ConfigError) as refused:
        parse_config(document, file="t.yaml", base=tmp_path)
    assert f"t.yaml: {path}: {name!r} is not a valid" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_storage_refuses_paths_that_leave_the_table(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "table"))
    for path in ("../escape", "a/../../escape", "/tmp/escape", "a/../../../escape"):
        with pytest.raises(StitchError, match="table folder"):
            storage.put_if_absent(path, b"x")
        with pytest.raises(StitchError, match="table folder"):
            storage.write_atomic(path, b"x")
    assert list(tmp_path.rglob("*")) == []
