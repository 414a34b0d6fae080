"""Tenancy: who may use how much of what, as typed, frozen, validated configuration.

The account hierarchy is *organisation → tenant → queue → user*; every level carries fair-share
``shares`` (relative weights among its siblings). A queue owns quota per *flavour* — a named
kind of capacity (e.g. A100 GPUs in pool ``x86``) defined by the resources it covers and the node
labels it stands for. Queues in one *cohort* lend each other unused quota within limits (the
Kueue ClusterQueue model). QoS tiers set priority, preemptibility, per-user limits and the grace
time a preempted job gets.

Everything here is pure data: no I/O. :meth:`TenancyConfig.from_dict` reads the structure a YAML
file parses into (see ``docs/TENANCY.md`` and :data:`EXAMPLE_YAML`); :meth:`from_yaml` takes the
YAML *text*.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import yaml

from fusesched.model.job import Placement
from fusesched.model.resources import QuantityError, canonical_name, parse_quantity

#: Quotas and limits above this are rejected (keeps the ledger's int64 sums exact).
MAX_QUANTITY: Final = 2**60


class TenancyError(ValueError):
    """Invalid tenancy configuration; the message names the offending object."""


def _freeze(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not name or "/" in name:
        raise TenancyError(f"{kind} name must be a non-empty string without '/', got {name!r}")
    return name


def _check_shares(where: str, shares: float) -> float:
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
        _check_name("flavor", self.name)
        if not self.resources:
            raise TenancyError(f"flavor {self.name!r}: must cover at least one resource")
        try:
            canon = frozenset(canonical_name(r) for r in self.resources)
        except QuantityError as exc:
            raise TenancyError(f"flavor {self.name!r}: {exc}") from exc
        object.__setattr__(self, "resources", canon)
        object.__setattr__(self, "node_labels", _freeze(self.node_labels))
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
        object.__setattr__(self, "resources", _freeze(self.resources))
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
        _check_name("cohort", self.name)


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
        _check_name("queue", self.name)
        _check_shares(f"queue {self.name!r}", self.shares)
        shares = {
            _check_name("user", u): _check_shares(f"queue {self.name!r} user {u!r}", s)
            for u, s in self.user_shares.items()
        }
        object.__setattr__(self, "user_shares", _freeze(shares))
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
        _check_name("tenant", self.name)
        _check_shares(f"tenant {self.name!r}", self.shares)


@dataclass(frozen=True, slots=True)
class Organisation:
    name: str
    shares: float = 1.0

    def __post_init__(self) -> None:
        _check_name("organisation", self.name)
        _check_shares(f"organisation {self.name!r}", self.shares)


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
        _check_name("qos", self.name)
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


@dataclass(frozen=True)
class TenancyConfig:
    """The whole tenancy model, cross-validated. Build with :meth:`from_dict`."""

    organisations: tuple[Organisation, ...] = ()
    tenants: tuple[Tenant, ...] = ()
    queues: tuple[Queue, ...] = ()
    flavors: tuple[Flavor, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    qos: Mapping[str, QoSTier] = field(default_factory=lambda: DEFAULT_QOS)
    default_qos: str = "silver"
    strict_resources: bool = False  # reject demand for resources a queue has no quota for

    def __post_init__(self) -> None:
        object.__setattr__(self, "qos", _freeze(self.qos))
        for kind, items in (
            ("organisation", self.organisations),
            ("tenant", self.tenants),
            ("queue", self.queues),
            ("flavor", self.flavors),
            ("cohort", self.cohorts),
        ):
            names = [i.name for i in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise TenancyError(f"{kind} names must be unique: {', '.join(dupes)}")
        orgs = {o.name for o in self.organisations}
        for t in self.tenants:
            if t.organisation not in orgs:
                raise TenancyError(f"tenant {t.name!r}: unknown organisation {t.organisation!r}")
        tenants = {t.name for t in self.tenants}
        cohorts = {c.name for c in self.cohorts}
        flavors = {f.name: f for f in self.flavors}
        for q in self.queues:
            if q.tenant not in tenants:
                raise TenancyError(f"queue {q.name!r}: unknown tenant {q.tenant!r}")
            if q.cohort is not None and q.cohort not in cohorts:
                raise TenancyError(
                    f"queue {q.name!r}: unknown cohort {q.cohort!r}; declare it under cohorts"
                )
            self._check_queue_flavors(q, flavors)
        for name, tier in self.qos.items():
            if name != tier.name:
                raise TenancyError(f"qos keyed {name!r} is named {tier.name!r}")
            for other in sorted(tier.may_preempt):
                if other not in self.qos:
                    raise TenancyError(f"qos {name!r}: may_preempt names unknown tier {other!r}")
                if not self.qos[other].preemptible:
                    raise TenancyError(
                        f"qos {name!r}: may_preempt names {other!r}, which is not preemptible"
                    )
        if self.default_qos not in self.qos:
            raise TenancyError(f"default_qos {self.default_qos!r} is not a defined tier")

    @staticmethod
    def _check_queue_flavors(q: Queue, flavors: Mapping[str, Flavor]) -> None:
        groups: dict[str, frozenset[str]] = {}  # resource -> covered set of its group
        for qq in q.quotas:
            flavor = flavors.get(qq.flavor)
            if flavor is None:
                raise TenancyError(f"queue {q.name!r}: unknown flavor {qq.flavor!r}")
            given = frozenset(qq.resources)
            if given != flavor.resources:
                missing = ", ".join(sorted(flavor.resources - given)) or "-"
                extra = ", ".join(sorted(given - flavor.resources)) or "-"
                raise TenancyError(
                    f"queue {q.name!r}, flavor {qq.flavor!r}: give a quota for exactly the "
                    f"flavor's resources (missing: {missing}; not covered: {extra})"
                )
            for res in flavor.resources:
                seen = groups.setdefault(res, flavor.resources)
                if seen != flavor.resources:
                    raise TenancyError(
                        f"queue {q.name!r}: resource {res!r} is covered by flavors with "
                        "different resource sets; flavors of a queue must cover the same "
                        "resources or disjoint ones"
                    )

    # ------------------------------------------------------------------ look-ups

    def queue(self, name: str) -> Queue:
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(f"unknown queue {name!r}")

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise KeyError(f"unknown tenant {name!r}")

    def organisation(self, name: str) -> Organisation:
        for o in self.organisations:
            if o.name == name:
                return o
        raise KeyError(f"unknown organisation {name!r}")

    def flavor(self, name: str) -> Flavor:
        for f in self.flavors:
            if f.name == name:
                return f
        raise KeyError(f"unknown flavor {name!r}")

    def tier(self, name: str | None) -> QoSTier:
        """The QoS tier ``name`` (the default tier when ``None``)."""
        key = self.default_qos if name is None else str(name)
        try:
            return self.qos[key]
        except KeyError:
            raise KeyError(f"unknown qos {key!r}; choose from: {', '.join(self.qos)}") from None

    def account_path(self, queue: str, user: str | None = None) -> tuple[str, ...]:
        """``(organisation, tenant, queue[, user])`` — the fair-share account of a job."""
        q = self.queue(queue)
        t = self.tenant(q.tenant)
        path = (t.organisation, t.name, q.name)
        return (*path, user) if user else path

    def cohort_members(self, cohort: str) -> tuple[Queue, ...]:
        return tuple(q for q in self.queues if q.cohort == cohort)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_yaml(cls, text: str) -> TenancyConfig:
        """Parse YAML *text* (the caller reads the file)."""
        data = yaml.safe_load(text)
        if not isinstance(data, Mapping):
            raise TenancyError("tenancy config must be a mapping at the top level")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TenancyConfig:
        """Build from the nested structure documented in ``docs/TENANCY.md``."""
        _only(data, "config", _CONFIG_FIELDS)
        flavors = tuple(_flavor(f) for f in _list(data, "flavors", "config"))
        cohorts = tuple(
            Cohort(c) if isinstance(c, str) else Cohort(**_mapping(c, "cohort"))
            for c in _list(data, "cohorts", "config")
        )
        orgs: list[Organisation] = []
        tenants: list[Tenant] = []
        queues: list[Queue] = []
        for o in _list(data, "organisations", "config"):
            o = _mapping(o, "organisation")
            _only(o, "organisation", {"name", "shares", "tenants"})
            org = Organisation(o.get("name", ""), o.get("shares", 1.0))
            orgs.append(org)
            for t in _list(o, "tenants", f"organisation {org.name!r}"):
                t = _mapping(t, "tenant")
                _only(t, "tenant", {"name", "shares", "queues"})
                tenant = Tenant(t.get("name", ""), org.name, t.get("shares", 1.0))
                tenants.append(tenant)
                queues.extend(
                    _queue(q, tenant.name) for q in _list(t, "queues", f"tenant {tenant.name!r}")
                )
        kwargs: dict[str, Any] = {}
        if "qos" in data:
            kwargs["qos"] = {
                name: _qos(name, spec) for name, spec in _mapping(data["qos"], "qos").items()
            }
        if "default_qos" in data:
            kwargs["default_qos"] = data["default_qos"]
        if "strict_resources" in data:
            kwargs["strict_resources"] = bool(data["strict_resources"])
        return cls(tuple(orgs), tuple(tenants), tuple(queues), flavors, cohorts, **kwargs)


# ----------------------------------------------------------------------------- parsing helpers

_CONFIG_FIELDS: Final = frozenset(
    {"organisations", "flavors", "cohorts", "qos", "default_qos", "strict_resources"}
)
_QOS_FIELDS: Final = frozenset(
    {
        "priority",
        "preemptible",
        "max_jobs_per_user",
        "max_gpus_per_user",
        "grace_s",
        "may_preempt",
        "power_cap",
    }
)


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TenancyError(f"{what}: expected a mapping, got {value!r}")
    return value


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise TenancyError(f"{where}: {key!r} must be a list")
    return value


def _only(data: Mapping[str, Any], what: str, allowed: Iterable[str]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise TenancyError(
            f"{what}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def _flavor(spec: object) -> Flavor:
    f = _mapping(spec, "flavor")
    _only(f, "flavor", {"name", "resources", "node_labels", "dedicated"})
    resources = f.get("resources", [])
    if not isinstance(resources, list):
        raise TenancyError(f"flavor {f.get('name')!r}: resources must be a list of names")
    labels = _mapping(f.get("node_labels", {}) or {}, f"flavor {f.get('name')!r} node_labels")
    dedicated = f.get("dedicated", False)
    if not isinstance(dedicated, bool):
        raise TenancyError(f"flavor {f.get('name')!r}: dedicated must be true or false")
    return Flavor(
        f.get("name", ""),
        frozenset(resources),
        {str(k): str(v) for k, v in labels.items()},
        dedicated,
    )


def _amount(resource: str, value: object, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise TenancyError(f"{where}: cannot read quantity {value!r}")
    try:
        return parse_quantity(resource, value)
    except QuantityError as exc:
        raise TenancyError(f"{where}: {exc}") from exc


def _queue(spec: object, tenant: str) -> Queue:
    q = _mapping(spec, "queue")
    _only(q, "queue", {"name", "shares", "cohort", "flavors", "users"})
    name = q.get("name", "")
    quotas: list[QueueQuota] = []
    for fq in _list(q, "flavors", f"queue {name!r}"):
        fq = _mapping(fq, f"queue {name!r} flavor")
        _only(fq, f"queue {name!r} flavor", {"name", "resources"})
        flavor = fq.get("name", "")
        where = f"queue {name!r}, flavor {flavor!r}"
        per_res: dict[str, ResourceQuota] = {}
        for raw, rq in _mapping(fq.get("resources", {}), where).items():
            try:
                res = canonical_name(str(raw))
            except QuantityError as exc:
                raise TenancyError(f"{where}: {exc}") from exc
            if isinstance(rq, str | int | float) and not isinstance(rq, bool):
                rq = {"nominal": rq}
            rq = _mapping(rq, f"{where}, {res}")
            _only(rq, f"{where}, {res}", {"nominal", "borrowing_limit", "lending_limit"})
            if "nominal" not in rq:
                raise TenancyError(f"{where}, {res}: nominal is required")
            nominal = _amount(res, rq["nominal"], f"{where}, {res}")
            assert nominal is not None  # guarded above
            borrow = _amount(res, rq.get("borrowing_limit"), f"{where}, {res}")
            lend = _amount(res, rq.get("lending_limit"), f"{where}, {res}")
            try:
                per_res[res] = ResourceQuota(res, nominal, borrow, lend)
            except TenancyError as exc:
                raise TenancyError(f"{where}: {exc}") from None
        quotas.append(QueueQuota(flavor, per_res))
    users = _mapping(q.get("users", {}) or {}, f"queue {name!r} users")
    return Queue(
        name,
        tenant,
        q.get("shares", 1.0),
        q.get("cohort"),
        tuple(quotas),
        {str(u): s for u, s in users.items()},
    )


def _qos(name: str, spec: object) -> QoSTier:
    s = _mapping(spec, f"qos {name!r}")
    _only(s, f"qos {name!r}", _QOS_FIELDS)
    if "priority" not in s:
        raise TenancyError(f"qos {name!r}: priority is required")
    may = s.get("may_preempt", []) or []
    if not isinstance(may, list):
        raise TenancyError(f"qos {name!r}: may_preempt must be a list of tier names")
    return QoSTier(
        name,
        s["priority"],
        bool(s.get("preemptible", True)),
        s.get("max_jobs_per_user"),
        s.get("max_gpus_per_user"),
        float(s.get("grace_s", 60.0)),
        frozenset(str(m) for m in may),
        dict(_mapping(s.get("power_cap") or {}, f"qos {name!r}: power_cap")),
    )


EXAMPLE_YAML: Final = """\
flavors:
  - name: a100-x86
    resources: [nvidia.com/gpu]
    node_labels: {fusesched.io/gpu-model: A100, fusesched.io/pool: x86}
  - name: h100-x86
    resources: [nvidia.com/gpu]
    node_labels: {fusesched.io/gpu-model: H100, fusesched.io/pool: x86}
  - name: cpu-x86
    resources: [cpu, memory]
    node_labels: {fusesched.io/pool: x86}
cohorts:
  - name: gpu-pool
organisations:
  - name: acme
    shares: 1
    tenants:
      - name: research
        shares: 3
        queues:
          - name: ml-train
            shares: 2
            cohort: gpu-pool
            users: {alice: 2, bob: 1}
            flavors:
              - name: a100-x86
                resources:
                  nvidia.com/gpu: {nominal: 16, borrowing_limit: 8, lending_limit: 8}
              - name: h100-x86
                resources:
                  nvidia.com/gpu: {nominal: 8, lending_limit: 0}
              - name: cpu-x86
                resources:
                  cpu: {nominal: 256}
                  memory: {nominal: 2Ti}
      - name: production
        shares: 1
        queues:
          - name: inference
            cohort: gpu-pool
            flavors:
              - name: a100-x86
                resources:
                  nvidia.com/gpu: {nominal: 8, borrowing_limit: 0}
qos:
  gold: {priority: 100, preemptible: false, grace_s: 300, may_preempt: [silver, bronze]}
  silver: {priority: 50, grace_s: 120, may_preempt: [bronze], max_gpus_per_user: 32}
  bronze: {priority: 10, grace_s: 30, max_jobs_per_user: 100}
default_qos: silver
"""
