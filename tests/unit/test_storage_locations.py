"""How a location is written (a path or a URI) is storage's to say, and callers ask a storage what it can do.

The landing files' identities are stored in checkpoints: these tests pin them, byte for byte, for a local path, a
`file://` URI and an `s3://` URI, as they were before the callers stopped testing schemes themselves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitchlake.config import SourceSpec
from stitchlake.config.fields import given_location, iceberg_catalog_refusal
from stitchlake.errors import ConfigError, UsageError
from stitchlake.io.landing import _identity, discover, split_location
from stitchlake.io.published import Target, check_iceberg_catalog
from stitchlake.storage import LocalStorage, storage_for
from stitchlake.storage.registry import absolute, is_local, is_uri, scheme_of, without_file_scheme
from stitchlake.storage.s3 import S3Storage
from stitchlake.table.handle import TableHandle as Table
from tests.support.tables import config


def test_a_location_is_a_uri_when_it_starts_with_a_scheme_and_slashes() -> None:
    schemes = [scheme_of(x) for x in ("s3://b/p", "S3://b", "file:///tmp/x", "hdfs://nn/x")]
    assert schemes == ["s3", "s3", "file", "hdfs"]
    assert not any(is_uri(x) for x in ("/tmp/x", "rel/x", "C:\\data", "C://data", "a/b://c", "data:v1/x"))
    assert is_local("/tmp/x") and is_local("rel") and is_local("file:///tmp/x")
    assert not is_local("s3://b/p") and not is_local("hdfs://nn/x")
    assert absolute("s3://b/p/") == "s3://b/p/" and absolute("file:///t") == "file:///t"
    assert absolute("rel/x") == str(Path("rel/x").resolve()) == given_location("rel/x")
    assert without_file_scheme("file:///tmp/x") == "/tmp/x" and without_file_scheme("s3://b/x") == "s3://b/x"
    assert without_file_scheme("/tmp/file:///x") == "/tmp/file:///x"


def _landing(tmp_path: Path) -> Path:
    land = tmp_path / "land"
    (land / "sub").mkdir(parents=True)
    (land / "x.csv").write_text("a\n1\n", encoding="utf-8")
    (land / "sub" / "y.csv").write_text("a\n2\n", encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "z.csv").write_text("a\n3\n", encoding="utf-8")
    return land


def test_landing_identities_are_unchanged_for_paths_file_uris_and_s3_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The strings checkpoints hold: relative to the source folder, the full location outside it."""
    _landing(tmp_path)
    monkeypatch.chdir(tmp_path)
    here = str(tmp_path.resolve())
    assert _identity(f"{here}/land", f"{here}/land", "x.csv") == "x.csv"
    assert _identity("land", "land", "sub/y.csv") == "sub/y.csv"
    assert _identity(f"{here}/land", "other", "z.csv") == f"{here}/other/z.csv"
    assert _identity(f"file://{here}/land", f"file://{here}/land", "x.csv") == "x.csv"
    assert _identity(f"file://{here}/land", f"file://{here}/other", "z.csv") == f"file://{here}/other/z.csv"
    assert _identity(f"{here}/land", f"file://{here}/land", "x.csv") == "x.csv"  # one file, one name
    assert _identity(f"file://{here}/land", f"{here}/land/sub", "y.csv") == "sub/y.csv"
    assert _identity("s3://b/land", "s3://b/land/", "sub/y.csv") == "sub/y.csv"
    assert _identity("s3://b/land", "s3://b/other", "z.csv") == "s3://b/other/z.csv"
    assert split_location("land/x.csv") == ("land", "x.csv") and split_location("x.csv") == (".", "x.csv")
    assert split_location(f"file://{here}/land/x.csv") == (f"file://{here}/land", "x.csv")
    assert split_location("s3://b/land/x.csv/") == ("s3://b/land", "x.csv")


@pytest.mark.parametrize("written", ["path", "file_uri"])
def test_discovery_names_files_by_their_identity_and_reads_a_file_uri_folder_as_a_folder(
    tmp_path: Path, written: str
) -> None:
    """A `file://` folder is asked of its storage (a folder on this machine), not stat-ed as if it were a file."""
    land = _landing(tmp_path).resolve()
    root = str(land) if written == "path" else land.as_uri()
    source = SourceSpec.model_validate({"path": root, "format": "csv"})
    assert [f.name for f in discover(source)] == ["sub/y.csv", "x.csv"]
    outside = str(tmp_path.resolve() / "other" / "z.csv")
    named = outside if written == "path" else Path(outside).as_uri()
    (found,) = discover(source, paths=[named])
    assert found.name == named and found.size == 4
    with pytest.raises(UsageError, match="is not a csv file"):
        discover(source, paths=[_not_csv(land, written)])


def _not_csv(land: Path, written: str) -> str:
    (land / "notes.txt").write_text("x", encoding="utf-8")
    return str(land / "notes.txt") if written == "path" else (land / "notes.txt").as_uri()


class _NoConditionalPuts(LocalStorage):
    """A real store that says it cannot create a file only if it is absent (an NFS mount without links, say)."""

    conditional_put = False


