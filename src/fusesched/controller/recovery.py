"""Crash recovery of the queue: a restarted controller queues again what its predecessor left.

At start (:func:`recover`) every job the store shows pending gets its live record back
(hold, attempt and remote-task numbering as stored; dependencies on jobs that ended before
the restart settled) and its submission is *held*: the core would find no node for it until
the nodes that were up come back, so the held submissions reach the core only once they
have all registered, or once ``node_timeout_s`` has passed (:func:`release_held`). Even
then, a job the nodes back so far cannot hold (a gang while one of its nodes' agents is
still restarting) *waits* instead of being rejected for good (:func:`resubmit`), and is
offered again whenever nodes join (:func:`retry_waiting`). Jobs the store shows
running are adopted where they run (``adoption``).

Until then the core does not hold those jobs, and would find a dependency on one of them
(or on an array of theirs) unknown, and a ``singleton`` free of them: a job with
dependencies submitted in that window (:func:`in_window`) is held with them, after them.

Every function here runs with the controller's lock held, or before its loop starts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fusesched.controller import adoption, dependencies, federation, holds
from fusesched.controller.records import LiveJob, recovered_spec
from fusesched.core.pending_reasons import given
from fusesched.model.events import Event, JobCancelRequested, JobSubmitted
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase
from fusesched.submit.errors import SubmitError
from fusesched.submit.feasibility import check_feasible
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")


def recover(ctl: Controller) -> None:
    """Jobs left pending by a previous controller go back into the queue; jobs it had
    running wait for their agents to report in and are adopted (controller/adoption.py)."""
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
    for detail in pending:
        row = detail.job
        request = JobRequest.model_validate(row.request)
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


def in_window(ctl: Controller) -> bool:
    """Whether the core does not hold every job recovered at start yet: submissions are
    still held, or jobs left running still wait for their nodes (until ``adopt_until``)."""
    if ctl.held:
        return True
    return bool(ctl.adopt_until) and any(live.adopting for live in ctl.jobs.values())


def release_held(ctl: Controller) -> None:
    """Hand the core the submissions recovered at start, held until the nodes were back."""
    for event in ctl.held:
        resubmit(ctl, event)
    ctl.held = []
    ctl.wake()


def resubmit(ctl: Controller, event: Event) -> None:
    """Hand the core a job recovered after a restart, unless the nodes back so far cannot
    hold it (a gang while one of its nodes' agents is still restarting): the core would
    reject it for good; it waits, pending, until a node registers that lets it fit."""
    if isinstance(event, JobSubmitted) and check_feasible(event.job, federation.node_specs(ctl)):
        ctl.waiting.append(event)
    elif not (isinstance(event, JobCancelRequested) and _with_waiting(ctl, event)):
        ctl.events.append(event)
        if isinstance(event, JobSubmitted):  # held before the restart (or since): held again
            ctl.events.extend(holds.after_resubmit(ctl, event.job.id))  # before any cycle


def cancel_unsubmitted(ctl: Controller, event: JobCancelRequested) -> bool:
    """Whether the cancel of a job whose submission the core has not had yet (held, or
    waiting for nodes) was taken here (the core would refuse the cancel of a job it does not
    know, and the job would run after all): held after it, or the waiting job ended here."""
    if ctl.held and any(_submits(ctl, held, event.job_id) for held in ctl.held):
        ctl.held.append(event)
        return True
    return _with_waiting(ctl, event)


def _with_waiting(ctl: Controller, event: JobCancelRequested) -> bool:
    """A cancel of a job waiting for nodes: it ends here, cancelled (the core, which never
    had it, would refuse it for want of nodes first)."""
    for i, waiting in enumerate(ctl.waiting):
        if isinstance(waiting, JobSubmitted) and waiting.job.id == event.job_id:
            del ctl.waiting[i]
            ctl.jobs.pop(event.job_id, None)
            now = ctl.clock()
            ctl.persist.job_finished(event.job_id, JobPhase.CANCELLED, None, event.reason, now)
            return True
    return False


def _submits(ctl: Controller, event: Event, job_id: str) -> bool:
    """Whether ``event`` submits job ``job_id`` (itself, or the array it is a member of)."""
    if not isinstance(event, JobSubmitted):
        return False
    live = ctl.jobs.get(job_id)
    return event.job.id in (job_id, live.spec.array_parent if live is not None else None)


def retry_waiting(ctl: Controller) -> None:
    """Offer again the recovered jobs that waited for more nodes (:func:`resubmit`)."""
    waiting, ctl.waiting = ctl.waiting, []
    for event in waiting:
        resubmit(ctl, event)
