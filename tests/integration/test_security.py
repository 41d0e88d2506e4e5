"""Security basics (issue 7): safe YAML, no shell anywhere a process starts, nothing escapes the table folder,
and secrets from `${ENV}` are never printed or stored.

Everything runs the real `stitch` console script or reads the real source tree; the one Spark test runs a real
spark-submit, because the launcher's process and Spark's log are what it is about.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake
from tests.support.cli import console
from tests.support.security import (
    BASE,
    HOSTILE,
    SECRET,
    process_calls,
    shell_problems,
)
from tests.support.snapshots import snapshot
from tests.support.tables import new_table_file, write_table_yaml

ROOT = Path(__file__).resolve().parents[2]
STITCH = Path(sys.executable).parent / "stitch"
#: ZooKeeper hosts with a chroot: a lock-config value worth hiding, and a closed port so it fails at once.
SECRET_HOSTS = "127.0.0.1:9/stitch-secret-chroot-7f3a"


def stitch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return console(*args, cwd=cwd, env=env)


def write_orders(path: Path, keys: list[int], partitions: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = {"k": keys, "p": partitions, "amount": [10 * k for k in keys], "ots": [1] * len(keys)}
    pq.write_table(pa.table(rows), path)


# ------------------------------------------------------------------------------------------ safe YAML

PYTHON_TAGS = [
    '!!python/object/apply:os.system ["touch {witness}"]',
    '!!python/object/apply:subprocess.check_call [["touch", "{witness}"]]',
    '!!python/object/new:subprocess.Popen [["touch", "{witness}"]]',
    "!!python/name:os.system",
    "!!python/module:os",
]


@pytest.mark.parametrize("tag", PYTHON_TAGS, ids=[t.split()[0] for t in PYTHON_TAGS])
def test_yaml_tags_that_build_objects_are_refused_and_nothing_runs(tmp_path: Path, tag: str) -> None:
    witness = tmp_path / "PWNED"
    text = yaml.safe_dump(BASE, sort_keys=False) + f"bad_rows: {tag.format(witness=witness)}\n"
    (tmp_path / "evil.yaml").write_text(text)
    done = stitch("init", "-c", "evil.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "evil.yaml: not valid YAML at line" in done.stderr
    assert "is not allowed: a config is plain data" in done.stderr and "python/" in done.stderr
    assert not witness.exists()
    assert not (tmp_path / "table").exists()


# ------------------------------------------------------------------------------------------ no shell


def python_sources() -> list[Path]:
    skip = {".venv", ".git", "build", "dist", "node_modules", ".ruff_cache", ".pytest_cache", "demo"}
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not skip & set(path.relative_to(ROOT).parts) and not path.relative_to(ROOT).parts[0].endswith(".egg-info")
    ]


def test_no_process_is_ever_started_through_a_shell() -> None:
    """Every place that starts a process, in the package, the CLI, scripts and tests: an argv list, no shell."""
    problems, starters = [], []
    for path in python_sources():
        problems += [f"{path.relative_to(ROOT).parent}/{problem}" for problem in shell_problems(path)]
        starters += [(path.relative_to(ROOT).as_posix(), name) for _, name, _ in process_calls(path)]
    assert problems == []
    # The scan really sees the process starters (so an empty result above means something).
    assert ("stitchlake/jobs/spark_submit.py", ("subprocess", "Popen")) in starters
    assert len(starters) >= 5


# ------------------------------------------------------------------------------ staying inside the table


HOSTILE_PARTITIONS = ["../../escape", "..", ".", "/stitch-escape-probe", "a/b", "..\\..\\win", "%2e%2e%2f", "~", "x y"]


def test_partition_values_stay_inside_the_table_and_read_back_exactly(tmp_path: Path) -> None:
    """Values like `../../x` become escaped folder names under the table, through ingest and compaction, and
    read back (and filter) as the values they were."""
    workspace = tmp_path / "ws"
    write_table_yaml(workspace, BASE)
    keys = list(range(1, len(HOSTILE_PARTITIONS) + 1))
    write_orders(workspace / "landing/orders/0001.parquet", keys, HOSTILE_PARTITIONS)
    outside = snapshot(tmp_path)
    assert stitch("init", "-c", "table.yaml", cwd=workspace).returncode == 0
    for step in (("ingest", "-s", "orders"), ("compact",)):
        done = stitch(*step, "-c", "table.yaml", "--engine", "local", cwd=workspace)
        assert done.returncode == 0, done.stderr

    table_root = (workspace / "table").resolve()
    after = snapshot(tmp_path)
    created = set(after) - set(outside)
    assert created and all(name.startswith("ws/table/") for name in created)
    assert {name: after[name] for name in outside} == outside  # nothing outside the table changed
    for path in table_root.rglob("*"):
        assert path.resolve().is_relative_to(table_root)
    assert not Path("/stitch-escape-probe").exists()
    assert not (tmp_path / "escape").exists() and not (workspace / "escape").exists()
    partition_folders = {p.name for p in table_root.iterdir() if p.is_dir() and p.name != ".stitch"}
    assert len(partition_folders) == len(HOSTILE_PARTITIONS)

    done = stitch("read", "-c", "table.yaml", "--json", "-n", "0", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert {r["k"]: r["p"] for r in json.loads(done.stdout)["records"]} == dict(
        zip(keys, HOSTILE_PARTITIONS, strict=True)
    )
    filtered = stitch("read", "-c", "table.yaml", "--json", "--where", "p=../../escape", cwd=workspace)
    assert [r["k"] for r in json.loads(filtered.stdout)["records"]] == [1]


@pytest.mark.parametrize(
    "args",
    [
        ("rollback", "--instant", "../../x", "--engine", "local"),
        ("compact", "--run", "--instant", "../../x", "--engine", "local"),
        ("savepoint", "create", "--name", "../../x", "--engine", "local"),
        ("savepoint", "restore", "--name", "../../x", "--engine", "local"),
        ("read", "--as-of", "../../x"),
        ("timeline", "show", "--stream", "../x"),
        ("ingest", "-s", "../orders", "--engine", "local"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_path_like_arguments_are_refused_without_touching_files(tmp_path: Path, args: tuple[str, ...]) -> None:
    _, config = new_table_file(tmp_path / "ws", BASE)
    before = snapshot(tmp_path)
    done = stitch(*args, "-c", "table.yaml", cwd=config.parent)
    assert done.returncode == 2, done.stderr
    assert "../" in done.stderr  # the message quotes what was refused
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------------- secrets


def secret_document() -> dict[str, Any]:
    document = json.loads(json.dumps(BASE))
    document["spark"] = {
        "conf": {
            "spark.hadoop.fs.s3a.secret.key": "${STITCH_TEST_SECRET}",
            "spark.stitchtest.auth": "Bearer ${STITCH_TEST_SECRET}",
        }
    }
    document["concurrency"]["lock"] = {"provider": "zookeeper", "hosts": "${STITCH_TEST_ZK_HOSTS}", "wait_s": 1}
    document["secrets"] = ["STITCH_TEST_ZK_HOSTS"]  # not secret by its name: declared so
    return document


def test_secrets_from_the_environment_are_never_printed_or_stored(tmp_path: Path) -> None:
    """A secret in spark.conf and one in the lock config, through every command an operator runs, their
    `--json` forms, and a lock error whose message would name the hosts."""
    workspace = tmp_path / "ws"
    write_table_yaml(workspace, secret_document())
    write_orders(workspace / "landing/orders/0001.parquet", [1, 2], ["a", "b"])
    env = {"STITCH_TEST_SECRET": SECRET, "STITCH_TEST_ZK_HOSTS": SECRET_HOSTS}
    runs = {}
    for args in [
        ("init", "-c", "table.yaml"),
        ("init", "-c", "table.yaml", "--json"),
        ("status", "-c", "table.yaml"),
        ("status", "-c", "table.yaml", "--json"),
        ("timeline", "show", "-c", "table.yaml", "--json"),
        ("read", "-c", "table.yaml", "--json"),
        ("ingest", "-c", "table.yaml", "-s", "orders", "--engine", "local"),
        ("ingest", "-c", "table.yaml", "-s", "orders", "--engine", "local", "--json"),
    ]:
        runs[args] = stitch(*args, cwd=workspace, env=env)
    for args, done in runs.items():
        for secret in (SECRET, SECRET_HOSTS, "stitch-secret-chroot-7f3a", "S3cr3t"):
            assert secret not in done.stdout + done.stderr, (args, done.stdout, done.stderr)
    # The lock error happened, and says where (masked), not just that something failed.
    failed = runs[("ingest", "-c", "table.yaml", "-s", "orders", "--engine", "local")]
    assert failed.returncode == 4, failed.stderr
    assert "on ZooKeeper <secret from the environment>" in failed.stderr
    assert runs[("init", "-c", "table.yaml")].returncode == 0
    assert runs[("status", "-c", "table.yaml", "--json")].returncode == 0
    # Nothing under the table records them either (table.json, timeline, locks, logs).
    assert (workspace / "table/.stitch/table.json").is_file()
    for path in (workspace / "table").rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert SECRET.encode() not in content and b"stitch-secret-chroot" not in content, path


def test_a_secret_in_a_config_error_is_masked(tmp_path: Path) -> None:
    """Config errors quote the offending value; a value from the environment is masked instead."""
    document = json.loads(json.dumps(BASE))
    document["clean"] = {"retain": "${STITCH_TEST_RETAIN}"}
    document["compaction"] = {"strategy": "${STITCH_TEST_STRATEGY}"}
    document["secrets"] = ["STITCH_TEST_RETAIN", "STITCH_TEST_STRATEGY"]
    write_table_yaml(tmp_path, document)
    done = stitch(
        "init", "-c", "table.yaml", cwd=tmp_path, env={"STITCH_TEST_RETAIN": "-31415926", "STITCH_TEST_STRATEGY": "all"}
    )
    assert done.returncode == 2, done.stderr
    assert "clean.retain: must be >= 1, got <secret from the environment>" in done.stderr
    assert "31415926" not in done.stderr


@pytest.mark.spark
def test_spark_job_in_a_hostile_folder_runs_without_a_shell_and_logs_no_secret(tmp_path: Path) -> None:
    """A real spark-submit ingest from a folder whose name a shell would execute, with secrets in spark.conf:
    it works, nothing in the name ran, and neither the terminal nor Spark's log under .stitch/logs has the secret.
    """
    workspace = tmp_path / HOSTILE
    document = json.loads(json.dumps(BASE))
    document["spark"] = {
        "master": "local[1]",
        "conf": {
            "spark.driver.memory": "768m",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "1",
            "spark.hadoop.fs.s3a.secret.key": "${STITCH_TEST_SECRET}",
            "spark.stitchtest.auth": "Bearer ${STITCH_TEST_SECRET}",
        },
    }
    write_table_yaml(workspace, document)
    write_orders(workspace / "landing/orders/0001.parquet", [1, 2, 3], ["a", "b", "a"])
    env = {"STITCH_TEST_SECRET": SECRET}
    assert stitch("init", "-c", "table.yaml", cwd=workspace, env=env).returncode == 0
    done = stitch("ingest", "-c", "table.yaml", "-s", "orders", "--engine", "spark", "--json", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rows"] == 3 and result["engine"] == "spark"
    assert SECRET not in done.stdout + done.stderr and "S3cr3t" not in done.stdout + done.stderr
    logs = list((workspace / "table/.stitch/logs").iterdir())
    assert logs
    for path in (workspace / "table").rglob("*"):
        if path.is_file():
            assert b"S3cr3t" not in path.read_bytes(), path
    assert not list(tmp_path.rglob("PWNED*"))
    assert stitchlake.read(str(workspace / "table")).num_rows == 3

    # A job that fails on a ZooKeeper lock whose hosts are a secret: the traceback and kazoo's own log lines
    # in Spark's log would quote them; the job masks both. (A compaction planned before, run on Spark, takes
    # the lock inside the job; an ingest would be refused by the CLI's claim before any JVM started.)
    scheduled = stitch("compact", "-c", "table.yaml", "--schedule", "--json", cwd=workspace, env=env)
    assert json.loads(scheduled.stdout)["scheduled"], scheduled.stderr
    document["concurrency"]["lock"] = {"provider": "zookeeper", "hosts": "${STITCH_TEST_ZK_HOSTS}", "wait_s": 1}
    document["secrets"] = ["STITCH_TEST_ZK_HOSTS"]
    write_table_yaml(workspace, document)
    env["STITCH_TEST_ZK_HOSTS"] = SECRET_HOSTS
    failed = stitch("compact", "-c", "table.yaml", "--run", "--engine", "spark", cwd=workspace, env=env)
    assert failed.returncode == 4, failed.stderr
    assert "<secret from the environment>" in failed.stderr
    assert len(list((workspace / "table/.stitch/logs").iterdir())) == len(logs) + 1
    for path in (workspace / "table").rglob("*"):
        if path.is_file():
            assert b"stitch-secret-chroot" not in path.read_bytes(), path
    assert SECRET_HOSTS not in failed.stdout + failed.stderr
