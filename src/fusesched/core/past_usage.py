"""Fair share across a restart: the usage of the runs that ended before it.

The core keeps fair-share usage in memory (:class:`~fusesched.policies.fairshare.UsageTracker`),
so a restarted shell's core would start with none: every account equal, however much it
used the day before. Before its first cycle the shell reads the runs its store shows ended
since :func:`recalled_since` and hands them over as one
:class:`~fusesched.model.events.UsageRecalled`; :func:`recall` charges each run as the gate
charged it while it ran: at :func:`~fusesched.core.tenants.holding_rate` of its resources
(this configuration's GPU weight), to the account its tenant, queue and user make, decayed
from its end. Jobs still running at the restart are not among them: adoption binds them from
their start (:meth:`~fusesched.core.scheduler.SchedulerCore.bind_adopted`), so they are
charged whole, once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from fusesched.core.tenants import holding_rate
from fusesched.model.events import UsageRecalled

if TYPE_CHECKING:
    from fusesched.core.tenants import TenantGate

#: Runs that ended more half-lives ago than this are not recalled: they weigh under 2^-20
#: (one in a million) of what they did when they ended, so 1,000 GPU-hours then count less
#: than a core-minute now.
RECALLED_HALF_LIVES: Final = 20

_Charged = tuple[float, tuple[tuple[float, float], ...]]  # (rate, the runs' spans)


def recalled_since(half_life_s: float, now: float) -> float:
    """The earliest end of a run still worth recalling at ``now`` (all runs without decay)."""
    if math.isinf(half_life_s):
        return -math.inf
    return now - RECALLED_HALF_LIVES * half_life_s


def recall(gate: TenantGate, event: UsageRecalled, now: float) -> None:
    """Charge ``gate`` the runs of ``event`` as of ``now``, each account once (see
    :meth:`~fusesched.policies.fairshare.UsageTracker.charge_ended` for a run's end after
    ``now``). Runs of no billed resources charge nothing, as they did while they ran."""
    weight = gate.policy.gpu_weight
    of_jobs: dict[tuple[str, str, str], list[_Charged]] = {}  # by (tenant, queue, user)
    for runs in event.runs:
        rate = holding_rate(runs.total, weight)
        if rate > 0:
            key = (runs.tenant, runs.queue, runs.user)
            of_jobs.setdefault(key, []).append((rate, runs.spans))
    of_accounts: dict[tuple[str, ...], list[_Charged]] = {}
    for (tenant, queue, user), charged in of_jobs.items():
        of_accounts.setdefault(gate.account_of(tenant, queue, user), []).extend(charged)
    for account, charged in of_accounts.items():
        gate.tracker.charge_ended(account, charged, now)
