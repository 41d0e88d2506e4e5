"""stitchlake: stitch several data streams into one wide table at the storage layer.

Imports stay lazy so that `stitch --help` and metadata commands never pay for pyarrow or pyspark.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    import pyarrow as pa

    from stitchlake.api import Table
    from stitchlake.config import TableConfig
    from stitchlake.vocabulary import ReadMode

__all__ = ["__version__", "open", "read"]


def open(target: str | os.PathLike[str] | TableConfig) -> Table:
    """A table handle from a config file path, a table folder, or a TableConfig."""
    from stitchlake.api import open as open_api

    return open_api(target)


def read(
    target: str | os.PathLike[str] | TableConfig | Table,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    columns: list[str] | None = None,
    filter: Any = None,
    mode: ReadMode | str = "snapshot",
    before_images: bool = False,
) -> pa.Table:
    """Read a table into one pyarrow.Table (design.md §7): the whole result in memory, which is the caller's choice.

    To stream the same rows one file slice at a time (memory bounded by the largest file group, not the table), use
    `stitchlake.open(target).scan(...)`; `Table.sql` and `Table.to_duckdb` stream the table into DuckDB."""
    from stitchlake.reading.options import ReadOptions
    from stitchlake.reading.reader import read as read_table
    from stitchlake.table.handle import TableHandle

    table = target if isinstance(target, TableHandle) else open(target)
    return read_table(table, ReadOptions(mode, as_of, since, until, columns, filter, before_images))
