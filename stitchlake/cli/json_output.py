"""The `--json` document: plain JSON values from results (dates, decimals, bytes, NaN), one object on stdout."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stitchlake.cli.printing import redact, silence

if TYPE_CHECKING:
    pass


#: How `--json` writes the floats JSON has no number for: as the strings pandas and Spark JSON writers use, so a
#: reader tells NaN and the infinities from null (and stitch reads them back into a double column).
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def jsonable(value: Any) -> Any:
    """A value json.dumps can write: ISO times, exact decimals as text, bytes as base64, NaN and the infinities
    as the strings "NaN", "Infinity" and "-Infinity" (null is reserved for null)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE[str(value)]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.time):  # datetimes too
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if value.is_finite():
            return str(value)
        return NON_FINITE["nan" if value.is_nan() else "inf" if value > 0 else "-inf"]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def json_line(value: Any) -> str:
    """One compact JSON document on one line (`--json`, and newline-delimited JSON files)."""
    return json.dumps(jsonable(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


#: Top-level `--json` keys that hold rows read from the table: data, never masked.
DATA_KEYS = frozenset({"records"})


def emit_json(document: Mapping[str, Any]) -> None:
    """The `--json` contract: exactly one JSON object on stdout and nothing else there.

    On one line, because Airflow's BashOperator pushes the last line of stdout to XCom.
    """
    plain = jsonable(document)
    shown = {key: value if key in DATA_KEYS else _redacted(value) for key, value in plain.items()}
    try:
        sys.stdout.write(json_line(shown) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone: the command still exits with its own code
        silence(sys.stdout)


def _redacted(value: Any) -> Any:
    """A jsonable value with secrets masked in every string (before encoding, so escaping cannot hide them)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value
