"""Kafka topics as a stream's source: the topic's offsets, and one partition's records read and decoded.

The table, not the broker, keeps a stream's offsets (design.md §6): each deltacommit records the offset range it
consumed per partition, so the consumer here never joins a group's offset bookkeeping and commits nothing; it is
assigned an explicit range and reads exactly it. Both engines read through this module (Spark tasks call
`read_range` on the executors), so they accept and reject the same records.

Values are JSON objects or Avro records (binary encoding, the writer schema given in the config; no schema
registry). A value that does not decode is a bad row whose reason, topic, partition and offset go to quarantine.
Records carry `_kafka_topic`, `_kafka_partition` and `_kafka_offset` on their way to `batch.prepare`, so a bad
row names where it came from. The client's own log goes to `client_log`, each problem once (a down broker makes
librdkafka log every reconnect).
"""

from __future__ import annotations

import decimal
import io
import json
import logging
import math
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from stitchlake.errors import ConfigError, InputRejected, StitchError, UsageError
from stitchlake.io.json_records import WRONG_JSON_TYPE, typed_column
from stitchlake.timeline.metadata import OffsetRange

if TYPE_CHECKING:
    from stitchlake.config import SourceSpec

#: Columns every decoded record carries (dropped by `batch.prepare`, kept with bad rows in quarantine).
TOPIC = "_kafka_topic"
PARTITION = "_kafka_partition"
OFFSET = "_kafka_offset"
#: The raw value of a record that did not decode (quarantine keeps it as evidence).
VALUE = "_value"
UNDECODABLE = "undecodable record value"
#: A record's position in its batch: partition << OFFSET_BITS | (offset - the range's first offset), so it is
#: unique in the commit and the same however often the range is read (design.md §2).
OFFSET_BITS = 40
#: Records a consumer hands over per call.
BATCH = 5000
#: A read that has had nothing for this long asks whether its topic still exists (a consumer assigned to a deleted
#: topic hears nothing at all), then again after twice as long, and so on until `read_timeout_s`.
STALL_CHECK_S = 5.0
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: A topic id of all zero bits: what a broker without topic ids (before Kafka 2.8) answers.
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


class _OncePerProblem(logging.Filter):
    """Lets a client log line through once per facility and message shape: librdkafka retries a down broker every
    few milliseconds and logs each failure (hundreds of `FAIL` lines before stitch's own error says the same)."""

    #: Parts of a line that change from one retry to the next (timings, counts, addresses' numbers).
    _VARYING = re.compile(r"\(after [^)]*\)|\d+")

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        facility = str(args[0]) if args else ""
        text = str(args[-1]) if args else record.getMessage()
        key = (facility, self._VARYING.sub("", text))
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


#: The Kafka client's own log (librdkafka's, handed over by confluent-kafka when a client is polled): warnings and
#: errors reach stderr the way stitchlake's other log lines do (debug lines with STITCH_DEBUG=1), each problem once;
#: librdkafka would otherwise print every line itself, informational ones (`%6|...`) included.
client_log = logging.getLogger(f"{__name__}.client")
client_log.addFilter(_OncePerProblem())


def where(source: SourceSpec) -> str:
    """The topic and brokers, for messages."""
    return f"Kafka topic {source.topic} at {source.bootstrap_servers}"


def client_settings(source: SourceSpec) -> dict[str, Any]:
    """The consumer's settings: the brokers, the config's client options (`${VAR}` secrets read from this
    process's environment now), and what stitch sets itself: explicit assignment, nothing committed, the client's
    log to `client_log`."""
    settings: dict[str, Any] = {"bootstrap.servers": str(source.bootstrap_servers)}
    for key, value in source.options.items():
        match = _ENV.fullmatch(value.strip())
        if match is not None:
            found = os.environ.get(match.group(1), match.group(2))
            if found is None:
                raise ConfigError(
                    f"{source.yaml_path}.options.{key}: environment variable {match.group(1)} is not set in this "
                    "process"
                )
            value = found
        settings[key] = value
    settings.update(
        {
            "group.id": "stitchlake",
            "client.id": "stitchlake",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
            "isolation.level": "read_committed",  # records of aborted transactions are skipped, never ingested
            "logger": client_log,
        }
    )
    return settings


#: `client_settings` an admin client does not take.
_CONSUMER_ONLY = (
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "auto.offset.reset",
    "isolation.level",
)


