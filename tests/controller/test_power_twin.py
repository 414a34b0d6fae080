"""The live controller and the simulator count waiting power demand the same way: both call
:func:`fusesched.power.pool_demand.waiting_demand` on the core's queue, so the same nodes and
waiting jobs give the same per-pool demand. And the rules it applies: a job without a pool
selector wakes nodes in one pool, not in every pool that could run it; an elastic job
(``min_member``) counts its minimum, what it can start with (docs/ENERGY.md)."""

from __future__ import annotations

from pathlib import Path

from tests.builders import Clock
from tests.controller.test_power_surge_room import start, tick
from tests.controller.test_power_waiting import put_to_sleep

from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.controller.service import Controller
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobSubmitted, NodeAdded, NodeStateChanged, StartJob
from fusesched.model.node import NodeState
from fusesched.power.saving import PoolDemand, PowerState
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch

#: per pool, its nodes (8 CPUs, 2 GPUs each); the first of each is powered, the others asleep
POOLS = {"a": ("a0", "a1"), "b": ("b0", "b1", "b2"), "c": ("c0",)}
ASLEEP = ("a1", "b1", "b2")


def _inventory(name: str, pool: str) -> NodeInventory:
    devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(2)]
    return NodeInventory(
        name=name,
        resources={"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "2"},
        labels={"fusesched.io/pool": pool},
        devices=devices,
    )


def _request(*args: str, pool: str | None = None, min_member: int | None = None) -> JobRequest:
    request = parse_sbatch("#!/bin/sh\nsleep 600\n", args=list(args)).request
    if pool is not None:
        placement = request.placement.model_copy(
            update={"node_selector": {"fusesched.io/pool": pool}}
        )
        request = request.model_copy(update={"placement": placement})
    return request.model_copy(update={"min_member": min_member})


#: a 1-GPU job for any pool (half of a node)
ANY_POOL = _request("-n", "1", "--gres=gpu:1")
#: 4 tasks of 1 GPU for pool b, that can start with 2 (one node; all 4 would be two)
ELASTIC = _request("-n", "4", "--gpus-per-task=1", pool="b", min_member=2)
#: a 1-GPU job for pool c, which has no sleeping node: held there
HELD = _request("-n", "1", "--gres=gpu:1", pool="c")
#: 4 tasks of 1 GPU for any pool, that can start with 1
ELASTIC_ANY = _request("-n", "4", "--gpus-per-task=1", min_member=1)


def _live(path: Path, clock: Clock, *waiting: JobRequest) -> tuple[Controller, list[str]]:
    """The nodes of :data:`POOLS` (:data:`ASLEEP` asleep, the others busy with one exclusive
    job) and ``waiting`` queued; returns the controller and its jobs' ids in submit order."""
    path.mkdir()
    ctl = Controller(
        Persistence(f"sqlite:///{path / 'db.sqlite'}"), LogStore(path / "logs"), clock=clock
    )
    for pool, names in POOLS.items():
        for name in names:
            ctl.register(_inventory(name, pool))
    ctl.power = PowerManager(
        PowerConfig(("true",), ("true",), policy="idle-timeout", interval_s=1.0)
    )
    with ctl.lock:
        ctl.power.tick(ctl, clock.now)  # (every node seen, awake)
    put_to_sleep(ctl, clock, *ASLEEP)
    start(ctl, "-N", "3", "--exclusive")  # a0, b0, c0 busy
    jobs = list(ctl.core.jobs)
    jobs += ctl.submit(list(waiting))
    ctl.run_cycle()
    assert [ctl.core.jobs[job].phase.value for job in jobs[1:]] == ["queued"] * len(waiting)
    return ctl, jobs


def _sim(ctl: Controller, jobs: list[str]) -> PowerSim:
    """The simulator's power hook on the same nodes, asleep and busy alike, with the same
    jobs submitted (the live core's specs)."""
    nodes = [ctl.nodes[name].spec for names in POOLS.values() for name in names]
    core = SchedulerCore()
    for spec in nodes:
        core.handle(NodeAdded(spec), 0.0)
    sim = PowerSim(PowerSetup("idle-timeout"))
    sim.attach(core, nodes)
    for name in ASLEEP:
        sim._set_state(sim.index[name], PowerState.SUSPENDED, 0.0)
        core.handle(NodeStateChanged(name, NodeState.SUSPENDED, "test: asleep"), 0.0)
    for job in jobs:
        decisions = core.handle(JobSubmitted(ctl.core.jobs[job].spec), 0.0) + core.cycle(0.0)
        for decision in decisions:  # (what the engine tells the hook: the filler started)
            if isinstance(decision, StartJob):
                sim._start(decision, 0.0)
    assert [rec.id for rec in core.queue.records] == jobs[1:]
    return sim


def _resuming(states: dict[str, PowerState]) -> list[str]:
    return sorted(name for name, state in states.items() if state is PowerState.RESUMING)


def test_live_and_simulator_count_the_same_demand(tmp_path: Path, clock: Clock) -> None:
    ctl, jobs = _live(tmp_path / "c", clock, ANY_POOL, ELASTIC, HELD, ELASTIC_ANY)
    assert ctl.power is not None
    with ctl.lock:
        live = ctl.power._demand(ctl)
    simulated = _sim(ctl, jobs).waiting(0.0)
    assert live == simulated
    # the job without a selector and the elastic one for any pool count once, in pool a (the
    # first by name with a sleeping node that fits), 1/2 each; the elastic job for pool b its
    # two tasks (one node), not four; the job for c is held there (no sleeping node to wake)
    assert live == {
        "a": PoolDemand(queued_nodes=1.0, wake_first=("a1",)),
        "b": PoolDemand(queued_nodes=1.0, wake_first=("b1", "b2")),
        "c": PoolDemand(held_nodes=0.5),
    }
    ctl.persist.close()


def test_a_job_without_a_pool_selector_wakes_one_pool_in_the_simulator(
    tmp_path: Path, clock: Clock
) -> None:
    # pools a and b each have a sleeping node that could run it: one node is woken, in a
    # (it counted against every pool, and woke a node in each)
    ctl, jobs = _live(tmp_path / "c", clock, ANY_POOL)
    sim = _sim(ctl, jobs)
    sim._control(0.0)
    assert _resuming(dict(zip(sim.names, sim.state, strict=True))) == ["a1"]
    ctl.persist.close()


def test_an_elastic_job_wakes_its_minimum_live(tmp_path: Path, clock: Clock) -> None:
    # 4 tasks of 1 GPU that can start with 2: one 2-GPU node of b is woken, not two (live it
    # counted its full request; the simulator's single-pool count, its minimum)
    ctl, _ = _live(tmp_path / "c", clock, ELASTIC)
    assert ctl.power is not None
    tick(ctl, clock, 1)
    assert _resuming({name: node.power for name, node in ctl.power.nodes.items()}) == ["b1"]
    ctl.persist.close()


def test_both_sides_wake_the_same_nodes(tmp_path: Path, clock: Clock) -> None:
    ctl, jobs = _live(tmp_path / "c", clock, ANY_POOL, ELASTIC, HELD, ELASTIC_ANY)
    assert ctl.power is not None
    sim = _sim(ctl, jobs)
    tick(ctl, clock, 1)
    sim._control(0.0)
    live = _resuming({name: node.power for name, node in ctl.power.nodes.items()})
    assert live == _resuming(dict(zip(sim.names, sim.state, strict=True))) == ["a1", "b1"]
    ctl.persist.close()


def test_only_jobs_the_core_would_start_now_wake_nodes_live(tmp_path: Path, clock: Clock) -> None:
    # both sides count the core's waiting queue: a job whose dependency is met wakes nodes
    # (any job with dependencies was skipped live); one still waiting for its dependency, a
    # user's hold or its begin time, until it is a boot away, does not (it was counted from
    # its submission, keeping nodes awake until then), nor an array's members beyond its
    # throttle (each was)
    ctl, jobs = _live(tmp_path / "c", clock)
    filler = jobs[0]  # (running: an ``after`` dependency on it is met)
    begins = _request("-n", "1", "--gres=gpu:1").model_copy(update={"begin_time": clock.now + 3600})
    ctl.submit(
        [
            _request("-n", "1", "--gres=gpu:1", f"--dependency=afterok:{filler}"),
            _request("-n", "1", "--gres=gpu:2", f"--dependency=after:{filler}"),
            _request("-n", "1", "--gres=gpu:1", "--hold"),
            begins,
            _request("-n", "1", "--gres=gpu:1", "--array=0-3%1", pool="b"),
        ]
    )
    ctl.run_cycle()
    assert ctl.power is not None
    with ctl.lock:
        demand = ctl.power._demand(ctl)
    assert demand == {
        "a": PoolDemand(queued_nodes=1.0, wake_first=("a1",)),  # the met dependency
        "b": PoolDemand(queued_nodes=0.5, wake_first=("b1", "b2")),  # one array member
    }
    # its begin time within a boot (wake latency + a power interval) of now: it counts, so
    # that its node is up when it comes (not one boot late)
    config = ctl.power.config
    clock.now += 3600 - (config.wake_latency_s + config.interval_s) / 2
    ctl.run_cycle()
    with ctl.lock:
        assert ctl.power._demand(ctl)["a"] == PoolDemand(queued_nodes=1.5, wake_first=("a1",))
    clock.now += 3600  # past the begin time: queued, and it still counts once
    ctl.run_cycle()
    with ctl.lock:
        assert ctl.power._demand(ctl)["a"] == PoolDemand(queued_nodes=1.5, wake_first=("a1",))
    ctl.persist.close()
