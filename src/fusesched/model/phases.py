"""The job life cycle as an explicit state machine.

One table lists every legal transition; :func:`check_transition` raises on any other. Each
transition is recorded with its time and reason (see :class:`Transition`), so a job's story can
be told afterwards.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NamedTuple


class JobPhase(StrEnum):
    PENDING = "pending"  # accepted, waiting for its dependencies
    QUEUED = "queued"  # eligible, waiting for resources
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"  # stopped to make room; goes back to the queue

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: Final = frozenset(
    {JobPhase.COMPLETED, JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.TIMEOUT}
)

_REQUEUED: Final = frozenset({JobPhase.QUEUED, JobPhase.PENDING})

TRANSITIONS: Final[dict[JobPhase, frozenset[JobPhase]]] = {
    JobPhase.PENDING: frozenset({JobPhase.QUEUED, JobPhase.CANCELLED}),
    JobPhase.QUEUED: frozenset({JobPhase.RUNNING, JobPhase.CANCELLED, JobPhase.PENDING}),
    JobPhase.RUNNING: frozenset(
        {
            JobPhase.COMPLETED,
            JobPhase.FAILED,
            JobPhase.CANCELLED,
            JobPhase.TIMEOUT,
            JobPhase.PREEMPTED,
            JobPhase.QUEUED,  # requeued after a node failure
        }
    ),
    JobPhase.PREEMPTED: frozenset({JobPhase.QUEUED, JobPhase.CANCELLED}),
    # an ended job requeued on request (scontrol requeue): it queues, or waits for its
    # dependencies again (one that never started: they were never met)
    JobPhase.COMPLETED: _REQUEUED,
    JobPhase.FAILED: _REQUEUED,
    JobPhase.CANCELLED: _REQUEUED,
    JobPhase.TIMEOUT: _REQUEUED,
}


#: The same table as a set of (old, new) pairs, for a fast membership test.
LEGAL: Final = frozenset((old, new) for old, targets in TRANSITIONS.items() for new in targets)


class IllegalTransition(RuntimeError):
    """Raised when code asks for a phase change that the table does not allow."""


def check_transition(job_id: str, old: JobPhase, new: JobPhase) -> None:
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"job {job_id}: {old} → {new} is not a legal transition")


class Transition(NamedTuple):
    """One recorded phase change: when, from, to, and why (an immutable record)."""

    time: float
    old: JobPhase
    new: JobPhase
    reason: str


#: What the reason of a job failed because a node of its allocation was lost begins with
#: (Slurm's job reason ``NodeDown``): the controller marks it where it fails such a job
#: (:func:`node_failure`), and sacct and squeue show the job ``NODE_FAIL`` by it
#: (:func:`node_failed`) rather than by guessing from the free text after it.
NODE_FAIL_REASON: Final = "NodeDown"
_NODE_FAIL_PREFIX: Final = f"{NODE_FAIL_REASON}: "


def node_failure(reason: str) -> str:
    """``reason`` marked as a lost node's (``NodeDown: node n0 stopped heartbeating; …``),
    once however often it is marked."""
    return reason if node_failed(reason) else f"{_NODE_FAIL_PREFIX}{reason}"


def node_failed(reason: str) -> bool:
    """Whether a failed job's ``reason`` says it failed because a node of it was lost."""
    return reason.startswith(_NODE_FAIL_PREFIX)


#: The reason of a task whose cgroup's OOM killer killed a process of it (the agent's): its
#: step shows ``OUT_OF_MEMORY`` by it (that very reason: a task the controller stopped because
#: its job died of memory has a reason that quotes it), its job by :func:`oom_killed`.
OOM_REASON: Final = "memory limit exceeded (killed by the kernel's OOM killer)"
_OOM_MARK: Final = "OOM killer"


def oom_killed(reason: str) -> bool:
    """Whether a failed job's ``reason`` says the kernel's OOM killer killed in it."""
    return _OOM_MARK in reason
