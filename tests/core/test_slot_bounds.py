"""The EASY scan's slot bounds (``backfill._SlotBounds``, ``placement.slot_bound``): a job the
bound turns away is one that placement would not place, so the scan decides the same with or
without them."""

from __future__ import annotations

import heapq
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.core import backfill
from fusesched.core.cluster import ClusterArrays
from fusesched.core.placement import GroupShape, plan_groups, slot_bound
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import Decision, JobExited, JobSubmitted, NodeAdded, StartJob
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.resources import CPU, MEMORY, Resources
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.registry import CoreConfig

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import cycle_speed  # noqa: E402

GI = 2**30


def _cluster(free: list[tuple[int, int]], cpus: int, mem: int) -> ClusterArrays:
    """Nodes of ``cpus`` CPUs and ``mem`` GiB, node k with ``free[k]`` (CPUs, GiB) left."""
    cluster = ClusterArrays()
    for k in range(len(free)):
        capacity = Resources({CPU: cpus * 1000, MEMORY: mem * GI})
        cluster.add_node(NodeSpec(f"n{k}", capacity), NodeState.UP)
    for k, (c, m) in enumerate(free):
        busy = np.zeros((1, len(cluster.columns)), np.int64)
        busy[0, cluster.columns[CPU]] = (cpus - c) * 1000
        busy[0, cluster.columns[MEMORY]] = (mem - m) * GI
        cluster.take(np.array([k]), busy, unique=True)
    return cluster


def _group(cluster: ClusterArrays, name: str, tasks: int, cpus: int, mem: int) -> GroupShape:
    per_task = cluster.vector(Resources({CPU: cpus * 1000, MEMORY: mem * GI}))
    assert per_task is not None
    return GroupShape(name, tasks, per_task, Resources({CPU: cpus * 1000, MEMORY: mem * GI}))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 32)), min_size=1, max_size=80),
    st.lists(
        st.tuples(st.integers(1, 12), st.integers(1, 4), st.integers(1, 12)),
        min_size=1,
        max_size=3,
    ),
    st.one_of(st.none(), st.integers(1, 3)),
    st.lists(st.booleans(), min_size=80, max_size=80),
    st.sampled_from(["first-fit", "best-fit"]),
)
def test_a_gang_below_its_bound_is_not_placed(
    free: list[tuple[int, int]],
    spec: list[tuple[int, int, int]],
    cap: int | None,
    allowed: list[bool],
    policy: str,
) -> None:
    cluster = _cluster(free, 8, 32)
    groups = [_group(cluster, f"g{k}", *s) for k, s in enumerate(spec)]
    eligible = np.array(allowed[: cluster.size], dtype=np.bool_)
    view = cluster.free.copy()
    view[::3] //= 2  # a smaller view than the cluster's (as the long jobs' is)
    for group in groups:
        rows = cluster.rows_with_free(group.cols, eligible)
        bound = slot_bound(group, view, rows, cap)
        # the bound is exactly the per-node count over the eligible rows
        exact = 0
        for row in range(cluster.size):
            if eligible[row]:
                fits = min(int(view[row, c]) // int(group.per_task[c]) for c in group.cols)
                exact += fits if cap is None else min(fits, cap)
        assert bound == exact
    plan = plan_groups(
        groups,
        view,
        eligible,
        max_per_node=cap,
        min_tasks=0,
        partial=False,
        policy=PLACEMENT_POLICIES[policy],
        cluster=cluster,
        preference=None,
        bounded=True,
    )
    below = any(
        slot_bound(g, view, cluster.rows_with_free(g.cols, eligible), cap) < g.replicas
        for g in groups
    )
    if below:
        assert plan is None


def _steady_decisions(placement: str, cycles: int) -> list[tuple[float, Decision]]:
    """Fill, then ``cycles`` steady cycles of 40 exits, on the cycle benchmark's cluster and
    jobs (selectors, spreading, gangs, GPUs), scaled down."""
    jobs, _ = cycle_speed.make_jobs(3000, 11)
    core = SchedulerCore(CoreConfig(queue_order="fcfs", backfill="easy", placement=placement))
    for spec in cycle_speed.make_nodes(400):
        core.handle(NodeAdded(spec), 0.0)
    now = 3600.0
    out: list[tuple[float, Decision]] = []
    for j in jobs:
        out.extend((now, d) for d in core.handle(JobSubmitted(j.spec), now))
    runtime = {j.spec.id: j.runtime for j in jobs}
    ends: list[tuple[float, str]] = []

    def cycle() -> bool:
        decisions = core.cycle(now)
        out.extend((now, d) for d in decisions)
        for d in decisions:
            if isinstance(d, StartJob):
                heapq.heappush(ends, (now + runtime[d.job_id], d.job_id))
        return any(isinstance(d, StartJob) for d in decisions)

    while cycle():
        pass
    for _ in range(cycles):
        if not ends:
            break
        batch = [heapq.heappop(ends) for _ in range(min(40, len(ends)))]
        now = max(now, batch[-1][0])
        for _, job_id in batch:
            out.extend((now, d) for d in core.handle(JobExited(job_id), now))
        cycle()
    return out


@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_easy_decides_the_same_without_the_bounds(
    placement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"no": 0}
    may_fit = backfill._SlotBounds.may_fit

    def counted(self: backfill._SlotBounds, *args: object) -> bool:
        ok = may_fit(self, *args)  # type: ignore[arg-type]
        calls["no"] += not ok
        return ok

    monkeypatch.setattr(backfill._SlotBounds, "may_fit", counted)
    fast = _steady_decisions(placement, 25)
    assert calls["no"] > 50  # the bounds did turn jobs away
    monkeypatch.setattr(backfill._SlotBounds, "may_fit", lambda self, *args: True)
    slow = _steady_decisions(placement, 25)
    assert len(fast) > 500
    assert fast == slow
