"""Changing a job (Slurm's ``scontrol update JobId=…``): its priority, QoS, time limit,
name, comment, partition (fusesched's queue), dependencies and begin time.

A waiting job (queued, held, or waiting for its dependencies): the core re-queues it with its
new place, or makes it wait on its new dependencies, or for its new begin time
(:class:`JobUpdateRequested`); the controller's copy and the stored request change too (and
the stored row's name and queue, which listings show), so the job starts, and is recovered
after a restart, with the new values. A new partition must take the job as a submission's
would (a queue the tenancy file knows; with a federation file, a route for it, whose nodes
could hold it); new dependencies are checked as a submission's are (an unknown job, one that
can never be met, and — as Slurm's — one on itself or one closing a circle are refused), and
those on jobs that ended before a restart are settled from the store. A running job may
change its time limit, its name and its comment: the core moves its estimated end (what
backfilling reserves around), and every agent running one of its tasks gets the new limit
in its next heartbeat reply and kills the task at the new deadline (reported timed out, as
at a limit given at submission); a limit already passed stops the job at once, as timed
out. The stored request changes too, so a restarted controller keeps the new limit.

Refused (an :class:`UpdateRefused`, a 409): an ended job (or an array whose members have
all ended), a running job's priority, QoS, partition, dependencies or begin time, the time
limit of a job running in an external cluster or being stopped, and a job recovered after a
restart and still waiting for its nodes, or to be adopted, or one that waits after a
restart for such a job it depends on (try again once it is queued). A job submitted since
the last cycle is changed right after the core takes it. Every member of an array is
checked before any is changed.

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from fusesched.api.wire import TaskLimit
from fusesched.controller import dependencies as stored_dependencies
from fusesched.controller import federation, submissions
from fusesched.controller.holds import HoldRefused, is_waiting, member_targets, recovered
from fusesched.controller.records import LiveJob
from fusesched.controller.unsubmitted import Unsubmitted
from fusesched.core.job_rewire import dependency_refusal, rename_refusal
from fusesched.model.events import Decision, JobSubmitted, JobUpdateRequested, StopJob
from fusesched.model.job import Dependency, JobSpec, QoS
from fusesched.model.phases import JobPhase
from fusesched.submit.begin import begin_reason
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import DependencyRequest, JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: What a running job may change (Slurm's: anything else only while it waits).
RUNNING_KEYS: Final = frozenset({"walltime_s", "name", "comment"})
#: What each change is called in messages.
_NAMES: Final = {
    "priority": "priority",
    "qos": "QoS",
    "walltime_s": "time limit",
    "name": "name",
    "comment": "comment",
    "queue": "partition",
    "dependencies": "dependencies",
    "begin_time": "begin time",
}


class UpdateRefused(HoldRefused):
    """A change that cannot be made (the job ended, runs and asks for what only a waiting
    job may change, is not queued yet, or its new partition or dependencies are refused);
    a 409."""


class UpdateForbidden(PermissionError):
    """A user (not an admin) asked to raise a priority or a QoS, or to lengthen a time limit:
    as in Slurm, users may only lower them (a 403)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """One job's change, made and checked before any job is changed: its new spec and
    request, what the core is told (None: nothing of its spec changes) and what is stored."""

    job_id: str
    spec: JobSpec
    request: JobRequest
    event: JobUpdateRequested | None
    shown: dict[str, str]
    deferred: bool = False  # it depends on a job submitted since the last cycle


def update(
    ctl: Controller,
    job_id: str,
    priority: int | None = None,
    qos: QoS | None = None,
    walltime_s: float | None = None,
    only_lower: bool = False,
    *,
    name: str | None = None,
    comment: str | None = None,
    queue: str | None = None,
    dependencies: Sequence[DependencyRequest] | None = None,
    begin_time: float | None = None,
) -> list[str]:
    """Change ``job_id`` (an array's waiting members; for a time limit, a name or a comment
    alone, its waiting and running members); the ids changed. ``dependencies``: the new
    ones (empty: none); ``begin_time``: a Unix time. ``only_lower``: the caller is a user,
    who may only lower the priority and the QoS and shorten the time limit
    (:class:`UpdateForbidden`)."""
    given = (
        ("priority", priority),
        ("qos", qos),
        ("walltime_s", walltime_s),
        ("name", name),
        ("comment", comment),
        ("queue", queue),
        ("dependencies", None if dependencies is None else list(dependencies)),
        ("begin_time", begin_time),
    )
    changes: dict[str, Any] = {k: v for k, v in given if v is not None}
    if not changes:
        raise UpdateRefused(
            "nothing to change: give a priority, a QoS, a time limit, a name, a comment, a "
            "partition, dependencies or a begin time"
        )
    now = ctl.clock()
    with ctl.work:
        targets = _targets(ctl, job_id, running_too=changes.keys() <= RUNNING_KEYS)
        coming = {e.job.id: e.job for e in ctl.events if isinstance(e, JobSubmitted)}
        # every member checked, and its change made ready, before any is changed
        plans = [_plan(ctl, target, changes, only_lower, coming) for target in targets]
        for plan in plans:
            _apply(ctl, plan, now)
        ctl.persist.flush()
        ctl.work.notify_all()  # long polls of the nodes that have new limits answer now
    ctl.wake()
    return targets


