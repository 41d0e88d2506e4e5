"""What every published format shares: where it goes (`Target`), the version a publish made, one publish's rows
and hooks, and whose table it is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from stitchlake.storage import Storage, storage_for

if TYPE_CHECKING:
    import pyarrow as pa

#: Who published a table, in its Delta description and as an Iceberg table property: the stitched table's id.
OWNER_MARK = "stitchlake table "
OWNER_PROPERTY = "stitchlake.table-id"


@dataclass(frozen=True)
class Target:
    """Where one format is published (a local folder or an `s3://` prefix) and the table's `storage:` settings,
    with which delta-rs and pyiceberg reach the same store as the table's own client does."""

    location: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def local_folder(self) -> str | None:
        """The target as an absolute folder on this machine, or None on an object store: the storage says which,
        so a new backend needs no branch here."""
        return self.storage().local_path()

    def storage(self, location: str | None = None) -> Storage:
        return storage_for(location or self.location, self.storage_options)

    def client_settings(self) -> dict[str, str]:
        """What delta-rs and pyiceberg need to reach the target as the table's own client does (none on disk)."""
        return self.storage().client_settings()


@dataclass(frozen=True)
class Published:
    """The version a publish made: Delta's table version, or Iceberg's snapshot id (with the table's name), and
    where that table is (a REST catalog chooses its tables' locations itself)."""

    version: int
    table_location: str
    identifier: str = ""
    removed_files: int = 0


@dataclass(frozen=True)
class Publication:
    """One publish: the rows, whose they are, what to keep, and the check to run right before the format's commit
    (once the current version is loaded, so that a commit landing after the check is a conflict, not lost)."""

    rows: pa.Table
    name: str
    table_id: str
    retain: int
    partition_by: Sequence[str] = ()
    #: Recreate the published table: no older version, log entry or manifest survives (after `erase --purge`).
    fresh: bool = False
    before_commit: Callable[[], None] = field(default=lambda: None)
    #: Told the version right after the format's commit, before the bookkeeping that follows it (expiry, vacuum):
    #: from then on the version exists, whatever interrupts the publish.
    committed: Callable[[int], None] = field(default=lambda version: None)
