"""Side Spark environments: a pinned PySpark and the Maven jars of the connectors that run on it.

stitchlake's own `.venv` holds the newest PySpark it supports. The connectors it is compared with and read by are
built against particular Spark versions, so each runs in a folder of its own (`pip install --target`) put first on
`PYTHONPATH` of a process started with the project's Python: that process imports the pinned PySpark, and
stitchlake and its other dependencies from `.venv`. Jars come from Maven Central through `maven_jars` (never
committed).

- `SPARK_4_1`: the newest Spark that both Delta's (`delta-spark_4.1`) and Iceberg's (`iceberg-spark-runtime-4.1`)
  Spark runtimes exist for; stitchlake's data source runs on it too (`stitch stream` needs PySpark 4.2).
- `SPARK_3_5`: the Spark that the Hudi and Paimon Spark connectors this machine's Maven Central serves are built
  for (their Spark 4 bundles are not served here).

`S3A` is Hadoop's S3 connector for a side environment's sessions (`install(env, trees=(S3A,))`): Spark reads
`s3a://` (and `s3://`, mapped to the same file system) through it. hadoop-aws must be the version of the Hadoop
inside PySpark's jars (`hadoop-client-api-3.4.2.jar` in PySpark 4.1.4), and calls the AWS SDK v2 it was built
against (2.29.52, hadoop-project 3.4.2's `aws-java-sdk-v2.version`). Hadoop ships that SDK as its `bundle`, a
~600 MB jar of every AWS service; the S3, STS and transfer-manager modules with their dependencies are 14 MB and
all S3A calls. `s3a_jars(version)` gives the connector for another Hadoop, such as the project's PySpark's 3.5.0
(the JVM reader's S3 test loads it). The libraries PySpark already has (Netty, SLF4J, Apache HttpClient,
commons-codec/logging) are left out: Spark's own copies are found first anyway.

`python -m scripts.spark_envs NAME` installs one and prints its folder.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts import ROOT, run_captured
from scripts.maven_jars import fetch, fetch_tree

INSTALL_TIMEOUT_S = 1800.0

DELTA_VERSION = "4.4.0"
ICEBERG_VERSION = "1.12.0"
HUDI_VERSION = "1.2.0"
PAIMON_VERSION = "0.9.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.46.1.3"
HADOOP_AWS_VERSION = "3.4.2"
#: The AWS SDK v2 each Hadoop's S3A was built against (hadoop-project's `aws-java-sdk-v2.version`): 3.4.2 is in
#: PySpark 4.1.4, 3.5.0 in the project's PySpark.
AWS_SDK_FOR_HADOOP = {"3.4.2": "2.29.52", "3.5.0": "2.35.4"}


@dataclass(frozen=True)
class JarTree:
    """An artifact that is not a bundle, with the runtime dependencies Maven resolves for it (`also`: more
    artifacts resolved with it, `excludes`: `G:A` or `G:*` left out)."""

    root: str
    also: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()

    def fetch(self) -> list[Path]:
        return fetch_tree(self.root, self.excludes, also=self.also)


def s3a_jars(hadoop: str) -> JarTree:
    """Hadoop's S3 connector for the Hadoop version `hadoop` with the SDK modules it calls (see the module doc)."""
    sdk = AWS_SDK_FOR_HADOOP.get(hadoop)
    if sdk is None:
        raise RuntimeError(f"no AWS SDK version known for Hadoop {hadoop}: add it to spark_envs.AWS_SDK_FOR_HADOOP")
    return JarTree(
        root=f"org.apache.hadoop:hadoop-aws:{hadoop}",
        also=tuple(f"software.amazon.awssdk:{name}:{sdk}" for name in ("s3", "s3-transfer-manager", "sts")),
        excludes=(
            "software.amazon.awssdk:bundle",
            "io.netty:*",
            "org.slf4j:*",
            "org.apache.httpcomponents:*",
            "commons-codec:commons-codec",
            "commons-logging:commons-logging",
        ),
    )