def _plan(
    ctl: Controller,
    job_id: str,
    changes: dict[str, Any],
    only_lower: bool,
    coming: Mapping[str, JobSpec],
) -> _Plan:
    """``job_id``'s change, checked (:class:`UpdateRefused`, :class:`UpdateForbidden`).
    ``coming``: the submissions the core takes at its next cycle, by id."""
    live = ctl.jobs[job_id]
    if changes.get("queue") == live.spec.queue:  # its own partition named again: no move
        changes = {k: v for k, v in changes.items() if k != "queue"}
    _check(ctl, job_id, changes, only_lower)
    request = live.request.model_copy(update=changes)
    fields = {k: v for k, v in changes.items() if k != "comment"}
    if "dependencies" in fields:
        fields["dependencies"] = tuple(Dependency(d.kind, d.job_id) for d in fields["dependencies"])
    spec = replace(live.spec, **fields)
    deferred = False
    if "dependencies" in fields:
        spec = _settled(ctl, spec, coming)
        fields["dependencies"] = spec.dependencies
        deferred = any(_is_coming(coming, d.job_id) for d in spec.dependencies)
    if "queue" in fields:
        spec = _routed(ctl, request, spec)
        if spec.placement != live.spec.placement:
            fields["placement"] = spec.placement
    _check_spec(ctl, live, spec, fields, coming)
    event = JobUpdateRequested(job_id, **fields) if fields else None
    shown = {k: _shown(k, v) for k, v in changes.items()}
    return _Plan(job_id, spec, request, event, shown, deferred)


def _is_coming(coming: Mapping[str, JobSpec], job_id: str) -> bool:
    """Whether ``job_id`` (or its array) is among the submissions the core takes next."""
    return bool(job_id) and (job_id in coming or job_id.rpartition("_")[0] in coming)


def _apply(ctl: Controller, plan: _Plan, now: float) -> None:
    """Make ``plan``'s change: in the core (or right after it takes the job), in the
    controller's copy and in the store."""
    live = ctl.jobs[plan.job_id]
    event = plan.event
    decisions: list[Decision] = []
    rec = ctl.core.jobs.get(plan.job_id)
    if event is not None:
        if rec is not None and not plan.deferred and not _waiting_change(ctl, plan.job_id):
            try:
                decisions = ctl.core.handle(event, now)
            except ValueError as exc:  # (checked before: not reached)
                raise UpdateRefused(str(exc)) from None
        else:  # it (or a job it is to depend on) was submitted since the last cycle, or an
            # earlier change of it waits for that: the change comes right after the core
            # takes them (after the earlier change, not before it)
            ctl.events.append(event)
    live.spec, live.request = plan.spec, plan.request
    stored = live.request.model_dump(mode="json", exclude_none=True)
    ctl.persist.job_updated(
        plan.job_id,
        live.spec.priority,
        stored,
        plan.shown,
        now,
        name=live.spec.name if "name" in plan.shown else None,
        queue=live.spec.queue if "queue" in plan.shown else None,
    )
    _new_reason(ctl, live, plan, now)
    walltime_s = event.walltime_s if event is not None else None
    if rec is not None and rec.phase is JobPhase.RUNNING and walltime_s is not None:
        _relimit_tasks(ctl, live, walltime_s, decisions)


def _waiting_change(ctl: Controller, job_id: str) -> bool:
    """Whether an earlier change of ``job_id`` waits for the core's next cycle."""
    return any(isinstance(e, JobUpdateRequested) and e.job_id == job_id for e in ctl.events)


def _new_reason(ctl: Controller, live: LiveJob, plan: _Plan, now: float) -> None:
    """The reason a waiting job shows after a new begin time or new dependencies, as at
    submission: its begin time while it is ahead (the core says ``Dependency`` instead
    while it waits for its dependencies), else none until the core explains it. A held job
    says its hold."""
    if live.hold is not None or not {"begin_time", "dependencies"} & plan.shown.keys():
        return
    begin = live.spec.begin_time
    if begin is not None and begin > now:
        ctl.persist.job_reason(live.id, begin_reason(begin))
    elif "begin_time" in plan.shown:
        ctl.persist.job_reason(live.id, "")


