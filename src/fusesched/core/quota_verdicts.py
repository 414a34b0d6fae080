"""What the quota ledger answers: a job's demand split over a queue's quota columns
(:class:`FlavorAssignment`) and the verdict on admitting it (:class:`Admission`), with the
names of the per-user limits a verdict may cite and the error a ledger operation raises.

The ledger itself (:class:`fusesched.core.quota.QuotaLedger`) builds them; the tenancy gate,
the job records, victim choice and the pending reasons read them. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fusesched.model.resources import Resources

Column = tuple[str, str]  # (flavor, resource)


class QuotaError(RuntimeError):
    """A ledger operation that would break the quota rules (or an unknown job or queue)."""


@dataclass(frozen=True, slots=True)
class FlavorAssignment:
    """A job's demand split over a queue's quota columns.

    ``amounts`` maps (flavour, resource) to the amount charged; ``unmanaged`` is demand for
    resources the queue has no quota for (allowed unless the config is ``strict_resources``).
    """

    queue: str
    amounts: Mapping[Column, int]
    unmanaged: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        object.__setattr__(self, "amounts", MappingProxyType(dict(self.amounts)))

    @property
    def flavors(self) -> Mapping[str, str]:
        """Resource → the flavour it was assigned to."""
        return {res: flavor for (flavor, res) in self.amounts}


#: Slurm's pending reasons for a QoS tier's per-user limits (``max_jobs_per_user``,
#: ``max_gpus_per_user``): :attr:`Admission.limit`.
USER_JOBS_LIMIT = "QOSMaxJobsPerUserLimit"
USER_GPUS_LIMIT = "QOSMaxGRESPerUser"


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer of :meth:`fusesched.core.quota.QuotaLedger.check`.

    When ``ok``, ``assignment`` is what to pass to ``QuotaLedger.admit`` and ``borrowed``
    the part of it above the queue's nominal quota. When not, ``reason`` says why, and
    ``assignment`` (if not ``None``) is the preferred flavour assignment to try to make room
    for (by reclaim or preemption). ``limit`` names, in Slurm's words, a limit other than
    the queue's quota that refused it (:data:`USER_JOBS_LIMIT`…; ``""``: the quota), so a
    waiting job's reason can say which (:mod:`fusesched.core.pending_reasons`).
    """

    ok: bool
    queue: str
    assignment: FlavorAssignment | None
    borrowed: Mapping[Column, int] = field(default_factory=dict)
    reason: str = ""
    limit: str = ""

    @property
    def borrowing(self) -> bool:
        return any(self.borrowed.values())
