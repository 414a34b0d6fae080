"""The in-order pass of a cycle with tenancy: quota admission, reclaim and preemption.

With a tenancy configuration the core's cycle (:meth:`SchedulerCore.cycle`) runs
:func:`start_admitted` instead of its plain in-order loop: each job's queue quota is checked
first (jobs it blocks are parked and may reclaim lent capacity), jobs are kept on their
quota flavours' nodes (:func:`pin_flavours`), and the first job blocked by room may preempt
borrowers or lower QoS tiers. Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from fusesched.core import reservations
from fusesched.core.quota_verdicts import Admission
from fusesched.core.records import JobRecord
from fusesched.core.victim_choice import priority_victims, reclaim_victims, room_victims
from fusesched.model.events import Decision, PreemptJob
from fusesched.model.job import LabelOp, LabelRequirement
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore


def start_admitted(
    core: SchedulerCore, now: float, changed: bool, fresh: Sequence[JobRecord] = ()
) -> list[Decision]:
    """The in-order pass with quotas: a job its queue's quota blocks is parked (it blocks
    no other queue) and may reclaim lent capacity; the first job blocked by room holds the
    others back, after preempting lower QoS tiers if its tier may — except, when that job
    holds no guarantee itself (it would borrow, or its queue has no quota) and no preemption
    is under way, jobs of *other* queues that fit within their queue's nominal quota: a
    guarantee does not wait behind a borrower (each queue keeps its order for its own jobs
    that hold a guarantee; Kueue's per-queue heads).
    ``fresh``: the jobs queued since the last cycle (with nothing ``changed``, only they can
    start behind the head)."""
    gate = core.tenants
    assert gate is not None
    queue = core.queue
    records = queue.records
    # jobs whose victims have gone go first: the room was made for them
    ready = [core.jobs[j] for j in gate.ready() if core.jobs[j].phase is JobPhase.QUEUED]
    for rec in ready:
        if core._parked.pop(rec.id, None) is not None:
            core.queue.push(rec, now)
    first = {id(r) for r in ready}  # (a ready preemptor takes its room even if it borrows)
    if ready:
        records = [*ready, *(r for r in queue.records if id(r) not in first)]
    # jobs that would borrow go after those within their guarantee (in order, once the
    # pass is done): a guarantee that could start now does not see its room lent out first
    deferred: list[JobRecord] = []
    out: list[Decision] = []
    done: set[int] = set()
    stop: int | None = None  # the position after the first job blocked by room
    held: set[str] = set()  # queues whose head is blocked by room: their order holds
    new = {id(r) for r in fresh}
    bypass = False  # may guarantees start behind the job blocked by room?
    for pos, rec in enumerate(records):
        if stop is not None:
            if not bypass:
                break
            if rec.spec.queue not in held and (changed or ready or id(rec) in new):
                if _start_guaranteed(core, rec, now, out):
                    done.add(id(rec))
                elif rec.admission is not None:
                    held.add(rec.spec.queue)
            continue
        if rec is core.blocked_head and not changed and not ready:
            stop = pos
            if _guaranteed(rec.admission):  # (its queue's guarantees do not wait for a borrower)
                held.add(rec.spec.queue)
            bypass = not _guaranteed(rec.admission) and not gate.preempting()
            continue
        verdict = gate.admission(rec)
        if verdict is not None and verdict.ok and verdict.borrowing and id(rec) not in first:
            deferred.append(rec)
            continue
        if verdict is not None and not verdict.ok:
            out.extend(_park(core, rec, verdict, done, now))
            continue
        rec.admission = verdict
        pin_flavours(core, rec, verdict)
        alloc = core.try_place(rec, quota_checked=True)
        if alloc is None:
            if ready and rec in ready:  # its victims' room did not do: choose again at once
                gate.choose_again(rec.id)
                victims = room_victims(gate, core, rec, verdict, now)
                victims = victims or priority_victims(gate, core, rec, now)
                if not victims and _guaranteed(verdict):
                    gate.hold(rec)  # nobody to preempt: keep the freed room from borrowers
                out.extend(preempt(core, victims))
                continue
            if core.licenses is None or not core.licenses.blocks(rec):  # (preempting
                # frees no license: a job its licenses hold back preempts nobody)
                victims = room_victims(gate, core, rec, verdict, now)
                out.extend(preempt(core, victims or priority_victims(gate, core, rec, now)))
            stop = pos + 1
            if _guaranteed(verdict):
                held.add(rec.spec.queue)
            bypass = not _guaranteed(verdict) and not gate.preempting()
            continue
        out.append(core.bind(rec, alloc, now, backfilled=False))
        done.add(id(rec))
    if stop is not None:
        out.extend(reclaim_behind(core, records[stop:], done, now))
    if deferred:
        out.extend(_start_borrowers(core, deferred, done, now))
    if done:
        queue.remove_at([i for i, r in enumerate(queue.records) if id(r) in done])
    return out


def _start_borrowers(
    core: SchedulerCore, deferred: list[JobRecord], done: set[int], now: float
) -> list[Decision]:
    """The jobs that would borrow, deferred by the in-order pass (all stood ahead of where it
    stopped), in order, with a fresh verdict (a reclaim started meanwhile stops borrowing in
    its cohort: such a job is parked as any job its quota blocks, and reclaims nothing since
    it would borrow); the first that does not fit holds the others back."""
    gate = core.tenants
    assert gate is not None
    out: list[Decision] = []
    for rec in deferred:
        verdict = gate.admission(rec)
        if verdict is not None and not verdict.ok:
            out.extend(_park(core, rec, verdict, done, now))
            continue
        rec.admission = verdict
        pin_flavours(core, rec, verdict)
        alloc = core.try_place(rec, quota_checked=True)
        if alloc is None:
            if core.licenses is None or not core.licenses.blocks(rec):
                out.extend(preempt(core, priority_victims(gate, core, rec, now)))
            break
        out.append(core.bind(rec, alloc, now, backfilled=False))
        done.add(id(rec))
    return out


def _park(
    core: SchedulerCore, rec: JobRecord, verdict: Admission, done: set[int], now: float
) -> list[Decision]:
    """``rec``'s quota blocks it: park it (it blocks no other queue) and let it reclaim lent
    capacity, or else preempt lower QoS tiers if its tier may."""
    gate = core.tenants
    assert gate is not None
    done.add(id(rec))
    core._parked[rec.id] = rec
    rec.parked_by = verdict
    victims = reclaim_victims(gate, core, rec, verdict, now)
    return preempt(core, victims or priority_victims(gate, core, rec, now))


def _guaranteed(verdict: Admission | None) -> bool:
    """Admitted within its queue's nominal quota (not borrowing)."""
    return verdict is not None and verdict.ok and not verdict.borrowing


def _start_guaranteed(core: SchedulerCore, rec: JobRecord, now: float, out: list[Decision]) -> bool:
    """Start ``rec`` behind a blocked head if its queue's quota admits it without borrowing
    and it fits now. ``rec.admission`` is left set when the quota admitted it (so a failure
    to fit holds its queue's order), else None."""
    gate = core.tenants
    assert gate is not None
    rec.admission = None
    verdict = gate.admission(rec)
    if verdict is None or not verdict.ok or verdict.borrowing:
        return False  # no guarantee to honour: borrowed capacity keeps the global order
    rec.admission = verdict
    pin_flavours(core, rec, verdict)
    alloc = core.try_place(rec, quota_checked=True)
    if alloc is None:
        return False
    out.append(core.bind(rec, alloc, now, backfilled=False))
    return True


def reclaim_behind(
    core: SchedulerCore, records: list[JobRecord], done: set[int], now: float
) -> list[Decision]:
    """Jobs behind the one blocked by room that their own queue's quota blocks while it
    is lent out: they start reclaiming now (and are parked), not when they reach the
    head — lent capacity comes back within the reclaim bound."""
    gate = core.tenants
    assert gate is not None
    lenders = gate.lenders()
    if not lenders:
        return []
    out: list[Decision] = []
    tried: set[str] = set()  # one room reclaim per queue and cycle (each is a what-if)
    for rec in records:
        queue = rec.spec.queue
        if queue not in lenders or id(rec) in done:
            continue
        if gate.preempting_for(rec.id):
            continue  # its reclaim is under way: the queue's turn goes to its next job
        verdict = gate.admission(rec)
        if verdict is not None and not verdict.ok:
            victims = reclaim_victims(gate, core, rec, verdict, now)
            if victims:
                done.add(id(rec))
                core._parked[rec.id] = rec
                rec.parked_by = verdict
                out.extend(preempt(core, victims))
        elif queue not in tried and _guaranteed(verdict):
            tried.add(queue)  # (a job that would borrow reclaims nothing: the next one may)
            rec.admission = verdict
            pin_flavours(core, rec, verdict)
            out.extend(preempt(core, room_victims(gate, core, rec, verdict, now)))
    return out


def preempt(core: SchedulerCore, victims: list[JobRecord]) -> list[Decision]:
    gate = core.tenants
    assert gate is not None
    return [PreemptJob(v.id, v.preempt_reason or "preempted", gate.grace(v)) for v in victims]


def pin_flavours(core: SchedulerCore, rec: JobRecord, verdict: Admission | None) -> None:
    """Keep ``rec`` on nodes of the quota flavours it is admitted in (their labels join
    its node selector) and off other flavours' dedicated nodes; recompiled only when
    that changes."""
    assert core.tenants is not None
    key = core.tenants.node_terms(verdict)
    if key == rec.flavour_key:
        return
    base = rec.base_spec if rec.base_spec is not None else rec.spec
    spec = base
    if key:
        placement = base.placement
        selector = {**placement.node_selector, **{k: v for op, k, v in key if op == "="}}
        avoid = tuple(LabelRequirement(k, LabelOp.IN, (v,)) for op, k, v in key if op == "!")
        spec = replace(
            base,
            placement=replace(
                placement,
                node_selector=selector,
                anti_affinity=(*placement.anti_affinity, *avoid),
            ),
        )
    rec.base_spec, rec.flavour_key = base, key
    core.reshape(rec, spec)
    if rec.booked is not None:  # (the nodes a reservation keeps it off do not count)
        reservations.fits_anyway(core, rec)
