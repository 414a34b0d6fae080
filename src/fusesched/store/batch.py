"""Helpers for batch statements: merging changes, executemany updates, id look-ups."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Final

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Table,
    bindparam,
    literal_column,
    select,
    update,
)

from fusesched.store.errors import DuplicateJob, DuplicateTask, UnknownJob, UnknownTask

#: Ids per ``IN (...)`` list when looking up many ids at once.
CHUNK: Final = 500


def unindexed(column: ColumnElement[str]) -> ColumnElement[str]:
    """``column || ''``: the same values, but no index on ``column`` can serve the test."""
    return column + literal_column("''")


def no_repeats(ids: list[str], error: type[DuplicateJob | DuplicateTask], why: str = "") -> None:
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        repeated: set[str] = set()
        for i in ids:
            (repeated if i in seen else seen).add(i)
        raise error(repeated, why or "repeated in one batch")


def merge(changes: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One dict of new values per key; later changes of a key override earlier ones."""
    merged: dict[str, dict[str, Any]] = {}
    for key, values in changes:
        merged.setdefault(key, {}).update(values)
    return merged


def update_many(
    conn: Connection, table: Table, key: Column[str], merged: dict[str, dict[str, Any]]
) -> int:
    """Apply ``merged`` with one executemany per set of changed columns; the count of rows
    matched (a key with nothing to change counts when its row exists)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    empty: list[str] = []
    for k, values in merged.items():
        if values:
            groups[tuple(sorted(values))].append({"_key": k, **values})
        else:
            empty.append(k)
    stmt = update(table).where(key == bindparam("_key"))
    matched = sum(conn.execute(stmt, params).rowcount for params in groups.values())
    return matched + (len(existing(conn, key, empty)) if empty else 0)


def update_known(
    conn: Connection,
    table: Table,
    key: Column[str],
    merged: dict[str, dict[str, Any]],
    unknown: type[UnknownJob | UnknownTask],
) -> int:
    """:func:`update_many`, raising ``unknown`` with the keys that match no row (the caller's
    transaction then rolls back)."""
    changed = update_many(conn, table, key, merged)
    if changed != len(merged):
        raise unknown(set(merged) - existing(conn, key, list(merged)))
    return changed


def existing(conn: Connection, column: Column[Any], values: list[Any]) -> set[Any]:
    """Which of ``values`` are stored in ``column``."""
    found: set[Any] = set()
    for start in range(0, len(values), CHUNK):
        chunk = values[start : start + CHUNK]
        found.update(conn.execute(select(column).where(column.in_(chunk))).scalars())
    return found
