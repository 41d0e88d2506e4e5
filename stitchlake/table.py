"""The core `Table` handle: a config, its storage, its lock, timeline and file-system view, and writes and reads.

Services (compaction, clean, ...) take a Table; the public handle with every action on it is `stitchlake.api.Table`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.config import (
    TABLE_JSON,
    TableConfig,
    config_from_properties,
    diff_properties,
    in_stored_order,
    load_config,
    table_properties,
)
from stitchlake.errors import ConfigError, NotFoundError, StitchError
from stitchlake.paths import TIMELINE_DIR
from stitchlake.storage import Storage, storage_for
from stitchlake.storage.registry import scheme_of

if TYPE_CHECKING:
    from stitchlake.concurrency.lock import TableLock
    from stitchlake.layout.fsview import FileSystemView
    from stitchlake.timeline.timeline import Timeline


T = TypeVar("T", bound="Table")


class Table:
    """A stitched table at `config.table.path`."""

    def __init__(self, config: TableConfig, storage: Storage | None = None) -> None:
        self.config = config
        self.storage = storage or storage_for(config.table.path, config.storage.options)
        self._properties: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Table({self.config.table.name!r} at {self.config.table.path!r})"

    @property
    def path(self) -> str:
        return self.config.table.path

    @property
    def storage_options(self) -> dict[str, str]:
        """Settings of the object-store client (endpoint, credentials) for the table and its landing folders."""
        return self.config.storage.options

    # ---------------------------------------------------------------------------------------- lifecycle

    def exists(self) -> bool:
        return self.storage.exists(TABLE_JSON)

    @property
    def properties(self) -> dict[str, Any]:
        """The stored `.stitch/table.json`."""
        if self._properties is None:
            try:
                data = self.storage.read_bytes(TABLE_JSON)
            except FileNotFoundError:
                if self.has_history():
                    raise NotFoundError(_lost_properties(self.path)) from None
                raise NotFoundError(
                    f"no stitchlake table at {self.path} (run `stitch init -c CONFIG` to create it)"
                ) from None
            try:
                self._properties = json.loads(data)
            except json.JSONDecodeError as exc:
                raise StitchError(f"{self.path}/{TABLE_JSON}: not valid JSON ({exc})") from None
        return self._properties

    @property
    def table_id(self) -> str:
        return str(self.properties.get("table_id", self.config.table.name))

    def require(self) -> None:
        """Refuse to work on a missing table or with a config that contradicts the stored one."""
        stored = {k: v for k, v in self.properties.items() if k not in ("table_id", "created")}
        differences = diff_properties(stored, table_properties(self.config))
        if differences:
            raise ConfigError(
                f"{self.config.source_file or 'config'} contradicts the table at {self.path}:\n  "
                + "\n  ".join(differences)
            )
        self.config = in_stored_order(self.config, stored)

    def init(self) -> bool:
        """Create `.stitch/table.json`. False (no-op) if it exists and matches; ConfigError if it contradicts."""
        from stitchlake.timeline.clock import from_millis, now_millis

        if self.exists():
            self.require()
            refuse_nesting(self.storage, self.path)
            return False
        if self.has_history():
            raise ConfigError(_lost_properties(self.path))
        refuse_nesting(self.storage, self.path)
        try:
            self.storage.makedirs(TIMELINE_DIR)
        except OSError as exc:
            raise ConfigError(f"table.path: cannot create the table at {self.path}: {exc.strerror or exc}") from None
        properties = {
            **table_properties(self.config),
            "table_id": uuid.uuid4().hex,
            "created": from_millis(now_millis()),
        }
        data = json.dumps(properties, indent=1).encode()
        if not self.storage.put_if_absent(TABLE_JSON, data):
            self._properties = None
            self.require()
            return False
        self._properties = properties
        return True

    def has_history(self) -> bool:
        """Whether the folder holds a timeline (instants or an archive) of a stitchlake table."""
        return bool(self.storage.list_names(TIMELINE_DIR))

    # --------------------------------------------------------------------------------------- components

    def lock(self) -> TableLock:
        """The table lock (short critical sections only; see `transaction`)."""
        from stitchlake.concurrency.providers import make_lock

        spec = self.config.concurrency.lock
        return make_lock(
            self.storage,
            provider=spec.provider,
            wait_s=spec.wait_s,
            expire_s=spec.expire_s,
            hosts=spec.hosts,
            zk_path=spec.zk_path,
            table_id=self.table_id,
        )

    def timeline(self) -> Timeline:
        from stitchlake.timeline.timeline import Timeline

        return Timeline.load(self.storage)

    def view(self, timeline: Timeline | None = None) -> FileSystemView:
        from stitchlake.layout.fsview import FileSystemView
        from stitchlake.timeline.archive import load_checkpoint

        timeline = timeline or self.timeline()
        return FileSystemView.build(timeline, load_checkpoint(self.storage))


def _lost_properties(path: str) -> str:
    return (
        f"{path} holds a stitchlake timeline but no {TABLE_JSON}: the table's properties were lost, and "
        "`stitch init` will not guess them over existing data (a different key, partitioning or bucket count would "
        f"corrupt it). Put {TABLE_JSON} back from a backup or a copy of the table"
    )


def refuse_nesting(storage: Storage, path: str) -> None:
    """Tables may not nest: an outer table's clean would take the inner table's files for its own orphans."""
    for outer in storage.ancestors():
        if outer.exists(TABLE_JSON):
            raise ConfigError(
                f"table.path: {path} is inside the stitchlake table at {outer.uri}; tables may not nest "
                "(pick a folder outside it)"
            )
    marker = "/" + TABLE_JSON
    for found in storage.walk_files():
        if found.endswith(marker):
            inner = found[: -len(marker)]
            raise ConfigError(
                f"table.path: the stitchlake table at {inner!r} is inside {path}; tables may not nest "
                "(pick a folder that holds no other table)"
            )


def open_table(target: str | os.PathLike[str] | TableConfig, cls: type[T] = Table) -> T:  # type: ignore[assignment]
    """A Table from a config file, a table folder (with `.stitch/table.json`) or a TableConfig."""
    if isinstance(target, TableConfig):
        return cls(target)
    path = Path(target)
    if path.is_file():
        return cls(load_config(path))
    location = str(target) if scheme_of(str(target)) else str(Path(target).resolve())
    storage = storage_for(location)
    try:
        properties = json.loads(storage.read_bytes(TABLE_JSON))
    except FileNotFoundError:
        raise NotFoundError(f"{target}: neither a config file nor a stitchlake table (no {TABLE_JSON})") from None
    except json.JSONDecodeError as exc:
        raise StitchError(f"{target}/{TABLE_JSON}: not valid JSON ({exc})") from None
    table = cls(config_from_properties(properties, location), storage)
    table._properties = properties
    return table
