"""Opening a table from Spark data source options, and its Spark schema (shared by reading and writing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from stitchlake.table.handle import TableHandle as Table


def open_for_spark(options: dict[str, str]) -> Table:
    """The table named by the `path` option, with the runtime settings of `config` when given."""
    from stitchlake.config import load_config
    from stitchlake.table.handle import TableHandle as Table
    from stitchlake.table.handle import open_table

    path = options.get("path")
    if options.get("config"):
        config = load_config(options["config"])
        return Table(config.with_path(path) if path else config)
    if not path:
        from stitchlake.errors import UsageError

        raise UsageError(
            "the stitchlake data source needs a table path (.load(path)), or for a write its config "
            "(.option('config', ...))"
        )
    return open_table(path)


def spark_schema(table: Table) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from stitchlake.io.schemas import table_schema

    return from_arrow_schema(table_schema(table.config))
