"""pytest plugin: a real Spark standalone cluster (master + one worker, scripts/spark_standalone.py).

`spark_master` (session scope) yields "spark://127.0.0.1:<port>"; submit with the venv's `spark-submit
--master <it>` plus `CLUSTER_APP_CONF`, so that several applications run side by side instead of queueing.
The worker advertises 6 cores on any machine (`$STITCH_SPARK_WORKER_CORES`), because an executor needs at
least one core and three concurrent applications need three executors; cores are only scheduling tokens here.
`$STITCH_SPARK_MASTER` points the tests at an existing cluster instead.

Under pytest-xdist, workers share one cluster the same way
tests/support/s3_server.py shares the S3 server (file lock + state in the common base temp dir, a watchdog that stops
it when the xdist controller exits).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from scripts import spark_standalone as standalone
from tests.support.session_servers import serve

WORKER_CORES = int(os.environ.get("STITCH_SPARK_WORKER_CORES", "6"))
WORKER_MEMORY = os.environ.get("STITCH_SPARK_WORKER_MEMORY", "4g")
DEFAULT_APP_CORES = 2  # spark.deploy.defaultCores: an app that sets nothing cannot take the whole worker

# Per-application settings for spark-submit --conf: each app gets one 2-slot executor of 512 MiB.
CLUSTER_APP_CONF = {
    "spark.cores.max": "2",
    "spark.executor.cores": "2",
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
}


@pytest.fixture(scope="session")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """'spark://127.0.0.1:<port>' of a standalone cluster that lives for the test session."""
    if external := os.environ.get("STITCH_SPARK_MASTER"):
        yield external
        return
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Spark cluster: java is not on PATH")
    yield from serve(
        tmp_path_factory,
        "spark-cluster",
        "the Spark cluster",
        lambda workdir, owner: (
            standalone.start(
                workdir, cores=WORKER_CORES, memory=WORKER_MEMORY, watch_pid=owner, default_cores=DEFAULT_APP_CORES
            ).master_url
        ),
        standalone.stop,
        standalone.SparkClusterError,
    )
