"""Which pool each waiting job's power demand counts against, and how much (pure).

The one place where waiting jobs become per-pool :class:`~fusesched.power.saving.PoolDemand`
(``queued_nodes``, ``held_nodes``, ``wake_first``): the simulator (:mod:`fusesched.sim.power`)
and the live controller (:mod:`fusesched.controller.power`) both call :func:`waiting_demand`
with the core's waiting queue and their nodes as :class:`NodeKind` s, so the two cannot count
differently (docs/ENERGY.md, "Waiting demand"). The rules:

* **one pool per job.** A job counts once, against the first pool (by name) whose sleeping
  nodes could run it (its label filters allow them and each task fits one): ``queued_nodes``,
  what nodes are woken for; those nodes are named in ``wake_first``. A job no sleeping node
  could run is *held* against the first pool whose powered nodes could (``held_nodes``): it
  wakes nothing but keeps that many idle nodes from suspension. A job without a pool selector
  that could run in several pools wakes nodes in one of them, not in all: one job's boot in
  every pool would waste all but one.
* **what it needs to start.** A job counts what it needs at least to start: an elastic or
  partial gang (``min_member``) its minimum (``min_member`` times the smallest task, as the
  core's lower bound), any other job its full request. An elastic job starts with its minimum
  and grows into what frees up; waking nodes for its full size would wake nodes it may never
  use. A job whose task groups carry label filters of their own (a hetjob component's ``-C``,
  a Kubeflow replica type's ``nodeSelector``) counts group by group, each whole, where its own
  nodes are; so does a job of several groups that no one node could run whole (the core
  places its groups on different nodes).
* **how much.** Per job the larger of its CPU and GPU shares of the largest node that could
  run it (:func:`fusesched.power.waiting.node_equivalents`), summed unrounded per pool. An
  exclusive job (``placement.exclusive``: idle nodes only, shared with nobody) counts whole
  nodes (:func:`whole_nodes`): its share rounded up, and at least as many nodes as its tasks
  need when each node takes only as many as fit (or ``max_tasks_per_node``), or its node
  count (``placement.nodes``).
* **which idle nodes are no use.** Per pool, the powered nodes that none of the jobs counted
  in ``queued_nodes`` could run (their labels, their size) are named in ``unfit_powered``:
  idle, they do not count towards the awake nodes those jobs need
  (:func:`fusesched.power.saving.plan_power`), so the nodes they can use are woken.

Which jobs count at all (the core's queue less those that their licenses hold back, and the
jobs due within one boot) is :func:`fusesched.power.counted_jobs.counted_jobs`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from fusesched.model.job import JobSpec
from fusesched.model.node import NodeSpec
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.power.saving import PoolDemand
from fusesched.power.waiting import largest_node, node_equivalents

#: what a waiting job's share of a node is counted in
COUNTED = (CPU, GPU)


@dataclass(frozen=True, slots=True)
class NodeKind:
    """Nodes of one pool and one size, by how they stand: ``asleep`` (suspended or
    suspending: the policy may wake them) and ``powered`` (on and up: they take work now).
    Nodes in neither (resuming, drained, down) are left out."""

    pool: str
    capacity: Resources
    asleep: tuple[NodeSpec, ...] = ()
    powered: tuple[NodeSpec, ...] = ()


def node_kinds(nodes: Iterable[tuple[NodeSpec, str, bool]]) -> list[NodeKind]:
    """:class:`NodeKind` s of ``(spec, pool, asleep)`` triples (a powered node: asleep
    False), in first-seen order."""
    kinds: dict[tuple[str, Resources], tuple[list[NodeSpec], list[NodeSpec]]] = {}
    for spec, pool, asleep in nodes:
        entry = kinds.setdefault((pool, spec.capacity), ([], []))
        entry[0 if asleep else 1].append(spec)
    return [
        NodeKind(pool, capacity, tuple(asleep), tuple(powered))
        for (pool, capacity), (asleep, powered) in kinds.items()
    ]


def job_parts(spec: JobSpec) -> list[JobSpec]:
    """``spec`` itself; or, when a task group has label filters of its own, one spec per
    group (whole: no ``min_member``) under the job's and the group's filters: each group may
    need nodes of another pool woken."""
    if all(group.placement is None for group in spec.task_groups):
        return [spec]
    return _groups(spec)


def _groups(spec: JobSpec) -> list[JobSpec]:
    """One spec per task group of ``spec`` (whole: no ``min_member``), under the job's and
    the group's label filters; without the job's node count (``placement.nodes``: the whole
    job's, which one group's tasks may not hold, nor need on their own)."""
    return [
        replace(
            spec,
            task_groups=(replace(group, placement=None),),
            placement=replace(
                spec.placement
                if group.placement is None
                else spec.placement.joined(group.placement),
                nodes=None,
            ),
            min_member=None,
        )
        for group in spec.task_groups
    ]


def least_to_start(spec: JobSpec) -> list[int]:
    """What ``spec`` needs at least to start, per :data:`COUNTED` resource (in the core's
    units): with ``min_member``, that many of its smallest task (per resource: the core's
    lower bound, :attr:`fusesched.core.records.JobRecord.bound`); otherwise every task."""
    groups = spec.task_groups
    if spec.min_member is not None:
        return [min(g.resources.get(r) for g in groups) * spec.min_member for r in COUNTED]
    return [sum(g.resources.get(r) * g.replicas for g in groups) for r in COUNTED]


def whole_nodes(spec: JobSpec, scale: Sequence[float]) -> int:
    """The fewest nodes of ``scale``'s size (per :data:`COUNTED` resource: the largest node
    that could run it) an exclusive ``spec`` needs at least to start: its share rounded up;
    per task group as many nodes as its tasks need when a node takes only as many as fit
    (and ``max_tasks_per_node``); with ``min_member``, that many of its smallest task; at
    least ``placement.nodes``. (Whole nodes: nothing else runs beside an exclusive job.)"""
    least = least_to_start(spec)
    share = max((q / s for q, s in zip(least, scale, strict=True) if s > 0), default=0.0)
    spread = spec.placement.max_tasks_per_node
    groups = spec.task_groups
    if spec.min_member is not None:
        tasks = [(spec.min_member, [min(g.resources.get(r) for g in groups) for r in COUNTED])]
    else:
        tasks = [(g.replicas, [g.resources.get(r) for r in COUNTED]) for g in groups]
    nodes = max(math.ceil(share - 1e-9), 1, spec.placement.nodes or 0)
    for count, each in tasks:
        per_node = min(
            (int(s // q) for q, s in zip(each, scale, strict=True) if q > 0), default=count
        )
        if spread is not None:
            per_node = min(per_node, spread)
        nodes = max(nodes, -(-count // max(per_node, 1)))
    return nodes


class WaitingJob(Protocol):
    """A waiting job as the core queues it (:class:`fusesched.core.records.JobRecord`): its
    spec, and its shape's number (jobs of one shape count alike)."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def shape_id(self) -> int: ...


