"""Reclaim: which running jobs of borrowing queues to preempt so that a lender gets back,
within its nominal quota, the room a job of its needs.

A queue in a cohort lends what it does not use; when it needs it again, the borrowers give it
back. :func:`reclaim_candidates` picks, among the admitted preemptible jobs of the other
queues of the cohort that borrow in a column the demand needs, as few as it can (in the
victim order, then giving back those that turned out unnecessary); :func:`within_nominal`
is the cheap test that a reclaim could help at all. Both are methods of
:class:`fusesched.core.quota.QuotaLedger` (``ledger.reclaim_candidates(...)``), kept here; they
read the ledger and change nothing. Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.quota_verdicts import FlavorAssignment, QuotaError
from fusesched.model.job import NO_PLACEMENT, Placement
from fusesched.model.resources import Resources
from fusesched.policies.victims import VictimCandidate, VictimOrder, checkpoint_aware_victims

if TYPE_CHECKING:
    from fusesched.core.quota import IntArray, QuotaLedger


def within_nominal(ledger: QuotaLedger, queue: str, assignment: FlavorAssignment) -> bool:
    """Whether ``assignment`` fits in what ``queue`` leaves unused of its nominal quota:
    only then can a reclaim give it room (a cheap test before choosing victims)."""
    qi = ledger._q(queue)
    if not assignment.amounts:
        return False
    for column, amount in assignment.amounts.items():
        ci = ledger._cidx.get(column)
        if ci is None or ledger._usage[qi, ci] + amount > ledger._nominal[qi, ci]:
            return False
    return True


def reclaim_candidates(
    ledger: QuotaLedger,
    queue: str,
    demand: Resources | FlavorAssignment,
    running: Sequence[VictimCandidate],
    now: float,
    *,
    order: VictimOrder = checkpoint_aware_victims,
    placement: Placement = NO_PLACEMENT,
) -> list[str]:
    """Running jobs of *borrowing* queues in ``queue``'s cohort to preempt so that
    ``demand`` fits within ``queue``'s nominal quota.

    Only admitted, preemptible jobs of other queues that currently borrow in a column the
    demand needs are eligible. They are taken in ``order`` while their queue still borrows
    there, until the demand fits; then every taken victim whose return would still leave
    room is given back (latest first), so the set is small. Returns ``[]`` when the demand
    already fits, exceeds the queue's nominal quota, or cannot be made to fit.
    """
    qi = ledger._q(queue)
    if isinstance(demand, FlavorAssignment):
        target: FlavorAssignment | None = demand
    else:
        verdict = ledger.check(queue, demand, placement=placement)
        if verdict.ok:
            return []
        target = verdict.assignment
    if target is None or not target.amounts:
        return []
    if target.queue != queue or any(
        c not in ledger._cidx or not ledger._defined[qi, ledger._cidx[c]] for c in target.amounts
    ):
        raise QuotaError(f"assignment does not match the quota of queue {queue!r}")
    cols = np.fromiter((ledger._cidx[c] for c in target.amounts), np.int64)
    amounts = np.fromiter(target.amounts.values(), np.int64)
    if np.any(ledger._usage[qi, cols] + amounts > ledger._nominal[qi, cols]):
        return []  # reclaim restores nominal quota only; it never lets a queue borrow

    def fits(usage: IntArray) -> bool:
        return bool(np.all(amounts <= ledger._available(qi, usage)[cols]))

    if fits(ledger._usage):
        return []
    cohort = int(ledger._cohort_of[qi])
    eligible = [
        c
        for c in running
        if c.preemptible
        and (held := ledger._jobs.get(c.job_id)) is not None
        and held.queue != qi
        and int(ledger._cohort_of[held.queue]) == cohort
        and np.any(np.isin(held.cols, cols))
    ]
    usage = ledger._usage.copy()
    taken: list[str] = []
    for cand in order(eligible, now):
        held = ledger._jobs[cand.job_id]
        mine = np.isin(held.cols, cols)
        vq, vcols = held.queue, held.cols[mine]
        if not np.any(usage[vq, vcols] > ledger._nominal[vq, vcols]):
            continue  # its queue no longer borrows where we need room
        usage[vq, held.cols] -= held.amounts
        taken.append(cand.job_id)
        if fits(usage):
            break
    else:
        return []
    for job in reversed(taken[:-1]):  # give back victims that turned out unnecessary
        held = ledger._jobs[job]
        usage[held.queue, held.cols] += held.amounts
        if fits(usage):
            taken.remove(job)
        else:
            usage[held.queue, held.cols] -= held.amounts
    return taken
