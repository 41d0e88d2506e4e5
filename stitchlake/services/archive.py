"""Archival of old instants with a file-system-view checkpoint (DESIGN §4)."""

from __future__ import annotations

import json
from typing import Any

from stitchlake.errors import CorruptFileError
from stitchlake.storage import Storage

ARCHIVE_DIR = ".stitch/timeline/archive"
CHECKPOINT = f"{ARCHIVE_DIR}/checkpoint.json"


def load_checkpoint(storage: Storage) -> dict[str, Any] | None:
    """The latest file-system-view checkpoint, or None if nothing was archived yet."""
    try:
        data = storage.read_bytes(CHECKPOINT)
    except FileNotFoundError:
        return None
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(f"{CHECKPOINT}: not valid JSON ({exc})") from None