def _settled(ctl: Controller, spec: JobSpec, coming: Mapping[str, JobSpec]) -> JobSpec:
    """``spec`` with its new dependencies on jobs that ended before a restart settled from
    the store (met: dropped), as a submission's are; the arrays it depends on that the
    core cannot account for are recalled to it first. One on a job recovered after a
    restart that the core does not hold yet is refused (try again once it is)."""
    for recalled in stored_dependencies.recall(ctl, spec, ctl.arrays_recalled):
        ctl.core.handle(recalled, ctl.clock())
    settled = stored_dependencies.settle_submitted(ctl, spec)
    if isinstance(settled, str):
        raise UpdateRefused(f"job {spec.id}: {settled}")
    for dep in settled.dependencies:
        other = ctl.jobs.get(dep.job_id)
        unheld = dep.job_id not in ctl.core.jobs and not _is_coming(coming, dep.job_id)
        if dep.job_id and unheld and other is not None:
            raise UpdateRefused(
                f"job {spec.id}: job {dep.job_id}, which it would depend on, is not in the "
                "scheduler's queue yet after a restart: try again once it is"
            )
    return settled


def _routed(ctl: Controller, request: JobRequest, spec: JobSpec) -> JobSpec:
    """``spec`` in its new queue: with a federation file, its placement limited to the
    pools the new queue's route allows, as at submission."""
    if ctl.config.federation is None:
        return spec
    try:
        return federation.routed(
            ctl, request, replace(spec, placement=request.placement.to_model())
        )
    except SubmitError as exc:
        raise UpdateRefused(f"job {spec.id}: {exc}") from None


def _check_spec(
    ctl: Controller,
    live: LiveJob,
    spec: JobSpec,
    fields: dict[str, Any],
    coming: Mapping[str, JobSpec],
) -> None:
    """Refuse a new spec a submission would be refused with: its partition (unknown, or
    one whose nodes could not hold it), its dependencies (a waiting job's), its begin time
    past its deadline."""
    if "queue" in fields or "dependencies" in fields:
        reason = submissions.refusal(ctl, spec, federation.node_specs(ctl))
        if reason:
            raise UpdateRefused(f"job {spec.id}: {reason}")
    rec = ctl.core.jobs.get(spec.id)
    waiting = rec is None or rec.phase in (JobPhase.QUEUED, JobPhase.PENDING)
    if waiting and ("dependencies" in fields or spec.name != live.spec.name):
        reason = dependency_refusal(ctl.core, spec, rec, coming)
        reason = reason or rename_refusal(ctl.core, spec, rec)
        if reason:
            raise UpdateRefused(f"job {spec.id}: {reason}")
    begin, limit, deadline = spec.begin_time, spec.walltime_s, spec.deadline
    late = begin is not None and deadline is not None and begin + (limit or 0.0) > deadline
    if "begin_time" in fields and late:
        raise UpdateRefused(
            f"job {spec.id}: the begin time and the deadline are incompatible: starting "
            "at its begin time, the job would not end by its deadline"
        )


def _shown(key: str, value: Any) -> str:
    """A change as its ``JobUpdated`` event says it (dependencies as sbatch's
    ``afterok:12,singleton``)."""
    if key == "dependencies":
        return ",".join(f"{d.kind}:{d.job_id}" if d.job_id else str(d.kind) for d in value)
    return str(value)


def _targets(ctl: Controller, job_id: str, running_too: bool) -> list[str]:
    """The jobs to change: ``job_id``, or its array's waiting members (and running ones when
    only what a running job may change changes); an ended job, or an array whose members
    have all ended, is a :class:`HoldRefused` (409)."""
    if running_too:
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
    queued or adopted yet), what a running job may not change, a QoS or a queue the tenancy
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
    tiers = {k: v for k, v in changes.items() if k in ("qos", "queue")}
    refused = tenants.refuse(replace(live.spec, **tiers)) if tenants and tiers else ""
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
    """Refuse what a running job cannot change: anything but its time limit, name and
    comment (as Slurm's), and its limit when an external cluster runs it or it is being
    stopped already (``stopping``: the core cancels or preempts it)."""
    waiting_only = [_NAMES[k] for k in changes if k not in RUNNING_KEYS]
    if waiting_only:
        raise UpdateRefused(
            f"job {live.id} is running: its {', '.join(waiting_only)} cannot change (only a "
            "waiting job can be changed in priority, QoS, partition, dependencies or begin "
            "time; a running job only in its time limit, name and comment)"
        )
    if "walltime_s" not in changes:
        return
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
