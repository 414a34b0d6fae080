"""Multifactor job priority (the Slurm ``priority/multifactor`` idea), explainable.

``priority = Σ weight_f · value_f`` over the factors *age*, *fairshare*, *size*, *qos* and
*user*, each value normalised to ``[0, 1]``:

* age — time eligible over ``max_age_s``, capped at 1;
* fairshare — the Fair Tree factor of the job's account (:mod:`fusesched.policies.fairshare`);
* size — the job's largest share of any cluster resource (``1 − share`` with ``favor_small``);
* qos — the tier's priority over the highest tier priority;
* user — the job's own priority mapped from ``[−R, R]`` onto ``[0, 1]`` (0 → 0.5).

:meth:`MultifactorPriority.breakdown` returns every factor's value, weight and contribution
(what ``fusesched priority JOB`` prints); :meth:`MultifactorPriority.totals` is the vector form
for ordering many jobs at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from fusesched.model.job import JobSpec
from fusesched.model.resources import format_quantity
from fusesched.model.tenancy import DEFAULT_QOS, QoSTier

FloatArray = npt.NDArray[np.float64]

FACTORS = ("age", "fairshare", "size", "qos", "user")


@dataclass(frozen=True, slots=True)
class PriorityWeights:
    age: float = 1000.0
    fairshare: float = 10000.0
    size: float = 1000.0
    qos: float = 2000.0
    user: float = 1000.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (0 <= value < math.inf):
                raise ValueError(f"priority weight {f.name} must be a non-negative number")


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    value: float  # normalised, in [0, 1]
    weight: float
    detail: str = ""

    @property
    def contribution(self) -> float:
        return self.value * self.weight


@dataclass(frozen=True, slots=True)
class PriorityBreakdown:
    job_id: str
    factors: tuple[Factor, ...]

    @property
    def total(self) -> float:
        return sum(f.contribution for f in self.factors)

    def factor(self, name: str) -> Factor:
        for f in self.factors:
            if f.name == name:
                return f
        raise KeyError(name)

    def explain(self) -> str:
        """A small table: one row per factor, then the total."""
        rows = [f"{'factor':<10} {'value':>8} {'weight':>10} {'contrib':>12}  detail"]
        for f in self.factors:
            rows.append(
                f"{f.name:<10} {f.value:>8.4f} {f.weight:>10g} {f.contribution:>12.2f}  {f.detail}"
            )
        rows.append(f"{'total':<10} {'':>8} {'':>10} {self.total:>12.2f}")
        return "\n".join(rows)


class MultifactorPriority:
    """Weighted sum of normalised factors; see the module docstring."""

    def __init__(
        self,
        weights: PriorityWeights | None = None,
        *,
        qos: Mapping[str, QoSTier] = DEFAULT_QOS,
        max_age_s: float = 7 * 86400.0,
        favor_small: bool = False,
        user_priority_range: int = 1000,
    ) -> None:
        if not max_age_s > 0:
            raise ValueError("max_age_s must be positive")
        if user_priority_range < 1:
            raise ValueError("user_priority_range must be at least 1")
        if not qos:
            raise ValueError("at least one QoS tier is needed")
        self.weights = weights or PriorityWeights()
        self.qos = qos
        self.max_age_s = float(max_age_s)
        self.favor_small = favor_small
        self.user_priority_range = user_priority_range
        self._top_qos = max(t.priority for t in qos.values())

    # ------------------------------------------------------------------ factor values

    def age_value(self, waited_s: float) -> float:
        return min(1.0, max(0.0, waited_s) / self.max_age_s)

    def qos_value(self, tier: str) -> float:
        try:
            prio = self.qos[tier].priority
        except KeyError:
            raise KeyError(f"unknown qos {tier!r}; choose from: {', '.join(self.qos)}") from None
        return prio / self._top_qos if self._top_qos else 0.0

    def user_value(self, priority: float) -> float:
        r = self.user_priority_range
        return (min(max(priority, -r), r) + r) / (2 * r)

    def size_value(self, share: float) -> float:
        share = min(1.0, max(0.0, share))
        return 1.0 - share if self.favor_small else share

    # ------------------------------------------------------------------ one job

    def breakdown(
        self,
        job: JobSpec,
        now: float,
        *,
        fairshare: float,
        capacity: Mapping[str, int],
        eligible_since: float | None = None,
    ) -> PriorityBreakdown:
        """Every factor of ``job``'s priority at ``now``. ``fairshare`` is its account's Fair
        Tree factor; ``capacity`` the cluster's total resources (for the size factor);
        ``eligible_since`` replaces the submit time for the age (e.g. after a requeue)."""
        if not 0.0 <= fairshare <= 1.0:
            raise ValueError(f"fairshare factor must be in [0, 1], got {fairshare}")
        w = self.weights
        since = job.submit_time if eligible_since is None else eligible_since
        waited = now - since
        total = job.total
        share, biggest = 0.0, ""
        for res, cap in capacity.items():
            if cap > 0 and total.get(res) / cap > share:
                share, biggest = total.get(res) / cap, res
        size_detail = (
            f"{share:.1%} of cluster {biggest} ({format_quantity(biggest, total.get(biggest))})"
            if biggest
            else "no capacity given"
        )
        if self.favor_small:
            size_detail += ", small jobs favoured"
        tier = str(job.qos)
        factors = (
            Factor(
                "age", self.age_value(waited), w.age, f"waited {waited:g} s of {self.max_age_s:g}"
            ),
            Factor("fairshare", fairshare, w.fairshare, "Fair Tree factor of the account"),
            Factor("size", self.size_value(share), w.size, size_detail),
            Factor(
                "qos",
                self.qos_value(tier),
                w.qos,
                f"{tier}: priority {self.qos[tier].priority} of {self._top_qos}",
            ),
            Factor(
                "user",
                self.user_value(job.priority),
                w.user,
                f"job priority {job.priority} in ±{self.user_priority_range}",
            ),
        )
        return PriorityBreakdown(job.id, factors)

    # ------------------------------------------------------------------ many jobs

    def totals(
        self,
        *,
        waited_s: FloatArray,
        fairshare: FloatArray,
        size_share: FloatArray,
        qos_priority: FloatArray,
        user_priority: FloatArray,
    ) -> FloatArray:
        """Vector form of ``breakdown(...).total`` (``qos_priority`` holds tier priorities)."""
        w = self.weights
        r = float(self.user_priority_range)
        age = np.minimum(1.0, np.maximum(0.0, waited_s) / self.max_age_s)
        size = np.clip(size_share, 0.0, 1.0)
        if self.favor_small:
            size = 1.0 - size
        qos = qos_priority / self._top_qos if self._top_qos else np.zeros_like(qos_priority)
        user = (np.clip(user_priority, -r, r) + r) / (2 * r)
        out: FloatArray = (
            w.age * age + w.fairshare * fairshare + w.size * size + w.qos * qos + w.user * user
        )
        return out
