"""The live power manager's view of the core's bookings: a node the core has booked is busy
(never suspended under its job), and the queue's demand costs one fit test per job shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.builders import Clock
from tests.controller.test_power_surge_room import cluster, start, suspended, tick

from fusesched.model.job import Placement
from fusesched.submit.sbatch import parse_sbatch


@pytest.mark.parametrize("policy", ["surge", "surge-room", "idle-timeout"])
def test_a_batch_jobs_other_nodes_are_not_suspended(
    tmp_path: Path, clock: Clock, policy: str
) -> None:
    # a 2-node batch job: its script runs on g0; g1 is booked but runs no task until the
    # script's srun launches one there. Switching it off would fail that srun
    ctl = cluster(tmp_path / "c", clock, policy, nodes=3)
    assert ctl.power is not None
    start(ctl, "-N", "2", "-n", "2")
    assert sorted(ctl.power._busy(ctl)) == ["g0", "g1"]
    for seconds in (0, 30, 1900, 1900):  # (idle-timeout: 1800 s)
        tick(ctl, clock, seconds)
    assert suspended(ctl) == ["g2"]
    ctl.persist.close()


def test_the_queue_is_fitted_once_per_job_shape(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 waiting jobs of one shape on 4 nodes: the label filters are tried on each node once
    # (for the sleeping and the powered nodes), not once per job (O(nodes × jobs) per tick,
    # under the controller's lock: seconds with thousands of each)
    ctl = cluster(tmp_path / "c", clock, "surge-room", nodes=4)
    start(ctl, "-N", "4", "-n", "4", "--exclusive")  # every node taken
    script = parse_sbatch("#!/bin/sh\nsleep 600\n", args=["--gres=gpu:1"]).request
    ctl.submit([script] * 40)
    ctl.run_cycle()
    calls = 0
    real = Placement.allows

    def counted(self: Placement, labels: object) -> bool:
        nonlocal calls
        calls += 1
        return real(self, labels)  # type: ignore[arg-type]

    monkeypatch.setattr(Placement, "allows", counted)
    assert ctl.power is not None
    demand = ctl.power._demand(ctl)
    assert demand["gpu"].held_nodes == 20.0  # (each half of a 2-GPU node)
    assert calls <= 2 * 4
    ctl.persist.close()
