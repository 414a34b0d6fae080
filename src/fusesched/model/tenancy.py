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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from fusesched.model.job import QoS
from fusesched.model.resources import QuantityError, canonical_name, parse_quantity
from fusesched.model.tenancy_parts import (
    DEFAULT_QOS,
    MAX_QUANTITY,
    Cohort,
    Flavor,
    Organisation,
    QoSTier,
    Queue,
    QueueQuota,
    ResourceQuota,
    TenancyError,
    Tenant,
    freeze,
)

__all__ = [
    "DEFAULT_QOS",
    "EXAMPLE_YAML",
    "MAX_QUANTITY",
    "Cohort",
    "Flavor",
    "Organisation",
    "QoSTier",
    "Queue",
    "QueueQuota",
    "ResourceQuota",
    "TenancyConfig",
    "TenancyError",
    "Tenant",
]


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
        object.__setattr__(self, "qos", freeze(self.qos))
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
        tiers = [q.value for q in QoS]
        for name, tier in self.qos.items():
            if name != tier.name:
                raise TenancyError(f"qos keyed {name!r} is named {tier.name!r}")
            if name not in tiers:  # (no job could name it: a job's QoS is one of these)
                raise TenancyError(
                    f"qos {name!r}: the tiers are {', '.join(tiers)} (a job names one of "
                    "them; the file sets their priorities, grace times and limits)"
                )
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
