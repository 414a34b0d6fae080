"""Crash recovery of the queue: a restarted controller queues again what its predecessor left.

At start (:func:`recover`) every job the store shows pending gets its live record back
(hold, attempt and remote-task numbering as stored; dependencies on jobs that ended before
the restart settled) and its submission is *held*: the core would find no node for it until
the nodes that were up come back, so the held submissions reach the core only once they
have all registered, or once ``node_timeout_s`` has passed (:func:`release_held`). Even
then, a job the nodes back so far cannot hold (a gang while one of its nodes' agents is
still restarting) *waits* instead of being rejected for good (:func:`resubmit`), and is
offered again whenever nodes join (:func:`retry_waiting`). Jobs the store shows
running are adopted where they run (``adoption``). Fair share gets back the usage of the runs
that ended (``past_usage``).

Until then the core does not hold those jobs, and would find a dependency on one of them
(or on an array of theirs) unknown, and a ``singleton`` free of them: a new job whose
dependencies name one (controller/unsubmitted.py) waits with them, after them, among the
waiting jobs, and goes to the core as soon as none of the jobs it names is outside it (its
dependencies on jobs ended meanwhile outside the core, a cancelled waiting job's, settled
from the store as after a restart). A job whose dependencies the core can settle goes to it
at once, in the window too.

Every function here runs with the controller's lock held, or before its loop starts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fusesched.controller import adoption, dependencies, federation, holds, past_usage
from fusesched.controller.records import LiveJob, recovered_spec, stored_request
from fusesched.controller.run_launches import revoke_job_tokens
from fusesched.controller.unsubmitted import Unsubmitted, submitted_ids
from fusesched.core.pending_reasons import given
from fusesched.model.events import ArrayRecalled, Event, JobCancelRequested, JobSubmitted
from fusesched.model.job import ArraySpec, JobSpec
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase
from fusesched.submit.errors import SubmitError
from fusesched.submit.feasibility import check_feasible

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")


def recover(ctl: Controller) -> None:
    """Jobs left pending by a previous controller go back into the queue; jobs it had
    running wait for their agents to report in and are adopted (controller/adoption.py).
    First, fair share gets the usage of the runs that ended (controller/past_usage.py)."""
    past_usage.recall(ctl)
    pending, running = ctl.persist.unfinished_jobs()
    if ctl.auth is not None and ctl.auth.enabled:
        ctl.persist.store.revoke_job_tokens(keep=[d.job.id for d in running])
    # queued jobs wait for the nodes to come back (else no node would fit them yet)
    ctl.expected_nodes = {  # local agents' nodes (external pools' are named pool:node)
        n.name
        for n in ctl.persist.store.list_nodes()
        if n.state is not NodeState.DOWN and ":" not in n.name
    }
    if ctl.expected_nodes:  # (and the tasks left on one not back then are lost: late_exits)
        ctl.adopt_until = ctl.clock() + ctl.config.node_timeout_s
    environments = ctl.persist.store.environments(d.job.env_id for d in pending)
    for detail in pending:
        row = detail.job
        request = stored_request(row, environments)
        spec = recovered_spec(request, row)
        if spec.dependencies:  # those on jobs that ended (or started) before the restart
            settled = dependencies.settle_recovered(spec, dependencies.reader(ctl))
            if isinstance(settled, str):
                ctl.persist.job_finished(spec.id, JobPhase.CANCELLED, None, settled, ctl.clock())
                ctl.persist.flush()
                continue
            spec = settled
        try:
            spec = federation.routed(ctl, request, spec)
        except SubmitError as exc:  # the pools changed since: it may still fit somewhere
            log.warning("job %s: %s; queued without a route", spec.id, exc)
        if given(row.reason):  # (cleared when it starts)
            ctl.persist.recovered_wait(spec.id)
        live = LiveJob(spec.id, row.seq, spec, request)
        live.hold = holds.stored_hold(row.phase, row.reason)
        live.hold_admin = holds.stored_admin(row.phase, row.reason)
        live.attempt_base = adoption.next_attempt(detail.tasks)
        live.remote_count = adoption.remote_count(detail.tasks)
        ctl.jobs[spec.id] = live
        ctl.held.extend(dependencies.recall(ctl, spec, ctl.arrays_recalled))
        ctl.held.append(JobSubmitted(spec))
    if not ctl.expected_nodes:
        release_held(ctl)
    if running:
        adoption.recover_running(ctl, running, ctl.clock())


def release_held(ctl: Controller) -> None:
    """Hand the core the submissions recovered at start, held until the nodes were back."""
    held, ctl.held = ctl.held, []
    _offer(ctl, held)
    retry_waiting(ctl)  # (those behind a job requeued or adopted: adoption.expire)
    ctl.wake()


def resubmit(ctl: Controller, event: Event, pending: Unsubmitted | None = None) -> None:
    """Hand the core a job recovered after a restart, unless the nodes back so far cannot
    hold it (a gang while one of its nodes' agents is still restarting): the core would
    reject it for good; it waits, pending, until a node registers that lets it fit. A job
    that depends on one the core does not hold yet (``pending``: what waits besides it)
    waits too, behind it."""
    if isinstance(event, JobSubmitted):
        waits = bool(check_feasible(event.job, federation.node_specs(ctl)))
        if not waits and event.job.dependencies:
            if pending is None:
                pending = Unsubmitted(ctl, [*ctl.held, *ctl.waiting])
            waits = pending.waits_for(event.job) is not None
        if waits:
            ctl.waiting.append(event)
            if pending is not None:
                pending.add(event)
            return
        settled = _settled(ctl, event)
        if settled is None:
            return
        ctl.events.append(settled)  # held before the restart (or since): held again
        ctl.events.extend(holds.after_resubmit(ctl, event.job.id))  # before any cycle
    elif not (isinstance(event, JobCancelRequested) and _cancel_waiting(ctl, [event])):
        ctl.events.append(event)


def _settled(ctl: Controller, event: JobSubmitted) -> JobSubmitted | None:
    """``event`` with the dependencies on jobs that ended outside the core (a waiting job
    cancelled, a dependent that could never start) settled from the store; ``None`` when
    one can never be met: the job (every member of an array) ends here, cancelled."""
    settled = dependencies.settle_submitted(ctl, event.job)
    if isinstance(settled, str):
        end_here(ctl, dict.fromkeys(_members(ctl, event.job), settled))
        return None
    return event if settled is event.job else JobSubmitted(settled)


def _members(ctl: Controller, spec: JobSpec) -> list[str]:
    """The jobs a submission makes that the controller still holds: ``spec`` itself, or the
    members of an array submitted as one."""
    if spec.array is None or spec.array_index is not None:
        return [spec.id]
    return [m for i in spec.array.indices if (m := f"{spec.id}_{i}") in ctl.jobs]


def end_here(
    ctl: Controller, reasons: dict[str, str], phase: JobPhase = JobPhase.CANCELLED
) -> None:
    """Jobs the core never had end here in ``phase`` (job id -> why), and the store says so
    at once: what waits on them settles from it (dependencies.settle_submitted). The core
    is told of those of an array it was told of already (``ctl.arrays_recalled``: counted
    waiting on it as yet to come, they would keep its dependents waiting for ever). Their
    job tokens are revoked, as when the core ends a job (one that ran before the restart
    and could not be adopted, ``--no-requeue``: its token would stay valid otherwise)."""
    now = ctl.clock()
    recalled: dict[str, tuple[ArraySpec, dict[str, JobPhase]]] = {}
    for job_id, why in reasons.items():
        live = ctl.jobs.pop(job_id, None)
        ctl.persist.job_finished(job_id, phase, None, why, now)
        array, parent = (live.spec.array, live.spec.array_parent) if live else (None, None)
        if array is not None and parent is not None and parent in ctl.arrays_recalled:
            recalled.setdefault(parent, (array, {}))[1][job_id] = phase
    ctl.events.extend(ArrayRecalled(a, array, ended) for a, (array, ended) in recalled.items())
    revoke_job_tokens(ctl, list(reasons))
    ctl.persist.flush()


def _offer(ctl: Controller, events: list[Event]) -> None:
    """:func:`resubmit` each of ``events`` in order; each reads what still waits besides it
    once (the others, those already back among the waiting)."""
    pending = Unsubmitted(ctl, [*ctl.held, *ctl.waiting, *events])
    for event in events:
        pending.remove(event)
        resubmit(ctl, event, pending)


def cancel_unsubmitted(
    ctl: Controller, events: list[JobCancelRequested]
) -> list[JobCancelRequested]:
    """Of the cancels ``events`` (a job's, an array's members'), those the core is to take:
    not those of jobs whose submission it has not had yet (held, or waiting for nodes or for
    the jobs they depend on), which it would refuse as of jobs it does not know (and the job
    would run after all): held after their job, or the waiting job ends here at once (and
    what waits on it may go now). Each list is read once, however many members. A running
    job's cancel is stored first (a restarted controller carries it out: adoption.py), and
    one being adopted waits for its adoption."""
    events = adoption.remember_cancels(ctl, events)
    if ctl.held:
        held = submitted_ids(ctl.held)
        ctl.held.extend(e for e in events if _submits(ctl, held, e.job_id))
        events = [e for e in events if not _submits(ctl, held, e.job_id)]
    ended = _cancel_waiting(ctl, events)
    if not ended:
        return events
    retry_waiting(ctl)
    return [e for e in events if e.job_id not in ended]


def _cancel_waiting(ctl: Controller, events: list[JobCancelRequested]) -> set[str]:
    """The jobs of ``events`` waiting outside the core, which end here, cancelled (the core,
    which never had them, would refuse them for want of nodes first). Of an array waiting as
    one submission whose members are not all cancelled, the others wait on one by one, as
    the members of an array recovered after a restart."""
    waiting = submitted_ids(ctl.waiting)
    reasons = {e.job_id: e.reason for e in events if _submits(ctl, waiting, e.job_id)}
    if not reasons:
        return set()
    parents = {live.spec.array_parent for j in reasons if (live := ctl.jobs.get(j))}
    taken = reasons.keys() | parents
    kept: list[Event] = []
    for event in ctl.waiting:
        if not isinstance(event, JobSubmitted) or event.job.id not in taken:
            kept.append(event)
        elif event.job.id not in reasons:  # (an array waiting as one)
            others = [m for m in _members(ctl, event.job) if m not in reasons]
            kept.extend(JobSubmitted(event.job.array_member(m)) for m in others)
    ctl.waiting = kept
    end_here(ctl, reasons)
    return set(reasons)


def _submits(ctl: Controller, submitted: set[str], job_id: str) -> bool:
    """Whether job ``job_id`` (itself, or the array it is a member of) is in ``submitted``."""
    if job_id in submitted:
        return True
    live = ctl.jobs.get(job_id)
    return live is not None and live.spec.array_parent in submitted


def retry_waiting(ctl: Controller) -> None:
    """Offer again the jobs that waited for more nodes (:func:`resubmit`) or for the jobs
    they depend on, until a round hands the core none (one behind another that went)."""
    while ctl.waiting:
        waiting, ctl.waiting = ctl.waiting, []
        _offer(ctl, waiting)
        if len(ctl.waiting) == len(waiting):
            return
