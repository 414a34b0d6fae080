"""Submissions: how the controller checks, numbers, stores and queues new jobs.

:func:`submit` is what ``POST /v1/jobs`` does (all or none: one refusal stores nothing and
takes no job numbers); :func:`intake` and :func:`prepare` are its checks, which
``sbatch --test-only`` trials (:func:`fusesched.controller.forecasts.trial`) share so that a
trial is refused exactly as a submission would be. Every function here but :func:`submit`
runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusesched.controller import (
    attendance,
    dependencies,
    federation,
    holds,
    licenses,
    pty_cap,
    reservations,
    unsubmitted,
)
from fusesched.controller.records import LiveJob, NotReadyError, array_size
from fusesched.model.events import Event, JobSubmitted
from fusesched.model.job import DependencyKind, JobSpec, QoS
from fusesched.model.node import NodeSpec
from fusesched.submit.errors import SubmitError
from fusesched.submit.feasibility import check_feasible
from fusesched.submit.gpu_model import resolve_gpu_model
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def submit(ctl: Controller, requests: Sequence[JobRequest], user: str, now: float) -> list[str]:
    """Validate, store and queue jobs; their ids (array parents for arrays)."""
    with ctl.lock:
        node_specs, requests, sizes = intake(ctl, requests)
        total = sum(sizes)
        start = ctl.persist.allocate_seqs(total)
        try:
            prepared = prepare(ctl, requests, sizes, start, user, node_specs, now)
        except BaseException:
            ctl.persist.release_seqs(start, total)  # a refusal takes no job numbers
            raise
        ids: list[str] = []
        pending: unsubmitted.Unsubmitted | None = None  # (read once: what the core lacks)
        for seq, request, spec in prepared:
            children = spec.expand_array()
            seqs = range(seq, seq + len(children))
            ctl.persist.jobs_submitted(seqs, request, children, now)
            for child_seq, child in zip(seqs, children, strict=True):
                ctl.jobs[child.id] = LiveJob(child.id, child_seq, child, request)
            if request.attended:  # (salloc's, run's: ended when their command goes silent)
                attendance.track(ctl, [child.id for child in children])
            recalled = dependencies.recall(ctl, spec, ctl.arrays_recalled)  # (restarts)
            events: list[Event] = [*recalled, JobSubmitted(spec)]
            # submitted held: held as soon as the core takes it
            holding = holds.at_submit(ctl, [c.id for c in children]) if request.hold else []
            target = None
            if spec.dependencies:
                pending = pending or unsubmitted.Unsubmitted(ctl, [*ctl.held, *ctl.waiting])
                target = pending.waits_for(spec)
            if pending is not None and target is not None:
                # after a restart, one that depends on a recovered job the core does not
                # hold yet waits after it (held then as it is then: recovery.resubmit)
                unsubmitted.hold_back(ctl, pending, events, [c.id for c in children], target)
            else:
                ctl.events.extend([*events, *holding])
            ids.append(spec.id)
    return ids


def intake(
    ctl: Controller, requests: Sequence[JobRequest]
) -> tuple[list[NodeSpec], list[JobRequest], list[int]]:
    """The nodes jobs may go to, the requests with their types identified, and how many jobs
    each makes (:class:`NotReadyError` before any node has registered)."""
    node_specs = federation.node_specs(ctl)
    if not node_specs:
        raise NotReadyError("no node has registered yet; start an agent first")
    requests = [r.identified() for r in requests]
    return list(node_specs), requests, [array_size(r) for r in requests]


def prepare(
    ctl: Controller,
    requests: Sequence[JobRequest],
    sizes: Sequence[int],
    first: int,
    user: str,
    node_specs: Sequence[NodeSpec],
    now: float,
) -> list[tuple[int, JobRequest, JobSpec]]:
    """Number and check every request (all or none): (first number, request, spec) each;
    raises :class:`SubmitError` on the first refusal. A request without a user gets
    ``user``; one without a QoS, the tenancy file's default tier."""
    prepared: list[tuple[int, JobRequest, JobSpec]] = []
    terminals = 0  # of the requests before this one (each opens one: pty_cap.py)
    for k, (request, size) in enumerate(zip(requests, sizes, strict=True)):
        if user and not request.user:
            request = request.model_copy(update={"user": user})
        if request.qos is None:
            request = request.model_copy(update={"qos": default_qos(ctl)})
        request = resolve_gpu_model(request, node_specs)  # gpu:h100 → H100-80GB-HBM3
        spec = federation.routed(ctl, request, request.to_job_spec(str(first), now))
        settled = dependencies.settle_submitted(ctl, spec)
        if isinstance(settled, str):
            reason: str | None = settled
        else:
            spec, reason = settled, refusal(ctl, settled, node_specs)
        if not reason and request.pty is not None:
            terminals += size
            reason = pty_cap.refusal(ctl, spec.user, terminals)
        if reason and len(requests) > 1:  # all or none: say which job it was
            name = f" ({request.name!r})" if request.name else ""
            reason = f"job {k + 1} of {len(requests)}{name}: {reason}"
        if reason:
            raise SubmitError(reason)
        prepared.append((first, request, spec))
        first += size
    return prepared


def default_qos(ctl: Controller) -> QoS:
    """The tier of a job that names none: the tenancy file's ``default_qos``, else silver."""
    tenants = ctl.core.tenants
    return QoS.SILVER if tenants is None else QoS(tenants.config.default_qos)


def refusal(ctl: Controller, spec: JobSpec, node_specs: Sequence[NodeSpec]) -> str | None:
    """Why ``spec`` cannot be accepted (its dependencies, its reservation, the nodes, the
    quotas), or ``None``."""
    for dep in spec.dependencies:
        if dep.kind is DependencyKind.SINGLETON:  # (names no job: its name does)
            if not spec.name:
                return "a singleton dependency needs a job name (sbatch -J, name:)"
            continue
        known = (
            dep.job_id in ctl.core.jobs
            or dep.job_id in ctl.core.arrays.specs  # a whole array (core/array_deps.py)
            or ctl.persist.job_exists(dep.job_id)
            or dependencies.stored_array(ctl, dep.job_id) is not None
        )
        if not known:
            return f"dependency on unknown job {dep.job_id!r}"
    reason = (
        licenses.refusal(ctl, spec)
        or reservations.refusal(ctl, spec)
        or check_feasible(spec, node_specs)
    )
    if not reason and ctl.core.tenants is not None:
        reason = ctl.core.tenants.refuse(spec)
    return reason or None
