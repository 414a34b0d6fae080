"""The ``surge-room`` power-saving policy: the plan, the work and room it reads, and the
simulator (the live controller: tests/controller/test_power_surge_room.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.power.test_predictive import NOW, busy, idle
from tests.power.test_surge import MODEL, asleep

import fusesched.sim.power as sim_power
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec
from fusesched.model.resources import CPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.power.forecast import DAY
from fusesched.power.model import CPU_NODE
from fusesched.power.room import node_shares, rows_by_pool, work_and_room
from fusesched.power.saving import SAVING_POLICIES, NodeView, PoolDemand, SavingConfig, plan_power
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.workload import homogeneous_nodes

CFG = SavingConfig(idle_threshold_s=1800, surge_min_idle_s=120)
IDLE = [idle("i1", 4000), idle("i2", 3000), idle("i3", 2000), idle("i4", 1000)]


def plan(policy: str, nodes: list[NodeView], demand: PoolDemand, config: SavingConfig = CFG):
    p = plan_power(policy, NOW, nodes, {"a": demand}, config)
    assert plan_power(policy, NOW, nodes, {"a": demand}, config) == p  # pure
    return p.suspend, p.resume, p.targets["a"]


def test_registered_by_name() -> None:
    assert "surge-room" in SAVING_POLICIES


def test_free_room_on_busy_nodes_keeps_fewer_idle_nodes_awake() -> None:
    nodes = [busy("b1"), busy("b2"), *IDLE]
    # a surge of 3 node-equivalents, 2 of them free on the busy nodes: one idle node is kept
    suspend, resume, target = plan("surge-room", nodes, PoolDemand(surge_nodes=3.0, room_nodes=2))
    assert target == 3 and suspend == ("i1", "i2", "i3") and resume == ()
    # surge, which gives the room no credit, keeps three
    assert plan("surge", nodes, PoolDemand(surge_nodes=3.0, room_nodes=2)) == (("i1",), (), 5)
    # more room than the surge: no headroom beyond the warm reserve
    reserve = SavingConfig(surge_min_idle_s=120, default_min_warm=1)
    demand = PoolDemand(surge_nodes=3.0, room_nodes=5.5)
    assert plan("surge-room", nodes, demand, reserve)[2] == 3
    assert plan("surge-room", nodes, demand)[2] == 2


@pytest.mark.parametrize(
    "demand",
    [
        PoolDemand(surge_nodes=None),
        PoolDemand(queued_nodes=2.0, surge_nodes=None),
        PoolDemand(surge_nodes=0.0),
        PoolDemand(surge_nodes=1.5),
        PoolDemand(queued_nodes=1.2, surge_nodes=2.0),
        PoolDemand(surge_nodes=7.0, held_nodes=1.0),
    ],
)
def test_without_free_room_it_is_surge(demand: PoolDemand) -> None:
    for nodes in ([busy("b"), *IDLE], [busy("b"), idle("i", 300), asleep("s1"), asleep("s2")]):
        assert plan("surge-room", nodes, demand) == plan("surge", nodes, demand)
    # the room is read only by surge-room: surge is unchanged by it
    nodes = [busy("b"), *IDLE]
    roomy = PoolDemand(demand.queued_nodes, surge_nodes=demand.surge_nodes, room_nodes=3.0)
    assert plan("surge", nodes, roomy) == plan("surge", nodes, demand)


def test_work_and_room_per_pool() -> None:
    cpu_used = np.array([1.0, 64.0, 0.0, 2.0, 0.0])
    gpu_used = np.array([2.0, 0.0, 0.0, 8.0, 1.0])
    cpu_cap = np.full(5, 64.0)
    gpu_cap = np.array([8.0, 8.0, 8.0, 8.0, 0.0])  # the last node has no GPUs
    shares = node_shares(cpu_used, gpu_used, cpu_cap, gpu_cap)
    assert shares.tolist() == [0.25, 1.0, 0.0, 1.0, 0.0]
    powered = np.array([True, True, True, True, False])
    rows = rows_by_pool(["a", "a", "a", "b", "b"])
    assert {pool: r.tolist() for pool, r in rows.items()} == {"a": [0, 1, 2], "b": [3, 4]}
    work, room = work_and_room(shares, powered, rows)
    # the idle node is not room (it is headroom); full nodes have none
    assert work == {"a": 1.25, "b": 1.0} and room == {"a": 0.75, "b": 0.0}


def gpu_pool(count: int) -> list[NodeSpec]:
    res = Resources.parse({"cpu": 64, "memory": "64Gi", "nvidia.com/gpu": 8})
    return [NodeSpec(f"g{i}", res, {LABEL_POOL: "gpu"}) for i in range(count)]


def test_the_simulator_feeds_work_and_room(monkeypatch: pytest.MonkeyPatch) -> None:
    # a 2-GPU job from the start; a 7-GPU job at minute 10 does not fit beside it
    jobs = [
        SimJob(
            JobSpec(
                f"j{gpus}",
                (TaskGroup("main", 1, Resources.parse({"cpu": 1, "nvidia.com/gpu": gpus})),),
                walltime_s=7200.0,
                submit_time=t,
            ),
            3600.0,
        )
        for gpus, t in ((2, 0.0), (7, 600.0))
    ]
    seen: dict[str, dict[float, PoolDemand]] = {"surge": {}, "surge-room": {}}
    real = sim_power.plan_power

    def spy(policy: str, now: float, views, demand, config, history):  # type: ignore[no-untyped-def]
        seen[policy][now] = demand["gpu"]
        return real(policy, now, views, demand, config, history)

    monkeypatch.setattr(sim_power, "plan_power", spy)
    warm = SavingConfig(surge_min_idle_s=120, default_min_warm=1)  # the 7-GPU job never waits
    for policy in seen:
        setup = PowerSetup(policy, warm, surge_warm_s=0.0)
        Simulation(gpu_pool(3), jobs, CoreConfig(), power=PowerSim(setup)).run()
    room, surge = seen["surge-room"], seen["surge"]
    # 6 of 8 GPUs free, then 6 and 1 on two busy nodes (the third, idle, is not room)
    assert room[300.0].room_nodes == 0.75 and room[900.0].room_nodes == 0.875
    # the second job is a rise of 7/8 of a node of work, and of one busy node
    assert room[900.0].surge_nodes == 0.875 and surge[900.0].surge_nodes == 1.0
    assert all(d.room_nodes == 0.0 for d in surge.values())


def test_in_the_simulator_whole_node_jobs_give_surge_exactly() -> None:
    # 2-node jobs that fill their nodes (as on HPC2N's one-CPU nodes): no room, the same run
    group = TaskGroup("main", 8, Resources({CPU: 1000}))
    jobs = [
        SimJob(JobSpec(f"j{k}", (group,), walltime_s=600.0, submit_time=k * 3600.0 + 30), 600.0)
        for k in range(36)
    ]

    def once(policy: str) -> tuple[dict[str, float], float, int]:
        setup = PowerSetup(policy, CFG, models={CPU_NODE: MODEL}, surge_warm_s=DAY)
        sim = Simulation(homogeneous_nodes(8, 32), jobs, CoreConfig(), power=PowerSim(setup))
        result = sim.run()
        assert result.power is not None
        waits = {o.job_id: o.start - o.submit for o in result.outcomes}
        return waits, result.power.energy_kwh, result.power.suspends

    got = once("surge-room")
    assert got == once("surge") and got[2] > 0
