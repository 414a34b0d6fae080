"""Cancelling every unfinished job that matches filters, in one request (Slurm's ``scancel -u
USER``, ``--me``, ``-n NAME``, ``-t STATE``, ``-p PARTITION``, and job ids with them).

The controller's unfinished jobs are matched under its lock, and those the caller may cancel
are cancelled as :meth:`~fusesched.controller.service.Controller.cancel` cancels one (an array
whose members all match ends as cancelling its id ends it: every member's cancel at once);
those it may not are answered apart (scancel's "Access/permission denied"), and left alone.
A job already being stopped, or whose cancel waits for the next cycle, is not matched
(Slurm's scancel skips a completing job).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.controller import recovery
from fusesched.model.events import JobCancelRequested
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller

#: the states an unfinished job is in, as ``GET /v1/jobs`` shows them
PENDING, RUNNING = "Pending", "Running"


@dataclass(frozen=True, slots=True)
class CancelFilter:
    """Which jobs: each field ``None`` matches every job, else the job's value is one of them
    (``ids``: a job's own id, or its array's); ``tenants``: only those tenants' jobs."""

    users: frozenset[str] | None = None
    names: frozenset[str] | None = None
    queues: frozenset[str] | None = None
    states: frozenset[str] | None = None
    ids: frozenset[str] | None = None
    tenants: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class BulkCancel:
    """What a filtered cancel did: the jobs cancelled and those matched that the caller may
    not cancel, each in submission order; ``users``: each cancelled job's user."""

    cancelled: list[str]
    denied: list[str]
    users: dict[str, str]


def state_of(ctl: Controller, live: LiveJob) -> str:
    """``Running`` while the core runs the job or, after a restart, it waits to be adopted
    (it runs: the store and ``GET /v1/jobs`` say so), else ``Pending`` (waiting, preempted,
    or not handed to the core yet)."""
    if live.adopting:
        return RUNNING
    rec = ctl.core.jobs.get(live.id)
    return RUNNING if rec is not None and rec.phase is JobPhase.RUNNING else PENDING


def _matches(f: CancelFilter, spec: JobSpec, state: str) -> bool:
    checks = (
        (f.users, spec.user),
        (f.names, spec.name),
        (f.queues, spec.queue),
        (f.states, state),
        (f.tenants, spec.tenant),
    )
    if any(allowed is not None and value not in allowed for allowed, value in checks):
        return False
    return f.ids is None or spec.id in f.ids or spec.array_parent in f.ids


def cancel_matching(
    ctl: Controller,
    f: CancelFilter,
    may: Callable[[JobSpec], bool],
    reason: str = "cancelled by user",
) -> BulkCancel:
    """Cancel every unfinished job matching ``f`` that ``may`` allows; in one hold of the
    controller's lock, so no job changes state between its match and its cancel."""
    with ctl.lock:
        queued = (*ctl.events, *ctl.held)  # (held: after a restart, behind its submission)
        asked = {e.job_id for e in queued if isinstance(e, JobCancelRequested)}
        matched = sorted(
            (
                live
                for live in ctl.jobs.values()
                if live.stopping is None
                and live.cancel_asked is None  # (asked while it waits for adoption)
                and live.id not in asked
                and _matches(f, live.spec, state_of(ctl, live))
            ),
            key=lambda live: live.seq,
        )
        allowed = [live.id for live in matched if may(live.spec)]
        denied = [live.id for live in matched if not may(live.spec)]
        if allowed:
            cancels = [JobCancelRequested(job_id, reason) for job_id in allowed]
            ctl.events.extend(recovery.cancel_unsubmitted(ctl, cancels))  # (restarts)
    if allowed:
        ctl.wake()
    users = {live.id: live.spec.user for live in matched}
    return BulkCancel(allowed, denied, {job_id: users[job_id] for job_id in allowed})