def environment(source: SourceSpec) -> dict[str, str]:
    """The variables the source's options refer to (`${VAR}`: its secrets) that are set in this process: what a
    process on another host (a Spark executor) needs in its environment for `client_settings` to work there."""
    found: dict[str, str] = {}
    for value in source.options.values():
        match = _ENV.fullmatch(value.strip())
        if match is not None and match.group(1) in os.environ:
            found[match.group(1)] = os.environ[match.group(1)]
    return found


def _kafka_error(source: SourceSpec, what: str, error: Any) -> StitchError:
    return StitchError(f"{where(source)}: {what} failed ({error}); is the broker reachable, and the topic there?")


class TopicState(NamedTuple):
    """What the broker says about a stream's topic now."""

    #: The topic's id (None from a broker without topic ids): a topic deleted and created again has a new one.
    topic_id: str | None
    #: Per partition, the earliest offset it still holds and its end (the last stable offset).
    offsets: dict[int, tuple[int, int]]


def topic_offsets(source: SourceSpec) -> dict[int, tuple[int, int]]:
    """Per partition of the topic, the earliest offset it still holds and its end (the last stable offset: what a
    read_committed consumer can read now)."""
    return topic_state(source).offsets


def topic_state(source: SourceSpec) -> TopicState:
    """The topic's id and, per partition, the earliest offset it still holds and its end (the last stable offset:
    what a read_committed consumer can read now)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin._listoffsets import OffsetSpec

    admin = _admin(source)
    try:
        topic_id, partitions = _describe(admin, source)
        found: dict[int, list[int]] = {p: [0, 0] for p in partitions}
        for index, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):  # type: ignore[no-untyped-call]
            asked = {TopicPartition(str(source.topic), p): spec for p in partitions}
            try:
                futures = admin.list_offsets(
                    asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=source.read_timeout_s
                )
                for tp, future in futures.items():
                    found[tp.partition][index] = int(future.result().offset)
            except KafkaException as exc:
                raise _kafka_error(source, "listing the topic's offsets", exc.args[0]) from None
    finally:
        admin.poll(0)  # hands the client's queued log lines to `client_log`
    return TopicState(topic_id, {p: (low, high) for p, (low, high) in found.items()})


def _admin(source: SourceSpec) -> Any:
    from confluent_kafka.admin import AdminClient

    settings = client_settings(source)
    for key in _CONSUMER_ONLY:  # the admin client warns on stderr of each it is given
        settings.pop(key)
    return AdminClient(settings)


#: How often `same_topic` asks before a broker that does not answer fails the ingest.
SAME_TOPIC_ATTEMPTS = 3


def same_topic(source: SourceSpec, ranges: Sequence[OffsetRange], asking_once: bool = False) -> None:
    """Refuse (exit 5) an ingest whose ranges were planned on a topic since deleted (and perhaps created again):
    the same offsets name other records there. Asked once, after every range was read and before the commit:
    topic ids are never reused, so if the id still holds, every record read came from the planned topic. A read
    that failed asks too (`asking_once`: a broker that does not answer then leaves the read's own error to say
    so), so a topic deleted under it is exit 5, not a broker error."""
    planned = next((r.topic_id for r in ranges if r.topic_id is not None), None)
    if planned is None:
        return
    admin = _admin(source)
    now: str | None = None
    attempts = 1 if asking_once else SAME_TOPIC_ATTEMPTS
    try:
        for attempt in range(1, attempts + 1):  # a blip now would throw away a whole written ingest
            try:
                # A read's own check asks briefly: a broker that does not answer is the read's error to report.
                now = _describe(admin, source, min(STALL_CHECK_S, source.read_timeout_s) if asking_once else None)[0]
                break
            except UsageError:  # deleted, not (yet) created again
                now = "none: the topic does not exist now"
                break
            except StitchError:
                if asking_once:
                    return
                if attempt == attempts:
                    raise
                time.sleep(attempt)
    finally:
        admin.poll(0)
    if now is not None and now != planned:
        raise InputRejected(
            f"{where(source)} was deleted (and perhaps created again) while the ingest read it (topic id {planned} "
            f"when planned, {now}): nothing was ingested; run the ingest again, and it will name the way on "
            "(--reset-offsets)",
            file=f"kafka:{source.topic}",
        )


def _describe(admin: Any, source: SourceSpec, timeout: float | None = None) -> tuple[str | None, list[int]]:
    """The topic's id and partitions (a broker that cannot describe topics: its partitions, no id)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    timeout = source.read_timeout_s if timeout is None else timeout
    topic = str(source.topic)
    try:
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise _no_topic(source, f" ({error})") from None
        if error.code() not in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            raise _kafka_error(source, "reading the topic's metadata", error) from None
    else:
        topic_id = str(described.topic_id)
        return (None if topic_id == _NO_TOPIC_ID else topic_id), sorted(p.id for p in described.partitions)
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _kafka_error(source, "reading the topic's metadata", exc.args[0]) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise _no_topic(source, f" ({found.error})" if found is not None and found.error is not None else "")
    return None, sorted(found.partitions)


