"""The running set's incremental orders and the cluster's cached row bounds, checked against
brute force under random starts, exits and releases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.core.cluster import ClusterArrays
from fusesched.core.placement import Allocation, GroupShape, plan_groups
from fusesched.core.running import BULK_RELEASE, RunningSet
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.resources import CPU, MEMORY, Resources
from fusesched.policies.placement import PLACEMENT_POLICIES

NODES = 12
WIDTH = 2


def _allocation(rng: np.random.Generator) -> Allocation:
    nodes = np.sort(rng.choice(NODES, size=int(rng.integers(1, 4)), replace=False))
    amounts = rng.integers(0, 5, size=(len(nodes), WIDTH)).astype(np.int64)
    return Allocation(nodes.astype(np.int64), amounts, True, amounts.sum(axis=0))


# each step: (start a job with this estimated end | end the k-th running job)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 6)),
        st.tuples(st.just("end"), st.integers(0, 1_000)),
    ),
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(steps, st.integers(0, 2**16))
def test_running_order_release_time_and_bulk_release(
    script: list[tuple[str, int]], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    running = RunningSet(WIDTH)
    live: dict[str, tuple[float, int, Allocation]] = {}  # id -> (end, start number, alloc)
    for n, (what, value) in enumerate(script):
        if what == "start":
            alloc = _allocation(rng)
            running.add(f"j{n}", float(value), alloc.total, alloc)
            live[f"j{n}"] = (float(value), n, alloc)
        elif live:
            job_id = sorted(live)[value % len(live)]
            running.remove(job_id)
            del live[job_id]
        if n % 7 == 0 or n == len(script) - 1:  # views and answers in between changes
            _check(running, live)


def _check(running: RunningSet, live: dict[str, tuple[float, int, Allocation]]) -> None:
    expected = sorted(live, key=lambda j: live[j][:2])
    view = running.view()
    assert [view.job_id(k) for k in range(len(view))] == expected
    assert view.ends.tolist() == [live[j][0] for j in expected]
    for col in range(WIDTH):
        assert view.column(col).tolist() == [int(live[j][2].total[col]) for j in expected]
    # release_time: the first end by which the released amount reaches the deficit
    for deficit in (1, 3, 8, 1_000):
        released, found = 0, None
        for j in expected:
            end, _, alloc = live[j]
            if found is not None and end != found[0]:
                break
            released += int(alloc.total[0])
            if found is None and released >= deficit:
                found = (end, 0)
            if found is not None:
                found = (found[0], released)
        assert running.release_time(0, deficit) == found
    # releasing the first k jobs: the list path and the ledger path agree with brute force
    for stop in {0, len(expected) // 2, len(expected)}:
        want = np.zeros((NODES, WIDTH), np.int64)
        for j in expected[:stop]:
            np.add.at(want, live[j][2].nodes, live[j][2].amounts)
        got = np.zeros((NODES, WIDTH), np.int64)
        view.release(got, 0, stop)
        assert (got == want).all()
        bulk = np.zeros((NODES, WIDTH), np.int64)
        view.ledger.release(bulk, view.slots[:stop], len(view.allocs))
        assert (bulk == want).all()


def test_bulk_release_is_used_for_many_jobs() -> None:
    running = RunningSet(WIDTH)
    rng = np.random.default_rng(1)
    allocs = [_allocation(rng) for _ in range(3 * BULK_RELEASE)]
    for n, alloc in enumerate(allocs):
        running.add(f"j{n}", float(n), alloc.total, alloc)
    for n in range(0, len(allocs), 3):  # some end before the ledger is first used
        running.remove(f"j{n}")
    want = np.zeros((NODES, WIDTH), np.int64)
    for n, alloc in enumerate(allocs):
        if n % 3:
            np.add.at(want, alloc.nodes, alloc.amounts)
    got = np.zeros((NODES, WIDTH), np.int64)
    view = running.view()
    view.release(got, 0, len(view))
    assert (got == want).all()


def _cluster(cpus: list[int]) -> ClusterArrays:
    cluster = ClusterArrays()
    for i, cpu in enumerate(cpus):
        cluster.add_node(
            NodeSpec(f"n{i}", Resources({CPU: cpu * 1000, MEMORY: 2**30})), NodeState.UP
        )
    return cluster


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=40),
    st.lists(st.tuples(st.booleans(), st.integers(0, 39), st.integers(1, 4)), max_size=60),
)
def test_rows_with_free_stays_a_superset(
    cpus: list[int], changes: list[tuple[bool, int, int]]
) -> None:
    cluster = _cluster(cpus)
    cols = np.array([0])
    held = np.zeros(len(cpus), np.int64)
    for take, row, amount in changes:
        row %= len(cpus)
        amount *= 1000
        if take and cluster.free[row, 0] >= amount:
            cluster.take(np.array([row]), np.array([[amount, 0]]), unique=True)
            held[row] += amount
        elif not take and held[row] >= amount:
            cluster.give(np.array([row]), np.array([[amount, 0]]), unique=True)
            held[row] -= amount
        rows = set(cluster.rows_with_free(cols).tolist())
        assert set(np.flatnonzero(cluster.free[:, 0]).tolist()) <= rows


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=4, max_size=40),
    st.integers(1, 12),
    st.integers(1, 3),
    st.sampled_from(["first-fit", "best-fit"]),
)
def test_bounded_planning_reads_fewer_rows_but_plans_the_same(
    cpus: list[int], replicas: int, per_task: int, policy: str
) -> None:
    cluster = _cluster([max(cpu, 1) for cpu in cpus])
    for row, cpu in enumerate(cpus):  # leave exactly ``cpu`` free (none on some nodes)
        taken = int(cluster.free[row, 0]) - cpu * 1000
        if taken:
            cluster.take(np.array([row]), np.array([[taken, 0]]), unique=True)
    vector = cluster.vector(Resources({CPU: per_task * 1000}))
    assert vector is not None
    group = GroupShape("main", replicas, vector, Resources({CPU: per_task * 1000}))
    plans = [
        plan_groups(
            [group],
            cluster.free,
            None,
            max_per_node=None,
            min_tasks=0,
            partial=False,
            policy=PLACEMENT_POLICIES[policy],
            cluster=cluster,
            preference=None,
            bounded=bounded,
        )
        for bounded in (False, True)
    ]
    if plans[0] is None or plans[1] is None:
        assert plans[0] is plans[1] is None
        return
    for (_, nodes_a, counts_a), (_, nodes_b, counts_b) in zip(*plans, strict=True):
        assert nodes_a.tolist() == nodes_b.tolist()
        assert counts_a.tolist() == counts_b.tolist()


def test_ledger_compacts_and_still_releases_what_is_running() -> None:
    running = RunningSet(WIDTH)
    rng = np.random.default_rng(2)
    allocs = {f"j{n}": _allocation(rng) for n in range(2_000)}
    for n, (job_id, alloc) in enumerate(allocs.items()):
        running.add(job_id, float(n % 50), alloc.total, alloc)
    view = running.view()
    view.release(np.zeros((NODES, WIDTH), np.int64), 0, len(view))  # records every job
    ended = [job_id for n, job_id in enumerate(allocs) if n % 5]
    for job_id in ended:  # most rows are dead now: the next release compacts
        running.remove(job_id)
    want = np.zeros((NODES, WIDTH), np.int64)
    for job_id, alloc in allocs.items():
        if job_id not in ended:
            np.add.at(want, alloc.nodes, alloc.amounts)
    got = np.zeros((NODES, WIDTH), np.int64)
    view = running.view()
    view.release(got, 0, len(view))
    assert (got == want).all()
