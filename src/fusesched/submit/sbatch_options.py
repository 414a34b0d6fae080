"""Readers for the values of some ``sbatch`` options: ``--nice``, ``--priority``, ``--export``,
``--kill-on-invalid-dep``, ``--open-mode`` and ``--deadline``. Pure: each returns the job's
value (and any warnings) or raises ``ValueError`` with the reason, which the batch-script
parser (submit/sbatch.py) locates at the option's line.
"""

from __future__ import annotations

import re
from typing import Final

from fusesched.model.text import is_env_name
from fusesched.submit.begin import parse_begin
from fusesched.submit.request import OPEN_MODES, PRIORITY_MAX, PRIORITY_MIN

#: ``--nice`` without a value lowers the priority by this much (as Slurm).
DEFAULT_NICE: Final = 100
#: The largest ``--nice`` adjustment either way (Slurm's range).
MAX_NICE: Final = 2_147_483_645
_INTEGER_RE: Final = re.compile(r"^[+-]?[0-9]+$")

#: What ``--export=ALL`` (Slurm's default) is told, once.
EXPORT_ALL_WARNING: Final = (
    "--export=ALL: fusesched does not carry the submitting shell's environment to the job "
    "(as --export=NONE); name the variables it needs: --export=NAME=value[,NAME=value]"
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


def export_env(text: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """``--export``'s variables for the job's environment, and warnings.

    ``NONE`` (what fusesched always does: nothing from the submitting shell), ``ALL`` (a
    warning: the shell's environment is not carried), optionally followed by
    ``,NAME=value[,NAME=value…]``; a bare ``NAME`` (its value from the submitting shell) is
    refused, since the script may be read where that shell's environment is not known.
    """
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or not all(items):
        raise ValueError(f"expected ALL, NONE or NAME=value joined by ',', got {text!r}")
    warnings: tuple[str, ...] = ()
    if items[0].upper() in ("ALL", "NONE"):
        if items[0].upper() == "ALL":
            warnings = (EXPORT_ALL_WARNING,)
        items = items[1:]
    env: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if name.upper() in ("ALL", "NONE") and not eq:
            raise ValueError(f"{name} may only come first (--export={name},NAME=value)")
        if not is_env_name(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if not eq:
            raise ValueError(
                f"{name} has no value: write {name}=value (fusesched does not read the "
                "submitting shell's environment)"
            )
        if name in env and env[name] != value:
            raise ValueError(f"{name} is given twice")
        env[name] = value
    return env, warnings


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
