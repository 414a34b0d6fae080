"""Readers for the values of some ``sbatch`` options: ``--nice``, ``--priority``, ``--export``,
``--kill-on-invalid-dep``, ``--open-mode`` and ``--deadline``. Pure: each returns the job's
value (and any warnings) or raises ``ValueError`` with the reason, which the batch-script
parser (submit/sbatch.py) locates at the option's line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fusesched.model.text import is_env_name
from fusesched.submit.begin import parse_begin
from fusesched.submit.request import OPEN_MODES, PRIORITY_MAX, PRIORITY_MIN

#: ``--nice`` without a value lowers the priority by this much (as Slurm).
DEFAULT_NICE: Final = 100
#: The largest ``--nice`` adjustment either way (Slurm's range).
MAX_NICE: Final = 2_147_483_645
_INTEGER_RE: Final = re.compile(r"^[+-]?[0-9]+$")

#: What ``--export=ALL`` (Slurm's default) is told when the submitting environment is not
#: known (the REST API, a client older than the controller), once.
EXPORT_ALL_WARNING: Final = (
    "--export=ALL: the submitting shell's environment was not sent (the REST API, or a client "
    "older than the controller), so the job gets none of it; name the variables it needs: "
    "--export=NAME=value[,NAME=value]"
)


def nice_priority(text: str) -> int:
    """The job priority ``--nice[=N]`` gives: ``-N`` (no value: ``-100``); a negative
    adjustment raises it."""
    if not text:
        return -DEFAULT_NICE
    if not _INTEGER_RE.fullmatch(text):
        raise ValueError(
            f"expected a whole number (an adjustment, default {DEFAULT_NICE}), got {text!r}"
        )
    value = int(text)
    if abs(value) > MAX_NICE:
        raise ValueError(f"the adjustment must be within ±{MAX_NICE}, got {text}")
    return -value


def explicit_priority(text: str) -> int:
    """The job priority ``--priority=N`` gives: ``N``, a 32-bit integer."""
    if text.upper() == "TOP":
        raise ValueError(f"give a number ({PRIORITY_MIN} … {PRIORITY_MAX}): TOP is not supported")
    if not _INTEGER_RE.fullmatch(text):
        raise ValueError(f"expected a whole number, got {text!r}")
    value = int(text)
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(f"the priority must be within {PRIORITY_MIN} … {PRIORITY_MAX}, got {text}")
    return value


@dataclass(frozen=True, slots=True)
class Export:
    """What ``--export`` asks for: whether the submitting environment is carried (``ALL``,
    Slurm's default), the variables it names (a bare ``NAME`` with its value from the
    submitting environment), and warnings."""

    carry_all: bool
    env: dict[str, str]
    warnings: tuple[str, ...] = ()


def export_env(text: str, submit_env: Mapping[str, str] | None = None) -> Export:
    """``--export``'s meaning: ``ALL`` (the submitting environment, then the variables
    named), ``NONE`` or ``NIL`` (none of it: only the variables named; ``NIL`` names none),
    or variables alone (as ``NONE,…``): ``NAME=value`` or a bare ``NAME``, whose value is
    the submitting environment's (``submit_env``; None: not known, so a bare name is refused
    and ``ALL`` warned of)."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or not all(items):
        raise ValueError(f"expected ALL, NONE or NAME=value joined by ',', got {text!r}")
    warnings: list[str] = []
    mode = items[0].upper()
    carry_all = mode == "ALL"
    if mode in ("ALL", "NONE", "NIL"):
        items = items[1:]
        if carry_all and submit_env is None:
            warnings.append(EXPORT_ALL_WARNING)
        if mode == "NIL" and items:
            raise ValueError("NIL takes no variables (--export=NONE,NAME=value names some)")
    env: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if name.upper() in ("ALL", "NONE", "NIL") and not eq:
            raise ValueError(f"{name} may only come first (--export={name},NAME=value)")
        if not is_env_name(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if not eq:
            if submit_env is None:
                raise ValueError(
                    f"{name} has no value: write {name}=value (the submitting shell's "
                    "environment was not sent)"
                )
            if name not in submit_env:
                warnings.append(f"--export: {name} is not set here, so the job does not get it")
                continue
            value = submit_env[name]
        if name in env and env[name] != value:
            raise ValueError(f"{name} is given twice")
        env[name] = value
    return Export(carry_all, env, tuple(warnings))


def kill_on_invalid_dep(text: str) -> tuple[str, ...]:
    """Warnings for ``--kill-on-invalid-dep=yes|no``: fusesched always cancels a job whose
    dependency can never be met (as ``yes``)."""
    answer = text.lower()
    if answer == "yes":
        return ()
    if answer == "no":
        return (
            "--kill-on-invalid-dep=no: fusesched always cancels a job whose dependency can "
            "never be met (as =yes), with the reason; it does not leave it waiting",
        )
    raise ValueError(f"expected yes or no, got {text!r}")


def open_mode(text: str) -> str:
    """``--open-mode=append|truncate`` (any case): how the ``-o``/``-e`` files are opened
    at each start of the job."""
    mode = text.strip().lower()
    if mode not in OPEN_MODES:
        raise ValueError(f"expected append or truncate, got {text!r}")
    return mode


def deadline_time(text: str, now: float, walltime_s: float | None) -> float:
    """The Unix time ``--deadline=TIME`` names (the forms of ``--begin``), read at ``now``:
    it must be ahead, and the job's time limit (``--time``, required: without one the job
    could not be known to end by it) must fit before it."""
    deadline = parse_begin(text, now, what="deadline")
    if deadline <= now:
        raise ValueError(f"the deadline {text!r} has passed")
    if walltime_s is None:
        raise ValueError(
            "a deadline needs a time limit (--time): without one the job could not be known "
            "to end by it"
        )
    if now + walltime_s > deadline:
        raise ValueError(
            f"the job cannot end by its deadline {text!r}: its time limit ({walltime_s:g} s) "
            "runs past it even if it started now"
        )
    return deadline