def _no_topic(source: SourceSpec, why: str) -> UsageError:
    return UsageError(f"{where(source)} does not exist{why}: create it, or fix the stream's source.topic in the config")


def read_range(source: SourceSpec, chunk: OffsetRange) -> list[tuple[int, bytes | None]]:
    """The (offset, value) of every record of `chunk` (transaction markers and aborted records skipped, so there
    may be fewer than its size). Raises InputRejected when the topic no longer holds the range's start."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(client_settings(source))
    records: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(chunk.topic, chunk.partition, chunk.start)])
        last_progress = time.monotonic()
        stall_check = STALL_CHECK_S
        done = chunk.start >= chunk.end
        while not done:
            messages = consumer.consume(num_messages=min(BATCH, max(1, chunk.end - chunk.start)), timeout=1.0)
            for message in messages:
                error = message.error()
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    last_progress = time.monotonic()  # not a retriable error: a broker repeating one is not progress
                    stall_check = STALL_CHECK_S
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = done or int(message.offset() or 0) >= chunk.end
                        continue
                    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        same_topic(source, [chunk], asking_once=True)
                        raise InputRejected(
                            f"{where(source)}: partition {chunk.partition} no longer holds offset {chunk.start} "
                            f"(retention deleted it while it was read: {error.str()}); run the ingest again",
                            file=f"kafka:{chunk.topic}/{chunk.partition}",
                        )
                    if error.fatal() or not error.retriable():
                        same_topic(source, [chunk], asking_once=True)
                        raise _kafka_error(source, f"reading partition {chunk.partition}", error.str())
                    continue
                offset = int(message.offset() or 0)
                if offset >= chunk.end:
                    done = True
                    break
                records.append((offset, message.value()))
                done = offset + 1 >= chunk.end
            stalled = time.monotonic() - last_progress
            if not done and stall_check < stalled < source.read_timeout_s:
                same_topic(source, [chunk], asking_once=True)
                stall_check *= 2
            if not done and stalled > source.read_timeout_s:
                same_topic(source, [chunk], asking_once=True)
                raise StitchError(
                    f"{where(source)}: partition {chunk.partition} sent nothing for {source.read_timeout_s:g}s while "
                    f"offsets {records[-1][0] + 1 if records else chunk.start} to {chunk.end - 1} were still to be "
                    "read; is the broker up? (source.read_timeout_s)"
                )
    finally:
        consumer.close()
    return records


def positions(chunk: OffsetRange, offsets: pa.Array) -> Any:
    """Each record's position in its commit, from its partition and offset alone."""
    rel = offsets.to_numpy(zero_copy_only=False).astype(np.int64) - np.int64(chunk.start)
    return (np.int64(chunk.partition) << OFFSET_BITS) | rel


class Decoded(NamedTuple):
    """An offset range's records decoded."""

    #: One column per field any record has (null where a record lacks it), with the topic, partition and offset.
    rows: pa.Table
    #: The records whose value did not decode, with the raw value and the reason.
    undecodable: pa.Table
    #: Per field asked about (`decode`'s `track`): which rows' records lack it, where some records have it and
    #: some do not (JSON values name their own fields; Avro values all have the writer schema's).
    absent: dict[str, np.ndarray]
    #: Per row, why its record is a bad row already (a nested value that does not fit its column), else None; None
    #: when every row is fine. `shown`: those values as written, by column and row.
    reasons: np.ndarray | None = None
    shown: dict[str, dict[int, str]] = {}


