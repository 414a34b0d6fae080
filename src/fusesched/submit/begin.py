"""A job's begin time (``sbatch --begin``, the YAML ``begin`` field) as a Unix time.

Slurm's forms, read against ``now`` and a time zone (default: this process's, which for
submission files is the controller's — it parses them):

* ``HH:MM[:SS]``: that time today, or tomorrow when it has passed;
* ``YYYY-MM-DD[THH:MM[:SS]]`` (also any ISO 8601 time, with a zone offset or ``Z``);
* ``now``, ``now+N[units]``: units ``seconds`` (the default), ``minutes``, ``hours``,
  ``days``, ``weeks`` (or their first letters: ``now+2h``);
* ``midnight`` (the next one), ``noon``, ``elevenses`` (11:00), ``fika`` (15:00),
  ``teatime`` (16:00): the next such time; ``today`` (midnight past: at once), ``tomorrow``
  (the next midnight).

A time in the past means: eligible at once. :func:`parse_begin` is pure (``now`` given).
"""

from __future__ import annotations

import re
import time
from datetime import date, datetime, timedelta, tzinfo
from typing import Final

FORMS: Final = (
    "HH:MM[:SS], YYYY-MM-DD[THH:MM[:SS]], now+N[seconds|minutes|hours|days|weeks], "
    "midnight, noon, teatime, today or tomorrow"
)
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_UNIT_WORDS: Final = {
    "": "s",
    **{w: w[0] for w in ("sec", "secs", "second", "seconds", "min", "mins", "minute")},
    **{w: w[0] for w in ("minutes", "hour", "hours", "day", "days", "week", "weeks")},
    **{u: u for u in _UNITS},
}
_NAMED: Final = {"noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
_RELATIVE_RE: Final = re.compile(r"^now\s*(?:\+\s*(\d+)\s*([a-z]*))?$", re.ASCII)
_CLOCK_RE: Final = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$", re.ASCII)
_DATE_RE: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[t ](\d{1,2}):(\d{2})(?::(\d{2}))?)?$", re.ASCII
)
#: ``now+N`` reaches this far at most (a typo of many digits is refused, not overflowed).
MAX_AHEAD_S: Final = 100 * 365 * 86400


def parse_begin(text: str, now: float, tz: tzinfo | None = None, what: str = "begin time") -> float:
    """The Unix time ``text`` (a Slurm ``--begin`` value) names, seen at ``now`` in the time
    zone ``tz`` (None: the local one); ``ValueError`` that lists the forms otherwise. ``what``
    names the time in the messages (``--deadline`` takes the same forms)."""
    word = text.strip().lower()
    if not word:
        raise ValueError(f"an empty {what} (use {FORMS})")
    today = _local(now, tz).date()
    match = _RELATIVE_RE.fullmatch(word)
    if match:
        if match.group(1) is None:
            return now
        unit = _UNIT_WORDS.get(match.group(2))
        if unit is None:
            raise ValueError(
                f"{what} {text!r}: unknown unit {match.group(2)!r} (seconds, minutes, "
                "hours, days or weeks)"
            )
        ahead = int(match.group(1)) * _UNITS[unit]
        if ahead > MAX_AHEAD_S:
            raise ValueError(f"{what} {text!r} is more than 100 years ahead")
        return now + ahead
    if word in ("today", "tomorrow", "midnight"):
        return _at(today + timedelta(days=0 if word == "today" else 1), 0, 0, 0, tz)
    if word in _NAMED:
        return _next(today, _NAMED[word], 0, 0, now, tz)
    match = _CLOCK_RE.fullmatch(word)
    if match:
        hour, minute, second = (int(g or 0) for g in match.groups())
        _check_clock(text, hour, minute, second, what)
        return _next(today, hour, minute, second, now, tz)
    match = _DATE_RE.fullmatch(word)
    if match:
        year, month, day, hour, minute, second = (int(g or 0) for g in match.groups())
        _check_clock(text, hour, minute, second, what)
        try:
            return _at(date(year, month, day), hour, minute, second, tz)
        except ValueError as exc:
            raise ValueError(f"{what} {text!r}: {exc}") from None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"cannot read the {what} {text!r} (use {FORMS})") from None
    return begin_of(moment, tz)


def begin_of(moment: datetime | date, tz: tzinfo | None = None) -> float:
    """The Unix time of a date or time (a YAML timestamp): without a zone, in ``tz`` (None:
    the local one); a date alone is its midnight."""
    if not isinstance(moment, datetime):
        return _at(moment, 0, 0, 0, tz)
    if moment.tzinfo is None and tz is not None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()  # (naive: local time)


def begin_reason(begin: float) -> str:
    """What a job waiting for its begin time says (``fusesched show``'s reason)."""
    return f"begin time {time.strftime('%Y-%m-%d %H:%M:%S %z', time.localtime(begin))}"


def _local(now: float, tz: tzinfo | None) -> datetime:
    return datetime.fromtimestamp(now, tz) if tz is not None else datetime.fromtimestamp(now)


def _at(day: date, hour: int, minute: int, second: int, tz: tzinfo | None) -> float:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=tz).timestamp()


def _next(day: date, hour: int, minute: int, second: int, now: float, tz: tzinfo | None) -> float:
    """That time of ``day``, or of the next day when it is not after ``now``."""
    moment = _at(day, hour, minute, second, tz)
    return moment if moment > now else _at(day + timedelta(days=1), hour, minute, second, tz)


def _check_clock(text: str, hour: int, minute: int, second: int, what: str) -> None:
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{what} {text!r}: no such time of day")
