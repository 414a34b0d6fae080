"""What a reconfiguration changes, in words: organisations, tenants, queues, flavours,
cohorts and QoS tiers added or removed, quotas, shares and limits changed, the
``scheduling:`` settings and the cluster's license counts (``fusesched reconfigure``'s
answer; docs/TENANCY.md, "Changing the configuration of a running controller").

Pure: two configurations in, a list of :class:`Change` out, sorted by kind and name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from fusesched.model.licenses import Licenses
from fusesched.model.resources import format_quantity
from fusesched.model.tenancy import Queue, ResourceQuota, TenancyConfig
from fusesched.policies.tenancy_policy import TenancyPolicy

ChangeKind = Literal["added", "removed", "changed"]


@dataclass(frozen=True, slots=True)
class Change:
    """One change: ``queue gpu-short changed (quota gpu/nvidia.com/gpu nominal 4 → 8)``."""

    kind: str  # organisation, tenant, queue, flavor, cohort, qos, setting, scheduling, license
    name: str
    change: ChangeKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {self.change}" + (
            f" ({self.detail})" if self.detail else ""
        )


_Named = TypeVar("_Named")


def _named(
    kind: str,
    old: Iterable[_Named],
    new: Iterable[_Named],
    describe: Callable[[_Named, _Named], list[str]],
) -> list[Change]:
    """Added, removed and changed items of one kind (each with a ``name``)."""
    before = {getattr(x, "name"): x for x in old}  # noqa: B009 (the items' common field)
    after = {getattr(x, "name"): x for x in new}  # noqa: B009
    out = [Change(kind, n, "added") for n in sorted(after.keys() - before.keys())]
    out += [Change(kind, n, "removed") for n in sorted(before.keys() - after.keys())]
    for name in sorted(before.keys() & after.keys()):
        details = describe(before[name], after[name])
        if details:
            out.append(Change(kind, name, "changed", "; ".join(details)))
    return out


def _show(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, frozenset | set):
        return "[" + ", ".join(sorted(str(v) for v in value)) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in sorted(value.items())) + "}"
    return str(value)


def _fields(old: Any, new: Any, names: Sequence[str]) -> list[str]:
    """``name a → b`` for every field of ``names`` that differs."""
    out = []
    for name in names:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            out.append(f"{name} {_show(a)} → {_show(b)}")
    return out


def _limit(resource: str, rq: ResourceQuota | None, part: str) -> str:
    if rq is None:
        return "-"
    value = getattr(rq, part)
    if value is None:
        return "unlimited" if part == "borrowing_limit" else "all"
    return format_quantity(resource, value)


def _quotas(old: Queue, new: Queue) -> list[str]:
    """``quota gpu/nvidia.com/gpu nominal 4 → 8``, ``quota cpu/cpu added (nominal 8)``."""

    def cells(queue: Queue) -> dict[tuple[str, str], ResourceQuota]:
        return {(qq.flavor, r): rq for qq in queue.quotas for r, rq in qq.resources.items()}

    before, after = cells(old), cells(new)
    out: list[str] = []
    for key in sorted(before.keys() | after.keys()):
        flavor, res = key
        a, b = before.get(key), after.get(key)
        where = f"quota {flavor}/{res}"
        if a is None:
            out.append(f"{where} added (nominal {_limit(res, b, 'nominal')})")
        elif b is None:
            out.append(f"{where} removed")
        else:
            for part in ("nominal", "borrowing_limit", "lending_limit"):
                x, y = _limit(res, a, part), _limit(res, b, part)
                if x != y:
                    out.append(f"{where} {part} {x} → {y}")
    return out


def _queue(old: Queue, new: Queue) -> list[str]:
    out = _fields(old, new, ("tenant", "cohort", "shares"))
    if dict(old.user_shares) != dict(new.user_shares):
        out.append(f"users {_show(old.user_shares)} → {_show(new.user_shares)}")
    return out + _quotas(old, new)


def _all_fields(old: Any, new: Any) -> list[str]:
    return _fields(old, new, [f.name for f in fields(old) if f.name != "name"])


def config_changes(old: TenancyConfig, new: TenancyConfig) -> list[Change]:
    """Every difference between two tenancy configurations."""
    out = _named("organisation", old.organisations, new.organisations, _all_fields)
    out += _named("tenant", old.tenants, new.tenants, _all_fields)
    out += _named("queue", old.queues, new.queues, _queue)
    out += _named("flavor", old.flavors, new.flavors, _all_fields)
    out += _named("cohort", old.cohorts, new.cohorts, _all_fields)
    out += _named("qos", old.qos.values(), new.qos.values(), _all_fields)
    for name in ("default_qos", "strict_resources"):
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            out.append(Change("setting", name, "changed", f"{_show(a)} → {_show(b)}"))
    return out


def tenancy_changes(old: TenancyPolicy, new: TenancyPolicy) -> list[Change]:
    """Every difference between two tenancy policies: the configuration's, then the
    ``scheduling:`` section's (one change per field, priority weights one each)."""
    out = config_changes(old.config, new.config)
    for f in fields(old):
        if f.name in ("config", "weights"):
            continue
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a != b:
            out.append(Change("scheduling", f.name, "changed", f"{_show(a)} → {_show(b)}"))
    for f in fields(old.weights):
        a, b = getattr(old.weights, f.name), getattr(new.weights, f.name)
        if a != b:
            out.append(Change("scheduling", f"weights.{f.name}", "changed", f"{a:g} → {b:g}"))
    if not out and old != new:  # (a difference the summary does not itemise)
        out.append(Change("setting", "tenancy", "changed"))
    return out


def license_changes(old: Licenses, new: Licenses) -> list[Change]:
    """Licenses added (with their count), removed, or with a new count."""
    before, after = dict(old), dict(new)
    out = [
        Change("license", n, "added", f"count {after[n]}")
        for n in sorted(after.keys() - before.keys())
    ]
    out += [Change("license", n, "removed") for n in sorted(before.keys() - after.keys())]
    out += [
        Change("license", n, "changed", f"count {before[n]} → {after[n]}")
        for n in sorted(before.keys() & after.keys())
        if before[n] != after[n]
    ]
    return out