def decode(
    source: SourceSpec,
    chunk: OffsetRange,
    records: list[tuple[int, bytes | None]],
    track: Collection[str] = (),
    types: Mapping[str, pa.DataType | None] | None = None,
) -> Decoded:
    """The records as rows, the records whose value did not decode, and which rows lack a field of `track`: a
    column `stitch alter` added with a default is the default there, and null where a value says null.

    `types` (each column's table type): a nested column (array, struct, map) is built as its type record by record,
    and a record whose value does not fit is a bad row (`Decoded.reasons`), the others good; scalars of mixed types
    stay text, parsed (or found bad) row by row later."""
    rows: list[dict[str, Any]] = []
    offsets: list[int] = []
    bad: list[tuple[int, bytes | None, str]] = []
    parse = _avro_decoder(source) if source.value_format == "avro" else _json_value
    for offset, value in records:
        if value is None:
            bad.append((offset, value, f"{UNDECODABLE} (a record without a value: a tombstone)"))
            continue
        try:
            rows.append(parse(value))
            offsets.append(offset)
        except _Undecodable as exc:
            bad.append((offset, value, f"{UNDECODABLE} ({exc})"))
    names = list(dict.fromkeys(name for row in rows for name in row))
    nested = {n: k for n, k in (types or {}).items() if n in names and k is not None and pa.types.is_nested(k)}
    json_values = source.value_format == "json"
    exact = {n for n, k in (types or {}).items() if k is not None and pa.types.is_decimal(k)}
    columns = {
        name: _column([_top_level(row.get(name), name in exact) if json_values else row.get(name) for row in rows])
        for name in names
        if name not in nested
    }
    reasons: list[str | None] = [None] * len(rows)
    shown: dict[str, dict[int, str]] = {}
    for name, kind in nested.items():
        values = [row.get(name) for row in rows]
        columns[name], unfit = typed_column(values, kind, judge=json_values)
        for row in unfit:
            shown.setdefault(name, {})[row] = json.dumps(values[row], default=str)
            reasons[row] = reasons[row] or f"{WRONG_JSON_TYPE}{name}"
    meta = {
        TOPIC: pa.array([chunk.topic] * len(rows), pa.string()),
        PARTITION: pa.array([chunk.partition] * len(rows), pa.int32()),
        OFFSET: pa.array(offsets, pa.int64()),
    }
    good = pa.table({**{k: v for k, v in columns.items() if k not in meta}, **meta})
    undecodable = pa.table(
        {
            TOPIC: pa.array([chunk.topic] * len(bad), pa.string()),
            PARTITION: pa.array([chunk.partition] * len(bad), pa.int32()),
            OFFSET: pa.array([b[0] for b in bad], pa.int64()),
            VALUE: pa.array([None if b[1] is None else b[1].decode("utf-8", "replace") for b in bad], pa.string()),
        }
    )
    absent = {}
    for name in track:
        if name in columns:
            mask = np.array([name not in row for row in rows], dtype=bool)
            if mask.any():
                absent[name] = mask
    flagged = np.array(reasons, dtype=object) if shown else None
    return Decoded(
        good, undecodable.append_column("reason", pa.array([b[2] for b in bad], pa.string())), absent, flagged, shown
    )


class _Undecodable(ValueError):
    """A value that is not one event of the configured format."""


def _json_value(value: bytes) -> dict[str, Any]:
    try:
        found = json.loads(value, parse_float=decimal.Decimal)  # exact: a nested decimal column keeps its digits
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Undecodable(f"not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise _Undecodable(f"a JSON {type(found).__name__}, not an object")
    return found


def _avro_decoder(source: SourceSpec) -> Any:
    import fastavro

    schema = fastavro.parse_schema(json.loads(str(source.avro_schema)))

    def parse(value: bytes) -> dict[str, Any]:
        buffer = io.BytesIO(value)
        try:
            found = fastavro.schemaless_reader(buffer, schema, None)
        except Exception as exc:  # fastavro raises many kinds on damaged input
            raise _Undecodable(f"not an Avro record of the configured schema: {type(exc).__name__}: {exc}") from None
        if buffer.tell() != len(value):
            raise _Undecodable(
                f"not an Avro record of the configured schema ({len(value) - buffer.tell()} bytes left over; a "
                "schema-registry header is not supported)"
            )
        if not isinstance(found, Mapping):
            raise _Undecodable("not an Avro record")
        return dict(found)

    return parse


def _top_level(value: Any, exact: bool) -> Any:
    """A top-level JSON number with a point: exact text for a decimal column (a digit past its scale is a bad row,
    not rounded), a float for the others, as they have always read it; one past any double stays text, so the
    column's cast finds it out of range (a bad row, not infinity)."""
    if not isinstance(value, decimal.Decimal):
        return value
    if exact:
        return format(value, "f")
    number = float(value)
    return str(value) if math.isinf(number) else number


def _column(values: list[Any]) -> pa.Array:
    """A column of decoded values; one whose values do not share a type becomes text, so bad values become bad
    rows (as in JSON landing files)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array(
            [None if v is None else v if isinstance(v, str) else json.dumps(v, default=str) for v in values],
            pa.string(),
        )
