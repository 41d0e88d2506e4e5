"""The core handle, `TableHandle`: a config, its storage, its lock, timeline and file-system view.

Services (compaction, clean, ...) take a `TableHandle`; the one public `Table`, with every action on it, is
`stitchlake.api.Table` (a `TableHandle` too), so there is one class named `Table`.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stitchlake.checksums import seal, unseal
from stitchlake.config import (
    SPARSE_COLUMN_VERSIONS,
    StoredSchema,
    TableConfig,
    TableProperties,
    config_from_schema,
    in_stored_order,
    load_config,
    stored_schema,
)
from stitchlake.config.evolution import changes, names_ever_used, refuse_name_clashes, same_schema, with_schema
from stitchlake.errors import ConfigError, CorruptFileError, NotFoundError, StitchError, UsageError
from stitchlake.paths import TABLE_JSON, TIMELINE_DIR
from stitchlake.storage import Storage, storage_for
from stitchlake.storage.registry import absolute

if TYPE_CHECKING:
    from stitchlake.concurrency.lock import TableLock
    from stitchlake.layout.fsview import FileSystemView
    from stitchlake.layout.rescales import BucketLayout
    from stitchlake.timeline.archive import RescaleRecord, SchemaVersion
    from stitchlake.timeline.timeline import Timeline


T = TypeVar("T", bound="TableHandle")


class TableHandle:
    """A stitched table at `config.table.path`."""

    def __init__(self, config: TableConfig, storage: Storage | None = None) -> None:
        self.config = config
        self.storage = storage or storage_for(config.table.path, config.storage.options)
        # Every instant, table.json and the default lock are created with `put_if_absent`: without an atomic
        # create, two writers could both commit the same instant time.
        self.storage.require_conditional_put("a stitchlake table (its timeline and its lock)")
        self._properties: TableProperties | None = None
        #: The schema version `config` describes (set by `require`; new files record it).
        self.schema_version = 0
        self._versions: dict[int, TableConfig] = {}
        self._history: list[SchemaVersion] = []
        self._origins: dict[str, tuple[int, Any]] | None = None
        self._routing: BucketLayout | None = None
        #: Opened from its folder (`--table`, `stitchlake.open(folder)`): its config's runtime settings are unknown.
        self.configless = False

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
    def properties(self) -> TableProperties:
        """The stored `.stitch/table.json`: the schema the table was created with, and its identity."""
        if self._properties is None:
            try:
                data = self.storage.read_bytes(TABLE_JSON)
            except FileNotFoundError:
                if self.has_history():
                    raise NotFoundError(_lost_properties(self.path)) from None
                raise NotFoundError(
                    f"no stitchlake table at {self.path} (run `stitch init -c CONFIG` to create it)"
                ) from None
            self._properties = parse_properties(data, self.storage.describe(TABLE_JSON))
        return self._properties

    @property
    def sparse_column_versions(self) -> bool:
        """Whether new files leave a column's version null where it is the row's (the table's format, §3)."""
        return self.properties.schema.format_version >= SPARSE_COLUMN_VERSIONS

    @property
    def table_id(self) -> str:
        return self.properties.table_id

    def schema_history(self, timeline: Timeline | None = None) -> list[SchemaVersion]:
        """Every version of the table's schema, oldest first (`table.json`, then each completed `alter`)."""
        from stitchlake.timeline.archive import load_checkpoint
        from stitchlake.timeline.schemas import history

        return history(timeline or self.timeline(), self.properties.schema, load_checkpoint(self.storage))

    def config_for(self, version: SchemaVersion) -> TableConfig:
        """This table's runtime settings with the columns and streams of one schema version (and, once `require`
        has seen the timeline, the table's bucket count now: a rescale changes it, not an alter)."""
        found = self._versions.get(version.version)
        if found is None:
            schema = version.properties
            if self._routing is not None:
                schema = schema.with_buckets(self._routing.default)
            found = self._versions[version.version] = in_stored_order(
                with_schema(self.config, schema), version.properties
            )
        return found

    @property
    def base_buckets(self) -> int:
        """The bucket count the table was created with (`table.json`); rescales change it (`layout`)."""
        return self.properties.schema.buckets

    def layout(self, timeline: Timeline | None = None) -> BucketLayout:
        """The bucket count of each partition now, from the timeline (`layout.rescales`)."""
        from stitchlake.layout.rescales import layout_at, records
        from stitchlake.timeline.archive import load_checkpoint

        return layout_at(self.base_buckets, records(timeline or self.timeline(), load_checkpoint(self.storage)))

    @property
    def routing(self) -> BucketLayout:
        """The layout this process routes new files with, read by `require` (each file records its partition's
        count, and a deltacommit publishes only while that is still the count: design.md §6)."""
        if self._routing is None:
            self._routing = self.layout()
        return self._routing

    def follow_buckets(self, buckets: int | None = None) -> None:
        """Give this handle's config the table's bucket count now (or `buckets`), when this process changed it (a
        rescale, a restore that undid one) and must go on working, e.g. to publish. Its YAML file keeps the old
        count, and commands started from it refuse until it says the new one."""
        count = self.layout().default if buckets is None else buckets
        if count != self.config.table.buckets:
            table = self.config.table.model_copy(update={"buckets": count})
            self.config = self.config.model_copy(update={"table": table})

    def require(self) -> None:
        """Refuse to work on a missing table, or with a config behind, ahead of or contradicting its schema.

        A table opened from its folder (no YAML) takes the current schema as it is. The config's `buckets` must be
        the table's count now: `stitch rescale` changes it, and then the YAML must say so.
        """
        from stitchlake.layout.rescales import layout_at, records
        from stitchlake.timeline.archive import load_checkpoint
        from stitchlake.timeline.schemas import history

        timeline = self.timeline()
        checkpoint = load_checkpoint(self.storage)
        versions = history(timeline, self.properties.schema, checkpoint)
        rescales = records(timeline, checkpoint)
        routing = layout_at(self.base_buckets, rescales)
        current = versions[-1]
        proposed = stored_schema(self.config)
        where = self.config.source_file or "config"
        if self.config.source_file is None or self.config.source_file.endswith(TABLE_JSON):
            proposed = current.properties.with_buckets(routing.default)  # the table itself is the truth

        def schema(version: SchemaVersion) -> StoredSchema:
            return version.properties.with_buckets(routing.default)

        if proposed.buckets != routing.default and same_schema(schema(current), proposed.with_buckets(routing.default)):
            # Only the count differs: say which count is right now, and what changes it (with other differences,
            # the listing below names this one among them).
            raise ConfigError(_buckets_differ(where, self.path, proposed.buckets, routing, rescales))
        if not same_schema(schema(current), proposed):
            for older in reversed(versions[:-1]):
                if same_schema(schema(older), proposed):
                    raise ConfigError(
                        f"{where} describes schema version {older.version} of the table at {self.path}, which "
                        f"is at version {current.version} now (altered at {current.since}); nothing was done. "
                        "Deploy the config that matches the table (the one `stitch alter` applied)"
                    )
            found = changes(schema(current), proposed, names_ever_used(v.properties for v in versions))
            refused = [change for change in found if not change.allowed]
            first = (refused or found)[0].path if found else None
            if not refused:
                raise ConfigError(
                    f"{where} is ahead of the table at {self.path} (schema version {current.version}); run "
                    f"`stitch alter -c {where}` first to apply:\n  " + "\n  ".join(map(str, found)),
                    file=self.config.source_file,
                    yaml_path=first,
                )
            raise ConfigError(
                f"{where} contradicts the table at {self.path} (schema version {current.version}):\n  "
                + "\n  ".join(map(str, refused)),
                file=self.config.source_file,
                yaml_path=first,
            )
        if versions != self._history or self._routing is None or routing.default != self._routing.default:
            # Each version's config is derived again only when the history or the count changed: deriving one
            # validates a whole config, the larger part of a `require`, which every table call makes.
            self._versions.clear()
        self._history = versions
        self._origins = None
        self._routing = routing
        self.config = self.config_for(current)
        self.schema_version = current.version

    def version(self, number: int) -> SchemaVersion:
        """A schema version by number (after `require`)."""
        for found in self._history:
            if found.version == number:
                return found
        raise StitchError(f"{self.path}: schema version {number} is not on the timeline (damaged history?)")

    def at_time(self, time: str | None) -> TableHandle:
        """This table as read at a completion time: the schema version then in force (None: now)."""
        from stitchlake.timeline.schemas import at_time

        if not self._history or time is None:
            return self
        found = at_time(self._history, time)
        if found.version == self.schema_version:
            return self
        clone = copy.copy(self)
        clone._versions = dict(self._versions)  # its own: `require` keeps this handle's for as long as they hold
        clone.config = self.config_for(found)
        clone.schema_version = found.version
        return clone

    def initial_defaults(self) -> dict[str, Any]:
        """Per column with one: the default it was added with, which rows written before it existed read as
        (Iceberg's initial-default). Fixed when the column is added: a later change of the default applies to
        events from then on, never to rows written before the column (after `require`)."""
        return {name: default for name, (_version, default) in self._column_origins().items() if default is not None}

    def late_columns(self, stream: str) -> dict[str, Any]:
        """Columns `stitch alter` added to `stream` after the stream existed, with what an event that lacks them
        carries: the column's current default (Iceberg's write-default), else null. Producers cannot switch at
        the moment of an alter, so inputs without them are accepted (after `require`)."""
        origins = self._column_origins()
        born = min((v.version for v in self._history if stream in self.config_for(v).streams), default=0)
        spec = self.config.stream(stream)
        return {c.name: c.default for c in spec.columns if origins.get(c.name, (0, None))[0] > born}

    def _column_origins(self) -> dict[str, tuple[int, Any]]:
        """Per column: the schema version that added it, and its default in that version."""
        if self._origins is not None:
            return self._origins
        out: dict[str, tuple[int, Any]] = {}
        for version in self._history or []:
            for column in self.config_for(version).all_columns():
                out.setdefault(column.name, (version.version, column.default))
        for column in self.config.all_columns():  # before `require`: the config is all there is
            out.setdefault(column.name, (self.schema_version, column.default))
        if self._history:
            self._origins = out
        return out

    def config_of_file(self, version: int) -> TableConfig:
        """The config a data file was written under (its columns and types)."""
        return (
            self.config
            if version == self.schema_version or not self._history
            else self.config_for(self.version(version))
        )

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
        refuse_name_clashes(self.config)
        schema = stored_schema(self.config)
        try:
            self.storage.makedirs(TIMELINE_DIR)
        except OSError as exc:
            raise ConfigError(f"table.path: cannot create the table at {self.path}: {exc.strerror or exc}") from None
        properties = TableProperties(schema, uuid.uuid4().hex, from_millis(now_millis()))
        data = seal(json.dumps(properties.to_json(), indent=1).encode())
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

    def require_config(self) -> None:
        """Refuse (exit 2) to change a table opened from its folder: the lock its writers share, heartbeat expiry
        and retention are in its config, and defaults in their place could write beside writers that lock elsewhere
        or roll back a live one."""
        if self.configless:
            raise UsageError(
                f"{self.path}: opened from its folder (--table, or stitchlake.open of a folder), which gives none "
                "of its config's runtime settings (the lock its writers share, heartbeat expiry, retention), so it "
                "is only read; name the table's config to change it (-c CONFIG.yaml, or stitchlake.open of the YAML)"
            )

    def lock(self) -> TableLock:
        """The table lock (short critical sections only; see `transaction`). A table opened from its folder has
        no lock settings: with the default lock it could write beside writers that lock elsewhere (ZooKeeper)."""
        from stitchlake.concurrency.providers import LockRequest, make_lock

        self.require_config()

        lock = make_lock(self.storage, self.config.concurrency.lock, LockRequest(table_id=self.table_id))
        lock.bound_creates(self.storage.create_budget_s)
        return lock

    def timeline(self) -> Timeline:
        from stitchlake.timeline.timeline import Timeline

        return Timeline.load(self.storage)

    def read_timeline(self) -> Timeline:
        """The timeline as one cut of its history (`Timeline.load_cut`): what a read that takes no lock plans by."""
        from stitchlake.timeline.timeline import Timeline

        return Timeline.load_cut(self.storage)

    def view(self, timeline: Timeline | None = None) -> FileSystemView:
        from stitchlake.layout.fsview import FileSystemView
        from stitchlake.timeline.archive import load_checkpoint

        timeline = timeline or self.timeline()
        return FileSystemView.build(timeline, load_checkpoint(self.storage), self.base_buckets)


def _buckets_differ(where: str, path: str, said: int, layout: BucketLayout, rescales: list[RescaleRecord]) -> str:
    """A config whose `buckets` is not the table's count: which count is right, and what changes it."""
    whole = [r for r in rescales if r.whole_table]
    since = f" since rescale {whole[-1].requested}" if whole else ""
    return (
        f"{where} contradicts the table at {path}: table.buckets: table has {layout.default}, config says {said} "
        f"(the table has {layout.default} buckets per partition{since}); nothing was done. Set "
        f"`buckets: {layout.default}` in the config, or rescale the table to {said} "
        f"(`stitch rescale -c {where} --buckets {said}` rewrites its file groups; `stitch alter` cannot)"
    )


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


def open_table(target: str | os.PathLike[str] | TableConfig, cls: type[T] = TableHandle) -> T:  # type: ignore[assignment]
    """A Table from a config file, a table folder (with `.stitch/table.json`: read only, its runtime settings
    being in its config) or a TableConfig."""
    if isinstance(target, TableConfig):
        return cls(target)
    path = Path(target)
    if path.is_file():
        return cls(load_config(path))
    location = absolute(str(target))
    storage = storage_for(location)
    try:
        properties = parse_properties(storage.read_bytes(TABLE_JSON), storage.describe(TABLE_JSON))
    except FileNotFoundError:
        raise NotFoundError(f"{target}: neither a config file nor a stitchlake table (no {TABLE_JSON})") from None
    table = cls(config_from_schema(properties.schema, location), storage)
    table._properties = properties
    table.configless = True
    return table


def parse_properties(data: bytes, where: str) -> TableProperties:
    """`table.json`, its checksum verified (one written before checksums is read as it is): a flipped bit in the
    buckets or a key type would send keys to the wrong file groups without a word."""
    try:
        properties = json.loads(unseal(data, where, (b'{\n "format_version": ',)))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"{where}: not valid JSON ({exc})", file=where) from None
    if not isinstance(properties, dict):
        raise CorruptFileError(f"{where}: does not hold a JSON object", file=where)
    return TableProperties.from_json(properties, where)
