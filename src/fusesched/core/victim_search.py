"""Victim search for preemption: the fewest running jobs whose stopping lets a job start.

A what-if on copies of the free matrix and on the quota ledger (undone before returning), so
nothing changes; the tenancy gate (:mod:`fusesched.core.tenants`) decides which running jobs
are candidates and what a preemption then does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.cluster import IntArray
from fusesched.core.records import JobRecord
from fusesched.policies.victims import VictimCandidate

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore
    from fusesched.core.tenants import TenantGate


def fewest_victims(
    gate: TenantGate,
    core: SchedulerCore,
    rec: JobRecord,
    cands: list[VictimCandidate],
    now: float,
    *,
    borrowers_only: bool = False,
) -> list[JobRecord]:
    """The fewest of ``cands``, in victim order, whose stopping lets ``rec`` start: its
    quota admits it and a placement exists (a what-if on copies; nothing changes).

    ``borrowers_only``: ``rec`` must be admitted within its own nominal quota (victims are
    never made to let it borrow), and no victim may be taken once its queue no longer
    borrows (its remaining jobs run within their own guarantee). The victims are first
    taken in plain victim order and pruned — which finds one large victim whose node
    forms the place even behind many small ones. If that set takes from a queue beyond
    what it borrows: the first single victim that is enough, else victims taken again
    passing over queues that no longer borrow."""
    if not cands:
        return []
    order = [core.jobs[c.job_id] for c in gate.victim_order(cands, now)]
    free = core.cluster.free.copy()
    released: dict[str, JobRecord] = {}

    def drop(victim: JobRecord) -> None:
        give(free, victim)
        if victim.admission is not None and gate.ledger.release(victim.id):
            released[victim.id] = victim

    def restore(victim: JobRecord) -> None:
        give(free, victim, -1)
        if released.pop(victim.id, None) is not None:
            assignment = victim.admission.assignment if victim.admission else None
            if assignment is not None:
                tier_name = gate.tier(victim.spec).name
                user = victim.spec.user or None
                gate.ledger.admit(victim.id, assignment, user=user, qos=tier_name, check=False)

    def reset() -> None:
        """Undo every drop: the ledger and the free matrix as they really are."""
        for victim in list(released.values()):
            restore(victim)
        free[:] = core.cluster.free

    def fits() -> bool:
        verdict = gate.admission(rec)
        if verdict is not None and (not verdict.ok or (borrowers_only and verdict.borrowing)):
            return False
        return core.plan(rec, free, search=False) is not None

    def search(skip_lenders: bool) -> list[JobRecord]:
        taken: list[JobRecord] = []
        try:
            for victim in order:
                if skip_lenders and not gate.ledger.borrowed(victim.spec.queue):
                    continue
                drop(victim)
                taken.append(victim)
                if fits():
                    break
            else:
                return []
            for victim in reversed(taken[:-1]):  # give back victims that were not needed
                restore(victim)
                if fits():
                    taken.remove(victim)
                else:
                    drop(victim)
            return taken
        finally:
            reset()

    def borrows_throughout(taken: list[JobRecord]) -> bool:
        """Each victim's queue still borrows when it is taken (in victim order)."""
        kept = {v.id for v in taken}
        try:
            for victim in order:
                if victim.id in kept:
                    if not gate.ledger.borrowed(victim.spec.queue):
                        return False
                    drop(victim)
            return True
        finally:
            reset()

    def alone() -> list[JobRecord]:
        """The first victim, in victim order, that is enough on its own."""
        for victim in order:
            if not gate.ledger.borrowed(victim.spec.queue):
                continue
            drop(victim)
            try:
                if fits():
                    return [victim]
            finally:
                reset()
        return []

    if fits():
        return []  # it can start as things are: nobody needs to go
    taken = search(skip_lenders=False)
    if borrowers_only and taken and not borrows_throughout(taken):
        taken = alone() or search(skip_lenders=True)
    return taken


def last_checkpoint(rec: JobRecord, now: float) -> float | None:
    """The job's latest checkpoint: reported by the shell, or implied by its declared
    interval (it checkpoints every ``checkpoint_interval_s`` of running)."""
    best = rec.last_checkpoint
    interval = rec.spec.checkpoint_interval_s
    if interval is not None and rec.start_time is not None and now > rec.start_time:
        implied = rec.start_time + math.floor((now - rec.start_time) / interval) * interval
        if implied > rec.start_time and (best is None or implied > best):
            best = implied
    return best


def give(free: IntArray, rec: JobRecord, sign: int = 1) -> None:
    """Add (or with ``sign`` −1 take back) what ``rec`` holds to a what-if free matrix."""
    alloc = rec.allocation
    assert alloc is not None
    if alloc.rows is None and alloc.column_amounts is not None:
        np.add.at(free[:, alloc.column], alloc.nodes, sign * alloc.column_amounts)
    else:
        np.add.at(free, alloc.nodes, sign * alloc.amounts)
