"""Whom the tenancy gate preempts: the victims of its three kinds of preemption.

A job its queue's quota blocks takes lent capacity back from the borrowers of its cohort
(:func:`reclaim_victims`); a job within its nominal quota but blocked by room has the
borrowers give back places to run (:func:`room_victims`); a job whose QoS tier may preempt
stops jobs of lower tiers (:func:`priority_victims`). Each picks the candidates and asks
:mod:`fusesched.core.victim_search` for the fewest of them that let the job start; the gate
(:meth:`TenantGate.preempt <fusesched.core.tenants.TenantGate.preempt>`) records the
preemption. Pure, like the rest of the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.core.quota_verdicts import Admission
from fusesched.core.records import JobRecord
from fusesched.core.victim_search import fewest_victims, last_checkpoint
from fusesched.policies.victims import VictimCandidate

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore
    from fusesched.core.tenants import TenantGate


def candidates(
    gate: TenantGate,
    core: SchedulerCore,
    now: float,
    tiers: frozenset[str] | None = None,
    queues: frozenset[str] | None = None,
) -> list[VictimCandidate]:
    """Running jobs that may be asked to stop (of these tiers / queues when given)."""
    out: list[VictimCandidate] = []
    for job_id in core.running.ids():
        rec = core.jobs[job_id]
        if rec.preempt_reason is not None or rec.stop_requested is not None:
            continue
        if rec.start_time is not None and rec.start_time >= now:
            continue  # started in this cycle: not stopped before it has run
        tier = gate.tier(rec.spec)
        if tiers is not None and tier.name not in tiers:
            continue
        if queues is not None and rec.spec.queue not in queues:
            continue
        assert rec.start_time is not None
        out.append(
            VictimCandidate(
                job_id,
                rec.start_time,
                last_checkpoint(rec, now),
                float(rec.spec.priority),
                tier.name,
                tier.preemptible,
                max(gate.rate(job_id), 1e-9),
                rec.preemptions,
            )
        )
    return out


def reclaim_victims(
    gate: TenantGate, core: SchedulerCore, rec: JobRecord, verdict: Admission, now: float
) -> list[JobRecord]:
    """Borrowers to preempt so that ``rec`` (blocked by quota) gets its queue's nominal
    quota back; empty when it would not help or a reclaim for it is under way."""
    if gate.preempting_for(rec.id) or verdict.assignment is None:
        return []
    queue = rec.spec.queue
    if queue not in gate.lenders():
        return []  # nobody borrows from its cohort
    if not gate.ledger.within_nominal(queue, verdict.assignment):
        return []  # it would borrow: a reclaim restores nominal quota only
    cands = candidates(gate, core, now, queues=gate.cohort_mates(queue))
    chosen = gate.ledger.reclaim_candidates(
        queue, verdict.assignment, cands, now, order=gate.victim_order
    )
    if not chosen:
        return []  # within its nominal quota there is nothing to take back
    # victims that give back both the quota and a place to run, in one round, when such
    # a set exists (else the quota now, and room victims once it has come back)
    cands = [c for c in cands if c.preemptible]
    victims = fewest_victims(gate, core, rec, cands, now, borrowers_only=True)
    return gate.preempt(rec, victims or [core.jobs[v] for v in chosen])


def priority_victims(
    gate: TenantGate, core: SchedulerCore, rec: JobRecord, now: float
) -> list[JobRecord]:
    """Jobs of lower QoS tiers to preempt so that ``rec`` can start: the fewest, in victim
    order, whose stopping gives it both quota (its queue's, when theirs counts there) and
    room for a placement."""
    tier = gate.tier(rec.spec)
    if not (gate.policy.preempt_for_priority and tier.may_preempt) or gate.preempting_for(rec.id):
        return []
    allowed = tier.may_preempt
    if not gate.running_in(allowed):
        return []
    cands = [c for c in candidates(gate, core, now, tiers=allowed) if c.preemptible]
    return gate.preempt(rec, fewest_victims(gate, core, rec, cands, now), allowed)


def room_victims(
    gate: TenantGate, core: SchedulerCore, rec: JobRecord, verdict: Admission | None, now: float
) -> list[JobRecord]:
    """Borrowers to preempt so that ``rec`` — within its queue's nominal quota, but
    blocked by room — can be placed: lent capacity must come back as places to run, not
    only as quota (a gang may need whole nodes the borrowers hold)."""
    queue = rec.spec.queue
    if verdict is None or verdict.borrowing or gate.preempting_for(rec.id):
        return []
    if queue not in gate.lenders():
        return []
    borrowing = frozenset(q for q in gate.cohort_mates(queue) if gate.ledger.borrowed(q))
    cands = [c for c in candidates(gate, core, now, queues=borrowing) if c.preemptible]
    victims = fewest_victims(gate, core, rec, cands, now, borrowers_only=True)
    return gate.preempt(rec, victims)
