"""``surge-room`` in the live controller: it is accepted, and the work and free room it feeds
the policy come from what the core has booked on each node (as the simulator counts them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.builders import Clock

import fusesched.controller.power as live_power
from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.power.saving import PoolDemand, SavingConfig
from fusesched.submit.sbatch import parse_sbatch


def gpu_node(name: str) -> NodeInventory:
    """8 CPUs and 2 GPUs in pool ``gpu``."""
    devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(2)]
    return NodeInventory(
        name=name,
        resources={"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "2"},
        labels={"fusesched.io/pool": "gpu"},
        devices=devices,
    )


def cluster(path: Path, clock: Clock, policy: str, nodes: int = 4) -> Controller:
    """``nodes`` GPU nodes, all idle, under ``policy`` with a surge tracker warm at once."""
    path.mkdir()
    ctl = Controller(
        Persistence(f"sqlite:///{path / 'db.sqlite'}"), LogStore(path / "logs"), clock=clock
    )
    for k in range(nodes):
        ctl.register(gpu_node(f"g{k}"))
    ctl.power = PowerManager(
        PowerConfig(
            ("true",),
            ("true",),
            policy=policy,
            interval_s=1.0,
            saving=SavingConfig(surge_min_idle_s=60.0),
            wake_latency_s=300.0,
            forecast_bin_s=60.0,
            surge_memory_days=1,
            surge_warm_s=0.0,
        )
    )
    return ctl


def start(ctl: Controller, *args: str) -> None:
    """Submit an sbatch job with ``args`` and let the core start it."""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 600\n", args=list(args)).request])
    ctl.run_cycle()
    assert ctl.core.jobs[job].phase.value == "running"


def tick(ctl: Controller, clock: Clock, seconds: float) -> None:
    clock.now += seconds
    assert ctl.power is not None
    with ctl.lock:
        ctl.power.tick(ctl, clock.now)


def suspended(ctl: Controller) -> list[str]:
    return sorted(name for name, n in ctl.nodes.items() if n.state is NodeState.SUSPENDED)


def test_the_live_config_accepts_surge_room() -> None:
    data = {"policy": "surge-room", "suspend": ["true"], "resume": ["true"]}
    assert PowerConfig.parse(data, "power.yaml").policy == "surge-room"
    # its surge tracker is bounded as surge's is
    too_many = data | {"forecast_bin_s": 1, "surge_memory_days": 366}
    with pytest.raises(ValueError, match=r"^power.yaml: .*must be at most 100,000 bins"):
        PowerConfig.parse(too_many, "power.yaml")


def test_a_half_booked_node_is_half_a_node_of_work_and_half_of_room(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = cluster(tmp_path / "c", clock, "surge-room", nodes=3)
    start(ctl, "--gres=gpu:1", "-n", "1")  # 1 of g0's 2 GPUs (and 1 of its 8 CPUs)
    assert ctl.power is not None
    assert ctl.power._work_and_room(ctl) == ({"gpu": 0.5}, {"gpu": 0.5})
    seen: list[PoolDemand] = []
    real = live_power.plan_power

    def spy(policy, now, views, demand, config, history):  # type: ignore[no-untyped-def]
        seen.append(demand["gpu"])
        return real(policy, now, views, demand, config, history)

    monkeypatch.setattr(live_power, "plan_power", spy)
    tick(ctl, clock, 1)
    assert seen[-1].room_nodes == 0.5
    # a 3-CPU job beside it: CPUs 4/8, GPUs still 1/2 -> the same share
    start(ctl, "-n", "3")
    assert ctl.power._work_and_room(ctl) == ({"gpu": 0.5}, {"gpu": 0.5})
    # a whole node's CPUs on g1: its share is 1, no room there
    start(ctl, "-N", "1", "-n", "8")
    assert ctl.power._work_and_room(ctl) == ({"gpu": 1.5}, {"gpu": 0.5})
    # a drained node's free room serves no burst: it is work, not room
    ctl.nodes["g0"].drain = "maintenance"
    assert ctl.power._work_and_room(ctl) == ({"gpu": 1.5}, {"gpu": 0.0})
    # surge is fed no room
    plain = cluster(tmp_path / "s", clock, "surge", nodes=2)
    plain_spy: list[PoolDemand] = []
    monkeypatch.setattr(
        live_power,
        "plan_power",
        lambda policy, now, views, demand, config, history: (
            plain_spy.append(demand["gpu"]) or real(policy, now, views, demand, config, history)
        ),
    )
    start(plain, "--gres=gpu:1", "-n", "1")
    tick(plain, clock, 1)
    assert plain_spy[-1].room_nodes == 0.0 and plain_spy[-1].surge_nodes == 0.0
    ctl.persist.close()
    plain.persist.close()


@pytest.mark.parametrize(("policy", "asleep"), [("surge", 2), ("surge-room", 3)])
def test_room_on_a_busy_node_keeps_fewer_idle_nodes_awake(
    tmp_path: Path, clock: Clock, policy: str, asleep: int
) -> None:
    # four idle nodes; a 1-GPU job arrives on g0. surge sees a rise of one busy node and keeps
    # one idle node booted for the next; surge-room sees half a node of work, and the other
    # half free on g0 already covers it: every idle node goes
    ctl = cluster(tmp_path / "c", clock, policy)
    tick(ctl, clock, 0)  # nothing running: the tracker's low
    start(ctl, "--gres=gpu:1", "-n", "1")
    tick(ctl, clock, 30)  # the rise; nothing idle long enough yet
    assert suspended(ctl) == []
    tick(ctl, clock, 60)
    assert len(suspended(ctl)) == asleep and "g0" not in suspended(ctl)
    ctl.persist.close()


def test_waiting_jobs_count_as_their_work_not_as_whole_nodes(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both nodes full; four 1-GPU jobs wait. The tracker's signal is work in node-equivalents
    # (as in the simulator): 2 nodes + 4 × 1/2, not 2 + 4 whole nodes, which would make each
    # small job's arrival a rise of a whole node and keep that many idle nodes booted
    ctl = cluster(tmp_path / "c", clock, "surge-room", nodes=2)
    for _ in range(2):
        start(ctl, "--gres=gpu:2", "-n", "1")
    script = parse_sbatch("#!/bin/sh\nsleep 600\n", args=["--gres=gpu:1"]).request
    ctl.submit([script] * 4)
    ctl.run_cycle()
    assert ctl.power is not None
    seen: list[dict[str, float]] = []
    real = ctl.power.surger.observe

    def observe(now: float, needed: dict[str, float]) -> None:
        seen.append(dict(needed))
        real(now, needed)

    monkeypatch.setattr(ctl.power.surger, "observe", observe)
    tick(ctl, clock, 1)
    assert seen == [{"gpu": 4.0}]
    ctl.persist.close()
