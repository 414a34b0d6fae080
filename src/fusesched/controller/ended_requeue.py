"""Requeueing an ended job on request (Slurm's ``scontrol requeue`` of a finished batch job;
``requeuehold`` with ``hold``): a completed, failed, cancelled or timed-out job runs again
under its id.

The job's stored request is read back as a restarted controller reads a pending one
(controller/recovery.py): its spec, its route, its live record with its attempt and
remote-task numbering following its earlier runs. The core then moves it out of its end
(``EndedJobRequeueRequested``, core/ended_requeue.py); the store shows it Pending again, its
last run's end and exit code cleared, with a ``JobRequeued`` event (``Restarts`` one more;
the earlier run's tasks and events stay). A job that ran does not wait on its dependencies
again (they were met); one that never started waits on them again, as a new submission does.
Refused (a :class:`RequeueRefused`, with the reason) as the running requeue refuses: a job
that is no batch job (:func:`not_batch`: salloc's allocation, a ``run`` job), one that may
not be requeued (``requeue: false``, ``sbatch --no-requeue``) or allows no restarts
(``restart.max_restarts: 0``); and a job the core cannot take again (it no longer fits, a
dependency that can no longer be met). Runs with the controller's lock held.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fusesched.controller import adoption, dependencies, federation
from fusesched.controller.holds import HELD, HoldRefused
from fusesched.controller.records import LiveJob, recovered_spec, stored_request
from fusesched.model.events import EndedJobRequeueRequested, JobHoldRequested
from fusesched.model.phases import JobPhase
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest
from fusesched.submit.salloc_holder import holds_allocation

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def ended_members(ctl: Controller, array_id: str) -> list[str]:
    """The members of array ``array_id`` that have ended (their stored rows), by index."""
    phases = [p.value for p in JobPhase if p.terminal]
    found = ctl.persist.store.member_phases(array_id, phases)
    return sorted(found, key=lambda j: int(j.rpartition("_")[2] or 0))


def not_batch(job_id: str, request: JobRequest) -> str:
    """Why job ``job_id`` is no batch job, which alone is requeued (Slurm: "Only batch jobs
    are accepted or processed"): salloc's allocation (its holder) or a ``run`` job, which
    a command waits on and which would run again with nobody attached; ``""`` for a batch
    job."""
    if holds_allocation(request.model_dump()):
        what = "salloc's allocation"
    elif request.pty is not None:
        what = "a run --pty job"
    elif request.attended:
        what = "a run job, which a command waits on"
    else:
        return ""
    return f"job {job_id} is not a batch job ({what}): only batch jobs are requeued"


def requeue_ended(ctl: Controller, job_id: str, why: str, hold: bool, admin: bool) -> None:
    """Queue the ended job ``job_id`` again (see the module's docstring); ``admin``: its
    ``hold`` is an administrator's."""
    detail = ctl.persist.store.get_job(job_id)
    if detail is None or not detail.job.state.finished:
        raise HoldRefused(f"job {job_id} has not ended")
    row = detail.job
    request = stored_request(row, ctl.persist.store.environments([row.env_id]))
    refused = not_batch(job_id, request)
    if refused:
        raise HoldRefused(refused)
    if not request.requeue:
        raise HoldRefused(
            f"job {job_id} is not to be requeued (requeue: false; sbatch --no-requeue)"
        )
    if request.restart.max_restarts == 0:
        raise HoldRefused(
            f"job {job_id} is not to be requeued: its restart policy allows no restarts "
            "(restart.max_restarts 0)"
        )
    spec = recovered_spec(request, row)
    if row.start_time is not None:  # it ran: its dependencies were met
        spec = replace(spec, dependencies=())
    else:  # (those on jobs the core has forgotten, settled from the store)
        settled = dependencies.settle_submitted(ctl, spec)
        if isinstance(settled, str):
            raise HoldRefused(f"job {job_id} cannot be requeued: {settled}")
        spec = settled
    try:
        spec = federation.routed(ctl, request, spec)
    except SubmitError as exc:
        raise HoldRefused(f"job {job_id} cannot be requeued: {exc}") from None
    now = ctl.clock()
    try:
        ctl.core.handle(EndedJobRequeueRequested(spec, why), now)
    except ValueError as exc:
        raise HoldRefused(str(exc)) from None
    rec = ctl.core.jobs[job_id]
    live = LiveJob(spec.id, row.seq, spec, request)
    live.attempt_base = adoption.next_attempt(detail.tasks) - rec.attempts
    live.remote_count = adoption.remote_count(detail.tasks)
    ctl.jobs[job_id] = live
    ctl.persist.job_reopened(job_id)
    reason = rec.history[-1].reason
    if ctl.persist.notices is not None:  # (its end forgot it: watched again, told of this)
        ctl.persist.notices.reopened(detail, reason, now)
    attempt = live.attempt_base + rec.attempts
    ctl.persist.job_requeued(job_id, rec.phase, reason, attempt, now)
    if hold:
        ctl.core.handle(JobHoldRequested(job_id, why), now)
        live.hold, live.hold_admin = why, admin
        ctl.persist.job_held(job_id, why, HELD, now, by_admin=admin)
