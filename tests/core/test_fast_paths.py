"""The replay's fast paths against the general code they stand in for: first fit on one
column, batched queue removals, shapes found by identity, the model's fast ``__init__`` and
``step``'s own dispatch of submits and exits."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.core import placement
from fusesched.core.cluster import ClusterArrays, ones
from fusesched.core.placement import GroupShape, Statement, first_fit_column, plan_groups
from fusesched.core.records import JobRecord, WaitingQueue
from fusesched.core.scheduler import SchedulerCore
from fusesched.core.shapes import ShapeCompiler
from fusesched.model.events import (
    Event,
    GroupPlacement,
    JobExited,
    JobSubmitted,
    NodeAdded,
    ReserveJob,
    StartJob,
)
from fusesched.model.job import Dependency, DependencyKind, JobSpec, TaskGroup
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.phases import IllegalTransition, JobPhase, Transition
from fusesched.model.resources import CPU, Resources
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.queue_order import QUEUE_ORDERS, JobFacts
from fusesched.policies.registry import CoreConfig


def _cluster(free_cpus: list[int], per_node: int) -> ClusterArrays:
    """Nodes of ``per_node`` CPUs each, with ``free_cpus[k]`` of node k still free."""
    cluster = ClusterArrays()
    for k in range(len(free_cpus)):
        cluster.add_node(NodeSpec(f"n{k}", Resources({CPU: per_node * 1000})), NodeState.UP)
    col = cluster.columns[CPU]
    for k, free in enumerate(free_cpus):
        busy = (per_node - free) * 1000
        if busy:
            row = np.zeros((1, len(cluster.columns)), np.int64)
            row[0, col] = busy
            cluster.take(np.array([k]), row, unique=True)
    return cluster


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda per_node: st.tuples(
            st.just(per_node),
            st.lists(st.integers(0, per_node), min_size=1, max_size=600),
            st.integers(1, 40),
        )
    )
)
def test_first_fit_column_matches_planning(case: tuple[int, list[int], int]) -> None:
    per_node, free_cpus, tasks = case
    fast, slow = _cluster(free_cpus, per_node), _cluster(free_cpus, per_node)
    for size in (tasks, max(1, tasks // 3)):  # the second one starts from a known full prefix
        if size * 1000 <= fast.free_total.item(fast.columns[CPU]):
            _compare_first_fit(fast, slow, size)


def _compare_first_fit(fast: ClusterArrays, slow: ClusterArrays, tasks: int) -> None:
    col = fast.columns[CPU]
    per_task = np.zeros(len(fast.columns), np.int64)
    per_task[col] = 1000
    group = GroupShape("main", tasks, per_task, Resources({CPU: 1000}))
    total = per_task * tasks
    alloc = first_fit_column(fast, group, col, tasks * 1000, 1000, total)
    plan = plan_groups(
        [group],
        slow.free,
        None,
        max_per_node=None,
        min_tasks=0,
        partial=False,
        policy=PLACEMENT_POLICIES["first-fit"],
        cluster=slow,
        preference=None,
    )
    assert plan is not None
    statement = Statement(slow)
    for g, nodes, counts in plan:
        statement.allocate(g, nodes, counts)
    expected = statement.commit()
    (_, nodes, counts), (_, want_nodes, want_counts) = alloc.groups[0], expected.groups[0]
    assert nodes.tolist() == want_nodes.tolist()
    assert counts.tolist() == want_counts.tolist()
    assert alloc.amounts.tolist() == expected.amounts.tolist()
    assert fast.free.tolist() == slow.free.tolist()
    assert fast.free_total.tolist() == slow.free_total.tolist()


@pytest.mark.parametrize("from_zero", [0, 10**9])
def test_first_fit_column_over_several_windows(
    monkeypatch: pytest.MonkeyPatch, from_zero: int
) -> None:
    monkeypatch.setattr(placement, "FROM_ZERO", from_zero)  # rows found from 0 or from start
    monkeypatch.setattr(placement, "FIRST_FIT_CHUNK", 16)  # several passes on 700 nodes
    rng = np.random.default_rng(5)
    free = rng.integers(0, 3, size=700).tolist()
    fast, slow = _cluster(free, 2), _cluster(free, 2)
    for _ in range(40):
        tasks = int(rng.integers(1, 30))
        if tasks * 1000 > fast.free_total.item(fast.columns[CPU]):
            break
        _compare_first_fit(fast, slow, tasks)


def test_ones_are_shared_and_read_only() -> None:
    one = ones(5)
    assert one.tolist() == [1] * 5 and one.dtype == np.int64
    with pytest.raises(ValueError):
        one[0] = 2
    assert ones(10_000).tolist() == [1] * 10_000  # grows when asked for more


def _record(seq: int, submit: float) -> JobRecord:
    spec = JobSpec(
        id=f"j{seq}",
        task_groups=(TaskGroup("main", 1, Resources({CPU: 1000})),),
        submit_time=submit,
    )
    facts = JobFacts(submit, 60.0, 1.0, 0, 1)
    rec = JobRecord(
        spec, seq, JobPhase.QUEUED, None, np.array([seq, 0]), np.array([seq, 1]), 60.0, facts
    )
    rec.key = (submit,)
    return rec


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.lists(st.integers(0, 59), unique=True, max_size=40))
def test_queue_removals_at_once_or_one_by_one(size: int, chosen: list[int]) -> None:
    positions = [p for p in chosen if p < size]
    queue, reference = WaitingQueue(QUEUE_ORDERS["fcfs"], 2), WaitingQueue(QUEUE_ORDERS["fcfs"], 2)
    for seq in range(size):
        rec = _record(seq, float(seq % 7))
        queue.push(rec, 0.0)
        reference.push(rec, 0.0)
    queue.remove_at(positions)
    for pos in sorted(positions, reverse=True):
        reference.remove_at([pos])
    assert [r.id for r in queue.records] == [r.id for r in reference.records]
    assert queue.rows.tolist() == reference.rows.tolist()
    for rec in reference.records:  # the keys stay in step: positions are found again
        assert queue.position(rec) == reference.position(rec)


def test_shapes_found_by_identity_or_by_value() -> None:
    cluster = ClusterArrays()
    cluster.add_node(NodeSpec("n0", Resources({CPU: 4000})), NodeState.UP)
    shapes = ShapeCompiler(cluster, PLACEMENT_POLICIES["first-fit"], False)
    groups = (TaskGroup("main", 2, Resources({CPU: 1000})),)
    a = JobSpec(id="a", task_groups=groups)
    b = JobSpec(id="b", task_groups=groups)
    c = JobSpec(id="c", task_groups=(TaskGroup("main", 2, Resources({CPU: 1000})),))
    d = JobSpec(id="d", task_groups=groups, min_member=1)
    first = shapes.shape_of(a)
    assert shapes.shape_of(b) is first  # the same objects
    assert shapes.shape_of(c) is first  # equal by value
    assert shapes.shape_of(d) is not first  # a gang size of its own
    shapes.clear()
    assert shapes.shape_of(a) is not first  # compiled again after a cluster change


@pytest.mark.parametrize(
    "cls", [JobSpec, TaskGroup, JobSubmitted, JobExited, StartJob, ReserveJob, GroupPlacement]
)
def test_fast_init_keeps_the_dataclass_signature(cls: type) -> None:
    params = list(inspect.signature(cls).parameters.values())
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        if f.default is not dataclasses.MISSING:
            assert p.default is f.default


def test_fast_init_objects_behave_as_before() -> None:
    exited = JobExited("j1", timed_out=True)
    assert exited == JobExited("j1", 0, "", True, False, (), 0.0)
    assert hash(exited) == hash(JobExited("j1", 0, "", True))
    assert dataclasses.replace(exited, exit_code=3).exit_code == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        exited.job_id = "j2"  # type: ignore[misc]
    with pytest.raises(ValueError, match="needs an id"):  # __post_init__ still runs
        JobSpec(id="", task_groups=(TaskGroup("main", 1, Resources({CPU: 1000})),))
    with pytest.raises(ValueError, match="replicas"):
        TaskGroup("main", 0, Resources({CPU: 1000}))
    spec = JobSpec(id="x", task_groups=(TaskGroup("main", 1, Resources({CPU: 1000})),))
    assert spec.placement.node_selector == {} and spec.dependencies == ()
    with pytest.raises(TypeError):
        JobExited()  # type: ignore[call-arg]


def test_step_dispatch_matches_handle_then_cycle() -> None:
    """``step`` hands submits and exits to their handlers itself; the same events through
    ``handle`` one by one and then ``cycle`` give the same decisions and job phases
    (dependents settled after a failure and a success, a rejection, backfilling)."""

    def spec(name: str, cpus: int, walltime: float, after: str = "") -> JobSpec:
        deps = (Dependency(DependencyKind.AFTER_OK, after),) if after else ()
        group = TaskGroup("main", cpus, Resources({CPU: 1000}))
        return JobSpec(id=name, task_groups=(group,), walltime_s=walltime, dependencies=deps)

    script: list[tuple[float, list[Event]]] = [
        (0.0, [NodeAdded(NodeSpec(f"n{k}", Resources({CPU: 4000}))) for k in range(3)]),
        (1.0, [JobSubmitted(spec("a", 8, 100)), JobSubmitted(spec("big", 64, 10))]),
        (2.0, [JobSubmitted(spec("b", 8, 50)), JobSubmitted(spec("c", 2, 20, after="a"))]),
        (3.0, [JobSubmitted(spec("d", 2, 30, after="b")), JobSubmitted(spec("e", 4, 5))]),
        (8.0, [JobExited("e"), JobSubmitted(spec("f", 4, 60))]),
        (100.0, [JobExited("a")]),
        (150.0, [JobExited("b", 1), JobExited("f")]),
        (160.0, [JobExited("c")]),
    ]
    config = CoreConfig(queue_order="fcfs", backfill="easy")
    fast, slow = SchedulerCore(config), SchedulerCore(config)
    for now, events in script:
        expected = [d for e in events for d in slow.handle(e, now)] + slow.cycle(now)
        assert fast.step(now, events) == expected
    assert {i: r.phase for i, r in fast.jobs.items()} == {i: r.phase for i, r in slow.jobs.items()}
    assert fast.jobs["d"].phase is JobPhase.CANCELLED  # its dependency failed
    assert fast.jobs["c"].phase is JobPhase.COMPLETED


def test_free_sums_follow_every_change() -> None:
    """The cluster's per-column free sums (a list, changed in place) and their array form
    agree with the free matrix on UP nodes after takes, gives, first-fit allocations and
    releases, a node going down and a node added."""
    cluster = _cluster([4, 2, 0, 3, 4], per_node=4)
    sums = cluster.free_sums  # held across the changes: it is changed in place

    def check() -> None:
        expected = cluster.free[cluster.up].sum(axis=0).tolist()
        assert sums == expected and cluster.free_total.tolist() == expected

    check()
    col = cluster.columns[CPU]
    group = GroupShape("main", 5, np.array([1000]), Resources({CPU: 1000}))
    alloc = first_fit_column(cluster, group, col, 5000, 1000, np.array([5000]))
    check()
    cluster.give_column(alloc.nodes, col, alloc.column_amounts, alloc.total)  # type: ignore[arg-type]
    check()
    row = np.array([[3000]])
    cluster.take(np.array([4]), row, unique=True)
    check()
    cluster.set_state("n1", NodeState.DOWN)
    check()
    cluster.give(np.array([4]), row, unique=True)
    check()
    cluster.add_node(NodeSpec("n5", Resources({CPU: 2000, "fpga": 1})), NodeState.UP)
    check()
    assert len(sums) == 2 and sums[cluster.columns["fpga"]] == 1


def test_record_fields_from_the_shape_by_position() -> None:
    """Intake builds a job's record by position: each field holds what its name says."""
    core = SchedulerCore(CoreConfig())
    core.handle(NodeAdded(NodeSpec("n0", Resources({CPU: 8000}))), 0.0)
    spec = JobSpec(id="j", task_groups=(TaskGroup("main", 3, Resources({CPU: 2000})),))
    core.step(1.0, [JobSubmitted(spec)])
    rec = core.jobs["j"]
    shape = core.shapes.shape_of(spec)
    assert (rec.spec, rec.seq, rec.groups, rec.estimate) == (spec, 1, shape.groups, 3600.0)
    assert rec.total is shape.total and rec.bound is shape.bound and rec.facts.procs == 6.0
    assert (rec.never_fits, rec.shape_id, rec.family) == ("", shape.number, shape.family)
    assert (rec.single_column, rec.single_amount, rec.single_total) == (0, 2000, 6000)
    assert (rec.fluid, rec.waiting_on, rec.key) == (False, set(), (0.0,))  # (submitted at 0)
    assert rec.phase is JobPhase.RUNNING and rec.start_time == 1.0 and rec.allocation


def test_history_is_told_from_the_recorded_steps() -> None:
    """A record keeps its phase changes as plain tuples and tells them as ``Transition``s;
    an illegal change still raises."""
    core = SchedulerCore(CoreConfig())
    core.handle(NodeAdded(NodeSpec("n0", Resources({CPU: 1000}))), 0.0)
    spec = JobSpec(id="j", task_groups=(TaskGroup("main", 1, Resources({CPU: 1000})),))
    core.step(1.0, [JobSubmitted(spec)])
    core.step(5.0, [JobExited("j")])
    history = core.jobs["j"].history
    assert [type(t) for t in history] == [Transition] * 3
    assert [(t.time, t.old, t.new, t.reason) for t in history] == [
        (1.0, JobPhase.PENDING, JobPhase.QUEUED, "submitted"),
        (1.0, JobPhase.QUEUED, JobPhase.RUNNING, "resources available"),
        (5.0, JobPhase.RUNNING, JobPhase.COMPLETED, "exit 0"),
    ]
    with pytest.raises(IllegalTransition):
        core.jobs["j"].move(JobPhase.RUNNING, 6.0, "again")
    assert len(core.jobs["j"].history) == 3
