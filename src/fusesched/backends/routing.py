"""Routing: which pools may take a job, in which order of preference (federation, issue 7).

fusesched schedules every job itself over one set of nodes; the nodes of each pool (the local
agents, a Slurm cluster, a Kubernetes cluster) carry the label
:data:`~fusesched.model.node.LABEL_POOL`. Routing runs once, at submission: it picks the
ordered pools a job may use (:func:`route`) and turns that choice into label constraints the
scheduling core already understands (:func:`routed_placement`): the job must land in one of the
pools, and earlier pools score higher, so later ones act as overflow when the first is full.

The rules come from the federation file (:mod:`fusesched.backends.federation_config`).
Nothing here does I/O: the controller passes what it knows of each pool's load
(:class:`PoolLoad`) at the time of the call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from fusesched.backends.federation_config import (
    MAX_WEIGHT,
    FederationConfig,
    PoolConfig,
    RouteMatch,
    RouteRule,
    close_hint,
)
from fusesched.model.job import JobType, LabelOp, LabelRequirement, Placement, PreferredTerm
from fusesched.model.node import LABEL_POOL
from fusesched.submit.identify import identify
from fusesched.submit.launch_mode import torchrun_tasks
from fusesched.submit.request import JobRequest


class RouteError(ValueError):
    """No pool can take the job (or it asks for an unknown pool).

    ``reasons`` maps each dropped candidate to why; ``explanation`` is the routing trace up to
    the failure, for ``fusesched route JOB --explain``.
    """

    def __init__(
        self,
        message: str,
        *,
        reasons: Mapping[str, str] | None = None,
        explanation: Sequence[str] = (),
    ) -> None:
        self.reasons: Mapping[str, str] = MappingProxyType(dict(reasons or {}))
        self.explanation: tuple[str, ...] = tuple(explanation)
        super().__init__(message)


# ----------------------------------------------------------------------------- routing


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """What the controller knows of a pool now: the fraction of its capacity in use and
    whether it is reachable (a pool with no report counts as up and unloaded)."""

    used_fraction: float
    up: bool = True

    def __post_init__(self) -> None:
        if not (0 <= self.used_fraction < math.inf):
            raise ValueError(f"used_fraction must be a non-negative number: {self.used_fraction}")


@dataclass(frozen=True, slots=True)
class Route:
    """The pools a job may use, most preferred first; the rule that chose them (``None``: the
    job named its pool, or no rule matched); and, line by line, why."""

    pools: tuple[str, ...]
    rule: str | None
    explanation: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Job:
    """The facts about a request that rules and pools are judged on."""

    type: JobType
    type_note: str
    tenant: str
    queue: str
    user: str
    labels: Mapping[str, str]

    @classmethod
    def of(cls, request: JobRequest) -> _Job:
        found = identify(request)
        note = "" if request.type is not None else f" (identified: {found.reason})"
        return cls(found.type, note, request.tenant, request.queue, request.user, request.labels)


def route(config: FederationConfig, request: JobRequest, loads: Mapping[str, PoolLoad]) -> Route:
    """The ordered pools for ``request``; :class:`RouteError` when none can run it.

    An explicit ``request.pool`` wins over the rules; otherwise the first matching rule
    decides, and without one ``config.default``. Pools that cannot run the job (its images)
    are dropped; pools over the rule's ``max_load`` move behind the others; pools that are
    down go last. Every step leaves a line in ``Route.explanation``.
    """
    job = _Job.of(request)
    lines = [_describe(job)]
    candidates, rule = _candidates(config, request, job, lines)
    reasons: dict[str, str] = {}
    for name in candidates:
        why = _cannot_run(config.pool(name), request)
        if why is not None:
            reasons[name] = why
            lines.append(f"pool {name} dropped: {why}")
    kept = [name for name in candidates if name not in reasons]
    if not kept:
        detail = "; ".join(f"pool {name}: {why}" for name, why in reasons.items())
        raise RouteError(
            f"no pool can run this job ({_origin(request, rule, candidates)}): {detail}",
            reasons=reasons,
            explanation=lines,
        )
    ordered = _order(kept, None if rule is None else rule.max_load, loads, lines)
    preference = "" if len(ordered) == 1 else f" ({ordered[0]} preferred)"
    lines.append(f"route: {', '.join(ordered)}{preference}")
    return Route(tuple(ordered), None if rule is None else rule.name, tuple(lines))


def _describe(job: _Job) -> str:
    user = job.user or "(none)"
    return (
        f"job: type {job.type}{job.type_note}, tenant {job.tenant}, queue {job.queue}, user {user}"
    )


def _candidates(
    config: FederationConfig, request: JobRequest, job: _Job, lines: list[str]
) -> tuple[tuple[str, ...], RouteRule | None]:
    """The pools before capability and load are judged, and the rule that named them."""
    if request.pool is not None:
        if request.pool not in config.pool_names:
            raise RouteError(
                f"the job asks for pool {request.pool!r}, which is not configured"
                f"{close_hint(request.pool, config.pool_names)} "
                f"(known pools: {', '.join(config.pool_names)})",
                explanation=lines,
            )
        lines.append(f"pool {request.pool} asked for by the job: rules not consulted")
        return (request.pool,), None
    for rule in config.rules:
        mismatch = _mismatch(rule.match, job)
        if mismatch is None:
            lines.append(f"rule {rule.name!r} matches ({_matched(rule.match, job)})")
            lines.append(f"rule {rule.name!r} names pools: {', '.join(rule.pools)}")
            return rule.pools, rule
        lines.append(f"rule {rule.name!r} skipped: {mismatch}")
    lines.append(f"no rule matches: default pools {', '.join(config.default)}")
    return config.default, None


def _origin(request: JobRequest, rule: RouteRule | None, candidates: Sequence[str]) -> str:
    if request.pool is not None:
        return f"it asks for pool {request.pool}"
    if rule is not None:
        return f"rule {rule.name!r} names {', '.join(candidates)}"
    return f"default pools {', '.join(candidates)}"


def _listed(values: Iterable[str]) -> str:
    return f"[{', '.join(values)}]"


def _mismatch(match: RouteMatch, job: _Job) -> str | None:
    """Why ``job`` does not match (the first criterion that fails), or ``None`` if it does."""
    if match.types and job.type not in match.types:
        return f"type {job.type} not in {_listed(match.types)}"
    for what, value, allowed in (
        ("tenant", job.tenant, match.tenants),
        ("queue", job.queue, match.queues),
        ("user", job.user, match.users),
    ):
        if allowed and value not in allowed:
            return f"{what} {value or '(none)'} not in {_listed(allowed)}"
    for key, wanted in match.labels.items():
        have = job.labels.get(key)
        if have is None:
            return f"label {key} missing (wanted {wanted})"
        if have != wanted:
            return f"label {key} is {have}, not {wanted}"
    return None


def _matched(match: RouteMatch, job: _Job) -> str:
    """The criteria a matching job met, in words (``type hpc, tenant physics``)."""
    parts = [f"type {job.type}"] if match.types else []
    parts += [f"tenant {job.tenant}"] if match.tenants else []
    parts += [f"queue {job.queue}"] if match.queues else []
    parts += [f"user {job.user}"] if match.users else []
    parts += [f"label {key}={value}" for key, value in match.labels.items()]
    return ", ".join(parts) or "it matches every job"


def _cannot_run(pool: PoolConfig, request: JobRequest) -> str | None:
    """Why ``pool`` cannot run the job, or ``None`` when it can.

    Registry images are pulled only by Kubernetes; images given as filesystem paths are
    unpacked only by the local agents; a Kubernetes pod needs some image, so a group without
    one needs the pool's ``default_image``; a heterogeneous job and a job on a pseudo-terminal
    (``run --pty``) run in local pools only. The job's own placement may also exclude the
    pool by its label (so may a task group's own placement).
    """
    for group in request.groups:
        image = f"(group {group.name}: {group.image})"
        if group.registry_image and pool.kind != "kubernetes":
            return f"registry images run only in kubernetes pools {image}"
        if group.image is not None and not group.registry_image and pool.kind != "local":
            return f"images given as paths run only in local pools {image}"
        if group.image is None and pool.kind == "kubernetes" and pool.default_image is None:
            return f"group {group.name} gives no image and the pool has no default_image"
    if request.hetjob and pool.kind != "local":  # (srun --het-group runs on local agents)
        return "heterogeneous jobs (hetjob) run only in local pools"
    if request.pty is not None and pool.kind != "local":  # (agents relay the terminal)
        return "a pseudo-terminal (run --pty) is relayed only by local pools' agents"
    why = _cannot_launch(pool, request)
    if why is not None:
        return why
    if not _placement_allows_pool(request.placement.to_model(), pool.name):
        return f"the job's placement excludes it (by the {LABEL_POOL} label)"
    for group in request.groups:  # (a group's own filters: its nodes are in the pool too)
        own = group.placement.to_model() if group.placement is not None else None
        if own is not None and not _placement_allows_pool(own, pool.name):
            return f"group {group.name}'s placement excludes it (by the {LABEL_POOL} label)"
    return None


def _cannot_launch(pool: PoolConfig, request: JobRequest) -> str | None:
    """Why ``pool`` cannot start the job's tasks as it asks, or ``None``: a Slurm job has one
    task group (fusesched does not map groups onto Slurm's heterogeneous jobs); a group's
    ``completes_job`` among several needs Volcano's ``TaskCompleted → CompleteJob``, which a
    Kubernetes pool's Volcano Job has and its ``gang_mode: podgroup`` has not; torchrun's
    ``PET_*`` rendezvous across tasks is set by local and Slurm pools, not Kubernetes ones."""
    several = len(request.groups) > 1
    if several and pool.kind == "slurm":
        return (
            f"jobs with several task groups ({len(request.groups)}) run only in local or "
            "kubernetes pools (they are not mapped onto Slurm's heterogeneous jobs)"
        )
    completing = [g.name for g in request.groups if g.completes_job]
    podgroup = pool.options.get("gang_mode") == "podgroup"
    if several and completing and pool.kind == "kubernetes" and podgroup:
        return (
            f"group {completing[0]} completes the job (completes_job), which needs a Volcano "
            "Job's TaskCompleted → CompleteJob, and this pool's gang_mode is podgroup"
        )
    world = torchrun_tasks(request)
    if world > 1 and pool.kind == "kubernetes":
        return (
            f"torchrun's rendezvous across {world} tasks (PET_NNODES, PET_NODE_RANK, "
            "PET_MASTER_ADDR, PET_MASTER_PORT) is set only in local and slurm pools"
        )
    return None


def _placement_allows_pool(placement: Placement, pool: str) -> bool:
    """False when the job's own constraints on the pool label exclude ``pool``."""
    labels = {LABEL_POOL: pool}
    selector = placement.node_selector.get(LABEL_POOL)
    if selector is not None and selector != pool:
        return False
    if any(r.key == LABEL_POOL and not r.matches(labels) for r in placement.required):
        return False
    return not any(r.key == LABEL_POOL and r.matches(labels) for r in placement.anti_affinity)


def _order(
    pools: Sequence[str], max_load: float | None, loads: Mapping[str, PoolLoad], lines: list[str]
) -> list[str]:
    """Pools within their load limit first, those above it next, those down last; the
    order among each set is the rule's."""
    ready: list[str] = []
    overflow: list[str] = []
    down: list[str] = []
    for name in pools:
        load = loads.get(name)
        if load is not None and not load.up:
            lines.append(f"pool {name} is down: tried last")
            down.append(name)
        elif max_load is not None and load is not None and load.used_fraction > max_load:
            lines.append(
                f"pool {name} above its load limit "
                f"({load.used_fraction:.2f} > {max_load:.2f}): kept as overflow"
            )
            overflow.append(name)
        else:
            ready.append(name)
    return ready + overflow + down


# ----------------------------------------------------------------------------- placement


def pool_weights(count: int) -> tuple[int, ...]:
    """Preferred-term weights for the first ``count - 1`` of ``count`` ordered pools (the last
    needs none: it only has to score lowest).

    Halving from 100 (100, 50, 25, …) keeps a clear gap between the first choices; never
    below the number of pools still to come, so the weights stay strictly decreasing (up to
    101 pools) within the core's -100..100.
    """
    return tuple(
        min(MAX_WEIGHT, max(MAX_WEIGHT >> index, count - 1 - index)) for index in range(count - 1)
    )


def routed_placement(placement: Placement, route: Route) -> Placement:
    """``placement`` restricted to the route's pools, earlier pools scoring higher.

    The job's own selector, requirements and preferred terms are kept; a requirement
    ``fusesched.io/pool In route.pools`` is added, and one preferred term per pool but the
    last with the weights of :func:`pool_weights`.
    """
    if not route.pools:
        raise ValueError("a route names at least one pool")
    required = LabelRequirement(LABEL_POOL, LabelOp.IN, route.pools)
    terms = tuple(
        PreferredTerm(LabelRequirement(LABEL_POOL, LabelOp.IN, (name,)), weight)
        for name, weight in zip(route.pools, pool_weights(len(route.pools)), strict=False)
    )
    return replace(
        placement,
        required=(*placement.required, required),
        preferred=(*placement.preferred, *terms),
    )
