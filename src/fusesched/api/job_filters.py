"""The lists ``GET /v1/jobs`` filters by (``user=a&user=b``, ``id=5&id=6_2``, ``phase=…``) and
its time window (``since``/``until``), checked and bounded: a bad value is a 400 (or 422) that
says which and why."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from fastapi import HTTPException, Query

from fusesched.controller.holds import HELD
from fusesched.model.phases import JobPhase

#: At most this many values in one filter (``user=…`` given 101 times: 400).
MAX_VALUES: Final = 100
#: At most this many characters in one value.
MAX_VALUE_CHARS: Final = 200
#: A job id: a number, or an array member's ``<array>_<index>``.
JOB_ID: Final = re.compile(r"[0-9]{1,18}(_[0-9]{1,9})?")
#: The phases a job may be in (the core's, and ``held``).
PHASES: Final = (*(p.value for p in JobPhase), HELD)


def values(what: str, given: Sequence[str] | None) -> list[str] | None:
    """``given`` checked: none empty, none too long, not too many (``None``: no filter)."""
    if given is None:
        return None
    if len(given) > MAX_VALUES:
        raise HTTPException(400, f"at most {MAX_VALUES} {what} values, not {len(given)}")
    for value in given:
        if not value:
            raise HTTPException(400, f"an empty {what} matches no job")
        if len(value) > MAX_VALUE_CHARS:
            raise HTTPException(400, f"a {what} has at most {MAX_VALUE_CHARS} characters")
    return sorted(set(given))


def job_ids(given: Sequence[str] | None) -> list[str] | None:
    """Job ids (``5``, ``5_1``) checked."""
    found = values("id", given)
    for job_id in found or ():
        if not JOB_ID.fullmatch(job_id):
            raise HTTPException(
                400, f"bad job id {job_id!r}: a number, or an array member's ARRAY_INDEX"
            )
    return found


def phases(given: Sequence[str] | None) -> list[str] | None:
    """Phases checked against the known ones."""
    found = values("phase", given)
    for phase in found or ():
        if phase not in PHASES:
            raise HTTPException(
                400, f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}"
            )
    return found


#: The latest time a window may name (the end of the year 9999, in Unix seconds).
LAST_TIME: Final = 253_402_300_799.0


def time_query(description: str) -> Any:
    """A Unix time query parameter: a finite number from 0 to :data:`LAST_TIME` (else 422)."""
    return Query(ge=0, le=LAST_TIME, allow_inf_nan=False, description=description)


def window(since: float | None, until: float | None) -> tuple[float | None, float | None]:
    """A time window (``since``/``until``, Unix seconds, each checked by its query parameter)
    that starts no later than it ends."""
    if since is not None and until is not None and since > until:
        raise HTTPException(
            400, f"the window starts after it ends: since={since:g} is later than until={until:g}"
        )
    return since, until