S3A = s3a_jars(HADOOP_AWS_VERSION)


def pyspark_hadoop_version() -> str:
    """The Hadoop inside the project's PySpark (its `hadoop-client-api-<version>.jar`): what its S3A must match."""
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        raise RuntimeError("PySpark is not installed in this environment")
    jars = Path(found.origin).parent / "jars"
    names = [p.name for p in jars.glob("hadoop-client-api-*.jar")]
    if len(names) != 1:
        raise RuntimeError(f"cannot tell PySpark's Hadoop version from {jars}: {names}")
    return names[0].removeprefix("hadoop-client-api-").removesuffix(".jar")


@dataclass(frozen=True)
class SparkEnv:
    """A pinned PySpark (pip packages) with the jars its sessions load."""

    name: str
    packages: tuple[str, ...]
    jars: tuple[str, ...]

    @property
    def folder(self) -> Path:
        return ROOT / ".venv" / self.name

    @property
    def spark_version(self) -> str:
        return next(p.split("==")[1] for p in self.packages if p.startswith("pyspark=="))


SPARK_4_1 = SparkEnv(
    name="spark-4.1",
    packages=("pyspark==4.1.4", "py4j==0.10.9.9"),
    jars=(
        f"io.delta:delta-spark_4.1_2.13:{DELTA_VERSION}",
        f"io.delta:delta-storage:{DELTA_VERSION}",
        f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{ICEBERG_VERSION}",
        SQLITE_JDBC,
    ),
)
SPARK_3_5 = SparkEnv(
    name="spark-3.5",
    packages=("pyspark==3.5.9", "py4j==0.10.9.7"),
    jars=(
        f"org.apache.hudi:hudi-spark3.5-bundle_2.12:{HUDI_VERSION}",
        f"org.apache.paimon:paimon-spark-3.5:{PAIMON_VERSION}",
    ),
)
ENVS = {env.name: env for env in (SPARK_4_1, SPARK_3_5)}


@dataclass(frozen=True)
class Installed:
    """What a process needs to run under an installed side environment."""

    env: SparkEnv
    folder: Path
    jars: tuple[Path, ...]

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with the pinned PySpark first on the path; the variables
        that would point Spark elsewhere are dropped. `STITCH_SPARK_JARS` lists the jars (comma-separated) for the
        session's `spark.jars`."""
        env = {
            k: v
            for k, v in (os.environ if base is None else base).items()
            if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
        }
        env["PYTHONPATH"] = os.pathsep.join([str(self.folder), str(ROOT)])
        env["PYSPARK_PYTHON"] = sys.executable
        env["STITCH_SPARK_JARS"] = ",".join(map(str, self.jars))
        return env


def install(env: SparkEnv, trees: tuple[JarTree, ...] = ()) -> Installed:
    """Install the environment on first use (one installer at a time), with the jars of `trees` (e.g. `S3A`) after
    its own; a failure raises, it is never skipped."""
    folder = env.folder
    done = folder / ".installed"
    wanted = "\n".join(env.packages)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done.read_text() if done.exists() else "") != wanted:
            pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
            argv = [*pip, "--upgrade", "--target", str(folder), *env.packages]
            finished = run_captured(argv, INSTALL_TIMEOUT_S)
            if finished.returncode != 0:
                raise RuntimeError(
                    f"installing {env.name} failed (exit {finished.returncode}):\n{finished.stderr[-3000:]}"
                )
            done.write_text(wanted)
    extra = [jar for tree in trees for jar in tree.fetch()]
    return Installed(env, folder, (*fetch(env.jars), *extra))


if __name__ == "__main__":
    for name in sys.argv[1:] or list(ENVS):
        installed = install(ENVS[name], (S3A,) if name == SPARK_4_1.name else ())
        print(installed.folder)
        for jar in installed.jars:
            print(f"  {jar}")
