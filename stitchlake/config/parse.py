"""YAML text -> a validated `TableConfig`, with errors that name the file and the YAML path.

The person reading an error is usually looking at a cron log, not at this code, so every message is
`<file>: <yaml.path>: <what is wrong>`. Before the model sees the document, this module refuses YAML that
builds objects, repeats a key or expands into an alias bomb, and replaces `${VAR}` / `${VAR:-fallback}` in
every text value, remembering which values are secrets so that no message ever shows them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from stitchlake.errors import ConfigError

from .fields import kind
from .model import StorageSpec, TableConfig
from .secrets import SECRET_PLACEHOLDER, declared_secrets, is_secret_name, redact
from .sources import KAFKA_SECRET_OPTION

#: A config with more values than this once YAML aliases are expanded is refused (an "alias bomb").
MAX_CONFIG_VALUES = 100_000
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def load_config(path: str | os.PathLike[str]) -> TableConfig:
    """Read and validate a table config YAML file (safe loading: no object construction)."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: config file not found", file=str(file))
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read config: {exc}", file=str(file)) from None
    try:
        data = yaml.load(text, Loader=_unique_key_loader())  # a SafeLoader subclass: no object construction
    except ValueError as exc:  # a scalar PyYAML typed and could not build: `0x_`, `2024-02-30`
        raise ConfigError(f"{file}: not valid YAML: {exc}", file=str(file)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError) and "could not determine a constructor" in problem:
            tag = problem.rsplit("tag ", 1)[-1]
            problem = f"the tag {tag} is not allowed: a config is plain data, and no objects are ever built from it"
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}", file=str(file)) from None
    return parse_config(data, file=str(file), base=file.resolve().parent)


def parse_config(data: Any, *, file: str | None = None, base: Path | None = None) -> TableConfig:
    """Validate an already-loaded YAML document. `base` is the folder relative paths resolve against."""
    if not isinstance(data, dict):
        raise _error(file, "", f"the config must be a mapping with a 'table' section, got {kind(data)}")
    _count_values(file, data)
    try:
        declared = frozenset(declared_secrets(data.get("secrets")))
    except ValueError as exc:
        raise _error(file, "secrets", str(exc)) from None
    _refuse_written_secrets(file, data.get("storage"), data.get("streams"))
    env = _Environment(file, declared)
    document = env.expand(data)
    config = validate(document, file=file, base=base, yaml=True, secret_paths=env.paths, secret_values=env.values)
    update = {"source_file": file, "secret_paths": frozenset(env.paths), "secret_values": frozenset(env.values)}
    return config.model_copy(update=update)


def validate(
    document: dict[str, Any],
    *,
    file: str | None,
    base: Path | None,
    yaml: bool,
    secret_paths: Iterable[str] = (),
    secret_values: Iterable[str] = (),
) -> TableConfig:
    """`TableConfig` from a document (YAML, or table.json's stored form), or a ConfigError for its first problem."""
    try:
        return TableConfig.model_validate(document, context={"base": base, "yaml": yaml})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        path, message = explain(first, document, frozenset(secret_paths))
        raise _error(file, path, message, secret_values) from None


def _error(file: str | None, path: str, message: str, secrets: Iterable[str] = ()) -> ConfigError:
    """The error, naming the file and YAML path in its message and as fields (`--json` failures carry them)."""
    where = f"{file}: " if file else ""
    text = redact(f"{where}{path}: {message}" if path else f"{where}{message}", secrets)
    return ConfigError(text, file=file, yaml_path=path or None)


# -------------------------------------------------------------------------------------- pydantic's errors


