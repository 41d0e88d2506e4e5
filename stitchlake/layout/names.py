"""Data file names (design.md §3): `<file group>_<instant>_<write token>.parquet` for base files and
`<file group>_<instant>_<write token>.log.<parquet|avro>` for log files."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from stitchlake.timeline.metadata import BASE, LOG

_NAME = re.compile(r"^(\d{5})_(\d{17})_([0-9a-z-]+)\.(log\.)?(parquet|avro)$")
__all__ = ["BASE", "LOG", "DataFileName", "base_name", "file_group_id", "join", "log_name", "parse_name"]


def file_group_id(bucket: int) -> str:
    return f"{bucket:05d}"


def write_token() -> str:
    return uuid.uuid4().hex[:10]


@dataclass(frozen=True)
class DataFileName:
    file_group: str
    instant: str
    token: str
    kind: str
    format: str

    def __str__(self) -> str:
        middle = ".log" if self.kind == LOG else ""
        return f"{self.file_group}_{self.instant}_{self.token}{middle}.{self.format}"


def log_name(file_group: str, instant: str, log_format: str, token: str | None = None) -> str:
    return str(DataFileName(file_group, instant, token or write_token(), LOG, log_format))


def base_name(file_group: str, instant: str, token: str | None = None) -> str:
    return str(DataFileName(file_group, instant, token or write_token(), BASE, "parquet"))


def parse_name(name: str) -> DataFileName | None:
    match = _NAME.match(name)
    if not match:
        return None
    kind = LOG if match.group(4) else BASE
    if kind == BASE and match.group(5) != "parquet":
        return None
    return DataFileName(match.group(1), match.group(2), match.group(3), kind, match.group(5))


def join(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name
