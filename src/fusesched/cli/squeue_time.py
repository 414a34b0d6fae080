"""``SLURM_TIME_FORMAT`` for squeue's time stamps (``%V`` submit, ``%S`` start, ``%e`` end, and
their ``-O`` names), as Slurm's commands read it: ``standard`` (or unset, or empty) the ISO
form ``2026-12-07T19:10:00``; ``relative`` the time alone today (``19:10:00``), ``Ystday
19:10`` and ``Tomorr 19:10``, a weekday within the coming week (``Mon 19:10``), the day and
month within a year (``7 Dec 19:10``), the date beyond (``7 Dec 2027``); anything else a
``strftime`` format (``%a %T``: ``Mon 19:10:00``), which must hold a ``%`` and be shorter than
:data:`MAX_FORMAT` bytes, as Slurm's (a ``ValueError`` otherwise); a time so written is cut to
``MAX_FORMAT - 1`` bytes, as Slurm's buffer cuts it (``%A %B %d %Y %H:%M:%S``: ``Tuesday
December 08 2026 02:17:``). ``N/A`` stays ``N/A``.

Pure but for the clock and the local time zone (as ``%M`` reads the clock).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from fusesched.cli import squeue_fields as f
from fusesched.cli.squeue_format import Field, Piece, cut_bytes

Job = dict[str, Any]

#: Slurm's ISO form, ``SLURM_TIME_FORMAT=standard``.
STANDARD: Final = "%Y-%m-%dT%H:%M:%S"
RELATIVE: Final = "relative"
#: Slurm keeps the format in a buffer of 32 bytes (a longer one is refused), and writes a
#: time in one (cut to 31 bytes).
MAX_FORMAT: Final = 32


def parse_time_format(value: str | None) -> str | None:
    """The style ``value`` asks for: None for Slurm's standard form, :data:`RELATIVE`, or a
    ``strftime`` format; a ``ValueError`` saying what is taken otherwise."""
    if value is None or not value.strip() or value == "standard":
        return None
    if value == RELATIVE:
        return RELATIVE
    size = len(value.encode("utf-8", "surrogateescape"))
    if "%" not in value or size >= MAX_FORMAT or "\0" in value:
        raise ValueError(
            f"{value!r} is no time format: give standard, relative or a strftime format "
            f"with a % (shorter than {MAX_FORMAT} bytes), such as '%a %T'"
        )
    return value


def _relative(when: time.struct_time, now: time.struct_time) -> str:
    """Slurm's ``relative`` format for a time ``when``, seen at ``now``."""
    days = _day_number(when) - _day_number(now)
    if days == 0:
        return "%H:%M:%S"
    if days == -1:
        return "Ystday %H:%M"
    if days == 1:
        return "Tomorr %H:%M"
    if not -365 <= days <= 365:
        return "%-d %b %Y"
    if days < -1 or days > 6:
        return "%-d %b %H:%M"
    return "%a %H:%M"


def _day_number(t: time.struct_time) -> int:
    """Slurm's day count for ``relative``: 1000 a year plus the day of the year (so the
    last day of a year and the first of the next are far apart, as in Slurm's)."""
    return 1000 * t.tm_year + t.tm_yday


def stamp(t: float | None, style: str | None, now: float | None = None) -> str:
    """A time as squeue writes it in ``style`` (:func:`parse_time_format`); ``N/A``: none."""
    if t is None:
        return "N/A"
    when = time.localtime(t)
    if style is None:
        return time.strftime(STANDARD, when)
    if style == RELATIVE:
        style = _relative(when, time.localtime(time.time() if now is None else now))
    return cut_bytes(time.strftime(style, when), MAX_FORMAT - 1)[0]


def _fields(style: str) -> dict[Field, Field]:
    """Each time field of :data:`~fusesched.cli.squeue_fields.FIELDS` and its ``style``'s."""
    fields = f.FIELDS
    return {
        fields["V"]: Field("SUBMIT_TIME", lambda j: stamp(j.get("submit_time"), style)),
        fields["S"]: Field("START_TIME", lambda j: stamp(j.get("start_time"), style)),
        fields["e"]: Field("END_TIME", lambda j: stamp(f.end_time(j), style)),
    }


def restamp(pieces: Sequence[Piece], style: str | None) -> list[Piece]:
    """``pieces`` with their time fields in ``style`` (None: as they are)."""
    if style is None:
        return list(pieces)
    swap = _fields(style)
    return [replace(p, field=swap[p.field]) if p.field in swap else p for p in pieces]
