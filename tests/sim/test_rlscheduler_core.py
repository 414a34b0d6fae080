"""The RLScheduler sequences replayed by the general core (``--policy default`` and friends)."""

from __future__ import annotations

import numpy as np
import pytest

from fusesched.policies.presets import PRESETS
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import Simulation
from fusesched.sim.protocols.rlscheduler import run_rlscheduler
from fusesched.sim.protocols.rlscheduler_core import run_core_protocol, sequence_jobs
from fusesched.sim.workload import homogeneous_nodes
from fusesched.traces.swf import RlJobs

from ._shared import needs_shared, rl_jobs


def make_jobs(rows: list[tuple[int, int, int, int, int]], max_nodes: int) -> RlJobs:
    """rows: (submit, run, estimate, procs, user)."""
    columns = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    submit, run, estimate, procs, user = columns
    job_id = np.arange(1, len(rows) + 1, dtype=np.int64)
    return RlJobs(job_id, submit, run, procs, estimate, max_nodes, max_nodes, 1.0, user)


def test_sequence_jobs_show_the_core_only_what_a_scheduler_knows() -> None:
    jobs = make_jobs([(100, 50, 60, 2, 7), (110, 10, -1, 0, -1), (130, 5, 9, 1, 3)], 4)
    a, b, c = sequence_jobs(jobs, 0, 3)
    assert a.spec.submit_time == 0.0 and c.spec.submit_time == 30.0  # relative to the first
    assert a.spec.walltime_s == 60.0 and a.runtime == 50.0
    assert a.spec.task_groups[0].replicas == 2 and a.spec.user == "7"
    assert b.spec.walltime_s is None  # no request: the core's default, never the true run time
    assert b.spec.task_groups[0].replicas == 1  # n = 0 asks for one CPU
    assert b.spec.user == ""  # -1: unknown user


def _sequence_rows(count: int, seed: int) -> list[tuple[int, int, int, int, int]]:
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.integers(0, 200, count))
    run = rng.integers(1, 3000, count)
    estimate = run * rng.integers(1, 5, count)
    procs = rng.integers(1, 9, count)
    user = rng.integers(0, 5, count)
    return list(zip(*(a.tolist() for a in (submit, run, estimate, procs, user)), strict=True))


def test_same_sequences_and_metrics_as_the_protocol_loop() -> None:
    """FCFS without backfilling is one schedule in both loops, so every metric agrees."""
    jobs = make_jobs(_sequence_rows(300, 3), 16)
    config = CoreConfig(queue_order="fcfs", backfill="none")
    core = run_core_protocol(jobs, config, "fcfs", sequence_length=64, iterations=3)
    loop = run_rlscheduler(jobs, "fcfs", False, sequence_length=64, iterations=3)
    assert [s.start_job_index for s in core.sequences] == [
        s.start_job_index for s in loop.sequences
    ]
    for mine, theirs in zip(core.sequences, loop.sequences, strict=True):
        assert mine.avg_bounded_slowdown == pytest.approx(theirs.avg_bounded_slowdown)
        assert mine.avg_wait_s == pytest.approx(theirs.avg_wait_s)
        assert mine.utilization == pytest.approx(theirs.utilization)


def test_default_preset_runs_and_is_deterministic() -> None:
    jobs = make_jobs(_sequence_rows(400, 5), 16)
    config = PRESETS["default"].config()
    first = run_core_protocol(jobs, config, "default", sequence_length=128, iterations=2)
    again = run_core_protocol(jobs, config, "default", sequence_length=128, iterations=2)
    assert first == again
    assert first.policy == "default" and len(first.sequences) == 2


@needs_shared
def test_predicted_run_times_rescue_shortest_first_on_sdsc_sp2() -> None:
    """SDSC-SP2's requests are loose: SJF on them is worse than FCFS; on predictions it is
    several times better (bounded slowdown, the protocol's ten sequences)."""
    jobs = rl_jobs("traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz")

    def bsld(order: str, prediction: str) -> float:
        config = CoreConfig(queue_order=order, runtime_prediction=prediction)
        result = run_core_protocol(jobs, config, order, batch_job_slice=10_000)
        return result.mean_bounded_slowdown

    fcfs, sjf = bsld("fcfs", "none"), bsld("sjf", "none")
    predicted = bsld("sjf", "user-last2")
    assert sjf > fcfs > 2 * predicted


def test_a_burst_waiting_for_its_first_job_is_re_predicted() -> None:
    """SDSC-SP2's pattern in small: one user submits a burst of whole-machine jobs that ask for
    10,000 s and run 10 s, all before the first has finished. Each waits with the request as
    its estimate only until the first ends: from then on it is predicted from that run (the
    core re-predicts waiting jobs at each exit of their user), so each starts on a 10 s
    estimate; none is predicted from a job that had not finished."""
    rows = [(t, 10, 10_000, 16, 7) for t in range(5)]
    jobs = make_jobs(rows, 16)
    sim_jobs = sequence_jobs(jobs, 0, len(rows))
    config = CoreConfig(queue_order="sjf", runtime_prediction="user-last2-request")
    sim = Simulation(homogeneous_nodes(16, 16), sim_jobs, config)
    result = sim.run()
    starts = sorted(o.start for o in result.outcomes)
    assert starts == [0.0, 10.0, 20.0, 30.0, 40.0]
    estimates = [sim.core.jobs[j.spec.id].estimate for j in sim_jobs]
    assert estimates == [10_000.0, 10.0, 10.0, 10.0, 10.0]
    assert sim.core.predictions is not None and sim.core.predictions.repredicted == 4
