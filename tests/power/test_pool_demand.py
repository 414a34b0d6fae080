"""The waiting jobs' demand per pool (power/pool_demand.py, pure): the rules the simulator
and the live controller share (docs/ENERGY.md, "Waiting demand")."""

from __future__ import annotations

from dataclasses import dataclass

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobExited, JobSubmitted, NodeAdded, NodeStateChanged, StartJob
from fusesched.model.job import JobSpec, Placement, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec, NodeState
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.power.pool_demand import least_to_start, node_kinds, waiting_demand
from fusesched.power.saving import PoolDemand


@dataclass(frozen=True)
class Queued:
    """A job as the core queues it: its spec and its shape's number."""

    spec: JobSpec
    shape_id: int


def _node(name: str, pool: str, gpus: int = 2, **labels: str) -> NodeSpec:
    return NodeSpec(name, Resources({CPU: 8000, GPU: gpus}), {LABEL_POOL: pool, **labels})


def _job(tasks: int, gpus: int = 1, min_member: int | None = None, **selector: str) -> JobSpec:
    group = TaskGroup("main", tasks, Resources({CPU: 1000, GPU: gpus}))
    placement = Placement(node_selector=selector)
    return JobSpec("j", (group,), placement=placement, min_member=min_member)


def test_an_elastic_jobs_minimum_is_min_member_of_its_smallest_task() -> None:
    small = TaskGroup("small", 2, Resources({CPU: 1000, GPU: 1}))
    big = TaskGroup("big", 2, Resources({CPU: 4000, GPU: 2}))
    assert least_to_start(JobSpec("j", (small, big))) == [10000, 6]  # every task
    assert least_to_start(JobSpec("j", (small, big), min_member=3)) == [3000, 3]


def test_nodes_of_one_pool_and_size_are_one_kind() -> None:
    nodes = [_node("a0", "a"), _node("a1", "a", ib="yes"), _node("a2", "a", gpus=8)]
    kinds = node_kinds([(nodes[0], "a", True), (nodes[1], "a", False), (nodes[2], "a", True)])
    assert [(k.pool, [n.name for n in k.asleep], [n.name for n in k.powered]) for k in kinds] == [
        ("a", ["a0"], ["a1"]),
        ("a", ["a2"], []),
    ]


def test_a_job_counts_in_the_first_pool_with_a_sleeping_node_it_fits() -> None:
    # b's sleeping node lacks the label the job asks for: it counts in c, whose node has it,
    # and only that node is to be woken first; a is never considered (no sleeping node)
    nodes = [
        (_node("a0", "a", ib="yes"), "a", False),
        (_node("b0", "b"), "b", True),
        (_node("c0", "c", ib="yes"), "c", True),
        (_node("c1", "c"), "c", True),
    ]
    demand = waiting_demand(node_kinds(nodes), [Queued(_job(1, ib="yes"), 1)])
    assert demand == {"c": PoolDemand(queued_nodes=0.5, wake_first=("c0",))}


def test_jobs_of_one_shape_sum_unrounded_and_elastic_ones_at_their_minimum() -> None:
    nodes = [(_node("a0", "a"), "a", True), (_node("a1", "a"), "a", True)]
    jobs = [Queued(_job(1), 1), Queued(_job(1), 1), Queued(_job(4, min_member=1), 2)]
    demand = waiting_demand(node_kinds(nodes), jobs)
    assert demand == {"a": PoolDemand(queued_nodes=1.5, wake_first=("a0", "a1"))}


def test_a_job_whose_groups_no_one_node_could_run_counts_group_by_group() -> None:
    # a GPU group and a 32-CPU group, for a pool of 2-GPU nodes and 64-CPU nodes: the core
    # places the groups on one node of each; no node fits both. Asleep, both are woken for it
    # (counted whole, no node fitting every group, it counted nothing and waited for ever)
    gpu_node = _node("g0", "a")
    cpu_node = NodeSpec("c0", Resources({CPU: 64000}), {LABEL_POOL: "a"})
    core = SchedulerCore()
    for spec in (gpu_node, cpu_node):
        core.handle(NodeAdded(spec), 0.0)
    gpus = TaskGroup("gpus", 1, Resources({CPU: 1000, GPU: 1}))
    cpus = TaskGroup("cpus", 1, Resources({CPU: 32000}))
    (started,) = core.handle(JobSubmitted(JobSpec("up", (gpus, cpus))), 0.0) + core.cycle(0.0)
    assert isinstance(started, StartJob)
    assert [group.rows.tolist() for group in started.groups] == [[0], [1]]
    core.handle(JobExited("up", 0), 1.0)
    for spec in (gpu_node, cpu_node):
        core.handle(NodeStateChanged(spec.name, NodeState.SUSPENDED, "asleep"), 1.0)
    assert core.handle(JobSubmitted(JobSpec("asleep", (gpus, cpus))), 1.0) + core.cycle(1.0) == []
    nodes = [(gpu_node, "a", True), (cpu_node, "a", True)]
    demand = waiting_demand(node_kinds(nodes), core.queue.records)
    # half a 2-GPU node and half a 64-CPU node; both nodes may run part of it
    assert demand == {"a": PoolDemand(queued_nodes=1.0, wake_first=("g0", "c0"))}
    # once the GPU node is up, the GPU group is held there and the CPU group still wakes c0
    # (g0 cannot run the CPU group: idle, it is no help to it)
    nodes = [(gpu_node, "a", False), (cpu_node, "a", True)]
    demand = waiting_demand(node_kinds(nodes), core.queue.records)
    expected = PoolDemand(0.5, held_nodes=0.5, wake_first=("c0",), unfit_powered=("g0",))
    assert demand == {"a": expected}
