"""The twin shifts a job's begin time with its submission: the wait it asked for is kept."""

from __future__ import annotations

import math

from tests.twin.builders import T0, snapshot

from fusesched.sim.engine import Simulation
from fusesched.twin.build import build
from fusesched.twin.scenario import parse_scenario


def test_begin_times_keep_their_wait_after_the_submission() -> None:
    snap = snapshot(3)
    first, second, third = snap.jobs
    waits = {first.id: 500.0, second.id: -30.0}  # a begin time in the past: no wait
    jobs = [
        j.model_copy(update={"request": {**j.request, "begin_time": j.submit + waits[j.id]}})
        if j.id in waits
        else j
        for j in snap.jobs
    ]
    snap = snap.model_copy(update={"jobs": jobs})
    assert first.submit > T0
    inputs = build(snap, parse_scenario({"dispatch_latency_s": 0.5}), 0)
    specs = {j.spec.id: j.spec for j in inputs.jobs}
    assert specs[first.id].submit_time == 0.5
    assert specs[first.id].begin_time == 500.5
    assert specs[second.id].begin_time is None
    assert specs[third.id].begin_time is None

    result = Simulation(inputs.nodes, inputs.jobs, inputs.config).run()
    starts = {o.job_id: o.start for o in result.outcomes}
    assert starts[first.id] == 500.5
    assert not math.isnan(starts[second.id]) and starts[second.id] < 500
