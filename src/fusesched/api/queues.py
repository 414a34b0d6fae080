"""What ``GET /v1/queues`` and ``GET /v1/fairshare`` answer (and the portal's Queues page):
each queue with its pending and running jobs and, for the tenancy configuration's queues, the
quota (nominal, in use, borrowed, still available), and the fair-share tree of the accounts.

Reads only: nothing here changes the controller's state.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fusesched.api.schemas import FairShareRow, QueueView, QuotaCell
from fusesched.controller import snapshots
from fusesched.controller.auth import Role
from fusesched.model.resources import format_quantity

if TYPE_CHECKING:
    from fusesched.controller.auth import Principal
    from fusesched.controller.service import Controller


def queue_view(ctl: Controller) -> dict[str, Any]:
    """Queues with their jobs, quotas, borrowing and the fair-share standing of accounts."""
    from fusesched.policies.fairshare import fairshare_factors

    counts = {name: (p, r) for name, p, r in snapshots.queue_counts(ctl)}
    with ctl.lock:
        gate = ctl.core.tenants
        now = ctl.clock()
        standings: list[QueueView] = []
        fair: list[FairShareRow] = []
        configured: set[str] = set()
        if gate is not None:
            ledger = gate.ledger
            for queue in gate.config.queues:
                configured.add(queue.name)
                nominal, used = ledger.nominal(queue.name), ledger.usage(queue.name)
                borrowed, available = ledger.borrowed(queue.name), ledger.available(queue.name)
                cells = [
                    QuotaCell(
                        flavor=flavor,
                        resource=resource,
                        nominal=format_quantity(resource, amount),
                        used=format_quantity(resource, used.get((flavor, resource), 0)),
                        borrowed=format_quantity(resource, borrowed.get((flavor, resource), 0)),
                        available=_amount(resource, available.get((flavor, resource), 0)),
                        fraction=round(used.get((flavor, resource), 0) / amount, 4)
                        if amount > 0
                        else 0.0,
                    )
                    for (flavor, resource), amount in sorted(nominal.items())
                ]
                pending, running = counts.get(queue.name, (0, 0))
                standings.append(
                    QueueView(
                        name=queue.name,
                        tenant=queue.tenant,
                        cohort=queue.cohort,
                        shares=queue.shares,
                        pending=pending,
                        running=running,
                        quota=cells,
                        borrowing=any(c.borrowed not in ("0", "0m") for c in cells),
                    )
                )
            try:
                result = fairshare_factors(gate.config, gate.tracker, now)
            except ValueError:
                result = None
            if result is not None:
                for entry in sorted(result.entries.values(), key=lambda e: e.account):
                    fair.append(
                        FairShareRow(
                            account="/".join(entry.account),
                            depth=len(entry.account),
                            shares=entry.shares,
                            norm_shares=round(entry.norm_shares, 6),
                            usage=round(entry.usage, 3),
                            norm_usage=round(entry.norm_usage, 6),
                            level_fs=_finite(entry.level_fs),
                            position=entry.position,
                            factor=entry.factor,
                        )
                    )
    for name, (pending, running) in counts.items():
        if name not in configured:
            standings.append(QueueView(name=name, pending=pending, running=running))
    standings.sort(key=lambda q: q.name)
    return {"tenancy": gate is not None, "queues": standings, "fairshare": fair}


def _amount(resource: str, amount: int) -> str:
    return "unlimited" if amount >= 2**60 else format_quantity(resource, amount)


def visible_queues(queues: list[QueueView], p: Principal) -> list[QueueView]:
    """What ``p`` may see of each queue: everything for cluster-admins (and everyone when
    authentication is off); else the quota of its own tenant's queues, and of the others
    only the name and job counts (as before quotas were shown)."""
    if p.at_least(Role.CLUSTER_ADMIN):
        return queues
    return [
        q if q.tenant == p.tenant else QueueView(name=q.name, pending=q.pending, running=q.running)
        for q in queues
    ]


def visible_shares(rows: list[FairShareRow], p: Principal) -> list[FairShareRow]:
    """What ``p`` may see of the fair-share tree (as Slurm's ``PrivateData=usage``):
    cluster-admins all; a tenant-admin its tenant's branch (its organisation's row, its
    tenant, queues and users); a user the same without the other users' rows."""
    if p.at_least(Role.CLUSTER_ADMIN):
        return rows
    paths = [row.account.split("/") for row in rows]
    orgs = {path[0] for path in paths if len(path) > 1 and path[1] == p.tenant}
    admin = p.at_least(Role.TENANT_ADMIN)
    return [
        row
        for row, path in zip(rows, paths, strict=True)
        if (len(path) == 1 and path[0] in orgs)
        or (
            len(path) > 1
            and path[0] in orgs
            and path[1] == p.tenant
            and (len(path) < 4 or admin or path[3] == p.user)
        )
    ]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
