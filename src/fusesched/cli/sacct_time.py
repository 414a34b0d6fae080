"""The times ``fusesched sacct -S/-E`` takes, in Slurm's forms, as Unix times.

sacct looks back, so a time of day is its latest past one (``09:00`` after nine is this
morning, before nine yesterday morning), unlike ``sbatch --begin`` (the next one):

* ``now``, ``now-N[units]``, ``now+N[units]``: units ``seconds`` (the default), ``minutes``,
  ``hours``, ``days``, ``weeks`` (or their first letters: ``now-2days``, ``now-3h``);
* ``HH:MM[:SS]``; ``today`` and ``midnight`` (this day's start), ``tomorrow``; ``noon``,
  ``elevenses``, ``fika``, ``teatime`` (the latest past one);
* ``YYYY-MM-DD[THH:MM[:SS]]`` (any ISO 8601 time, also with a zone offset);
* ``MMDD[YY]``, ``MM/DD[/YY]``, ``MM.DD[.YY]``, each with an optional ``-HH:MM[:SS]``: a day
  of this year, or of last year when its month is still to come (``YY``: of 20YY).

Read in the local time zone (``tz`` None) unless one is given. Pure: ``now`` is passed in.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, tzinfo
from typing import Final

from fusesched.submit.begin import MAX_AHEAD_S, begin_of, parse_begin

FORMS: Final = (
    "now, now-N[seconds|minutes|hours|days|weeks], HH:MM[:SS], today, midnight, "
    "YYYY-MM-DD[THH:MM[:SS]], MMDD[YY], MM/DD[/YY] or MM.DD[.YY] (each with -HH:MM[:SS])"
)
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE: Final = re.compile(r"now\s*(?:([+-])\s*(\d{1,12})\s*([a-z]*))?", re.ASCII)
_CLOCK: Final = r"(\d{1,2}):(\d{2})(?::(\d{2}))?"
_TIME_OF_DAY: Final = re.compile(_CLOCK, re.ASCII)
_DAY: Final = re.compile(
    r"(?:(\d{2})(\d{2})(\d{2})?|(\d{1,2})([/.])(\d{1,2})(?:\5(\d{2}))?)" rf"(?:-{_CLOCK})?",
    re.ASCII,
)
_NAMED: Final = {"noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}


def parse_sacct_time(text: str, now: float, tz: tzinfo | None = None, what: str = "time") -> float:
    """The Unix time ``text`` names, seen at ``now``; a ``ValueError`` naming the forms
    otherwise (``what``: the option, for the message)."""
    word = text.strip().lower()
    if not word:
        raise ValueError(f"an empty {what} (use {FORMS})")
    today = (datetime.fromtimestamp(now, tz) if tz else datetime.fromtimestamp(now)).date()
    if match := _RELATIVE.fullmatch(word):
        return _relative(text, match, now, what)
    if word in ("today", "midnight", "tomorrow"):
        return _at(today + timedelta(days=word == "tomorrow"), 0, 0, 0, tz)
    if word in _NAMED:
        return _latest(today, _NAMED[word], 0, 0, now, tz)
    if match := _TIME_OF_DAY.fullmatch(word):
        hour, minute, second = _clock(text, match.groups(), what)
        return _latest(today, hour, minute, second, now, tz)
    if match := _DAY.fullmatch(word):
        return _day(text, match, today, tz, what)
    if re.match(r"\d{4}-", word):
        return parse_begin(text, now, tz, what)  # (an absolute date: read as --begin reads it)
    raise ValueError(f"cannot read the {what} {text!r} (use {FORMS})")


def _relative(text: str, match: re.Match[str], now: float, what: str) -> float:
    sign, count, unit = match.groups()
    if sign is None:
        return now
    letter = (unit or "s")[0]
    if letter not in _UNITS or (unit and not _is_unit(unit)):
        raise ValueError(
            f"{what} {text!r}: unknown unit {unit!r} (seconds, minutes, hours, days or weeks)"
        )
    span = int(count) * _UNITS[letter]
    if span > MAX_AHEAD_S:
        raise ValueError(f"{what} {text!r} is more than 100 years away")
    return now - span if sign == "-" else now + span


def _is_unit(unit: str) -> bool:
    """``unit`` is a letter of one of the units, or its name (singular or plural, ``min``,
    ``sec``)."""
    names = ("second", "minute", "hour", "day", "week")
    return unit in _UNITS or unit.rstrip("s") in (*names, "sec", "min")


def _clock(text: str, groups: tuple[str | None, ...], what: str) -> tuple[int, int, int]:
    hour, minute, second = (int(g or 0) for g in groups)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{what} {text!r}: no such time of day")
    return hour, minute, second


def _day(text: str, match: re.Match[str], today: date, tz: tzinfo | None, what: str) -> float:
    """``MMDD[YY]``, ``MM/DD[/YY]`` or ``MM.DD[.YY]``, with an optional time of day; without
    a year, last year's when its month is later than this one (as Slurm's sacct looks back:
    ``1231`` read on January 2nd is three days ago, not a date to come)."""
    g = match.groups()
    month, day, year = (g[0], g[1], g[2]) if g[0] is not None else (g[3], g[5], g[6])
    hour, minute, second = _clock(text, g[7:10], what) if g[7] is not None else (0, 0, 0)
    in_year = 2000 + int(year) if year else today.year - (int(month or 0) > today.month)
    try:
        on = date(in_year, int(month or 0), int(day or 0))
    except ValueError as exc:
        raise ValueError(f"{what} {text!r}: {exc}") from None
    return _at(on, hour, minute, second, tz)


def _at(day: date, hour: int, minute: int, second: int, tz: tzinfo | None) -> float:
    return begin_of(datetime(day.year, day.month, day.day, hour, minute, second), tz)


def _latest(day: date, hour: int, minute: int, second: int, now: float, tz: tzinfo | None) -> float:
    """That time of ``day``, or of the day before when it is later than ``now``."""
    moment = _at(day, hour, minute, second, tz)
    return moment if moment <= now else _at(day - timedelta(days=1), hour, minute, second, tz)