def explain(error: ErrorDetails, document: Any, secret_paths: frozenset[str] = frozenset()) -> tuple[str, str]:
    """The YAML path and our message for one pydantic error (values from secret variables masked)."""
    path = yaml_path(document, error["loc"], missing=error["type"] == "missing")
    ctx = error.get("ctx") or {}
    if ctx.get("at"):
        path = _join(path, str(ctx["at"]))
    value = error.get("input")
    shown = SECRET_PLACEHOLDER if path in secret_paths else str(value)
    kind_of = "a secret from the environment" if path in secret_paths else kind(value)
    match error["type"]:
        case "stitch":
            message = error["msg"]
        case "missing":
            message = "is required"
        case "extra_forbidden":
            message = "unknown key"
        case "int_type" | "int_parsing" | "int_from_float":
            message = f"must be a whole number, got {kind_of}"
        case "float_type" | "float_parsing":
            message = f"must be a number, got {kind_of}"
        case "bool_type" | "bool_parsing":
            message = f"must be true or false, got {kind_of}"
        case "string_type":
            message = f"must be text, got {kind_of}"
        case "greater_than_equal":
            message = f"must be >= {ctx['ge']}, got {shown}"
        case "greater_than":
            message = f"must be > {ctx['gt']:g}, got {shown}"
        case "less_than_equal":
            message = f"must be <= {ctx['le']}, got {shown}"
        case "string_pattern_mismatch":
            message = f"must match {ctx['pattern']}"
        case "enum":
            choices = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
            quoted = SECRET_PLACEHOLDER if path in secret_paths else repr(value)
            message = f"{quoted} is not one of: {choices}"
        case "model_type" | "model_attributes_type" | "dict_type":
            message = f"must be a mapping, got {kind_of}"
        case "tuple_type" | "list_type":
            message = f"must be a list, got {kind_of}"
        case "value_error":
            message = str(ctx.get("error", error["msg"]))
        case _:
            message = error["msg"]
    return path, message


def yaml_path(document: Any, loc: tuple[int | str, ...], *, missing: bool = False) -> str:
    """The YAML path of a pydantic location, read along the document itself.

    The model keeps columns as a tuple, so pydantic says `columns.2`; the document says which name that is.
    A location that leaves the document (the `name` a mapping key gives, the `type` of `amount: money`)
    stops at the last node the person wrote, except for a missing key, which is named.
    """
    path = ""
    node = document
    for i, part in enumerate(loc):
        if isinstance(node, dict):
            keys = {str(key): key for key in node}
            if isinstance(part, int) and 0 <= part < len(node):  # the i-th entry of a mapping read as a list
                key = list(node)[part]
            elif str(part) in keys:
                key = keys[str(part)]
            else:
                return _join(path, str(part)) if missing else path
            path, node = _join(path, str(key)), node[key]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path, node = f"{path}[{part}]", node[part]
        elif node is None and missing:  # an empty section (`orders:` with nothing under it)
            return ".".join([path, *(str(p) for p in loc[i:] if isinstance(p, str))])
        else:
            break
    return path


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ----------------------------------------------------------------------------------- before the model


