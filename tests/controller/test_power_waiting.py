"""The live controller counts waiting jobs as the simulator does (power/waiting.py): in
node-equivalents, unrounded, both in the forecasters' signal and in what is woken for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.builders import Clock
from tests.controller.test_power_surge_room import cluster, start, tick

import fusesched.controller.power as live_power
from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.power.saving import PowerState
from fusesched.submit.sbatch import parse_sbatch

#: each forecasting policy and the PowerManager attribute that observes its signal
FEEDS = [("forecast", "forecaster"), ("predictive", "riser"), ("surge", "surger")]


def wait_small_jobs(ctl: Controller, count: int) -> None:
    """Submit ``count`` 1-GPU jobs (half of a 2-GPU node each) that cannot start now."""
    script = parse_sbatch("#!/bin/sh\nsleep 600\n", args=["--gres=gpu:1"]).request
    jobs = ctl.submit([script] * count)
    ctl.run_cycle()
    assert all(ctl.core.jobs[job].phase.value == "queued" for job in jobs)


def put_to_sleep(ctl: Controller, clock: Clock, *names: str) -> None:
    assert ctl.power is not None
    for name in names:
        ctl.power.nodes[name] = live_power._Node(PowerState.SUSPENDED, clock.now)
        live_power._set_state(ctl, name, NodeState.SUSPENDED, "test: asleep", clock.now)


@pytest.mark.parametrize(("policy", "feed"), FEEDS)
def test_waiting_jobs_feed_their_share_of_a_node_not_a_node_each(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, policy: str, feed: str
) -> None:
    # both nodes full; four 1-GPU jobs wait. The signal is 2 busy nodes + 4 × 1/2 (as the
    # simulator's busy + queued node-equivalents), not 2 + 4 whole nodes: a burst of small
    # jobs is not a rise of one node each
    ctl = cluster(tmp_path / "c", clock, policy, nodes=2)
    for _ in range(2):
        start(ctl, "--gres=gpu:2", "-n", "1")
    wait_small_jobs(ctl, 4)
    assert ctl.power is not None
    seen: list[dict[str, float]] = []
    tracker = getattr(ctl.power, feed)
    real = tracker.observe
    monkeypatch.setattr(
        tracker, "observe", lambda now, needed: seen.append(dict(needed)) or real(now, needed)
    )
    tick(ctl, clock, 1)
    assert seen == [{"gpu": 4.0}]
    ctl.persist.close()


@pytest.mark.parametrize(
    "policy", ["idle-timeout", "forecast", "predictive", "surge", "surge-room"]
)
def test_small_waiting_jobs_that_fit_one_node_wake_one_node(
    tmp_path: Path, clock: Clock, policy: str
) -> None:
    # g0 is full, g1-g3 asleep; two 1-GPU jobs wait that fit one 2-GPU node together: one node
    # is resumed for both (the pool's node-equivalents, 1.0, rounded up), not one each
    ctl = cluster(tmp_path / "c", clock, policy, nodes=4)
    start(ctl, "--gres=gpu:2", "-n", "1")
    put_to_sleep(ctl, clock, "g1", "g2", "g3")
    wait_small_jobs(ctl, 2)
    assert ctl.power is not None
    assert ctl.power._demand(ctl)["gpu"].queued_nodes == 1.0
    tick(ctl, clock, 1)
    resuming = [n for n, e in ctl.power.nodes.items() if e.power is PowerState.RESUMING]
    assert len(resuming) == 1
    # a third job needs a second node: 1.5 rounds up to 2
    wait_small_jobs(ctl, 1)
    assert ctl.power._demand(ctl)["gpu"].queued_nodes == 1.5
    ctl.persist.close()


def mixed_pool_waiting(tmp_path: Path, clock: Clock, big: str) -> Controller:
    """Pool "gpu" of four sleeping 2-GPU nodes g0-g3 (type=small) and a sleeping 8-GPU one
    named ``big`` (type=big); four jobs wait, each for a whole small node (-C type=small)."""
    ctl = cluster(tmp_path / "c", clock, "idle-timeout", nodes=0)
    for name, gpus, kind in [*((f"g{k}", 2, "small") for k in range(4)), (big, 8, "big")]:
        ctl.register(
            NodeInventory(
                name=name,
                resources={"cpu": str(4 * gpus), "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
                labels={"fusesched.io/pool": "gpu", "type": kind},
                devices=[DeviceInfo(index=i, uuid=f"GPU-{name}-{i}") for i in range(gpus)],
            )
        )
    put_to_sleep(ctl, clock, "g0", "g1", "g2", "g3", big)
    script = parse_sbatch("#!/bin/sh\nsleep 600\n", args=["--gres=gpu:2", "-C", "type=small"])
    ctl.submit([script.request] * 4)
    ctl.run_cycle()
    return ctl


def test_a_job_for_the_small_nodes_of_a_mixed_pool_counts_its_share_of_those(
    tmp_path: Path, clock: Clock
) -> None:
    # each job is one node to wake, not 2/8 of the big node that cannot run it (1.0 in all:
    # one node woken at a time, one job per boot)
    ctl = mixed_pool_waiting(tmp_path, clock, "zbig")
    assert ctl.power is not None
    assert ctl.power._demand(ctl)["gpu"].queued_nodes == 4.0
    tick(ctl, clock, 1)
    resuming = sorted(n for n, e in ctl.power.nodes.items() if e.power is PowerState.RESUMING)
    assert resuming == ["g0", "g1", "g2", "g3"]
    ctl.persist.close()


def test_the_nodes_the_waiting_jobs_fit_are_woken_before_a_node_they_cannot_use(
    tmp_path: Path, clock: Clock
) -> None:
    # the big node sorts first (by name, all asleep since the same time): woken for the small
    # jobs, it would count as awake once idle and the fourth job would wait for ever. The
    # small nodes the jobs fit are resumed first, the big one stays asleep
    ctl = mixed_pool_waiting(tmp_path, clock, "abig")
    assert ctl.power is not None
    assert ctl.power._demand(ctl)["gpu"].wake_first == ("g0", "g1", "g2", "g3")
    tick(ctl, clock, 1)
    resuming = sorted(n for n, e in ctl.power.nodes.items() if e.power is PowerState.RESUMING)
    assert resuming == ["g0", "g1", "g2", "g3"]
    assert ctl.power.state_of("abig") is PowerState.SUSPENDED
    ctl.persist.close()
