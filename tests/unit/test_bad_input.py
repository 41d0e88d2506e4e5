"""The bad-input catalogue (issues 7, 12 and 16): every way a cron job can hand `stitch` something wrong.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_bad_input.py).
"""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from stitchlake.errors import InputRejected
from tests.support.bad_input import orders


def test_text_that_is_not_utf8_is_refused_by_the_api_too(workspace: Path) -> None:
    """Arrow builds strings without checking them; stored, Latin-1 bytes made every later read of the table fail."""
    table = stitchlake.open(workspace / "table.yaml")
    status = pa.array(["café".encode("latin-1")], pa.binary()).view(pa.string())
    with pytest.raises(InputRejected, match="column status holds text that is not UTF-8") as refused:
        table.write("orders", pa.table(orders([5], status=status)))
    assert refused.value.column == "status"
    assert table.read().num_rows == 4
    categorical = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), status)  # its entries are the text
    with pytest.raises(InputRejected, match="column status holds text that is not UTF-8"):
        table.write("orders", pa.table(orders([5], status=categorical)))
    assert table.read().num_rows == 4


def test_whole_landing_files_set_aside_get_a_copy_each_whatever_their_names(tmp_path: Path) -> None:
    """Folders were flattened to `__`, so `x/y.csv` and `x__y.csv` shared one copy path and the second file's
    copy overwrote the first's evidence (both commits pointed at the one left)."""
    from stitchlake.storage.local import LocalStorage
    from stitchlake.writing.badrows import quarantine_file

    storage = LocalStorage(str(tmp_path))
    names = ["x/y.csv", "x__y.csv", "x~sy.csv", ".hidden.csv", "~dhidden.csv", "s3://b/x/y.csv", "s3_b__x__y.csv"]
    copies = [quarantine_file(storage, "20261201000000000", n, n.encode(), "bad", lambda _p: None) for n in names]
    paths = [c.copy for c in copies]
    assert len(set(paths)) == len(names), paths
    assert [storage.read_bytes(p or "") for p in paths] == [n.encode() for n in names]
    assert not any(p.rsplit("/", 1)[1].startswith(".") for p in paths if p)


