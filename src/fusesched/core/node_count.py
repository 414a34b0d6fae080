"""Exact node counts (Slurm's ``-N``): a gang on exactly ``count`` distinct nodes, each
holding at least one of its tasks.

:func:`plan_on_nodes` stands in for :func:`~fusesched.core.placement.plan_groups` when a
job's placement sets ``nodes``. It counts how many of the job's tasks each eligible node holds
now (all groups together, in turn on what the earlier ones leave; capped at
``max_tasks_per_node`` and at what leaves every other node one task), ranks the nodes by
that count capped at the block size ``ceil(tasks / count)`` (room beyond a node's share does
not rank it higher, so among nodes that hold a share the placement policy's order or score
decides), takes the first ``count`` nodes that hold a task, and gives each its share as
Slurm's block distribution does: ``ceil(tasks / count)`` on the first nodes, fewer on the
last, none empty (more on a node where another holds less than its share). The groups are
then placed within those shares, so the gang uses exactly those nodes. Ranking by the count
takes the nodes that hold the most tasks, so a one-group job is placed whenever any
``count`` nodes could hold it. For a job of several groups, when the count in turn (each
group on what the earlier ones could take on every node) finds no nodes, each group is
counted on the whole free room instead; it may still wait where an exhaustive search would
have found room.

Without ``nodes`` nothing here runs: such jobs are placed as before. Pure, like the rest
of the core.
"""

from __future__ import annotations

import numpy as np

from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray
from fusesched.core.devices import DeviceLedger
from fusesched.core.placement import GroupShape, Plan, device_slots, plan_groups, task_slots
from fusesched.core.topology import DomainCodes
from fusesched.policies.placement import FloatArray, PlacementPolicy


def plan_on_nodes(
    groups: list[GroupShape],
    free: IntArray,
    eligible: BoolArray | None,
    *,
    count: int,
    max_per_node: int | None,
    policy: PlacementPolicy,
    cluster: ClusterArrays,
    preference: FloatArray | None,
    rows: IntArray | None = None,
    ledger: DeviceLedger | None = None,
) -> Plan | None:
    """Every group of the gang on exactly ``count`` distinct nodes of ``free`` (left
    untouched), each with at least one task; None when no ``count`` nodes hold it now.

    ``eligible`` (None: every row) and ``rows`` (its rows, if known) as for
    :func:`~fusesched.core.placement.plan_groups`; with a ``ledger``, groups with a device
    demand count only the tasks the devices hold now.
    """
    tasks = sum(g.replicas for g in groups)
    if count > tasks:
        return None
    cand = _rows(len(free), eligible, rows)
    cap = tasks - count + 1 if max_per_node is None else min(tasks - count + 1, max_per_node)
    # several groups: first each on what the earlier ones could take on every node (short
    # of the truth), then each on the whole free room (beyond it): the first may find no
    # room where a group's few tasks leave much (one 4-CPU task and three 1-CPU ones on two
    # 4-CPU nodes), the second may choose nodes where the groups do not fit together
    for in_turn in (True, False) if len(groups) > 1 else (False,):
        slots = _slots(groups, free, cand, cluster, ledger, in_turn)
        np.minimum(slots, cap, out=slots)  # (every other node takes one)
        found = _on_best(groups, free, cand, slots, tasks, count, policy, cluster, preference)
        if found is not None:
            nodes, shares, have = found
            plan = _place(groups, free, nodes, shares, have, policy, cluster, ledger)
            if plan is not None:
                return plan
    return None


def _slots(
    groups: list[GroupShape],
    free: IntArray,
    cand: IntArray,
    cluster: ClusterArrays,
    ledger: DeviceLedger | None,
    in_turn: bool,
) -> IntArray:
    """How many of the gang's tasks each row of ``cand`` holds on ``free``, all groups
    together: ``in_turn``, each group on what the earlier ones could take there."""
    slots = np.zeros(len(cand), np.int64)
    work = free[cand] if in_turn else free
    for group in groups:
        if in_turn:
            counts = task_slots(work, None, group.per_task, None, group.cols)
        else:
            counts = task_slots(free, None, group.per_task, None, group.cols, rows=cand)
        if ledger is not None and group.demand is not None:
            counts = device_slots(ledger, group.demand, counts, cand)
        if group.placement is not None:  # (its own label filters)
            counts[~cluster.allowed(group.placement)[cand]] = 0
        counts = np.minimum(counts, group.replicas)
        if in_turn:
            work -= counts[:, None] * group.per_task[None, :]
        slots += counts
    return slots


