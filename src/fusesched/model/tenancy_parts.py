"""The parts of a tenancy configuration: flavours, quotas, queues, tenants, organisations and
QoS tiers, each frozen and validated on construction (:mod:`fusesched.model.tenancy` puts them
together and reads them from YAML)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from fusesched.model.job import Placement
from fusesched.model.resources import QuantityError, canonical_name

#: Quotas and limits above this are rejected (keeps the ledger's int64 sums exact).
MAX_QUANTITY: Final = 2**60


class TenancyError(ValueError):
    """Invalid tenancy configuration; the message names the offending object."""


def freeze(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not name or "/" in name:
        raise TenancyError(f"{kind} name must be a non-empty string without '/', got {name!r}")
    return name


def check_shares(where: str, shares: float) -> float:
    if isinstance(shares, bool) or not isinstance(shares, int | float):
        raise TenancyError(f"{where}: shares must be a number, got {shares!r}")
    if not (0 < shares < math.inf):
        raise TenancyError(f"{where}: shares must be positive, got {shares!r}")
    return float(shares)


# ----------------------------------------------------------------------------- flavours


@dataclass(frozen=True, slots=True)
class Flavor:
    """A named kind of capacity: the resources it covers on nodes carrying ``node_labels``.

    ``dedicated``: the nodes carrying its (single) label run only jobs charged to this
    flavour — a tenant's own nodes, when only its queues list the flavour.
    """

    name: str
    resources: frozenset[str]
    node_labels: Mapping[str, str] = field(default_factory=dict)
    dedicated: bool = False

    def __post_init__(self) -> None:
        check_name("flavor", self.name)
        if not self.resources:
            raise TenancyError(f"flavor {self.name!r}: must cover at least one resource")
        try:
            canon = frozenset(canonical_name(r) for r in self.resources)
        except QuantityError as exc:
            raise TenancyError(f"flavor {self.name!r}: {exc}") from exc
        object.__setattr__(self, "resources", canon)
        object.__setattr__(self, "node_labels", freeze(self.node_labels))
        if self.dedicated and len(self.node_labels) != 1:
            raise TenancyError(
                f"flavor {self.name!r}: a dedicated flavor names its nodes by exactly one "
                "label (e.g. fusesched.io/owner: physics)"
            )

    def matches_node(self, labels: Mapping[str, str]) -> bool:
        """True when a node with ``labels`` provides this flavour."""
        return all(labels.get(k) == v for k, v in self.node_labels.items())

    def compatible_with(self, placement: Placement) -> bool:
        """True unless the job's hard label constraints exclude this flavour's nodes.

        Only label keys the flavour fixes are judged (as Kueue does); constraints on other
        keys (hostname, rack, …) are left to placement.
        """
        labels = self.node_labels
        for key, value in placement.node_selector.items():
            if key in labels and labels[key] != value:
                return False
        if any(req.key in labels and not req.matches(labels) for req in placement.required):
            return False
        return not any(req.key in labels and req.matches(labels) for req in placement.anti_affinity)


# ----------------------------------------------------------------------------- quotas


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavour for one queue, in the resource's base unit.

    * ``nominal`` — guaranteed to the queue (when not lent out, it is reclaimable);
    * ``borrowing_limit`` — how much above nominal the queue may borrow from its cohort
      (``None``: as much as the cohort has spare);
    * ``lending_limit`` — how much of its *unused* nominal quota the cohort may borrow
      (``None``: all of it). ``nominal − lending_limit`` is never lent out.
    """

    resource: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    def __post_init__(self) -> None:
        where = self.resource
        for label, value in (
            ("nominal", self.nominal),
            ("borrowing_limit", self.borrowing_limit),
            ("lending_limit", self.lending_limit),
        ):
            if value is None and label != "nominal":
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TenancyError(f"{where}: {label} must be a whole number, got {value!r}")
            if not 0 <= value <= MAX_QUANTITY:
                raise TenancyError(f"{where}: {label} must be between 0 and 2**60, got {value}")
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise TenancyError(
                f"{where}: lending_limit ({self.lending_limit}) exceeds nominal ({self.nominal})"
            )

    @property
    def lendable(self) -> int:
        """The part of nominal the cohort may use while this queue does not."""
        return self.nominal if self.lending_limit is None else self.lending_limit

    @property
    def guaranteed(self) -> int:
        """The part of nominal never lent out."""
        return self.nominal - self.lendable


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A queue's quota in one flavour: one :class:`ResourceQuota` per covered resource."""

    flavor: str
    resources: Mapping[str, ResourceQuota]

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", freeze(self.resources))
        for name, quota in self.resources.items():
            if name != quota.resource:
                raise TenancyError(f"flavor {self.flavor!r}: quota keyed {name!r} is for {quota}")


