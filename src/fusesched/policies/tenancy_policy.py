"""How the core applies a tenancy configuration: fair-share decay, priority weights, victim
order and the preemption budget (the configuration itself is :class:`TenancyConfig`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fusesched.model.tenancy import TenancyConfig, TenancyError
from fusesched.policies.fairshare import GPU_BILLING_WEIGHT
from fusesched.policies.priority import PriorityWeights
from fusesched.policies.victims import VICTIM_ORDERS


@dataclass(frozen=True)
class TenancyPolicy:
    """Quotas, fair share, QoS and preemption for the scheduling core.

    ``half_life_s``: decay of historical usage (Slurm's ``PriorityDecayHalfLife``);
    ``recalc_s``: how often fair-share factors are recomputed and running jobs charged
    (Slurm's ``PriorityCalcPeriod``); ``gpu_weight``: billing units per GPU (a CPU core is
    one), so usage = core-seconds + ``gpu_weight`` × GPU-seconds; ``victim_order``: a name
    in :data:`VICTIM_ORDERS`; ``max_preemptions``: a job preempted more often than this is
    not requeued again but ends (cancelled, with the reason); ``preempt_for_priority``: jobs
    of a tier with ``may_preempt`` stop lower tiers when they cannot be placed;
    ``borrow_backoff_s``: a job preempted while its queue borrowed may borrow again only
    after this long, doubled at each such preemption (meanwhile it may still start within
    its queue's nominal quota, or borrow while its queue uses less than its nominal quota);
    0 turns the back-off off.
    """

    config: TenancyConfig = field(default_factory=TenancyConfig)
    half_life_s: float = 7 * 86400.0
    recalc_s: float = 300.0
    gpu_weight: float = GPU_BILLING_WEIGHT
    weights: PriorityWeights = field(default_factory=PriorityWeights)
    max_age_s: float = 7 * 86400.0
    victim_order: str = "checkpoint-aware"
    max_preemptions: int = 10
    preempt_for_priority: bool = True
    borrow_backoff_s: float = 0.0

    def __post_init__(self) -> None:
        if self.victim_order not in VICTIM_ORDERS:
            known = ", ".join(VICTIM_ORDERS)
            raise TenancyError(f"unknown victim order {self.victim_order!r}; choose from: {known}")
        for name in ("half_life_s", "recalc_s", "max_age_s"):
            value = getattr(self, name)
            if not (value > 0 and not math.isnan(value)):
                raise TenancyError(f"{name} must be positive")
        if not 0 <= self.gpu_weight < math.inf:
            raise TenancyError("gpu_weight must be a non-negative number")
        if not 0 <= self.borrow_backoff_s < math.inf:
            raise TenancyError("borrow_backoff_s must be a non-negative number of seconds")
        if self.max_preemptions < 0:
            raise TenancyError("max_preemptions must not be negative")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TenancyPolicy:
        """A policy from a mapping: the tenancy configuration's own keys plus an optional
        ``scheduling:`` section with this class's fields (``weights`` a mapping)."""
        if not isinstance(data, Mapping):
            raise TenancyError("the tenancy configuration must be a mapping")
        body = dict(data)
        sched = body.pop("scheduling", None) or {}
        if not isinstance(sched, Mapping):
            raise TenancyError("scheduling: must be a mapping")
        known = {f for f in cls.__dataclass_fields__ if f != "config"}
        unknown = sorted(set(sched) - known)
        if unknown:
            names = ", ".join(unknown)
            raise TenancyError(
                f"scheduling: unknown field(s) {names}; known: {', '.join(sorted(known))}"
            )
        kwargs: dict[str, Any] = dict(sched)
        for name, value in kwargs.items():
            _check_type(name, value, _KINDS.get(name))
        if "weights" in kwargs:
            weights = kwargs["weights"]
            if not isinstance(weights, Mapping):
                raise TenancyError("scheduling.weights: must be a mapping")
            for name, value in weights.items():
                _check_type(f"weights.{name}", value, float)
            try:
                kwargs["weights"] = PriorityWeights(**weights)
            except (TypeError, ValueError) as exc:
                raise TenancyError(f"scheduling.weights: {exc}") from None
        try:
            return cls(config=TenancyConfig.from_dict(body), **kwargs)
        except TypeError as exc:
            raise TenancyError(f"scheduling: {exc}") from None


#: The type each ``scheduling:`` field takes (a YAML reader gives ``1e400`` as a string).
_KINDS: dict[str, type] = {
    "half_life_s": float,
    "recalc_s": float,
    "gpu_weight": float,
    "max_age_s": float,
    "borrow_backoff_s": float,
    "victim_order": str,
    "max_preemptions": int,
    "preempt_for_priority": bool,
}


def _check_type(name: str, value: object, kind: type | None) -> None:
    """A clear error for a ``scheduling:`` value of the wrong type (Python's own comparison
    error named neither the field nor the value)."""
    if kind is None:
        return
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        what = "a number"
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = "a whole number"
    elif kind is bool:
        ok = isinstance(value, bool)
        what = "true or false"
    else:
        ok = isinstance(value, kind)
        what = "a name"
    if not ok:
        raise TenancyError(f"scheduling.{name}: must be {what}, not {value!r}")
