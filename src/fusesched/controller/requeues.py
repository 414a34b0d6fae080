"""Requeueing a running job on request (Slurm's ``scontrol requeue``; ``requeuehold`` with
``hold``).

The job's tasks are stopped as for a failure's restart (SIGTERM, then SIGKILL after the grace
period) and, once all have exited, the core queues it again: it starts afresh (a job that
checkpoints resumes from its checkpoint folder), counts one more attempt, and the run's tasks
stay in its history. With ``hold`` it is held once queued (controller/holds.py; a
cluster-admin's is an administrator hold, as with :func:`holds.hold`). A running job of
the local agents, or a job that has ended (completed, failed, cancelled, timed out: it runs
again under its id, controller/ended_requeue.py) can be requeued: a waiting one has nothing
to requeue, and a job an external cluster runs is requeued there; an array's id requeues its
running and its ended members. Only a batch job is requeued, as in Slurm (salloc's
allocation and a ``run`` job are refused: ``ended_requeue.not_batch``). A job that may not
be requeued (``requeue`` false, as ``sbatch --no-requeue`` asks) or whose restart policy
allows no restarts (``max_restarts`` 0) is not requeued (as Slurm refuses to requeue a
``--no-requeue`` job).

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.controller import ended_requeue
from fusesched.controller.holds import Authority, HoldRefused, member_targets
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


class RequeueRefused(HoldRefused):
    """A requeue that cannot be done (the job is not running here); a 409."""


def requeue(
    ctl: Controller,
    job_id: str,
    reason: str,
    hold: bool = False,
    by: Authority = Authority.OPEN,
) -> list[str]:
    """Requeue ``job_id`` (an array's running members); the ids requeued. ``by`` says whose
    hold ``hold`` places."""
    why = " ".join(reason.split()) or "requeued by user"
    now = ctl.clock()
    with ctl.work:
        running = lambda t: _running(ctl, t)  # noqa: E731
        ended = [] if job_id in ctl.jobs else ended_requeue.ended_members(ctl, job_id)
        if job_id in ctl.jobs or not ended:
            try:
                targets = member_targets(ctl, job_id, running, "running", "requeue")
            except HoldRefused:
                if job_id in ctl.jobs or not ctl.persist.job_exists(job_id):
                    raise
                targets, ended = [], [job_id]  # an ended job (not an array's id)
        else:  # an array some members of which have ended: those, and its running ones
            members = [j for j, job in ctl.jobs.items() if job.spec.array_parent == job_id]
            targets = [t for t in members if _running(ctl, t)]
        for target in targets:
            live = ctl.jobs[target]
            if not _running(ctl, target):
                rec = ctl.core.jobs.get(target)
                phase = rec.phase if rec is not None else JobPhase.PENDING
                raise RequeueRefused(f"job {target} is {phase}: only a running job is requeued")
            refused = ended_requeue.not_batch(target, live.request)
            if refused:
                raise RequeueRefused(refused)
            if not live.request.requeue:
                raise RequeueRefused(
                    f"job {target} is not to be requeued (requeue: false; sbatch --no-requeue)"
                )
            if live.request.restart.max_restarts == 0:
                raise RequeueRefused(
                    f"job {target} is not to be requeued: its restart policy allows no "
                    "restarts (restart.max_restarts 0)"
                )
            if live.pool is not None:
                raise RequeueRefused(
                    f"job {target} runs in the external pool {live.pool!r}: requeue it there"
                )
            restarting = live.requeue is not None or live.relaunch is not None
            if live.stopping is not None or restarting or live.exit_sent:
                raise RequeueRefused(f"job {target} is already stopping")
            live.requeue = ((), now, why)
            live.hold_after_requeue = why if hold else None
            live.hold_admin = hold and by is Authority.ADMIN
            ctl.persist.job_event(target, "JobRequeueRequested", why, now)
            ctl.stop_tasks(live, why)
        admin = hold and by is Authority.ADMIN
        for target in ended:
            ended_requeue.requeue_ended(ctl, target, why, hold, admin)
        ctl.persist.flush()
    ctl.wake()
    return [*targets, *ended]


def _running(ctl: Controller, job_id: str) -> bool:
    rec = ctl.core.jobs.get(job_id)
    return rec is not None and rec.phase is JobPhase.RUNNING