def _count_values(file: str | None, document: Any) -> None:
    """Refuse a document that YAML aliases blow up: count what expanding it would visit, in linear time."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, dict | list):
            return 1
        known = sizes.get(id(value))
        if known is None:
            items = value.values() if isinstance(value, dict) else value
            known = 1 + sum(size(item) for item in items)
            if known > MAX_CONFIG_VALUES:
                raise _error(
                    file,
                    "",
                    f"the config expands to more than {MAX_CONFIG_VALUES:,} values; nested YAML aliases (&a / *a) "
                    "repeat blocks exponentially — write the values out instead",
                )
            sizes[id(value)] = known
        return known

    size(document)


#: YAML paths whose `${VAR}` value is a secret whatever the variable is called (object-store credentials).
SECRET_FIELD_PATHS = frozenset(f"storage.{name}" for name in StorageSpec.secret_fields)
#: A Kafka source's client option (`streams.S.source.options.sasl.password`): its key may say it is a secret.
_SOURCE_OPTION = re.compile(r"^streams\.[^.]+\.source\.options\.(.+)$")


def is_secret_field(path: str) -> bool:
    """A YAML path whose value is a credential whatever the variable is called: written only as `${VAR}`, kept as
    that reference (each process reads the environment), never printed."""
    if path in SECRET_FIELD_PATHS:
        return True
    option = _SOURCE_OPTION.match(path)
    return option is not None and KAFKA_SECRET_OPTION.search(option.group(1)) is not None


def _refuse_written_secrets(file: str | None, storage: Any, streams: Any = None) -> None:
    """Credentials are read from the environment: a secret written into the file would be copied and printed."""
    fields: list[tuple[str, Any]] = []
    if isinstance(storage, dict):
        fields += [(f"storage.{name}", storage.get(name)) for name in StorageSpec.secret_fields]
    for stream, spec in (streams or {}).items() if isinstance(streams, dict) else ():
        source = spec.get("source") if isinstance(spec, dict) else None
        options = source.get("options") if isinstance(source, dict) else None
        if isinstance(options, dict):
            for key, value in options.items():
                path = f"streams.{stream}.source.options.{key}"
                if is_secret_field(path):
                    fields.append((path, value))
    for path, value in fields:
        if value is not None and not (isinstance(value, str) and _ENV.fullmatch(value.strip())):
            raise _error(
                file, path, "write ${VAR} and put the secret in the environment; a secret in the file is not accepted"
            )


class _Environment:
    """`${VAR}` expansion for one document; remembers the YAML paths and values of secret variables."""

    def __init__(self, file: str | None, declared: frozenset[str]) -> None:
        self.file = file
        self.declared = declared
        self.paths: set[str] = set()
        self.values: set[str] = set()

    def expand(self, value: Any, path: str = "") -> Any:
        """Replace `${VAR}` and `${VAR:-default}` in every text value (not in keys)."""
        if isinstance(value, dict):
            return {key: self.expand(item, _join(path, str(key))) for key, item in value.items()}
        if isinstance(value, list):
            return [self.expand(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value

        def substitute(match: re.Match[str]) -> str:
            name, fallback = match.group(1), match.group(2)
            if fallback and is_secret_field(path):
                # The fallback is written into the file: a secret there is copied, printed and never masked.
                raise _error(
                    self.file,
                    path,
                    f"a secret is read from the environment only: ${{{name}}} with no fallback "
                    "(a fallback is written into the file)",
                )
            if name in os.environ:
                if is_secret_name(name, self.declared) or is_secret_field(path):
                    self.values.add(os.environ[name])
                    self.paths.add(path)
                return os.environ[name]
            if fallback is not None:
                return fallback
            raise _error(self.file, path, f"environment variable {name} is not set", self.values)

        expanded = _ENV.sub(substitute, value)
        if is_secret_field(path):
            # Checked and masked like any secret, but kept as the `${VAR}` reference: each process (a Spark
            # executor too) reads the value from its own environment, so no pickled config or storage holds it.
            return value
        return expanded


#: Plain scalars YAML 1.1 (which PyYAML follows) reads as something else than the text written, where YAML 1.2
#: and a reader's eye see text: `NO` is false, `on` true, `0755` is 493, `0x1F` 31, `12:30` 750 (base 60). A
#: string column's default `NO` (Norway) was stored as "False", a delete marker `yes` as "true" (rows marked `yes`
#: then updated instead of deleting). Refused, saying what was read: quoted they are text, and the value meant is
#: written plainly (`false`, `493`).
_YAML11_ONLY = re.compile(
    r"(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)"
    r"|[-+]?0[0-7_]+|[-+]?0[xX][0-9a-fA-F_]+|[-+]?0b[01_]+"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"
)


def _unique_key_loader() -> type:
    """yaml.SafeLoader that refuses duplicate keys (a block pasted twice must not silently win) and the plain
    scalars only YAML 1.1 reads as other than text (`_YAML11_ONLY`)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
            value = super().construct_object(node, deep=deep)
            if (
                isinstance(node, yaml.ScalarNode)
                and node.style is None
                and not isinstance(value, str)
                and _YAML11_ONLY.fullmatch(node.value)
            ):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"`{node.value}` reads as {str(value).lower() if isinstance(value, bool) else value} in YAML 1.1: "
                    f"quote it ('{node.value}') for the text, or write the value meant plainly",
                    node.start_mark,
                )
            return value

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"found duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader
