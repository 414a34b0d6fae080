"""Power saving and task groups with label filters of their own (power/pool_demand.py
``job_parts``): each such group counts against the pool whose sleeping nodes it may use, so a
job whose groups need different pools wakes each of them (no processes)."""

from __future__ import annotations

from types import SimpleNamespace

from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.core.cluster import ClusterArrays
from fusesched.model.job import JobSpec, Placement, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec, NodeState
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.power.saving import PoolDemand, PowerState


def _node(name: str, pool: str, gpus: int = 0) -> SimpleNamespace:
    capacity = Resources({CPU: 4000, GPU: gpus} if gpus else {CPU: 4000})
    spec = NodeSpec(name, capacity, {LABEL_POOL: pool})
    return SimpleNamespace(spec=spec, state=NodeState.UP, drain=None)


def _demand(spec: JobSpec) -> dict[str, PoolDemand]:
    """The demand of ``spec`` waiting while pools ``cpu`` and ``gpu`` are asleep."""
    nodes = {"c1": _node("c1", "cpu"), "g1": _node("g1", "gpu", gpus=2)}
    core = SimpleNamespace(
        queue=SimpleNamespace(records=[SimpleNamespace(spec=spec, shape_id=1)]),
        completing={},
        cluster=ClusterArrays(),  # (nothing booked)
        due_within=lambda horizon_s: [],  # (no begin time, no backoff)
        licenses=None,  # (the cluster has none)
    )
    ctl = SimpleNamespace(
        nodes=nodes, jobs=[spec.id], core=core, tasks={}, outliving={}, clock=lambda: 0.0
    )
    manager = PowerManager(PowerConfig(("true",), ("true",), policy="idle-timeout"))
    manager._views(ctl, 0.0)  # type: ignore[arg-type]
    for name in nodes:
        manager.nodes[name].power = PowerState.SUSPENDED
    return manager._demand(ctl)  # type: ignore[arg-type]


def test_each_groups_own_pool_is_woken() -> None:
    # a Kubeflow Master on the CPU pool and GPU Workers: the GPU nodes could hold both, but
    # the Master may not go there; counted there alone, the CPU pool stayed asleep
    master = TaskGroup(
        "master", 1, Resources({CPU: 1000}), Placement(node_selector={LABEL_POOL: "cpu"})
    )
    worker = TaskGroup("worker", 2, Resources({CPU: 1000, GPU: 1}))
    demand = _demand(JobSpec("j", (master, worker)))
    assert set(demand) == {"cpu", "gpu"}
    assert demand["cpu"].queued_nodes > 0 and demand["gpu"].queued_nodes > 0


def test_a_job_without_group_filters_counts_once_as_before() -> None:
    master = TaskGroup("master", 1, Resources({CPU: 1000}))
    worker = TaskGroup("worker", 2, Resources({CPU: 1000, GPU: 1}))
    expected = PoolDemand(queued_nodes=1.0, wake_first=("g1",))  # the node that can run it
    assert _demand(JobSpec("j", (master, worker))) == {"gpu": expected}
