"""Why a job its queue's quota parked waits, in a phrase that fits squeue's ``REASON``.

The ledger's verdict says what was short (``gpu: nvidia.com/gpu needs 2, 0 free``); a user
needs to know whose quota it is and what could change it. :func:`quota_reason` reads the
ledger as it is after the cycle and names the first column the job's preferred flavours lack:
the queue's own use against its nominal quota, what the job needs, and why no more comes:

* ``QuotaExceeded: queue physics gpu 8/8, needs 2; no cohort to borrow from``;
* ``…; cohort lab has none to lend`` / ``…; cohort lab lends only 1`` — the cohort's unused
  quota is drawn by others: it lends again when their jobs end;
* ``…; borrowing capped at 4`` — the queue's ``borrowing_limit``;
* ``…; tier gold may not borrow`` — only preemptible tiers borrow;
* ``…; may not borrow now`` — it backs off after a preemption, or its cohort reclaims;
* ``QuotaExceeded: queue physics gpu 4/8, needs 2; its quota is lent out: reclaiming`` —
  within its nominal quota, lent to the cohort: borrowers are preempted to give it back.

A verdict without a preferred assignment (no flavour the job may use, no quota for a
resource), or one the ledger no longer explains, keeps the ledger's words:
``QuotaExceeded: queue physics (…)``. Pure, like the rest of the core.
"""

from __future__ import annotations

from fusesched.core.quota import QuotaLedger
from fusesched.core.quota_verdicts import Admission, Column
from fusesched.model.resources import format_quantity
from fusesched.model.tenancy import QoSTier, Queue

QUOTA_EXCEEDED = "QuotaExceeded"


def quota_reason(ledger: QuotaLedger, verdict: Admission, tier: QoSTier | None) -> str:
    """The reason of a job the quota of ``verdict.queue`` parked (``tier``: the job's QoS
    tier, ``None`` when unknown)."""
    queue = verdict.queue
    fallback = f"{QUOTA_EXCEEDED}: queue {queue}"
    if verdict.reason:
        fallback += f" ({verdict.reason})"
    assignment = verdict.assignment
    if assignment is None:
        return fallback
    try:
        config = ledger.config.queue(queue)
    except KeyError:
        return fallback
    used, nominal, available = ledger.usage(queue), ledger.nominal(queue), ledger.available(queue)
    for column, need in sorted(assignment.amounts.items()):
        if column not in nominal:
            continue
        u, n, free = used.get(column, 0), nominal[column], available.get(column, 0)
        why = _why(config, column, need, u, n, free, tier)
        if why:
            res = column[1]
            name = res.rsplit("/", 1)[-1]
            if len(config.quotas) > 1:
                name = f"{column[0]}:{name}"
            own = f"{_q(res, u)}/{_q(res, n)}, needs {_q(res, need)}"
            return f"{QUOTA_EXCEEDED}: queue {queue} {name} {own}; {why}"
    return fallback


def _why(
    config: Queue,
    column: Column,
    need: int,
    used: int,
    nominal: int,
    free: int,
    tier: QoSTier | None,
) -> str:
    """Why ``need`` of ``column`` does not come (``""``: it would)."""
    res = column[1]
    borrows = used + need > nominal
    if not borrows:
        return "its quota is lent out: reclaiming" if need > free else ""
    if config.cohort is None:
        return "no cohort to borrow from"
    if tier is not None and not tier.preemptible:
        return f"tier {tier.name} may not borrow"
    limit = _borrowing_limit(config, column)
    if limit is not None and used + need > nominal + limit:
        return f"borrowing capped at {_q(res, limit)}"
    if need <= free:
        return "may not borrow now"  # (a back-off after a preemption, or a reclaim)
    lends = max(0, free - max(0, nominal - used))
    if not lends:
        return f"cohort {config.cohort} has none to lend"
    return f"cohort {config.cohort} lends only {_q(res, lends)}"


def _borrowing_limit(config: Queue, column: Column) -> int | None:
    flavor, res = column
    for quota in config.quotas:
        if quota.flavor == flavor and res in quota.resources:
            return quota.resources[res].borrowing_limit
    return None


def _q(resource: str, amount: int) -> str:
    return format_quantity(resource, int(amount))