# ----------------------------------------------------------------------------- hierarchy


@dataclass(frozen=True, slots=True)
class Cohort:
    """A set of queues that share unused quota."""

    name: str
    description: str = ""

    def __post_init__(self) -> None:
        check_name("cohort", self.name)


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue of one tenant. ``quotas`` lists flavours in the order they are tried."""

    name: str
    tenant: str
    shares: float = 1.0
    cohort: str | None = None
    quotas: tuple[QueueQuota, ...] = ()
    user_shares: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("queue", self.name)
        check_shares(f"queue {self.name!r}", self.shares)
        shares = {
            check_name("user", u): check_shares(f"queue {self.name!r} user {u!r}", s)
            for u, s in self.user_shares.items()
        }
        object.__setattr__(self, "user_shares", freeze(shares))
        flavors = [q.flavor for q in self.quotas]
        if len(set(flavors)) != len(flavors):
            raise TenancyError(f"queue {self.name!r}: a flavor is listed twice")
        if self.cohort is None:
            for qq in self.quotas:
                for rq in qq.resources.values():
                    if rq.borrowing_limit is not None or rq.lending_limit is not None:
                        raise TenancyError(
                            f"queue {self.name!r}, flavor {qq.flavor!r}, {rq.resource}: "
                            "borrowing_limit and lending_limit need a cohort"
                        )

    def user_share(self, user: str) -> float:
        return self.user_shares.get(user, 1.0)


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    organisation: str
    shares: float = 1.0

    def __post_init__(self) -> None:
        check_name("tenant", self.name)
        check_shares(f"tenant {self.name!r}", self.shares)


@dataclass(frozen=True, slots=True)
class Organisation:
    name: str
    shares: float = 1.0

    def __post_init__(self) -> None:
        check_name("organisation", self.name)
        check_shares(f"organisation {self.name!r}", self.shares)


# ----------------------------------------------------------------------------- QoS


@dataclass(frozen=True, slots=True)
class QoSTier:
    """A quality-of-service tier.

    ``priority`` feeds the multifactor priority; ``preemptible`` says whether jobs of this
    tier may be stopped for others (only preemptible jobs may borrow quota, so that borrowed
    capacity can always be reclaimed); ``may_preempt`` names the tiers whose jobs this tier
    may preempt; ``grace_s`` is the notice a preempted job gets before it is killed.
    ``power_cap`` caps the power its tasks may draw, by kind (``gpu_watts``: each of the
    task's GPUs; ``cpu_mhz``: the task's CPUs' top frequency), applied by the node agents'
    configured hooks (energy-efficiency tiers; docs/ENERGY.md).
    """

    name: str
    priority: int
    preemptible: bool = True
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    grace_s: float = 60.0
    may_preempt: frozenset[str] = frozenset()
    power_cap: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("qos", self.name)
        where = f"qos {self.name!r}"
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TenancyError(f"{where}: priority must be a whole number")
        if self.priority < 0:
            raise TenancyError(f"{where}: priority must not be negative")
        for label, limit in (
            ("max_jobs_per_user", self.max_jobs_per_user),
            ("max_gpus_per_user", self.max_gpus_per_user),
        ):
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
            ):
                raise TenancyError(f"{where}: {label} must be a non-negative whole number")
        if not (0 <= self.grace_s < math.inf):
            raise TenancyError(f"{where}: grace_s must be a non-negative number of seconds")
        object.__setattr__(self, "may_preempt", frozenset(self.may_preempt))
        for kind, value in self.power_cap.items():
            if kind not in POWER_CAP_KINDS:
                raise TenancyError(
                    f"{where}: unknown power_cap {kind!r}; choose from {', '.join(POWER_CAP_KINDS)}"
                )
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise TenancyError(f"{where}: power_cap {kind} must be a positive number")
        object.__setattr__(self, "power_cap", MappingProxyType(dict(self.power_cap)))
        if self.name in self.may_preempt:
            raise TenancyError(f"{where}: a tier cannot preempt itself")


#: What a QoS tier may cap (see ``QoSTier.power_cap``).
POWER_CAP_KINDS: Final = ("gpu_watts", "cpu_mhz")

DEFAULT_QOS: Final[Mapping[str, QoSTier]] = MappingProxyType(
    {
        "gold": QoSTier(
            "gold",
            100,
            preemptible=False,
            grace_s=300.0,
            may_preempt=frozenset({"silver", "bronze"}),
        ),
        "silver": QoSTier("silver", 50, grace_s=120.0, may_preempt=frozenset({"bronze"})),
        "bronze": QoSTier("bronze", 10, grace_s=30.0),
    }
)


# ----------------------------------------------------------------------------- the config
