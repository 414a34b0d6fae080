"""Preemption victim order: which running jobs to stop first when some must go.

Eligibility (which jobs *may* be preempted: QoS ``preemptible``/``may_preempt``, borrowing
queues for quota reclaim) is decided by the caller; a victim order only ranks the eligible.
Orders are registered by name in :data:`VICTIM_ORDERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fusesched.model.tenancy import QoSTier


@dataclass(frozen=True, slots=True)
class VictimCandidate:
    """A running job as the victim order sees it.

    ``last_checkpoint`` is the time of the job's newest durable checkpoint (``None``: never
    checkpointed); ``size`` weighs lost time into lost work (e.g. GPUs or nodes held; 1 means
    lost work is measured in seconds); ``priority`` is the job's effective priority (higher is
    more important); ``qos`` its tier name.
    """

    job_id: str
    start_time: float
    last_checkpoint: float | None = None
    priority: float = 0.0
    qos: str = "silver"
    preemptible: bool = True
    size: float = 1.0
    preemptions: int = 0  # how often the job was preempted before

    def lost_work(self, now: float) -> float:
        """Work lost if stopped at ``now``: time since the later of start and checkpoint."""
        since = self.start_time
        if self.last_checkpoint is not None and self.last_checkpoint > since:
            since = self.last_checkpoint
        return max(0.0, now - since) * self.size


VictimOrder = Callable[[Sequence[VictimCandidate], float], list[VictimCandidate]]


def _least_lost(c: VictimCandidate, now: float) -> tuple[float, float, float, str]:
    """Least lost work first; ties: lower priority first, then the most recently started."""
    return (c.lost_work(now), c.priority, -c.start_time, c.job_id)


def checkpoint_aware_victims(
    candidates: Sequence[VictimCandidate], now: float
) -> list[VictimCandidate]:
    """Least lost work first; ties: lower priority first, then the most recently started."""
    return sorted(candidates, key=lambda c: _least_lost(c, now))


def fewest_preemptions_victims(
    candidates: Sequence[VictimCandidate], now: float
) -> list[VictimCandidate]:
    """Jobs preempted fewer times first, then as ``checkpoint-aware``: a job that has just
    restarted from its checkpoint loses little and would otherwise be the first victim again
    and again, until its retry budget is spent."""
    return sorted(candidates, key=lambda c: (c.preemptions, *_least_lost(c, now)))


def lowest_priority_victims(
    candidates: Sequence[VictimCandidate], now: float
) -> list[VictimCandidate]:
    """Kueue's classic order: lowest priority first, then the most recently started."""
    return sorted(candidates, key=lambda c: (c.priority, -c.start_time, c.job_id))


def eligible_victims(
    preemptor_qos: str,
    candidates: Sequence[VictimCandidate],
    tiers: Mapping[str, QoSTier],
) -> list[VictimCandidate]:
    """The candidates a job of tier ``preemptor_qos`` may preempt for priority (not for quota
    reclaim): preemptible jobs of a tier listed in its ``may_preempt``."""
    allowed = tiers[preemptor_qos].may_preempt
    return [c for c in candidates if c.preemptible and c.qos in allowed]


VICTIM_ORDERS: Mapping[str, VictimOrder] = {
    "checkpoint-aware": checkpoint_aware_victims,
    "fewest-preemptions": fewest_preemptions_victims,
    "lowest-priority": lowest_priority_victims,
}
