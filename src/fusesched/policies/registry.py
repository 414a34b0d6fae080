"""The one place where policies are registered by name and configuration is validated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fusesched.model.licenses import LicenseError, Licenses, normalize
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS
from fusesched.policies.tenancy_policy import TenancyPolicy

BACKFILL_MODES: Mapping[str, str] = {
    "none": "strict order: nothing overtakes a blocked job",
    "easy": "EASY: the first blocked job gets a reservation from requested walltimes; "
    "others may start if they do not delay it",
    "conservative": "every waiting job (up to a depth) gets a reservation; "
    "a job may start only if it delays none of them",
}


class PolicyError(ValueError):
    """An unknown policy name or an invalid core setting."""


def _check(kind: str, name: str, known: Mapping[str, object]) -> None:
    try:
        present = name in known
    except ValueError as exc:  # e.g. learned:FILE with a bad file: say why
        raise PolicyError(f"{kind} policy {name!r}: {exc}") from exc
    if not present:
        raise PolicyError(f"unknown {kind} policy {name!r}; choose from: {', '.join(known)}")


@dataclass(frozen=True)
class CoreConfig:
    """How the scheduling core behaves. Every policy is chosen by its registered name."""

    queue_order: str = "fcfs"
    backfill: str = "easy"
    placement: str = "first-fit"
    default_estimate_s: float = 3600.0  # for jobs that state no walltime
    reject_unschedulable: bool = True  # reject jobs no node of the cluster could ever hold
    conservative_depth: int = 64  # reservations made per cycle by conservative backfilling
    tenancy: TenancyPolicy | None = None  # quotas, fair share, QoS preemption (docs/TENANCY.md)
    runtime_prediction: str = "none"  # estimates from finished jobs, see RUNTIME_PREDICTORS
    # data-aware placement (docs/DATA.md): the bonus of a node caching all of a job's data,
    # in units of the placement score, and how long a job may wait for such a node
    data_locality_weight: float = 1.0
    data_locality_wait_s: float = 0.0
    # the cluster's floating licenses, (name, count) sorted by name (docs/LICENSES.md);
    # () : none, and a job asking for one is rejected
    licenses: Licenses = ()

    def __post_init__(self) -> None:
        _check("queue-order", self.queue_order, QUEUE_ORDERS)
        _check("backfill", self.backfill, BACKFILL_MODES)
        _check("placement", self.placement, PLACEMENT_POLICIES)
        _check("runtime-prediction", self.runtime_prediction, RUNTIME_PREDICTORS)
        if self.default_estimate_s <= 0:
            raise PolicyError("default_estimate_s must be positive")
        if not (0 <= self.data_locality_weight < float("inf")):
            raise PolicyError("data_locality_weight must be a non-negative number")
        if not (0 <= self.data_locality_wait_s < float("inf")):
            raise PolicyError("data_locality_wait_s must be a non-negative number of seconds")
        if self.conservative_depth < 1:
            raise PolicyError("conservative_depth must be at least 1")
        if self.licenses or not isinstance(self.licenses, tuple):  # (a mapping is taken too)
            try:
                checked = normalize(self.licenses)
            except (LicenseError, TypeError, ValueError) as exc:
                raise PolicyError(f"licenses: {exc}") from None
            object.__setattr__(self, "licenses", checked)
