"""The fast RLScheduler replay against hand-worked schedules and a literal re-implementation.

The literal version below follows PROTOCOL.md sections 3-4 word by word: it re-sorts the running
list by actual end before every event step and by estimated end at every shadow computation,
re-sorts the waiting list at every decision with the per-job (scalar) keys and scans the whole
waiting list after every event. The fast replay must give the very same start times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusesched.policies.hpc_keys import HPC_KEYS
from fusesched.sim.protocols.rlscheduler import _Replay, replay_whole_trace, run_rlscheduler
from fusesched.traces.swf import RlJobs

Job = tuple[int, int, int, int]  # submit, run, estimate, procs


def make_jobs(jobs: list[Job], max_nodes: int, max_procs: int | None = None) -> RlJobs:
    max_procs = max_nodes if max_procs is None else max_procs
    columns = [np.array(c, dtype=np.int64) for c in zip(*jobs, strict=True)]
    submit, run, estimate, procs = columns
    job_id = np.arange(1, len(jobs) + 1, dtype=np.int64)
    return RlJobs(job_id, submit, run, procs, estimate, max_nodes, max_procs, max_procs / max_nodes)


def fast_starts(jobs: RlJobs, policy: str, backfill: bool) -> list[int]:
    replay = _Replay(jobs, 0, len(jobs), HPC_KEYS[policy])
    replay.run(backfill)
    return replay.start


@dataclass
class Literal:
    """PROTOCOL.md sections 3-4, without any shortcut."""

    jobs: RlJobs
    policy: str
    t: int = 0
    free: int = 0
    arrived: int = 1
    waiting: list[int] = field(default_factory=lambda: [0])
    running: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)

    def run(self, backfill: bool) -> list[int]:
        jobs, key = self.jobs, HPC_KEYS[self.policy]
        s, r, n = jobs.submit.tolist(), jobs.estimate.tolist(), jobs.procs.tolist()
        self.nodes = [max(math.ceil(p / jobs.ppn), 0) for p in n]
        self.t, self.free, self.start = s[0], jobs.max_nodes, [0] * len(jobs)
        while True:
            now = self.t
            self.waiting.sort(key=lambda j: key.scalar(s[j], r[j], n[j], now))
            head = self.waiting[0]
            if backfill and self.nodes[head] > self.free:
                shadow = self.shadow(n[head])
                while self.nodes[head] > self.free:
                    self.waiting.sort(key=lambda j: s[j])
                    for job in list(self.waiting):
                        if self.t + r[job] < shadow and self.nodes[job] <= self.free:
                            self.begin(job)
                    self.step()
            while self.nodes[head] > self.free:
                self.step()
            self.begin(head)
            if self.waiting:
                continue
            if self.arrived == len(jobs):
                return self.start
            while not self.step():
                pass

    def begin(self, job: int) -> None:
        self.waiting.remove(job)
        self.start[job] = self.t
        self.free -= self.nodes[job]
        self.running.append(job)

    def end(self, job: int) -> int:
        return self.start[job] + int(self.jobs.run[job])

    def estimated_end(self, job: int) -> int:
        return self.start[job] + int(self.jobs.estimate[job])

    def step(self) -> bool:
        self.running.sort(key=self.end)
        nxt = self.arrived
        if nxt < len(self.jobs) and (
            not self.running or self.jobs.submit[nxt] <= self.end(self.running[0])
        ):
            self.waiting.append(nxt)
            self.t = int(self.jobs.submit[nxt])
            self.arrived += 1
            return True
        job = self.running.pop(0)
        self.free += self.nodes[job]
        self.t = self.end(job)
        return False

    def shadow(self, need: int) -> int:
        self.running.sort(key=self.estimated_end)
        available, shadow = self.free * self.jobs.ppn, self.t
        for job in self.running:
            available += self.nodes[job] * self.jobs.ppn
            shadow = self.estimated_end(job)
            if available >= need:
                break
        return shadow


# A: 1 node for 10 s; B needs both nodes; C (t + r = 10 = shadow) must not backfill (strict <);
# D (3 + 5 < 10) backfills at its arrival.
SMALL: list[Job] = [(0, 10, 10, 1), (1, 10, 10, 2), (2, 8, 8, 1), (3, 5, 5, 1)]


def test_hand_worked_schedule_without_backfilling() -> None:
    jobs = make_jobs(SMALL, 2)
    assert fast_starts(jobs, "fcfs", False) == [0, 10, 20, 20]
    result = replay_whole_trace(jobs, "fcfs", False)
    # waits 0, 9, 18, 17 → bsld 1, 1.9, 2.6, 2.2 (threshold 10 s)
    assert result.avg_bounded_slowdown == pytest.approx((1 + 1.9 + 2.6 + 2.2) / 4)
    # Σ run·procs / ((last start − first submit) · MaxProcs) = 43 / (20 · 2)
    assert result.utilization == pytest.approx(43 / 40)
    assert result.avg_wait_s == pytest.approx(44 / 4)
    assert result.makespan_s == 28.0


def test_hand_worked_schedule_with_backfilling() -> None:
    assert fast_starts(make_jobs(SMALL, 2), "fcfs", True) == [0, 10, 20, 3]


def test_negative_estimate_always_passes_the_time_test() -> None:
    jobs = make_jobs([(0, 10, 10, 1), (1, 10, 10, 2), (2, 50, -1, 1)], 2)
    # C (r = -1) backfills at once and delays the head until it ends at 52
    assert fast_starts(jobs, "fcfs", True) == [0, 52, 2]


def test_ppn_is_real_and_jobs_take_whole_nodes() -> None:
    # 2 nodes × 1.5 processors: a 2-processor job needs ⌈2 / 1.5⌉ = 2 nodes
    jobs = make_jobs([(0, 10, 10, 1), (0, 10, 10, 2)], 2, 3)
    assert fast_starts(jobs, "fcfs", False) == [0, 10]


def test_job_larger_than_the_cluster_is_rejected() -> None:
    with pytest.raises(ValueError, match="needs more than the cluster's 2 nodes"):
        replay_whole_trace(make_jobs([(0, 10, 10, 3)], 2), "fcfs", False)


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown policy 'lifo'"):
        replay_whole_trace(make_jobs(SMALL, 2), "lifo", False)


def test_progress_and_batch_job_slice() -> None:
    jobs = make_jobs([(i, 5, 5, 1) for i in range(60)], 2)
    seen: list[int] = []
    result = run_rlscheduler(
        jobs, "sjf", True, sequence_length=8, iterations=3, batch_job_slice=30, progress=seen.append
    )
    assert seen == [1, 2, 3]
    assert all(8 <= s.start_job_index < 30 - 8 - 1 for s in result.sequences)
    with pytest.raises(ValueError, match="exceeds"):
        run_rlscheduler(jobs, "sjf", True, batch_job_slice=61)


@st.composite
def workloads(draw: st.DrawFn) -> RlJobs:
    """Small workloads with many ties: equal submits, ends, estimates and keys."""
    max_nodes = draw(st.integers(1, 6))
    max_procs = draw(st.integers(max_nodes, 3 * max_nodes))
    ppn = max_procs / max_nodes
    count = draw(st.integers(1, 40))
    submit = draw(st.lists(st.integers(0, 30), min_size=count, max_size=count))
    if draw(st.booleans()):
        submit.sort()  # real traces; unsorted submits let time step back, as in the artifact
    job = st.tuples(st.integers(1, 15), st.integers(-1, 20), st.integers(1, max_procs))
    rest = draw(st.lists(job, min_size=count, max_size=count))
    assume(all(math.ceil(p / ppn) <= max_nodes for _, _, p in rest))
    return make_jobs([(s, *j) for s, j in zip(submit, rest, strict=True)], max_nodes, max_procs)


@pytest.mark.parametrize("policy", sorted(HPC_KEYS))
@settings(max_examples=60, deadline=None)
@given(jobs=workloads(), backfill=st.booleans())
def test_fast_replay_equals_literal_protocol(jobs: RlJobs, policy: str, backfill: bool) -> None:
    assert fast_starts(jobs, policy, backfill) == Literal(jobs, policy).run(backfill)