#: a pool found for a job shape: its name, its largest fitting node (per counted resource)
#: and the fitting nodes' names
_Found = tuple[str, tuple[float, ...], tuple[str, ...]]

#: per shape key (label filters, per-task resources), the pool found on one side, or None
_Fits = dict[tuple[object, ...], _Found | None]


def _fitting(spec: JobSpec, kinds: Sequence[NodeKind], asleep: bool) -> _Found | None:
    """The first pool (by name) with nodes on the ``asleep`` side that could run ``spec``
    (its label filters allow them and each of its tasks fits one)."""
    placement = spec.placement
    best: str | None = None
    found: list[tuple[NodeKind, tuple[NodeSpec, ...]]] = []
    for kind in kinds:
        members = kind.asleep if asleep else kind.powered
        if not members or (best is not None and kind.pool > best):
            continue
        if not all(g.resources.fits_in(kind.capacity) for g in spec.task_groups):
            continue
        if placement.constrained:
            members = tuple(m for m in members if placement.allows(m.labels))
            if not members:
                continue
        if best is None or kind.pool < best:
            best, found = kind.pool, []
        found.append((kind, members))
    if best is None:
        return None
    sizes = np.array([[k.capacity.get(r) for r in COUNTED] for k, _ in found], np.float64)
    names = tuple(m.name for _, members in found for m in members)
    return best, tuple(largest_node(sizes).tolist()), names


#: per (label filters, pool): the pool's powered node kinds, each with the names of its
#: nodes those filters do not allow
_Barred = dict[tuple[object, ...], list[tuple[NodeKind, tuple[str, ...]]]]


def _unfit(spec: JobSpec, kinds: Sequence[NodeKind], pool: str, barred: _Barred) -> frozenset[str]:
    """The powered nodes of ``pool`` that ``spec`` could not run (its label filters do not
    allow them, or a task does not fit one). ``barred``: what the filters allow, per filters
    and pool, worked out once for every task size."""
    placement = spec.placement
    key = (placement.cache_key(), pool)
    per_kind = barred.get(key)
    if per_kind is None:
        per_kind = barred[key] = [
            (
                kind,
                tuple(m.name for m in kind.powered if not placement.allows(m.labels))
                if placement.constrained
                else (),
            )
            for kind in kinds
            if kind.pool == pool and kind.powered
        ]
    out: list[str] = []
    for kind, names in per_kind:
        if not all(g.resources.fits_in(kind.capacity) for g in spec.task_groups):
            out.extend(m.name for m in kind.powered)
        else:
            out.extend(names)
    return frozenset(out)