@contextlib.contextmanager
def files_cut_at(size: int) -> Iterator[None]:
    """This process can write no file past `size` bytes (a write beyond fails with EFBIG, as a process killed or
    out of disk half-way through a write leaves it): the limit a shell's `ulimit -f` sets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from the write, not a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_second_attempt_failing_half_way_leaves_the_first_attempts_quarantine_whole(tmp_path: Path) -> None:
    """Two attempts of one Spark task (a speculative one) set the same rows and the same landing file aside, at
    one path. They were written in place: the attempt that lost, killed or failing half-way through its write, had
    already emptied the copy the winner wrote, and the only evidence of the bad rows was a torn file. One whole
    copy stays now."""
    from stitchlake.storage.local import LocalStorage
    from stitchlake.writing.badrows import quarantine_file, quarantine_rows

    storage = LocalStorage(str(tmp_path))
    instant, mark = "20261201000000000", lambda _path: None
    bad = pa.table({"k": [str(k) for k in range(2000)], "_reason": ["unparsable value in amount"] * 2000})
    data = b"k,amount\n" + b"".join(b"%d,n/a\n" % k for k in range(20000))
    rows = quarantine_rows(storage, instant, bad, "task-7", mark)
    copy = quarantine_file(storage, instant, "0001.csv", data, "bad", mark).copy
    assert copy is not None
    for attempt in (
        lambda: quarantine_rows(storage, instant, bad, "task-7", mark),
        lambda: quarantine_file(storage, instant, "0001.csv", data, "bad", mark),
    ):
        with files_cut_at(1024), pytest.raises(OSError, match="too large"):
            attempt()
    assert pq.read_table(tmp_path / rows).equals(bad)
    assert storage.read_bytes(copy) == data
    left = sorted(p.name for p in (tmp_path / rows).parent.rglob("*") if p.is_file())
    assert left == ["0001.csv", "rows-task-7.parquet"], "a failed attempt left a file behind"


def test_a_delete_is_not_rejected_for_values_it_carries_in_columns_a_delete_ignores(tmp_path: Path) -> None:
    """A delete is its key, partition and version (design.md §2): a value in its other columns never counts, yet one
    that did not parse made the delete a bad row, and the key stayed. Its ordering value still counts."""
    from tests.support.tables import new_table

    table = new_table(tmp_path)
    text = pa.string()

    def orders(rows: list[dict[str, str | None]]) -> pa.Table:
        names = ["k", "p", "amount", "status", "ots", "op"]
        return pa.table({n: pa.array([r.get(n) for r in rows], text) for n in names})

    table.write("orders", orders([{"k": "1", "p": "odd", "amount": "10", "status": "new", "ots": "1"}]))
    table.write("orders", orders([{"k": "1", "p": "odd", "amount": "n/a", "status": "x", "ots": "2", "op": "D"}]))
    assert table.read().num_rows == 0, "the delete took the key"
    with pytest.raises(InputRejected, match="unparsable value in ots"):  # its version must parse
        table.write("orders", orders([{"k": "1", "p": "odd", "amount": "1", "ots": "later", "op": "D"}]))
    with pytest.raises(InputRejected, match="unparsable value in amount"):  # not a delete: the value counts
        table.write("orders", orders([{"k": "2", "p": "even", "amount": "n/a", "ots": "3"}]))
    # a JSON value of the wrong type in such a column, judged by the reader, is dropped the same way
    import numpy as np

    from stitchlake.io.json_records import WRONG_JSON_TYPE
    from stitchlake.writing.batch import prepare

    stream = table.config.streams["orders"]
    delete = orders([{"k": "3", "p": "odd", "ots": "4", "op": "D"}, {"k": "4", "p": "even", "ots": "4"}])
    judged = np.array([f"{WRONG_JSON_TYPE}amount"] * 2, dtype=object)
    prepared = prepare(table.config, stream, delete, judged=judged)
    assert prepared.deleted.tolist() == [True] and prepared.bad is not None and prepared.bad.num_rows == 1


def test_numbers_for_a_timestamp_or_date_column_are_bad_rows_not_read_as_microseconds(tmp_path: Path) -> None:
    """Arrow casts an integer to a timestamp as a count of its unit: epoch milliseconds in a Parquet or Avro column
    (or a Kafka record's) became a moment in January 1970, silently; an int32 for a date, a day count. A number has
    no unit to say which: each is a bad row, as the same number in CSV text is, and `bad_rows` decides (a refusal
    of the whole column would stop a Kafka stream for good whatever the policy)."""
    from tests.support.tables import new_table

    document = {
        "table": {"name": "t", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {"e": {"columns": {"at": "timestamp", "day": "date"}}},
        "bad_rows": "quarantine",
    }
    table = new_table(tmp_path, document)
    for column, values in (("at", pa.array([1704103200000, None], pa.int64())), ("day", pa.array([19723, None]))):
        rows = {"k": pa.array([1, 2], pa.int64()), "at": pa.array([None, None], pa.timestamp("us", "UTC"))}
        rows |= {
            "day": pa.array([None, None], pa.date32()),
            column: values.cast(pa.int32()) if column == "day" else values,
        }
        written = table.write("e", pa.table(rows))
        assert written.bad_rows == 1, column  # the null is no number: its row is fine
        assert written.quarantine is not None
        rejected = pq.read_table(Path(table.path) / written.quarantine).to_pylist()
        assert [(r["k"], r["_reason"]) for r in rejected] == [("1", f"unparsable value in {column}")]
    assert table.read().to_pylist() == [{"k": 2, "at": None, "day": None}]
    strict = new_table(tmp_path / "strict", {**document, "bad_rows": "fail"})
    with pytest.raises(InputRejected, match="unparsable value in at"):
        strict.write("e", pa.table({"k": [1], "at": pa.array([1704103200000]), "day": pa.array([None], pa.date32())}))


def test_values_are_read_by_one_grammar_whatever_their_encoding_and_none_changes_on_the_way() -> None:
    """Found by a review of landing ingest: text past a float type's range became ±infinity, dictionary-encoded text
    (pandas categoricals) skipped the text grammar (`0x10` read as 16), text with nanoseconds was a bad row though
    nanoseconds are cut to µs, and 1 ns before 1970 became 1970 itself."""
    import datetime

    from stitchlake.config import ColumnSpec
    from stitchlake.writing.batch import cast_column

    def cast(values: pa.Array, type_name: str) -> tuple[list[object], list[bool]]:
        got, failed = cast_column(values, ColumnSpec(name="c", type=type_name), "test")
        return got.to_pylist(), failed.tolist()

    text = pa.array(["1e400", "-1e400", "inf", "-Infinity", "1.5", None])
    assert cast(text, "double") == ([None, None, float("inf"), float("-inf"), 1.5, None], [1, 1, 0, 0, 0, 0])
    with_a_bad_value = pa.array(["1e400", "abc", "2.5"])  # cast value by value: the same rule
    assert cast(with_a_bad_value, "double") == ([None, None, 2.5], [True, True, False])
    from stitchlake.config.values import parse_text  # and so `--where`, defaults and partition values read text

    with pytest.raises(ValueError, match="past the range of double"):
        parse_text("double", "1e400")
    assert parse_text("double", "-Infinity") == float("-inf")
    doubles = pa.array([1e39, float("inf"), 2.5])
    assert cast(doubles, "float") == ([None, float("inf"), 2.5], [True, False, False])
    categorical = pa.array(["0x10", "16", "yes"]).dictionary_encode()
    assert cast(categorical, "long") == ([None, 16, None], [True, False, True])
    assert cast(pa.array(["yes", "no"]).dictionary_encode(), "boolean") == ([True, False], [False, False])
    utc = datetime.UTC
    nanos = pa.array(["2024-01-01T10:00:00.123456789", "2024-01-01 10:00:00.1234567Z"])
    moment = datetime.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=utc)
    assert cast(nanos, "timestamp") == ([moment, moment], [False, False])
    before_1970 = pa.array([-1, -1001], pa.timestamp("ns", "UTC"))
    epoch = datetime.datetime(1970, 1, 1, tzinfo=utc)
    micro = datetime.timedelta(microseconds=1)
    assert cast(before_1970, "timestamp") == ([epoch - micro, epoch - 2 * micro], [False, False])
    # a zone whose clock turned back in that hour: the same instant, not a refusal
    ambiguous = pa.array([1729992600_123456789], pa.timestamp("ns", "Europe/Berlin"))
    turned_back = datetime.datetime(2024, 10, 27, 1, 30, 0, 123456, tzinfo=utc)
    assert cast(ambiguous, "timestamp") == ([turned_back], [False])
