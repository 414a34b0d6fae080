"""Slurm's job states as ``squeue`` names them (``-t PD,R``, ``%t``, ``%T``) mapped onto
fusesched's states and phases: which jobs a state list asks for, and what state a job shows.

Pure functions of the job views (``GET /v1/jobs``); an unknown state raises ``ValueError``
naming the known ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from fusesched.model.phases import node_failed, oom_killed

Job = dict[str, Any]


class StateMatch(NamedTuple):
    """What a Slurm state name asks for: jobs in any of ``states`` (fusesched's coarse
    states) or in any of ``phases`` (its finer phases), or, with ``completing``, those the
    controller shows completing (``GET /v1/jobs?completing=true``). Of the jobs in phase
    ``failed``, which Slurm tells apart, ``failed`` names those kept (``FAILED``,
    ``NODE_FAIL``: :func:`matches`), unless ``states`` holds ``Failed`` (all of them)."""

    states: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    completing: bool = False
    failed: tuple[str, ...] = ()


#: Slurm's job states that fusesched has, by long name: (short code, what they match).
SLURM_STATES: Final[dict[str, tuple[str, StateMatch]]] = {
    "PENDING": ("PD", StateMatch(states=("Pending",))),
    "RUNNING": ("R", StateMatch(states=("Running",))),
    "COMPLETED": ("CD", StateMatch(states=("Completed",))),
    "FAILED": ("F", StateMatch(phases=("failed",), failed=("FAILED",))),
    "NODE_FAIL": ("NF", StateMatch(phases=("failed",), failed=("NODE_FAIL",))),
    "OUT_OF_MEMORY": ("OOM", StateMatch(phases=("failed",), failed=("OUT_OF_MEMORY",))),
    "CANCELLED": ("CA", StateMatch(states=("Cancelled",))),
    "TIMEOUT": ("TO", StateMatch(phases=("timeout",))),
    "PREEMPTED": ("PR", StateMatch(phases=("preempted",))),
    # (a run still holds its booking where its tasks are being killed; its state is its end's)
    "COMPLETING": ("CG", StateMatch(completing=True)),
}
#: Slurm's job states that a fusesched job is never in: asked for, they match no job (so a
#: script's ``-t PD,R,CG`` works).
NEVER_STATES: Final[dict[str, str]] = {
    "BOOT_FAIL": "BF",
    "CONFIGURING": "CF",
    "DEADLINE": "DL",
    "REQUEUED": "RQ",
    "REQUEUE_FED": "RF",
    "REQUEUE_HOLD": "RH",
    "RESIZING": "RS",
    "RESV_DEL_HOLD": "RD",
    "REVOKED": "RV",
    "SIGNALING": "SI",
    "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO",
    "STOPPED": "ST",
    "SUSPENDED": "S",
}
_NEVER: Final = frozenset({*NEVER_STATES, *NEVER_STATES.values()})
#: Every state (``-t all``).
ALL_STATES: Final = StateMatch(
    states=("Pending", "Running", "Completed", "Failed", "Cancelled"), completing=True
)
_BY_CODE: Final = {code: match for code, match in SLURM_STATES.values()}


def known_states() -> str:
    """The state names ``-t`` takes, for an error message."""
    return ", ".join(f"{code}/{name}" for name, (code, _) in SLURM_STATES.items()) + ", all"


def parse_states(given: Iterable[str]) -> StateMatch:
    """``-t PD,R`` (each item may hold a comma list; case does not matter; fusesched's own
    names such as ``Pending`` are Slurm's too) as the states and phases to ask for (none at
    all when only states fusesched never has are named: no job matches); a ``ValueError``
    listing the known names for any other."""
    states: set[str] = set()
    phases: set[str] = set()
    failed: set[str] = set()
    completing = False
    for item in given:
        for raw in item.split(","):
            word = raw.strip().upper()
            if not word:
                raise ValueError(f"an empty job state in {item!r}; known: {known_states()}")
            if word == "ALL":
                match = ALL_STATES
            elif word in SLURM_STATES:
                match = SLURM_STATES[word][1]
            elif word in _BY_CODE:
                match = _BY_CODE[word]
            elif word in _NEVER:
                continue  # (matches no job)
            else:
                raise ValueError(f"unknown job state {raw.strip()!r}; known: {known_states()}")
            states.update(match.states)
            phases.update(match.phases)
            failed.update(match.failed)
            completing = completing or match.completing
    found = (tuple(sorted(states)), tuple(sorted(phases - {""})))
    return StateMatch(*found, completing, tuple(sorted(failed)))


def matches(match: StateMatch, job: Job) -> bool:
    """Whether ``-t`` lists a job the controller answered for ``match``. One shown
    ``COMPLETING`` only for ``CG`` (or ``all``), as Slurm's squeue matches a job whose state
    has that flag by the flag alone: ``-t CA`` lists a cancelled job once its tasks are gone,
    not while it is shown ``CG``. And with ``CG`` alone only such a job: an older controller
    ignores ``completing=true`` and answers every job. A failed job only for the one of
    ``FAILED``, ``NODE_FAIL`` and ``OUT_OF_MEMORY`` it is shown in (or ``all``): all are
    phase ``failed``."""
    if job.get("completing"):
        return match.completing
    if job.get("phase") == "failed" and "Failed" not in match.states:
        return slurm_state(job) in match.failed
    return bool(match.states or match.phases)


def slurm_state(job: Job) -> str:
    """The job's state as Slurm names it (``PENDING``, ``TIMEOUT``, ``NODE_FAIL`` for one
    failed by a lost node, …); ``COMPLETING`` while the controller shows it so, whatever
    state it ended in (as Slurm's flag)."""
    if job.get("completing"):
        return "COMPLETING"
    phase, state = job.get("phase"), job.get("state")
    if phase == "failed" and node_failed(str(job.get("reason") or "")):
        return "NODE_FAIL"
    if phase == "failed" and oom_killed(str(job.get("reason") or "")):
        return "OUT_OF_MEMORY"  # (the kernel's OOM killer ended it, as sacct shows it)
    if phase == "timeout":
        return "TIMEOUT"
    if phase == "preempted":
        return "PREEMPTED"
    return str(state or "").upper()


def state_code(job: Job) -> str:
    """The job's state as ``squeue %t`` writes it (``PD``, ``R``, ``TO``, …)."""
    long = slurm_state(job)
    return SLURM_STATES[long][0] if long in SLURM_STATES else long
