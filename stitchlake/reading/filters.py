"""Read filters: what a filter lets a read skip before opening a file, and what it checks row by row.

A filter is a mapping `{column: value or [values]}`, text conditions (`"p=eu,amount>=10"`, a list of them from
repeated `--where`), or a pyarrow expression. Conditions all hold together, except equalities on one column, which
combine as IN. Conditions on partition columns prune partitions (any comparison); equalities on every key column
prune file groups (the bucket of each key); everything is also checked on the rows.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config import TableConfig
from stitchlake.config.values import parse_text
from stitchlake.errors import UsageError
from stitchlake.layout.bucket import bucket_for_values
from stitchlake.layout.names import file_group_id
from stitchlake.layout.partition import parse_partition_path
from stitchlake.types import arrow_type

#: A read filter, as the Python API and `--where` give it.
Filter = Mapping[str, Any] | Any | str | Sequence[str] | None  # Any: a pyarrow.compute.Expression

#: Comparison operators of text conditions, longest first so `>=` is not read as `>`.
_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|>=|<=|==|=|>|<)(.*)$")


#: What each comparison of a condition does: to typed values, pyarrow expressions and Spark columns alike.
COMPARE = {"!=": operator.ne, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Condition:
    """`column op value`; an equality may hold several values (IN)."""

    column: str
    op: str
    values: tuple[Any, ...]

    def expression(self, kind: pa.DataType) -> pc.Expression:
        """As IEEE 754 compares floats (the Spark read follows, `spark.where`): -0.0 equals 0.0, NaN equals
        nothing and is neither greater nor less than anything. (`isin` hashes: it keeps -0.0 apart from 0.0.)"""
        column = pc.field(self.column)
        if self.op == "=" and pa.types.is_floating(kind):
            return functools.reduce(operator.or_, [column == pa.scalar(v, kind) for v in self.values])
        if self.op == "=":
            return column.isin(pa.array(list(self.values), kind))
        return COMPARE[self.op](column, pa.scalar(self.values[0], kind))

    def holds(self, value: Any) -> bool:
        """The condition on one (typed) value, for partition values."""
        if value is None:
            return False
        if self.op == "=":
            return value in self.values
        return bool(COMPARE[self.op](value, self.values[0]))


@dataclass(frozen=True)
class Pruning:
    """What a filter lets us skip before reading, and what must still be checked row by row."""

    partition_conditions: tuple[Condition, ...] = ()
    #: The keys an equality on every key column names (None: any): they prune file groups to their buckets, under
    #: the bucket count of each partition at the read's time (a rescale changes it).
    bucket_keys: tuple[tuple[Any, ...], ...] | None = None
    key_types: tuple[pa.DataType, ...] = ()
    #: The only (partition, file group) pairs to read, if the reader was handed them (a Spark task's share).
    only: frozenset[tuple[str, str]] | None = None
    rows: pc.Expression | None = None
    #: Columns the row filter needs (None: possibly any, for an opaque expression).
    row_columns: tuple[str, ...] | None = ()
    #: The part of `rows` on key and partition columns only (a deleted row still has those).
    keys: pc.Expression | None = None
    #: The part of `rows` on stream columns (null on a deleted row).
    values: pc.Expression | None = None
    partition_types: dict[str, str] = field(default_factory=dict)
    _groups: dict[int, set[str]] = field(default_factory=dict, compare=False, repr=False)

    def file_groups(self, buckets: int) -> set[str] | None:
        """The file groups the key equalities leave, with `buckets` buckets (None: no pruning by key)."""
        if self.bucket_keys is None:
            return None
        found = self._groups.get(buckets)
        if found is None:
            types = list(self.key_types)
            found = self._groups[buckets] = {
                file_group_id(bucket_for_values(list(key), types, buckets)) for key in self.bucket_keys
            }
        return found

    def allows(self, key: tuple[str, str], buckets: int) -> bool:
        """Whether file group `key` (partition, id) may hold matching rows when its partition has `buckets`."""
        if self.only is not None and key not in self.only:
            return False
        if not self.matches_partition(key[0]):
            return False
        groups = self.file_groups(buckets)
        return groups is None or key[1] in groups

    def matches_partition(self, path: str) -> bool:
        if not self.partition_conditions:
            return True
        found = parse_partition_path(path)
        for condition in self.partition_conditions:
            text = found.get(condition.column)
            value = None if text is None else parse_text(self.partition_types[condition.column], text)
            if not condition.holds(value):
                return False
        return True


def parse_conditions(texts: str | Sequence[str]) -> list[tuple[str, str, str]]:
    """`col=value`, `col>=value` (also != < <= >), comma-separated, in one text or several."""
    out = []
    for text in [texts] if isinstance(texts, str) else texts:
        for part in filter(None, (p.strip() for p in text.split(","))):
            match = _CONDITION.match(part)
            if not match:
                raise UsageError(f"--where {text!r}: expected col=value or col>=value (also != < <= >), got {part!r}")
            name, op, value = match.group(1), match.group(2), match.group(3).strip()
            out.append((name, "=" if op == "==" else op, value))
    return out


def _typed(config: TableConfig, name: str, op: str, value: Any) -> Any:
    columns = {c.name: c for c in config.all_columns()}
    if name not in columns:
        raise UsageError(f"filter: {name!r} is not a column (columns: {', '.join(columns)})")
    if value is None:  # matched nulls in some columns and nothing in others
        raise UsageError(
            f"filter: {name}=None: a filter compares values, and null is none; use a pyarrow expression "
            f"(pc.field({name!r}).is_null()) for rows where {name} is null"
        )
    if not isinstance(value, str):
        return value
    try:  # the grammar CSV landing files are read with: `1_0` is no whole number, `yes` is true
        return parse_text(columns[name].type, value)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"filter: {name}{op}{value!r} is not a valid {columns[name].type}: {exc}") from None


def refuse_empty_values(where: Mapping[str, Any]) -> None:
    """A filter mapping naming a column with an empty list of values (exit 2): taken as no condition at all, it
    would be every row."""
    empty = [name for name, value in where.items() if isinstance(value, list | tuple | set | frozenset) and not value]
    if empty:
        raise UsageError(
            f"filter: {empty[0]}: an empty list of values matches no row; with no values to look for, skip the read "
            "(it would return nothing)"
        )


def conditions(config: TableConfig, where: Mapping[str, Any] | str | Sequence[str]) -> list[Condition]:
    """Typed conditions; equalities on one column merged into one IN."""
    if isinstance(where, Mapping):
        refuse_empty_values(where)
        raw = [
            (name, "=", v)
            for name, value in where.items()
            for v in (list(value) if isinstance(value, list | tuple | set | frozenset) else [value])
        ]
    else:
        raw = parse_conditions(where)
    equal: dict[str, list[Any]] = {}
    out: list[Condition] = []
    for name, op, value in raw:
        typed = _typed(config, name, op, value)
        if op == "=":
            equal.setdefault(name, []).append(typed)
        else:
            out.append(Condition(name, op, (typed,)))
    return [Condition(name, "=", tuple(values)) for name, values in equal.items()] + out


def prune(config: TableConfig, where: Filter) -> Pruning:
    """Split a filter into partition pruning, file-group (bucket) pruning and a residual row filter."""
    if where is None:
        return Pruning()
    if isinstance(where, pc.Expression):
        return Pruning(rows=where, row_columns=None)
    found = conditions(config, where)
    kinds = {c.name: arrow_type(c.type) for c in config.all_columns()}
    partition_names = set(config.table.partition_names)
    common = {c.name for c in config.common_columns}
    equal = {c.column: list(c.values) for c in found if c.op == "="}
    combos = None
    if all(name in equal for name in config.table.key_names):
        combos = tuple(itertools.product(*(equal[n] for n in config.table.key_names)))
    on_keys = _conjunction([c.expression(kinds[c.column]) for c in found if c.column in common])
    on_values = _conjunction([c.expression(kinds[c.column]) for c in found if c.column not in common])
    return Pruning(
        partition_conditions=tuple(c for c in found if c.column in partition_names),
        bucket_keys=combos,
        key_types=tuple(arrow_type(c.type) for c in config.table.key),
        rows=_conjunction([e for e in (on_keys, on_values) if e is not None]),
        row_columns=tuple(dict.fromkeys(c.column for c in found)),
        keys=on_keys,
        values=on_values,
        partition_types={c.name: c.type for c in config.table.partition_by},
    )


def _conjunction(terms: list[pc.Expression]) -> pc.Expression | None:
    out = None
    for term in terms:
        out = term if out is None else out & term
    return out
