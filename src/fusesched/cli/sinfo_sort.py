"""``fusesched sinfo -S/--sort``: the order of a listing's lines, by ``-o`` letters, as
Slurm's sinfo reads it.

``-S "+P,-m"``: lines by partition name, then by memory, largest first. Each item is a
``-o`` letter of :mod:`fusesched.cli.sinfo_format` (``%P`` is taken too), ``+`` (the
default) for ascending and ``-`` for descending; ``#P`` is the partitions in their own order
(the default partition first, then the others by name: the order fusesched lists them in
without ``-S``). Values compare as people read them: ``n2`` before ``n10``, ``512`` before
``4096``. Lines that compare equal keep the order they had. Pure; a bad item raises
:class:`~fusesched.cli.squeue_format.FormatError` naming the known letters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fusesched.cli.sinfo_format import FIELDS, NodeInfo, Row
from fusesched.cli.squeue_format import Field, FormatError

_NUMBER: Final = re.compile(r"(\d+)")
#: The partition's own order (``#P``).
CONFIGURED: Final = "#P"


@dataclass(frozen=True, slots=True)
class SortKey:
    """One ``-S`` item: the field (None: ``#P``, the partitions' own order) and whether it
    sorts descending."""

    field: Field | None
    descending: bool = False


def parse(text: str) -> list[SortKey]:
    """``-S`` text (a comma list of ``[+|-][#]LETTER``, ``%`` before the letter allowed)."""
    keys: list[SortKey] = []
    for raw in text.split(","):
        item = raw.strip()
        descending = item.startswith("-")
        item = item[1:] if item[:1] in "+-" else item
        item = item.replace("%", "", 1) if item.startswith(("%", "#%")) else item
        if item == CONFIGURED:
            keys.append(SortKey(None, descending))
        elif len(item) == 1 and item in FIELDS:
            keys.append(SortKey(FIELDS[item], descending))
        else:
            known = " ".join(sorted(FIELDS, key=str.lower))
            what = f"unknown sort field {raw.strip()!r}" if raw.strip() else "an empty sort field"
            raise FormatError(
                f"-S/--sort: {what}: give [+|-]LETTER items, as '+P,-m' "
                f"(#P: the partitions' own order; letters: {known})"
            )
    return keys


def _natural(text: str) -> tuple[tuple[int, Any], ...]:
    """``n2`` before ``n10`` (numbers compare as numbers, before text at the same place)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _NUMBER.split(text) if p)


def _configured(row: Row) -> tuple[bool, str]:
    first: NodeInfo = row["nodes"][0]
    return (not first.default, first.partition)


def ordered(rows: Sequence[Row], keys: Sequence[SortKey]) -> list[Row]:
    """``rows`` in the order ``keys`` give (the first key first; equal ones as they were)."""
    out = list(rows)
    for key in reversed(keys):
        out.sort(key=_by(key.field), reverse=key.descending)
    return out


def _by(field: Field | None) -> Callable[[Row], tuple[Any, ...]]:
    """A line's sort key for ``field`` (None: ``#P``)."""
    if field is None:
        return _configured
    return lambda row: _natural(field.value(row))
