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
  run it (:func:`fusesched.power.waiting.node_equivalents`), summed unrounded per pool.
"""

from __future__ import annotations

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
    the group's label filters."""
    return [
        replace(
            spec,
            task_groups=(replace(group, placement=None),),
            placement=spec.placement
            if group.placement is None
            else spec.placement.joined(group.placement),
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


def _place(
    spec: JobSpec, kinds: Sequence[NodeKind], fits: tuple[_Fits, _Fits]
) -> list[tuple[int, _Found, list[int]]]:
    """Where a job of ``spec``'s shape counts: per part, the side (0: queued, on sleeping
    nodes; 1: held, on powered ones), the pool found and what the part counts. A part of
    several task groups that no one node could run whole (a GPU group and a big-memory CPU
    group, for nodes of two sizes) counts group by group, as its groups are placed."""
    out: list[tuple[int, _Found, list[int]]] = []
    parts = job_parts(spec)
    while parts:
        part = parts.pop(0)
        key = (part.placement.cache_key(), tuple(g.resources for g in part.task_groups))
        for side, seen in enumerate(fits):
            if key not in seen:
                seen[key] = _fitting(part, kinds, asleep=side == 0)
            found = seen[key]
            if found is not None:
                out.append((side, found, least_to_start(part)))
                break
        else:
            if len(part.task_groups) > 1:
                parts[:0] = _groups(part)
    return out


def waiting_demand(kinds: Sequence[NodeKind], jobs: Iterable[WaitingJob]) -> dict[str, PoolDemand]:
    """Per pool (name order; only pools something counts against), the waiting ``jobs``'
    ``queued_nodes``, ``held_nodes`` and ``wake_first`` (the module docstring's rules).
    ``jobs``: the core's waiting queue (``core.queue.records``), in its order."""
    # where each job counts is worked out once per shape, not per job (the queue may hold
    # thousands of jobs of a few shapes), and which nodes fit once per label filters and
    # task size
    fits: tuple[_Fits, _Fits] = ({}, {})
    places: dict[int, list[tuple[int, _Found, list[int]]]] = {}
    asks: tuple[dict[tuple[str, tuple[float, ...]], list[list[int]]], ...] = ({}, {})
    for job in jobs:
        place = places.get(job.shape_id)
        if place is None:
            place = places[job.shape_id] = _place(job.spec, kinds, fits)
        for side, found, least in place:
            asks[side].setdefault(found[:2], []).append(least)
    queued: dict[str, float] = {}
    held: dict[str, float] = {}
    for counted, out in zip(asks, (queued, held), strict=True):
        for (pool, scale), rows in counted.items():
            amount = node_equivalents(np.array(rows, np.float64), np.array(scale))
            out[pool] = out.get(pool, 0.0) + amount
    # the sleeping nodes of every shape counted in queued_nodes, to be woken first
    wake: dict[str, dict[str, None]] = {}
    for hit in fits[0].values():
        if hit is not None:
            wake.setdefault(hit[0], {}).update(dict.fromkeys(hit[2]))
    return {
        pool: PoolDemand(
            queued_nodes=queued.get(pool, 0.0),
            held_nodes=held.get(pool, 0.0),
            wake_first=tuple(wake.get(pool, ())),
        )
        for pool in sorted(set(queued) | set(held))
    }
