"""Which environment values are secrets, and masking them in text.

A value taken from `${VAR}` is a secret when the variable's name says so (`DB_PASSWORD`, `S3_SECRET_KEY`) or
the config lists it under `secrets:`. Other variables (`${YEAR}`, `${WAREHOUSE}`) are plain settings: masking
them would garble table names, paths and instant times in every message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: What a value taken from the environment is shown as, wherever stitchlake prints or records text.
SECRET_PLACEHOLDER = "<secret from the environment>"
#: Environment values shorter than this are not searched for in free text (masking every "8" or "on" in a
#: message would garble it); such values are still masked by their YAML path (`TableConfig.secret_paths`).
MIN_SECRET_LENGTH = 4
#: Environment variables whose names say they hold a secret; their values are masked in everything printed.
SECRET_NAME = re.compile(r"(SECRET|PASSW|PWD|TOKEN|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH|SESSION)", re.I)
#: An environment variable name, as `${VAR}` and `secrets:` accept it.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_secret_name(name: str, declared: frozenset[str] = frozenset()) -> bool:
    """Whether an environment variable's value is a secret: its name says so, or the config's `secrets:` lists it."""
    return name in declared or SECRET_NAME.search(name) is not None


def declared_secrets(value: Any) -> tuple[str, ...]:
    """The `secrets: [VAR, ...]` list (variables to mask whatever their names); ValueError if it is not one."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and ENV_NAME.fullmatch(v) for v in value):
        raise ValueError("must be a list of environment variable names, e.g. [DB_PASS]")
    return tuple(value)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (of at least MIN_SECRET_LENGTH characters) replaced by a placeholder."""
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: a secret may contain another
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, SECRET_PLACEHOLDER)
    return text
