"""Jobs on a Spark standalone cluster (tests/support/spark_cluster.py) writing a table on the S3 server
(tests/support/s3_server.py).

Three `stitch ingest --engine spark` jobs run at once as three applications of one cluster, their executors in
JVMs and Python workers of the cluster's worker, reaching S3 through stitchlake's storage (no s3a, no Hadoop
jars); then a compaction job, then `stitch read --engine spark` (`spark.read.format("stitchlake")` in a job on
the cluster). The result equals the demo data's ground truth every time.

The config's `storage:` block gives the credentials as `${VAR}`s and the jobs' environment has no AWS_*
variable at all: the executors get the referenced variables from the launcher (`spark.executorEnv.*` in the
private properties file), so this also proves that nothing reached them by pickling the secret.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.processes import ROOT, concurrent_ingests, stitch
from tests.support.spark_cluster import CLUSTER_APP_CONF
from tests.support.spark_fixtures import write_config

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.cluster]
STREAMS = ("orders", "payments", "shipments")


def job_env(bucket: Any, log_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") or "CHECKSUM" in k}
    env.update(
        {
            "TEST_S3_ENDPOINT": bucket.server.endpoint,
            "TEST_S3_KEY_ID": bucket.server.access_key,
            "TEST_S3_SECRET": bucket.server.secret_key,
            "STITCH_LOG_DIR": str(log_dir),
        }
    )
    return env


@pytest.fixture(scope="module")
def cluster_table(
    spark_master: str, s3_server: Any, demo_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The demo streams' landing files on S3, a config on the cluster, and the three ingest jobs' results."""
    from concurrent.futures import ThreadPoolExecutor

    from scripts import rgw
    from stitchlake.storage import storage_for
    from tests.support.s3_server import S3Bucket, _bucket_name

    bucket = S3Bucket(_bucket_name("cluster"), s3_server, s3_server.env())
    rgw.create_bucket(s3_server._rgw(), bucket.name)
    landing = storage_for(f"{bucket.url}/landing", bucket.options)
    files = [p for p in (demo_data / "landing").rglob("*") if p.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: landing.write_bytes(str(p.relative_to(demo_data / "landing")), p.read_bytes()), files))

    folder = tmp_path_factory.mktemp("cluster")
    config = write_config(folder, demo_data / "landing")
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["table"]["path"] = f"{bucket.url}/warehouse/orders_wide"
    for name, stream in document["streams"].items():
        stream["source"]["path"] = f"{bucket.url}/landing/{name}"
    document["storage"] = {
        "endpoint": "${TEST_S3_ENDPOINT}",
        "access_key_id": "${TEST_S3_KEY_ID}",
        "secret_access_key": "${TEST_S3_SECRET}",
    }
    document["spark"] = {"master": spark_master, "conf": dict(CLUSTER_APP_CONF)}
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    env = job_env(bucket, folder / "logs")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            stitch(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )

    assert cli("init", "-c", str(config)).returncode == 0
    ran = concurrent_ingests(config, STREAMS, env)
    for stream, (code, _out, err) in ran.items():
        assert code == 0, f"ingest {stream} exited {code}:\n{err[-3000:]}"
    yield {
        "bucket": bucket,
        "config": config,
        "env": env,
        "cli": cli,
        "results": {s: json.loads(out.strip()) for s, (_code, out, _err) in ran.items()},
        "logs": folder / "logs",
    }
    rgw.delete_bucket(s3_server._rgw(), bucket.name)


def test_three_concurrent_ingest_jobs_on_the_cluster_give_the_ground_truth(
    cluster_table: dict[str, Any], demo_data: Path, spark_master: str
) -> None:
    import stitchlake
    from scripts.demo_data import compare
    from stitchlake.timeline.instant import Action

    results, env = cluster_table["results"], cluster_table["env"]
    for stream, result in results.items():
        assert result["engine"] == "spark" and result["stream"] == stream and result["source_files"] == 3
        log = Path(result["log"])
        assert log.is_relative_to(cluster_table["logs"]) and log.is_file()  # spark-submit's log: the only local file
        text = log.read_text(errors="replace")
        assert spark_master in text or "StandaloneSchedulerBackend" in text  # it ran on the cluster
        assert env["TEST_S3_SECRET"] not in text
    os.environ.update({k: env[k] for k in ("TEST_S3_ENDPOINT", "TEST_S3_KEY_ID", "TEST_S3_SECRET")})
    table = stitchlake.open(str(cluster_table["config"]))
    timeline = table.timeline()
    commits = timeline.completed([Action.DELTACOMMIT])
    assert sorted(str(timeline.commit(c).stream) for c in commits) == sorted(STREAMS)  # type: ignore[attr-defined]
    assert timeline.pending() == []
    assert compare(stitchlake.read(str(cluster_table["config"])), demo_data / "truth.parquet") == []


def test_compaction_on_the_cluster_and_a_cluster_session_reads_the_table(
    cluster_table: dict[str, Any], demo_data: Path, spark_master: str, tmp_path: Path
) -> None:
    import stitchlake
    from scripts.demo_data import compare

    compacted = cluster_table["cli"]("compact", "-c", str(cluster_table["config"]), "--engine", "spark", "--json")
    assert compacted.returncode == 0, compacted.stderr[-3000:]
    result = json.loads(compacted.stdout)
    assert result["engine"] == "spark" and result["result"]["file_groups"] > 0
    env = cluster_table["env"]
    os.environ.update({k: env[k] for k in ("TEST_S3_ENDPOINT", "TEST_S3_KEY_ID", "TEST_S3_SECRET")})
    config = str(cluster_table["config"])
    assert compare(stitchlake.read(config, mode="read_optimized"), demo_data / "truth.parquet") == []

    # `stitch read --engine spark`: spark.read.format("stitchlake") in a job whose executors are on the cluster (the
    # JVM reader hands a table on S3 to the Python data source when the session has no s3a), the part files written
    # by the executors; the secrets reach them as the other jobs' do.
    out = tmp_path / "read.parquet"
    read = cluster_table["cli"]("read", "-c", config, "--engine", "spark", "--out", str(out), "--json")
    assert read.returncode == 0, read.stderr[-3000:]
    answer = json.loads(read.stdout)
    assert answer["engine"] == "spark" and answer["reader"] == "python" and answer["files"] > 1, answer
    log = Path(answer["log"]).read_text(errors="replace")
    # the driver said why, once, in the job's Spark log (StitchSource's one-line notice)
    notices = [line for line in log.splitlines() if "; reading with the Python data source" in line]
    assert len(notices) == 1 and "no s3a file system" in notices[0], notices
    assert spark_master in log or "StandaloneSchedulerBackend" in log  # it ran on the cluster
    assert env["TEST_S3_SECRET"] not in log
    import pyarrow.parquet as pq

    assert compare(pq.read_table(out), demo_data / "truth.parquet") == []
