"""The multifactor priority of waiting jobs: the queue keys of the ``multifactor`` order and
one job's priority factor by factor (``fusesched priority JOB``).

The weights are the policy's (:class:`fusesched.policies.priority.MultifactorPriority`); the
fair share and the QoS tier of each job come from the tenancy gate
(:class:`fusesched.core.tenants.TenantGate`). Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import IntArray
from fusesched.core.records import JobRecord
from fusesched.policies.priority import PriorityBreakdown

if TYPE_CHECKING:
    from fusesched.core.tenants import TenantGate

FloatArray = npt.NDArray[np.float64]


def sort_keys(
    gate: TenantGate, records: Sequence[JobRecord], now: float, capacity: IntArray
) -> tuple[FloatArray]:
    """Queue keys for the ``multifactor`` order: the negated priority (highest first)."""
    result = gate.factors(records, now)
    cap = np.where(capacity > 0, capacity, 1).astype(np.float64)
    totals = np.array([r.total for r in records], dtype=np.float64)
    share = (totals / cap).max(axis=1) if totals.size else np.zeros(len(records))
    prio = gate.priority.totals(
        waited_s=now - np.array([r.spec.submit_time for r in records]),
        fairshare=np.array([gate.fairshare(r.spec, result) for r in records]),
        size_share=share,
        qos_priority=np.array([float(gate.tier(r.spec).priority) for r in records]),
        user_priority=np.array([float(r.spec.priority) for r in records]),
    )
    return (-prio,)


def breakdown(
    gate: TenantGate,
    rec: JobRecord,
    now: float,
    capacity: Mapping[str, int],
    queued: Sequence[JobRecord],
) -> PriorityBreakdown:
    """Every factor of ``rec``'s priority now (``fusesched priority JOB``)."""
    result = gate.factors([*queued, rec], now)
    return gate.priority.breakdown(
        rec.spec, now, fairshare=gate.fairshare(rec.spec, result), capacity=capacity
    )