def _on_best(
    groups: list[GroupShape],
    free: IntArray,
    cand: IntArray,
    slots: IntArray,
    tasks: int,
    count: int,
    policy: PlacementPolicy,
    cluster: ClusterArrays,
    preference: FloatArray | None,
) -> tuple[IntArray, IntArray, IntArray] | None:
    """The ``count`` rows of ``cand`` to use (by ``slots``, the tasks each holds), the
    block shares of the tasks on them and what each holds; None when they hold too few."""
    held = slots.nonzero()[0]
    if len(held) < count:
        return None
    share = -(-tasks // count)
    nodes, have = cand[held], slots[held]
    shares = np.minimum(have, share)
    if policy.node_order and preference is None:
        order = np.lexsort((nodes, -shares))  # node order among equal shares
    else:
        key = _score(groups[0], free, cluster, policy, preference, nodes, shares)
        order = np.lexsort((nodes, key, -shares))
    chosen = order[:count]
    nodes, have = nodes[chosen], have[chosen]
    if int(have.sum()) < tasks:
        return None
    return nodes, block_shares(have, tasks, share), have


def block_shares(have: IntArray, tasks: int, share: int) -> IntArray:
    """How many of ``tasks`` tasks each node takes, in order: one each, then up to ``share``
    (the block size) each, then up to what each holds (``have``, which holds them all)."""
    quota = np.ones(len(have), np.int64)
    rest = tasks - len(have)
    for limit in (np.minimum(have, share), have):
        room = limit - quota
        before = room.cumsum() - room
        take = np.clip(rest - before, 0, room)
        quota += take
        rest -= int(take.sum())
    return quota


def nodes_holding(
    groups: list[GroupShape], capacity: IntArray, allowed: BoolArray, cluster: ClusterArrays
) -> BoolArray:
    """The ``allowed`` nodes that could hold one task of some group when empty (a mask)."""
    rows = allowed.nonzero()[0]
    hit = np.zeros(len(rows), np.bool_)
    for group in groups:
        counts = task_slots(capacity, None, group.per_task, None, group.cols, rows=rows)
        if group.placement is not None:
            counts[~cluster.allowed(group.placement)[rows]] = 0
        hit |= counts > 0
    out = np.zeros(len(allowed), np.bool_)
    out[rows[hit]] = True
    return out


def domain_hosts(
    domains: DomainCodes, rows: IntArray, holds: BoolArray
) -> tuple[IntArray, IntArray]:
    """The domains of ``rows`` (codes as :func:`~fusesched.core.topology.choose_domains`
    numbers them: an unlabelled node is a domain of its own) and how many of their rows
    hold a task (``holds``, aligned with ``rows``): a gang on ``count`` nodes fits in one
    domain only if it has that many."""
    codes = domains.codes[rows]
    codes = np.where(codes >= 0, codes, -1 - rows)
    uniq, inverse = np.unique(codes, return_inverse=True)
    hosts = np.bincount(inverse, weights=holds, minlength=len(uniq)).astype(np.int64)
    return uniq, hosts


def _rows(size: int, eligible: BoolArray | None, rows: IntArray | None) -> IntArray:
    if rows is not None:
        return rows
    if eligible is None:
        return np.arange(size, dtype=np.int64)
    return eligible.nonzero()[0]


def _score(
    group: GroupShape,
    free: IntArray,
    cluster: ClusterArrays,
    policy: PlacementPolicy,
    preference: FloatArray | None,
    nodes: IntArray,
    shares: IntArray,
) -> FloatArray:
    """The placement policy's key per node (lower first) for taking its share of tasks
    (scored as tasks of ``group``, the most constrained one), less its preference bonus."""
    scores = policy.score(free[nodes], cluster.capacity[nodes], group.per_task, shares)
    key = np.zeros(len(nodes)) if scores is None else scores.astype(np.float64)
    if preference is not None:
        key = key - preference[nodes]
    return key


def _place(
    groups: list[GroupShape],
    free: IntArray,
    nodes: IntArray,
    shares: IntArray,
    have: IntArray,
    policy: PlacementPolicy,
    cluster: ClusterArrays,
    ledger: DeviceLedger | None,
) -> Plan | None:
    """The groups on ``nodes``, node ``nodes[k]`` taking ``shares[k]`` tasks: the shares add
    up to the gang, so a plan fills every node. Several groups may not split into those
    shares: then each node may take what it holds (``have``), and the plan must still use
    every node."""
    mask = np.zeros(len(free), np.bool_)
    mask[nodes] = True
    rows = np.sort(nodes)
    cap = np.zeros(len(free), np.int64)
    for limit in (shares, have) if len(groups) > 1 else (shares,):
        cap[nodes] = limit
        plan = plan_groups(
            groups,
            free,
            mask,
            max_per_node=cap,
            min_tasks=0,
            partial=False,
            policy=policy,
            cluster=cluster,
            preference=None,
            rows=rows,
            ledger=ledger,
        )
        if plan is not None and limit is shares:
            return plan
        if plan is not None:  # (every node must still take a task)
            used = {int(n) for _, placed, takes in plan for n in placed[takes > 0]}
            return plan if len(used) == len(nodes) else None
    return None
