"""A stream's `source:` section: landing files or a Kafka topic, and which keys each kind takes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from annotated_types import Ge, Gt, Le
from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from stitchlake.vocabulary import SourceFormat

from . import yaml_schema as schema
from .choices import StartingOffsets, ValueFormat
from .fields import NUMBER, WHOLE, Location, Spec, Text, as_options, refuse, resolve_location

#: Kafka client settings stitch sets itself (the consumer is assigned explicit offsets; nothing is committed to
#: the broker: the table records the offsets; only committed transactions' records are read, as the docs promise).
KAFKA_OWN_OPTIONS = frozenset(
    {
        "isolation.level",
        "bootstrap.servers",
        "group.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "enable.partition.eof",
        "client.id",
    }
)
#: Kafka client settings that hold secrets: written only as `${VAR}`, never printed, resolved in each process.
#: Besides names that say so (sasl.password, ssl.keystore.password, sasl.oauthbearer.client.secret,
#: sasl.jaas.config), a private key inline (ssl.key.pem, sasl.oauthbearer.assertion.private.key.pem), its
#: passphrase, and sasl.oauthbearer.config (it may carry a client secret).
KAFKA_SECRET_OPTION = re.compile(r"(password|secret|jaas|passphrase|key\.pem|oauthbearer\.config)", re.IGNORECASE)
#: Keys of a file source that a Kafka source refuses, and the other way round.
FILE_ONLY_KEYS = ("path", "files_per_trigger")
KAFKA_ONLY_KEYS = (
    "topic",
    "bootstrap_servers",
    "value_format",
    "avro_schema",
    "starting_offsets",
    "records_per_trigger",
    "read_timeout_s",
)


def _avro_schema(value: Any, info: ValidationInfo) -> Any:
    """An Avro writer schema: inline (a mapping) or a `.avsc` file (relative to the config's folder); kept as the
    schema's JSON text, parsed here once so a mistake names its YAML path."""
    import json

    if value is None:
        return None
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        where = Path(resolve_location(value, info))
        try:
            value = where.read_text()
        except OSError as exc:
            raise refuse(f"cannot read the Avro schema file {where}: {exc.strerror or exc}") from None
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        parsed = json.loads(text)
        import fastavro

        fastavro.parse_schema(parsed)
    except (ValueError, TypeError, KeyError) as exc:
        raise refuse(f"not a valid Avro schema: {exc}") from None
    except Exception as exc:  # fastavro's SchemaParseException and friends
        raise refuse(f"not a valid Avro schema: {exc}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise refuse("must be an Avro record schema (type: record): a stream reads records whose fields are columns")
    return json.dumps(parsed, sort_keys=True)


class SourceSpec(Spec):
    """Where a stream's events come from: landing files (`path` is absolute after loading), or a Kafka topic."""

    format: SourceFormat
    """parquet, json (one object per line), csv (with a header row) or avro files; or kafka (a topic)."""
    path: Location | None = None
    """Files: the folder (or URL) searched recursively for landing files; sorted name = arrival order."""
    options: Annotated[dict[str, str], BeforeValidator(as_options), WithJsonSchema(schema.TEXT_MAPPING)] = Field(
        default_factory=dict
    )
    """Reader settings, kept as text. CSV: delimiter (default `,`, tab for .tsv), quote (`"`), escape (none),
    null_values (comma-separated; default: empty, NULL, null). Other file formats take none. Kafka: client
    settings passed to the consumer as they are (security.protocol, sasl.mechanism, sasl.username,
    sasl.password: ${VAR}, ssl.ca.location, ...)."""
    #: Reader options each format takes (one character each, except null_values: a comma-separated list).
    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"csv": ("delimiter", "quote", "escape", "null_values")}
    files_per_trigger: Annotated[int, Strict(), Ge(1), Le(100_000), WHOLE] = 10
    """`stitch stream`: landing files ingested per micro-batch at most."""
    trigger_interval_s: Annotated[float, Strict(), Gt(0), Le(86_400), NUMBER] = 60.0
    """`stitch stream`: seconds between micro-batches (a batch that runs longer starts the next at once)."""
    topic: Text | None = None
    """Kafka: the topic the stream reads (every partition, partitions added later included)."""
    bootstrap_servers: Text | None = None
    """Kafka: host:port[,host:port...] of the brokers."""
    value_format: ValueFormat = ValueFormat.JSON
    """Kafka: json (each value one JSON object whose fields are columns) or avro (each value one Avro record in
    binary encoding, no header, written with avro_schema)."""
    avro_schema: Annotated[str | None, BeforeValidator(_avro_schema), WithJsonSchema(schema.AVRO_SCHEMA)] = None
    """Kafka, value_format avro: the writer schema, inline or a .avsc file (relative to the config's folder)."""
    starting_offsets: StartingOffsets = StartingOffsets.EARLIEST
    """Kafka: where the first ingest of the topic starts (earliest: every record the topic holds; latest: only
    records produced from then on). Partitions added later always start at their earliest offset."""
    records_per_trigger: Annotated[int, Strict(), Ge(1), Le(100_000_000), WHOLE] = 100_000
    """Kafka, `stitch stream`: records ingested per micro-batch at most."""
    read_timeout_s: Annotated[float, Strict(), Gt(0), Le(3600), NUMBER] = 60.0
    """Kafka: seconds an ingest waits for the broker (metadata, offsets, the next records) before it fails."""
    #: The stream it belongs to (set by the stream), so messages name the YAML path: `streams.S.source`.
    _stream: str = PrivateAttr(default="")

    @property
    def is_kafka(self) -> bool:
        return self.format == SourceFormat.KAFKA

    @property
    def yaml_path(self) -> str:
        return f"streams.{self._stream}.source" if self._stream else "source"

    @model_validator(mode="after")
    def _known_options(self) -> Self:
        """An option the reader would not use is an error, never silently ignored."""
        if self.is_kafka:
            return self._kafka_settings()
        if self.path is None:
            raise refuse(f"is required for {self.format} files (the landing folder)", at="path")
        for key in KAFKA_ONLY_KEYS:
            if key in self.model_fields_set:
                raise refuse("only applies to format: kafka", at=key)
        allowed = self.OPTIONS.get(str(self.format), ())
        for key, value in self.options.items():
            if key not in allowed:
                takes = f"takes only: {', '.join(allowed)}" if allowed else "takes none"
                raise refuse(f"unknown option for {self.format} files ({self.format} {takes})", at=f"options.{key}")
            if key != "null_values" and len(value) != 1:
                raise refuse(f"must be one character, got {value!r}", at=f"options.{key}")
        characters = {key: self.options[key] for key in ("delimiter", "quote", "escape") if key in self.options}
        delimiters = (characters["delimiter"],) if "delimiter" in characters else (",", "\t")  # .csv, .tsv
        if "escape" in characters and characters["escape"] in (characters.get("quote", '"'), *delimiters):
            # The reader takes an escape for "the next character is text": equal to the quote, no quoted value
            # ever closes (a quote in one is written twice already).
            raise refuse("must differ from the quote and the delimiter", at="options.escape")
        for key in ("delimiter", "quote", "escape"):
            if key in characters and not characters[key].isascii():
                raise refuse(f"must be an ASCII character, got {characters[key]!r}", at=f"options.{key}")
        return self

    def _kafka_settings(self) -> Self:
        for key in FILE_ONLY_KEYS:
            if key in self.model_fields_set:
                raise refuse("does not apply to format: kafka (a Kafka source reads a topic)", at=key)
        if self.topic is None:
            raise refuse("is required for format: kafka", at="topic")
        if self.bootstrap_servers is None:
            raise refuse("is required for format: kafka (host:port of the brokers)", at="bootstrap_servers")
        if self.value_format == ValueFormat.AVRO and self.avro_schema is None:
            raise refuse("is required for value_format: avro (the values' writer schema)", at="avro_schema")
        if self.value_format != ValueFormat.AVRO and self.avro_schema is not None:
            raise refuse("only applies to value_format: avro", at="avro_schema")
        for key in self.options:
            if key in KAFKA_OWN_OPTIONS:
                own = (
                    "bootstrap_servers"
                    if key == "bootstrap.servers"
                    else "stitch (read_committed: aborted transactions are never ingested)"
                    if key == "isolation.level"
                    else "stitch (offsets are kept in the table)"
                )
                raise refuse(f"is set by {own}; remove it", at=f"options.{key}")
        return self