def test_a_table_refuses_a_storage_without_conditional_puts(tmp_path: Path) -> None:
    assert LocalStorage(str(tmp_path)).conditional_put and S3Storage("s3://bucket/t").conditional_put
    assert storage_for(f"file://{tmp_path}").conditional_put
    spec = config(tmp_path)
    with pytest.raises(ConfigError, match=r"creates a file only if it is absent.*_NoConditionalPuts cannot"):
        Table(spec, _NoConditionalPuts(spec.table.path))
    assert Table(spec).storage.conditional_put


def test_the_iceberg_catalog_rule_is_one_rule_at_config_time_and_at_publish_time(tmp_path: Path) -> None:
    sql = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}"}
    for local in (str(tmp_path), tmp_path.as_uri()):
        assert iceberg_catalog_refusal(local, {}) is None
        check_iceberg_catalog(Target(local), {})
    for remote in ("s3://b/wide", "hdfs://nn/wide"):
        assert iceberg_catalog_refusal(remote, sql) is None
        assert iceberg_catalog_refusal(remote, {"type": "rest"}) is None
        refused = iceberg_catalog_refusal(remote, {})
        assert refused is not None and "needs a catalog that is not a file on the object store" in refused
    with pytest.raises(UsageError, match="s3://b/wide needs a catalog that is not a file on the object store"):
        check_iceberg_catalog(Target("s3://b/wide"), {"type": "sql"})


@pytest.mark.parametrize("location", ["s3:/bucket/table", "hdfs:/x"])
def test_a_uri_written_with_one_slash_is_refused_not_taken_for_a_folder(location: str) -> None:
    with pytest.raises(ConfigError, match="with two slashes"):
        storage_for(location)


def test_hadoops_file_uri_with_one_slash_is_the_local_path(tmp_path: Path) -> None:
    """Spark hands a data source `file:/tmp/t` for `LOCATION '/tmp/t'`: the same local folder."""
    storage = storage_for(f"file:{tmp_path}")
    assert isinstance(storage, LocalStorage) and storage.local_path("x") == str(tmp_path / "x")


def test_a_linked_landing_file_keeps_the_name_it_always_had(tmp_path: Path) -> None:
    """Comparing a `file://` folder as a path must not follow links: a linked file under a `file://` source was
    always `linked.csv`, and a name that changes is a file ingested again. (Under a plain path it was always its
    target's full path: kept too.)"""
    land = tmp_path / "landing"
    land.mkdir()
    (tmp_path / "elsewhere.csv").write_text("k\n1\n", encoding="utf-8")
    (land / "linked.csv").symlink_to(tmp_path / "elsewhere.csv")
    real = str((tmp_path / "elsewhere.csv").resolve())
    assert _identity(land.as_uri(), land.as_uri(), "linked.csv") == "linked.csv"
    assert _identity(land.as_uri(), str(land), "linked.csv") == "linked.csv"
    assert _identity(str(land), str(land), "linked.csv") == real


def test_a_landing_file_gone_before_its_read_in_a_spark_task_is_recovered_as_itself() -> None:
    """A Spark task's error comes back as text and is recovered by its class's name in stitchlake.errors: the
    vanished file's error must live there, or the driver sees exit 1 and a Java traceback instead of exit 5."""
    from stitchlake.errors import LandingVanished
    from stitchlake.spark.errors import recovered, unwrap

    error = LandingVanished("landing/0001.csv: landing file vanished between the listing and the read", file="x")
    text = "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n  ...\n"
    wrapped = Exception(f"{text}stitchlake.errors.LandingVanished: {error}\n\tat org.apache.spark...")
    assert unwrap(wrapped)[:2] == ("LandingVanished", 5)
    assert isinstance(recovered(wrapped), LandingVanished)


def test_a_fenced_s3_create_is_bounded_within_the_budget_its_fence_asks_of_the_lease() -> None:
    """obstore retries a failed PUT for up to 3 minutes by default: a create behind a table-lock fence retried that
    long could land after the lease ran out. Fenced creates use a client whose attempts and retries fit the
    storage's `create_budget_s`, which the fence keeps on the lease (test_locks)."""
    import datetime as dt

    from stitchlake.storage import s3

    options = {"endpoint": "http://127.0.0.1:1", "region": "us-east-1"}
    plain, fenced = s3.client_for("bucket", options), s3.client_for("bucket", options, fenced=True)
    assert plain.retry_config is None and fenced is not plain
    assert fenced.retry_config["retry_timeout"] == dt.timedelta(seconds=s3.FENCED_RETRIES_S)
    assert str(fenced.client_options["timeout"]) in ("10s", str(dt.timedelta(seconds=s3.FENCED_ATTEMPT_S)))
    assert S3Storage("s3://bucket/t").create_budget_s > s3.FENCED_ATTEMPT_S + s3.FENCED_RETRIES_S
    assert fenced.retry_config["backoff"]["max_backoff"] <= dt.timedelta(seconds=1)
    assert LocalStorage("/tmp").create_budget_s == 0.0
