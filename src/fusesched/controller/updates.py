"""Changing a job's priority, QoS or time limit (Slurm's ``scontrol update``).

A waiting job: the core re-queues it with its new place (:class:`JobUpdateRequested`); the
controller's copy and the stored request change too, so the job starts, and is recovered
after a restart, with the new values. A running job may change only its time limit: the core
moves its estimated end (what backfilling reserves around), and every agent running one of
its tasks gets the new limit in its next heartbeat reply and kills the task at the new
deadline (reported timed out, as at a limit given at submission); a limit already passed
stops the job at once, as timed out. The stored request changes too, so a restarted
controller keeps the new limit.

Refused (an :class:`UpdateRefused`, a 409): an ended job (or an array whose members have
all ended), a running job's priority or QoS, a job running in an external cluster, one being
stopped, and one recovered after a restart and still waiting for its nodes, or to be adopted,
or one that waits after a restart for such a job it depends on (try again once it is
queued). A job submitted since the last cycle is changed right after the core takes it.

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fusesched.api.wire import TaskLimit
from fusesched.controller.holds import HoldRefused, is_waiting, member_targets, recovered
from fusesched.controller.records import LiveJob
from fusesched.controller.unsubmitted import Unsubmitted
from fusesched.model.events import Decision, JobUpdateRequested, StopJob
from fusesched.model.job import JobSpec, QoS
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


class UpdateRefused(HoldRefused):
    """A change that cannot be made (the job ended, runs and asks for more than a new time
    limit, or is not queued yet); a 409."""


class UpdateForbidden(PermissionError):
    """A user (not an admin) asked to raise a priority or a QoS, or to lengthen a time limit:
    as in Slurm, users may only lower them (a 403)."""


def update(
    ctl: Controller,
    job_id: str,
    priority: int | None = None,
    qos: QoS | None = None,
    walltime_s: float | None = None,
    only_lower: bool = False,
) -> list[str]:
    """Change ``job_id`` (an array's waiting members; for a time limit alone, its waiting
    and running members); the ids changed. ``only_lower``: the caller is a user, who may
    only lower the priority and the QoS and shorten the time limit
    (:class:`UpdateForbidden`)."""
    changes: dict[str, Any] = {
        k: v
        for k, v in (("priority", priority), ("qos", qos), ("walltime_s", walltime_s))
        if v is not None
    }
    if not changes:
        raise UpdateRefused("nothing to change: give a priority, a QoS or a time limit")
    now = ctl.clock()
    with ctl.work:
        targets = _targets(ctl, job_id, limit_only=changes.keys() == {"walltime_s"})
        for target in targets:  # every member checked before any is changed
            _check(ctl, target, changes, only_lower)
        for target in targets:
            live = ctl.jobs[target]
            event = JobUpdateRequested(target, priority, qos, walltime_s)
            rec = ctl.core.jobs.get(target)
            decisions: list[Decision] = []
            if rec is not None:
                decisions = ctl.core.handle(event, now)
            else:  # submitted since the last cycle: changed right after the core takes it
                ctl.events.append(event)
            live.spec = replace(live.spec, **changes)
            live.request = live.request.model_copy(update=changes)
            stored = live.request.model_dump(mode="json", exclude_none=True)
            ctl.persist.job_updated(target, live.spec.priority, stored, changes, now)
            if rec is not None and rec.phase is JobPhase.RUNNING and walltime_s is not None:
                _relimit_tasks(ctl, live, walltime_s, decisions)
        ctl.persist.flush()
        ctl.work.notify_all()  # long polls of the nodes that have new limits answer now
    ctl.wake()
    return targets


def _targets(ctl: Controller, job_id: str, limit_only: bool) -> list[str]:
    """The jobs to change: ``job_id``, or its array's waiting members (and running ones when
    only the time limit changes); an ended job, or an array whose members have all ended, is
    a :class:`HoldRefused` (409)."""
    if limit_only:
        keep, state = (lambda t: is_waiting(ctl, t) or _running(ctl, t)), "waiting or running"
    else:
        keep, state = (lambda t: is_waiting(ctl, t)), "waiting"
    return member_targets(ctl, job_id, keep, state, "change")


def _running(ctl: Controller, job_id: str) -> bool:
    rec = ctl.core.jobs.get(job_id)
    return rec is not None and rec.phase is JobPhase.RUNNING


def _check(ctl: Controller, job_id: str, changes: dict[str, Any], only_lower: bool) -> None:
    """Refuse a change of ``job_id`` before anything is changed: a user raising something
    (:class:`UpdateForbidden`), a job neither waiting nor running (or recovered and not
    queued or adopted yet), a running job's priority or QoS, a QoS or a limit the tenancy
    configuration refuses (a refused job would be cancelled at the next restart, when it is
    submitted again)."""
    live = ctl.jobs[job_id]
    if only_lower:
        _only_lower(
            job_id,
            live.spec,
            changes.get("priority"),
            changes.get("qos"),
            changes.get("walltime_s"),
        )
    rec = ctl.core.jobs.get(job_id)
    if rec is not None and rec.phase is JobPhase.RUNNING:
        stopping = rec.stop_requested is not None or rec.preempt_reason is not None
        _check_running(live, changes, stopping)
    elif rec is not None and rec.phase not in (JobPhase.QUEUED, JobPhase.PENDING):
        raise UpdateRefused(
            f"job {job_id} is {rec.phase}: only a waiting or running job can be changed"
        )
    if rec is None and live.adopting:
        raise UpdateRefused(
            f"job {job_id} runs and waits to be adopted after a restart: try again once "
            "its nodes are back"
        )
    if rec is None and recovered(ctl, job_id, live.spec.array_parent):
        raise UpdateRefused(_not_queued(ctl, live.spec))
    tenants = ctl.core.tenants
    refused = tenants.refuse(replace(live.spec, **changes)) if tenants is not None else ""
    if refused:
        raise UpdateRefused(f"job {job_id}: {refused}")


def _not_queued(ctl: Controller, spec: JobSpec) -> str:
    """Why a job the core does not hold yet after a restart cannot be changed: it waits for
    its nodes, or for a job it depends on that the core does not hold yet either."""
    unsent = Unsubmitted(ctl, [*ctl.held, *ctl.waiting]) if spec.dependencies else None
    target = unsent.waits_for(spec) if unsent is not None else None
    if target is None:
        why = "waits for its nodes after a restart"
    elif target:
        why = f"waits after a restart for job {target}, which it depends on, to be queued"
    else:
        why = "waits after a restart for the earlier jobs of its name (singleton) to be queued"
    return f"job {spec.id} {why} and is not in the scheduler's queue yet: try again once it is"


def _check_running(live: LiveJob, changes: dict[str, Any], stopping: bool) -> None:
    """Refuse what a running job cannot change: anything but its time limit, and its limit
    when an external cluster runs it or it is being stopped already (``stopping``: the core
    cancels or preempts it)."""
    if changes.keys() != {"walltime_s"}:
        raise UpdateRefused(
            f"job {live.id} is running: only a waiting job can be changed in priority or QoS "
            "(a running job only in its time limit)"
        )
    if live.pool is not None:
        raise UpdateRefused(
            f"job {live.id} runs in the external pool {live.pool!r}: its time limit cannot "
            "be changed there"
        )
    if stopping or live.stopping is not None or live.exit_sent:
        raise UpdateRefused(f"job {live.id} is being stopped: its time limit no longer matters")


def _relimit_tasks(
    ctl: Controller, live: LiveJob, walltime_s: float, decisions: list[Decision]
) -> None:
    """Carry a running job's new time limit to its tasks: a launch not sent yet goes with
    it, the agents of the others get it in their next heartbeat reply. A limit already
    passed (the core's :class:`StopJob`) stops the job's tasks now instead; the reason says
    "walltime", so their exits end the job as timed out, not cancelled."""
    for decision in decisions:
        if isinstance(decision, StopJob):
            live.stopping = decision.reason
            for task in live.tasks.values():
                ctl.kill_task(task, decision.reason)
            return
    for task in live.tasks.values():
        if task.remote:  # (mpirun's helpers have no limit of their own: they end with the job)
            continue
        task.launch = task.launch.model_copy(update={"walltime_s": walltime_s})
        node = ctl.nodes.get(task.node)
        if node is None:
            continue
        task_id = task.launch.task_id
        if task.state == "launching":  # still in the outbox: it starts with the new limit
            node.outbox = [task.launch if t.task_id == task_id else t for t in node.outbox]
        elif task.state in ("delivered", "running"):
            node.limits.append(TaskLimit(task_id=task_id, walltime_s=walltime_s))
            node.relimited.add(task_id)


def _only_lower(
    job_id: str, spec: JobSpec, priority: int | None, qos: QoS | None, walltime_s: float | None
) -> None:
    if priority is not None and priority > spec.priority:
        raise UpdateForbidden(
            f"job {job_id}: only an admin may raise a priority ({spec.priority} → {priority})"
        )
    if qos is not None and qos.rank > spec.qos.rank:
        raise UpdateForbidden(f"job {job_id}: only an admin may raise a QoS ({spec.qos} → {qos})")
    if walltime_s is not None and spec.walltime_s is not None and walltime_s > spec.walltime_s:
        raise UpdateForbidden(
            f"job {job_id}: only an admin may lengthen a time limit "
            f"({spec.walltime_s:g} s → {walltime_s:g} s)"
        )
