"""Why each waiting job waits, in Slurm's words (squeue's ``NODELIST(REASON)``).

An explanation of the cycle, not a part of it: :func:`take_reasons` reads what the cycle left
behind (the queue in order, the jobs parked by quota with the verdict that parked them, the
array children held by their throttle, the jobs waiting on dependencies) and decides nothing.
It walks the waiting jobs once (no node is looked at, except the few a job names with
``--nodelist``), and only after a cycle that could have changed something: the core raises
``reasons_due`` then, and the shell asks. The simulator never asks.

The reasons, first that applies:

* ``ReqNodeNotAvail: n3 drained`` — a node the job names (``--nodelist``) takes no work;
* ``""`` — its licenses are not all free: the shell's own view says which, with live counts
  (:meth:`~fusesched.core.licenses.LicensePool.shortage`);
* ``Resources`` — the first job of its partition: it waits for room;
* ``Priority`` — a job behind one of its partition (:mod:`fusesched.core.contention`: a
  partition is the nodes a job may use and the scarce kind it asks for, e.g. H100 GPUs);
* ``QuotaExceeded: queue physics gpu 8/8, needs 2; cohort lab has none to lend`` — its
  queue's quota parked it: its use against its nominal quota and why it may not borrow
  (:mod:`fusesched.core.quota_reasons`);
  ``QOSMaxJobsPerUserLimit: …`` / ``QOSMaxGRESPerUser: …`` — its tier's per-user limit did;
  ``Priority: waits while job 12 takes the room it preempted for``;
* ``JobArrayTaskLimit: …`` — its array runs at most so many children at a time;
* ``Dependency: job 12`` — it waits for the jobs its dependencies name.

Jobs with a reason of their own are left out, and the shell keeps what it said of them:
held jobs, jobs waiting for their begin time, a requeue's back-off or a reservation's window.
Pure, like the rest of the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.core.contention import Contention
from fusesched.core.quota_reasons import QUOTA_EXCEEDED, quota_reason
from fusesched.core.quota_verdicts import USER_GPUS_LIMIT, USER_JOBS_LIMIT, Admission
from fusesched.core.records import JobRecord
from fusesched.model.job import LabelOp
from fusesched.model.node import LABEL_HOSTNAME, NodeState
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

RESOURCES = "Resources"
PRIORITY = "Priority"
REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
ARRAY_TASK_LIMIT = "JobArrayTaskLimit"
DEPENDENCY = "Dependency"

#: Node states that take no new work and do not come back by themselves (a suspended node
#: is resumed for the jobs that wait for it: it is no reason).
_UNAVAILABLE = (NodeState.DOWN, NodeState.DRAINED, NodeState.DRAINING)
#: Jobs named in a dependency reason; more are counted.
_NAMED = 3
#: The first word of every reason the core gives (:func:`given`).
_GIVEN = frozenset(
    {RESOURCES, PRIORITY, REQ_NODE_NOT_AVAIL, QUOTA_EXCEEDED, USER_JOBS_LIMIT, USER_GPUS_LIMIT}
    | {ARRAY_TASK_LIMIT, DEPENDENCY}
)


def take_reasons(core: SchedulerCore) -> dict[str, str] | None:
    """The reasons of the waiting jobs (job id → reason; ``""``: none the core can give)
    if a cycle or an event may have changed them since the last call, else ``None``."""
    if not core.reasons_due:
        return None
    core.reasons_due = False
    return waiting_reasons(core)


def waiting_reasons(core: SchedulerCore) -> dict[str, str]:
    """Every waiting job's reason but those the shell keeps (see the module's docstring)."""
    reasons: dict[str, str] = {}
    licenses = core.licenses
    records = core.queue.records
    for rec, first in zip(records, Contention(core).firsts(records), strict=True):
        spec = rec.spec
        # (most jobs name no node: no call for them)
        named = spec.placement.required or any(g.placement for g in spec.task_groups)
        why = nodes_not_available(core, rec) if named else ""
        if not why and licenses is not None and licenses.blocks(rec):
            why = ""  # (the shell's view names the licenses, with live counts)
        elif not why:
            why = RESOURCES if first else PRIORITY
        reasons[spec.id] = why
    said: dict[int, str] = {}  # (parked jobs alike share their verdict)
    for rec in core._parked.values():
        verdict = rec.parked_by
        known = said.get(id(verdict))
        if known is None:
            known = said[id(verdict)] = refused(core, rec, verdict)
        reasons[rec.id] = known
    for parent, held in core._array_held.items():
        for rec in held:
            array = rec.spec.array
            most = array.max_parallel if array is not None else None
            reasons[rec.id] = f"{ARRAY_TASK_LIMIT}: array {parent} runs at most {most} at a time"
    jobs = core.jobs
    for waiters in core._dependents.values():
        for job_id in waiters:
            rec = jobs[job_id]
            if job_id not in reasons and rec.phase is JobPhase.PENDING and rec.held is None:
                reasons[job_id] = dependency(rec)
    return reasons


def given(reason: str) -> bool:
    """Whether a stored reason is one :func:`waiting_reasons` gives (``Priority``,
    ``QuotaExceeded: …``, ``Resources; requeued (…)``): a shell restarted with it stored
    knows it as its own to replace."""
    return reason.split(";", 1)[0].split(":", 1)[0] in _GIVEN


def nodes_not_available(core: SchedulerCore, rec: JobRecord) -> str:
    """``ReqNodeNotAvail: n3 drained, n4 down`` when nodes the job or one of its task groups
    names (``--nodelist``: a hostname ``In`` requirement) take no work, else ``""``."""
    spec = rec.spec
    required = [*spec.placement.required]
    for group in spec.task_groups:
        if group.placement is not None:
            required.extend(group.placement.required)
    if not required:
        return ""
    cluster = core.cluster
    out: list[str] = []
    for req in required:
        if req.key != LABEL_HOSTNAME or req.op is not LabelOp.IN:
            continue
        for name in req.values:
            row = cluster.index.get(name)
            if row is None:
                out.append(f"{name} not registered")
            elif cluster.states[row] in _UNAVAILABLE:
                out.append(f"{name} {cluster.states[row]}")
    return f"{REQ_NODE_NOT_AVAIL}: {', '.join(dict.fromkeys(out))}" if out else ""


def refused(core: SchedulerCore, rec: JobRecord, verdict: Admission | None) -> str:
    """The reason of a job its quota (or a tier's limit) parked, from the verdict that did
    and the quota ledger as it is now."""
    if verdict is None:
        return QUOTA_EXCEEDED
    if verdict.limit:
        return f"{verdict.limit}: {verdict.reason}"
    gate = core.tenants
    if gate is None:  # (not parked by a quota: no ledger to read)
        return f"{QUOTA_EXCEEDED}: queue {verdict.queue} ({verdict.reason})"
    return quota_reason(gate.ledger, verdict, gate.tier(rec.spec))


def dependency(rec: JobRecord) -> str:
    """``Dependency: job 12`` (``jobs 12, 13, 14 and 2 more``): the jobs it still waits on."""
    ids = sorted(rec.waiting_on, key=lambda j: (len(j), j))
    named = ", ".join(ids[:_NAMED])
    more = f" and {len(ids) - _NAMED} more" if len(ids) > _NAMED else ""
    return f"{DEPENDENCY}: {'job' if len(ids) == 1 else 'jobs'} {named}{more}"