#: where a job counts, per part: the side (0: queued, 1: held), the pool found, what it needs
#: at least to start (per counted resource) and, for an exclusive job, its whole nodes
_Part = tuple[int, _Found, list[int], int | None]


def _place(
    spec: JobSpec,
    kinds: Sequence[NodeKind],
    fits: tuple[_Fits, _Fits],
    unfit: dict[tuple[object, ...], tuple[str, frozenset[str]]],
    barred: _Barred,
) -> list[_Part]:
    """Where a job of ``spec``'s shape counts: per part, the side (0: queued, on sleeping
    nodes; 1: held, on powered ones), the pool found and what the part counts. A part of
    several task groups that no one node could run whole (a GPU group and a big-memory CPU
    group, for nodes of two sizes) counts group by group, as its groups are placed. For a
    queued part, the powered nodes of its pool it could not run go into ``unfit`` (by its
    fits key)."""
    out: list[_Part] = []
    parts = job_parts(spec)
    while parts:
        part = parts.pop(0)
        key = (part.placement.cache_key(), tuple(g.resources for g in part.task_groups))
        for side, seen in enumerate(fits):
            if key not in seen:
                seen[key] = _fitting(part, kinds, asleep=side == 0)
            found = seen[key]
            if found is not None:
                if side == 0 and key not in unfit:
                    unfit[key] = (found[0], _unfit(part, kinds, found[0], barred))
                whole = whole_nodes(part, found[1]) if part.placement.exclusive else None
                out.append((side, found, least_to_start(part), whole))
                break
        else:
            if len(part.task_groups) > 1:
                parts[:0] = _groups(part)
    return out


def waiting_demand(kinds: Sequence[NodeKind], jobs: Iterable[WaitingJob]) -> dict[str, PoolDemand]:
    """Per pool (name order; only pools something counts against), the waiting ``jobs``'
    ``queued_nodes``, ``held_nodes``, ``wake_first`` and ``unfit_powered`` (the module
    docstring's rules). ``jobs``: what power saving counts
    (:func:`fusesched.power.counted_jobs.counted_jobs`: the core's waiting queue, in its
    order, and the jobs due within one boot)."""
    # where each job counts is worked out once per shape, not per job (the queue may hold
    # thousands of jobs of a few shapes), and which nodes fit once per label filters and
    # task size
    fits: tuple[_Fits, _Fits] = ({}, {})
    unfit: dict[tuple[object, ...], tuple[str, frozenset[str]]] = {}
    barred: _Barred = {}
    # (the core's shape leaves exclusivity out: an exclusive job counts whole nodes)
    places: dict[tuple[int, bool], list[_Part]] = {}
    asks: tuple[dict[tuple[str, tuple[float, ...]], list[list[int]]], ...] = ({}, {})
    queued: dict[str, float] = {}
    held: dict[str, float] = {}
    for job in jobs:
        spec = job.spec
        shape = (job.shape_id, spec.placement.exclusive)
        place = places.get(shape)
        if place is None:
            place = places[shape] = _place(spec, kinds, fits, unfit, barred)
        for side, found, least, whole in place:
            if whole is None:
                asks[side].setdefault(found[:2], []).append(least)
            else:
                out = held if side else queued
                out[found[0]] = out.get(found[0], 0.0) + whole
    for counted, out in zip(asks, (queued, held), strict=True):
        for (pool, scale), rows in counted.items():
            amount = node_equivalents(np.array(rows, np.float64), np.array(scale))
            out[pool] = out.get(pool, 0.0) + amount
    # the sleeping nodes of every shape counted in queued_nodes, to be woken first
    wake: dict[str, dict[str, None]] = {}
    for hit in fits[0].values():
        if hit is not None:
            wake.setdefault(hit[0], {}).update(dict.fromkeys(hit[2]))
    # the powered nodes that no job counted in queued_nodes could run
    useless: dict[str, frozenset[str]] = {}
    for pool, names in unfit.values():
        useless[pool] = useless[pool] & names if pool in useless else names
    return {
        pool: PoolDemand(
            queued_nodes=queued.get(pool, 0.0),
            held_nodes=held.get(pool, 0.0),
            wake_first=tuple(wake.get(pool, ())),
            unfit_powered=tuple(sorted(useless.get(pool, ()))),
        )
        for pool in sorted(set(queued) | set(held))
    }
