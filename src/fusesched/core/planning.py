"""Placement planning for one job: filter, score, reserve and permit (phases 2–5 of a
cycle, see :mod:`fusesched.core.scheduler`).

:func:`plan` finds where every task group of a gang would go on a free matrix without
applying it; :func:`try_place` checks the job's quota, plans on the cluster's free resources
and commits the gang as one :class:`Statement` (or nothing).

The functions take the core (``core``); :class:`~fusesched.core.scheduler.SchedulerCore` binds
those it exposes as methods in its class body, so a call costs what a method call costs.
Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.admission import pin_flavours
from fusesched.core.cluster import BoolArray, IntArray, covers
from fusesched.core.datasets import FloatArray, node_bonus
from fusesched.core.devices import DevicesUnavailable
from fusesched.core.node_count import domain_hosts, plan_on_nodes
from fusesched.core.placement import (
    Allocation,
    Plan,
    Statement,
    device_slots,
    first_fit_column,
    plan_groups,
    task_slots,
)
from fusesched.core.placement_search import SearchBudgetExceeded, search_placement
from fusesched.core.records import JobRecord
from fusesched.core.topology import TopologyStatus, choose_domains

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

#: Steps of exhaustive search tried when greedy placement of a multi-group gang fails.
SEARCH_BUDGET = 2_000

#: Domains tried for a job with a topology request before it waits.
TOPOLOGY_TRIES = 3


def fluid_column(core: SchedulerCore, rec: JobRecord) -> int:
    """The single column whose free sum decides exactly if ``rec`` fits, or -1.

    That holds for one task group of one resource, without label constraints, whose task
    size divides the column's quantum (so every node's free amount is a multiple of it).
    """
    col = rec.single_column
    if col < 0 or not core.cluster.all_up:  # sums would count nodes that are not up
        return -1
    quantum = core.cluster.quantum[col]
    return col if quantum > 0 and quantum % rec.single_amount == 0 else -1


def plan(
    core: SchedulerCore,
    rec: JobRecord,
    free: IntArray,
    search: bool = True,
    bounded: bool = False,
    mask: BoolArray | None = None,
) -> Plan | None:
    """Filter and score for every group on ``free`` (not applied); None if the gang fails.

    ``search``: when greedy placement of several groups fails, try a bounded exhaustive
    search (done for jobs in order, not for backfill candidates, to bound cycle time).
    ``bounded``: ``free`` is at most the cluster's free matrix (see :func:`plan_groups`).
    ``mask``: only these nodes, besides what the job's placement allows (a later start's
    advance reservations: see :func:`fusesched.core.reservations.plan_at`).
    """
    assert rec.groups is not None
    spec = rec.spec
    cluster = core.cluster
    filters = core._filters.get(rec.shape_id)  # a function of the shape
    if filters is None:
        filters = core._filters[rec.shape_id] = cluster.filter(spec.placement)
    eligible, rows = filters
    if mask is not None:
        eligible = mask if eligible is None else eligible & mask
        rows = None
    preference, holders = node_bonus(cluster, core.data, spec, core.config.data_locality_weight)
    if holders is not None and rec.data_wait_until > core._now:
        # delay scheduling: only nodes holding some of the data, until the deadline —
        # unless none of them could ever take it (down, or ruled out by its labels), or
        # fewer than its node count (sbatch -N) could
        usable = holders & (cluster.up if eligible is None else eligible)
        count = spec.placement.nodes
        if usable.any() and (count is None or int(usable.sum()) >= count):
            eligible, rows = usable, None
    if spec.placement.topology is not None and spec.min_member is None:
        return plan_in_domain(core, rec, free, eligible, bounded, preference)
    if spec.placement.nodes is not None:  # exactly so many nodes (sbatch -N)
        return on_nodes(core, rec, free, eligible, rows, preference, bounded)
    greedy = plan_groups(
        rec.groups,
        free,
        eligible,
        max_per_node=spec.placement.max_tasks_per_node,
        # without min_member every group is placed whole, which is the whole gang
        min_tasks=spec.min_member or 0,
        partial=spec.min_member is not None,
        policy=core.placement,
        cluster=cluster,
        preference=preference,
        rows=rows,
        bounded=bounded,
        ledger=core.devices if bounded else None,
    )
    if greedy is not None or len(rec.groups) < 2 or spec.min_member is not None or not search:
        return greedy
    # several groups competing for nodes: greedy can miss a placement that exists
    try:
        allowed = cluster.eligible(spec.placement)
        return search_placement(
            rec.groups,
            free,
            allowed if mask is None else allowed & mask,
            spec.placement.max_tasks_per_node,
            budget=SEARCH_BUDGET,
            cluster=cluster,
        )
    except SearchBudgetExceeded:
        return None


def plan_in_domain(
    core: SchedulerCore,
    rec: JobRecord,
    free: IntArray,
    eligible: BoolArray | None,
    bounded: bool,
    preference: FloatArray | None,
) -> Plan | None:
    """:func:`plan` for a job with a topology request: the domain(s) ``choose_domains``
    picks among the eligible rows with room, then the placement policy inside them (the
    next domain when the gang does not fit in the chosen one, a few times at most)."""
    assert rec.groups is not None
    spec = rec.spec
    request = spec.placement.topology
    assert request is not None
    cluster = core.cluster
    ledger = core.devices if bounded else None
    cand = (cluster.up if eligible is None else eligible).nonzero()[0]
    slots = np.zeros((len(rec.groups), len(cand)), np.int64)
    for k, group in enumerate(rec.groups):
        counts = task_slots(free, None, group.per_task, None, group.cols, rows=cand)
        if ledger is not None and group.demand is not None:
            counts = device_slots(ledger, group.demand, counts, cand)
        if group.placement is not None:  # (none outside its own label filters)
            counts[~cluster.allowed(group.placement)[cand]] = 0
        slots[k] = counts
    domains = core.shapes.domains(request.key)
    wanted = [g.replicas for g in rec.groups]
    tried: list[int] = []
    if spec.placement.nodes is not None:  # never alone a domain of fewer nodes with room
        holds = (slots > 0).sum(axis=0) > 0
        codes, hosts = domain_hosts(domains, cand, holds)
        tried = codes[hosts < spec.placement.nodes].tolist()
    for _ in range(TOPOLOGY_TRIES):
        choice = choose_domains(request, domains, cand, slots, wanted, skip=tried)
        if choice.status is not TopologyStatus.FITS:
            return None
        mask = np.zeros(cluster.size, np.bool_)
        mask[choice.rows] = True
        if spec.placement.nodes is not None:
            found = on_nodes(core, rec, free, mask, choice.rows, preference, bounded)
        else:
            found = plan_groups(
                rec.groups,
                free,
                mask,
                max_per_node=spec.placement.max_tasks_per_node,
                min_tasks=0,
                partial=False,
                policy=core.placement,
                cluster=cluster,
                preference=preference,
                rows=choice.rows,
                ledger=ledger,
            )
        if found is not None or not choice.single:
            return found
        tried.extend(choice.codes)
    return None


def on_nodes(
    core: SchedulerCore,
    rec: JobRecord,
    free: IntArray,
    eligible: BoolArray | None,
    rows: IntArray | None,
    preference: FloatArray | None,
    bounded: bool,
) -> Plan | None:
    """:func:`plan` for a job with a node count (``placement.nodes``): see
    :mod:`fusesched.core.node_count`."""
    placement = rec.spec.placement
    count = placement.nodes
    assert rec.groups is not None and count is not None
    return plan_on_nodes(
        rec.groups,
        free,
        eligible,
        count=count,
        max_per_node=placement.max_tasks_per_node,
        policy=core.placement,
        cluster=core.cluster,
        preference=preference,
        rows=rows,
        ledger=core.devices if bounded else None,
    )


def try_place(
    core: SchedulerCore,
    rec: JobRecord,
    limit: IntArray | None = None,
    view: IntArray | None = None,
    search: bool = True,
    quota_checked: bool = False,
) -> Allocation | None:
    """Place the whole gang now (within ``limit`` per node if given) or not at all.

    ``view`` may pass ``np.minimum(cluster.free, limit)`` when the caller keeps it;
    ``search`` as in :func:`plan`. With tenancy the job's queue quota must admit it
    (``quota_checked``: the caller did that and set ``rec.admission``).
    """
    cluster = core.cluster
    if rec.groups is None:
        return None
    if core.tenants is not None and not quota_checked:
        verdict = core.tenants.admission(rec)
        if verdict is not None and not verdict.ok:
            return None
        rec.admission = verdict
        pin_flavours(core, rec, verdict)
    col = rec.single_column
    if col >= 0 and limit is None and cluster.all_up and core.placement.node_order:
        quantum = cluster.quantum[col]
        if quantum > 0 and quantum % rec.single_amount == 0:  # see fluid_column
            # the job needs only this column, so its sum decides
            if rec.single_total > cluster.free_sums[col]:
                return None
            groups = rec.groups
            return first_fit_column(
                cluster, groups[0], col, rec.single_total, rec.single_amount, rec.total
            )
    if not covers(cluster.free_total, rec.bound):
        return None
    caller_limit = limit
    exclusive = rec.spec.placement.exclusive
    if exclusive:  # idle nodes only
        idle = cluster.up & (cluster.free == cluster.capacity).all(axis=1)
        only_idle = np.where(idle[:, None], cluster.free, 0)
        limit = only_idle if limit is None else np.minimum(limit, only_idle)
        view = None
    if limit is None:
        free = cluster.free
    else:
        free = np.minimum(cluster.free, limit) if view is None else view
    planned = plan(core, rec, free, search, bounded=True)
    if planned is None:
        return None
    statement = Statement(cluster, core.devices)
    try:
        for group, nodes, counts in planned:
            statement.allocate(group, nodes, counts)
    except DevicesUnavailable:  # groups of one job competing for one node's devices
        statement.discard()
        return None
    alloc = statement.commit()
    if exclusive:
        alloc = whole_nodes(core, alloc)
    if caller_limit is not None:
        np.subtract.at(caller_limit, alloc.nodes, alloc.amounts)
    return alloc


def whole_nodes(core: SchedulerCore, alloc: Allocation) -> Allocation:
    """An exclusive job also holds what its tasks leave free on their nodes."""
    nodes = np.unique(alloc.nodes)
    rest = core.cluster.free[nodes].copy()
    core.cluster.take(nodes, rest, unique=True)
    return replace(
        alloc,
        nodes=np.concatenate([alloc.nodes, nodes]),
        rows=np.concatenate([alloc.amounts, rest]),
        unique=False,
        total=alloc.total + rest.sum(axis=0),
        column=-1,
        column_amounts=None,
    )
