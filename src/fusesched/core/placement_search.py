"""Exhaustive placement search: every task of a job placed one by one, with backtracking, for
the jobs greedy placement (:func:`fusesched.core.placement.plan_groups`) can miss — task
groups that compete for the same nodes, each with its own label filters. Bounded by a step
budget; the caller gives up when it runs out (:class:`SearchBudgetExceeded`).
"""

from __future__ import annotations

import numpy as np

from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray, rows_within
from fusesched.core.placement import GroupShape, Plan, group_mask


class SearchBudgetExceeded(Exception):
    """The exhaustive placement search gave up before an answer."""


def search_placement(
    groups: list[GroupShape],
    free: IntArray,
    allowed: BoolArray,
    max_per_node: int | None,
    budget: int,
    cluster: ClusterArrays,
) -> Plan | None:
    """Exhaustive search for a placement of every task on ``free`` (greedy placement can miss
    one when groups compete for the same nodes), each group on the ``allowed`` nodes its own
    label filters allow too (``cluster``'s). None if there is none; raises
    :class:`SearchBudgetExceeded` after ``budget`` steps."""
    work = free.copy()
    tasks = [g for g in groups for _ in range(g.replicas)]
    used = np.zeros(len(work), np.int64)
    where: list[int] = []
    candidates = [
        [
            int(i)
            for i in np.flatnonzero(
                group_mask(cluster, g, allowed) & rows_within(-work, -g.per_task)
            )
        ]
        for g in groups
    ]
    index_of = {id(g): k for k, g in enumerate(groups)}
    steps = 0

    def place(i: int) -> bool:
        nonlocal steps
        if i == len(tasks):
            return True
        group = tasks[i]
        same = i > 0 and tasks[i - 1] is group  # tasks of one group: nodes in ascending order
        for node in candidates[index_of[id(group)]]:
            if same and node < where[-1]:
                continue
            steps += 1
            if steps > budget:
                raise SearchBudgetExceeded
            if max_per_node is not None and used[node] >= max_per_node:
                continue
            if (work[node] < group.per_task).any():
                continue
            work[node] -= group.per_task
            used[node] += 1
            where.append(node)
            if place(i + 1):
                return True
            where.pop()
            work[node] += group.per_task
            used[node] -= 1
        return False

    if not place(0):
        return None
    plan: Plan = []
    start = 0
    for group in groups:
        rows, counts = np.unique(
            np.array(where[start : start + group.replicas]), return_counts=True
        )
        plan.append((group, rows.astype(np.int64), counts.astype(np.int64)))
        start += group.replicas
    return plan
