"""The RLScheduler (SC'20) heuristic-baseline evaluation, replayed to the letter.

Implements ``anchors/rlscheduler/PROTOCOL.md`` sections 2-5 (checklist in section 9): gym-style
seeding of a legacy NumPy ``RandomState``, 10 sequences of 1,024 consecutive jobs, each on an
empty cluster; non-preemptive list scheduling with a committed head and one event per step;
optional backfilling (shadow time once per blocking head, FCFS scan with a strict time test and no
extra-node rule); bounded slowdown (10 s threshold) and utilisation.

Speed (section 10) comes from three exact shortcuts: completions live in a heap keyed by
(actual end, rank), where ranks are re-issued in estimated-end order at each shadow computation,
which reproduces the running list's tie order; sorts are skipped while the waiting list is known
to be in order already; and after an arrival only the new job is tested for backfilling (every
other waiting job already failed at an earlier time with the same free nodes).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fusesched.policies.hpc_keys import HPC_KEYS, HpcKey
from fusesched.traces.swf import RlJobs

__all__ = [
    "ProtocolResult",
    "SequenceResult",
    "default_batch_job_slice",
    "protocol_starts",
    "replay_whole_trace",
    "run_rlscheduler",
    "score_sequence",
    "sequence_starts",
]

BSLD_THRESHOLD_S = 10
_SLICED_TRACES = ("SDSC-SP2", "HPC2N")
_SLICE = 10_000
_FCFS = HPC_KEYS["fcfs"]


@dataclass(frozen=True)
class SequenceResult:
    """Metrics of one simulated sequence (PROTOCOL.md section 5).

    ``utilization`` = Σ run·procs / ((last start − first submit) · MaxProcs), NaN if that span
    is 0; ``makespan_s`` = latest actual end − submit time of the sequence's first job.
    """

    index: int
    start_job_index: int
    avg_bounded_slowdown: float
    utilization: float
    avg_wait_s: float
    makespan_s: float
    jobs: int


@dataclass(frozen=True)
class ProtocolResult:
    """All sequences of one (policy, backfill) run; the table values are the means."""

    policy: str
    backfill: bool
    sequences: tuple[SequenceResult, ...]

    @property
    def mean_bounded_slowdown(self) -> float:
        return _mean([s.avg_bounded_slowdown for s in self.sequences])

    @property
    def mean_utilization(self) -> float:
        return _mean([s.utilization for s in self.sequences])

    @property
    def mean_wait_s(self) -> float:
        return _mean([s.avg_wait_s for s in self.sequences])

    @property
    def mean_makespan_s(self) -> float:
        return _mean([s.makespan_s for s in self.sequences])


def default_batch_job_slice(trace_path: str | Path) -> int:
    """The artifact's ``batch_job_slice``: 10,000 for SDSC-SP2 and HPC2N files, else 0."""
    name = Path(trace_path).name.upper()
    return _SLICE if any(tag in name for tag in _SLICED_TRACES) else 0


def sequence_starts(
    n_jobs: int, *, seed: int = 1, sequence_length: int = 1024, iterations: int = 10
) -> list[int]:
    """Start indices of the sampled sequences (section 2).

    ``n_jobs`` is the number of eligible jobs (``batch_job_slice`` when non-zero). Each start is
    one ``randint(L, N - L - 1)`` of a RandomState seeded the way gym's ``seeding.np_random`` did.
    """
    high = n_jobs - sequence_length - 1
    if high <= sequence_length:
        raise ValueError(
            f"{n_jobs} jobs are too few for sequences of {sequence_length}: "
            f"need more than {2 * sequence_length + 1}"
        )
    rng = _gym_random_state(seed)
    return [int(rng.randint(sequence_length, high)) for _ in range(iterations)]


def run_rlscheduler(
    jobs: RlJobs,
    policy: str,
    backfill: bool,
    *,
    seed: int = 1,
    sequence_length: int = 1024,
    iterations: int = 10,
    batch_job_slice: int = 0,
    progress: Callable[[int], None] | None = None,
) -> ProtocolResult:
    """Run the protocol for one policy (a key of ``HPC_KEYS``), with or without backfilling.

    ``progress`` is called with the number of sequences finished so far.
    """
    key = _key(policy)
    starts = protocol_starts(jobs, seed, sequence_length, iterations, batch_job_slice)
    results = []
    for index, first in enumerate(starts):
        results.append(_simulate(jobs, first, sequence_length, key, backfill, index))
        if progress is not None:
            progress(index + 1)
    return ProtocolResult(policy, backfill, tuple(results))


def protocol_starts(
    jobs: RlJobs, seed: int, sequence_length: int, iterations: int, batch_job_slice: int
) -> list[int]:
    """The first job of each sampled sequence, among the first ``batch_job_slice`` jobs (all
    when 0)."""
    if batch_job_slice > len(jobs):
        raise ValueError(f"batch_job_slice {batch_job_slice} exceeds the {len(jobs)} jobs")
    eligible = batch_job_slice or len(jobs)
    return sequence_starts(
        eligible, seed=seed, sequence_length=sequence_length, iterations=iterations
    )


def replay_whole_trace(jobs: RlJobs, policy: str, backfill: bool) -> SequenceResult:
    """Every loaded job as one sequence on an empty cluster (section 10)."""
    return _simulate(jobs, 0, len(jobs), _key(policy), backfill, 0)


def _key(policy: str) -> HpcKey:
    try:
        return HPC_KEYS[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(HPC_KEYS)}") from None


def score_sequence(
    index: int,
    first: int,
    submit: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    start: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    run: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    procs: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    max_procs: int,
) -> SequenceResult:
    """The metrics of section 5 for one schedule: per-job arrays in job order, the span of
    the utilisation running from the first submit to the last start."""
    wait = start - submit
    bsld = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD_S))
    span = (start.max() - submit[0]) * max_procs
    work = float(np.sum(run * procs))
    return SequenceResult(
        index=index,
        start_job_index=first,
        avg_bounded_slowdown=float(bsld.mean()),
        utilization=work / float(span) if span else float("nan"),
        avg_wait_s=float(wait.mean()),
        makespan_s=float(np.max(start + run) - submit[0]),
        jobs=len(submit),
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _gym_random_state(seed: int) -> np.random.RandomState:
    """A legacy RandomState seeded like gym 0.1x: SHA-512 of str(seed), first 8 bytes.

    The bytes are read as a little-endian integer, split into 32-bit words (least significant
    first, trailing zero words dropped) and used for MT19937's init-by-array.
    """
    digest = hashlib.sha512(str(seed % 2**64).encode("utf8")).digest()
    value = int.from_bytes(digest[:8], "little")
    words = []
    while value:
        value, word = divmod(value, 2**32)
        words.append(word)
    return np.random.RandomState(np.array(words, dtype=np.uint32))


def _simulate(
    jobs: RlJobs, first: int, count: int, key: HpcKey, backfill: bool, index: int
) -> SequenceResult:
    if count < 1 or first < 0 or first + count > len(jobs):
        raise ValueError(f"no jobs to replay in [{first}, {first + count}) of {len(jobs)}")
    replay = _Replay(jobs, first, count, key)
    replay.run(backfill)
    return replay.result(index, first)


class _Replay:
    """One sequence on an empty cluster: the decision loop of PROTOCOL.md sections 3 and 4.

    Jobs are local indices 0..count-1 in job-number order. ``running`` is a heap of
    (actual end, rank, job); the waiting list is a plain list sorted in place, as the artifact's.
    """

    def __init__(self, jobs: RlJobs, first: int, count: int, key: HpcKey) -> None:
        window = slice(first, first + count)
        self.jobs = jobs
        self.key = key
        self.submit_np = jobs.submit[window]
        self.estimate_np = jobs.estimate[window]
        self.procs_np = jobs.procs[window]
        nodes_np = np.maximum(np.ceil(self.procs_np / jobs.ppn), 0).astype(np.int64)
        if nodes_np.size and nodes_np.max() > jobs.max_nodes:
            job = int(jobs.job_id[first + int(nodes_np.argmax())])
            raise ValueError(f"job {job} needs more than the cluster's {jobs.max_nodes} nodes")
        self.submit: list[int] = self.submit_np.tolist()
        self.run_time: list[int] = jobs.run[window].tolist()
        self.estimate: list[int] = self.estimate_np.tolist()
        self.procs: list[int] = self.procs_np.tolist()
        self.nodes: list[int] = nodes_np.tolist()
        self.min_nodes = min(self.nodes)
        self.key_rank = None if key.dynamic or key is _FCFS else self._static_ranks()
        self.count = count
        self.start: list[int] = [0] * count
        self.t: int = self.submit[0]
        self.last_start = self.t
        self.free = jobs.max_nodes
        self.waiting = [0]
        self.by_submit = True  # the waiting list is known to be in submit order
        self.by_key = True  # ... known to be in static-key order
        self.next_arrival = 1
        self.running: list[tuple[int, int, int]] = []
        self.rank = 0

    def _static_ranks(self) -> list[int]:
        """Dense ranks of the static key: equal keys share a rank, so sorting by rank is
        sorting by key (stable, same tie order)."""
        columns = self.key.vector(self.submit_np, self.estimate_np, self.procs_np, 0.0)
        keys = list(zip(*(c.tolist() for c in columns), strict=True))
        ranks = [0] * len(keys)
        rank, previous = -1, None
        for job in sorted(range(len(keys)), key=keys.__getitem__):
            if keys[job] != previous:
                rank, previous = rank + 1, keys[job]
            ranks[job] = rank
        return ranks

    # --- the decision loop (section 3) ----------------------------------------------------------

    def run(self, backfill: bool) -> None:
        """Schedule every job of the sequence; stops at the last start."""
        while True:
            head = self._pick_head()
            if self.nodes[head] > self.free:
                if backfill:
                    self._wait_backfilling(head)
                else:
                    while self.nodes[head] > self.free:
                        self._step()
            self.waiting.remove(head)
            self._start(head)
            if self.waiting:
                continue
            if self.next_arrival == self.count:
                return
            while not self._step():
                pass

    def _pick_head(self) -> int:
        """Step 1: stable in-place sort of the waiting list by the policy key; take the first."""
        if self.key_rank is not None:
            self._sort_by_key_rank()
        elif self.key.dynamic:
            self._sort_by_dynamic_key()
        else:
            self._sort_by_submit()  # FCFS: the key is the submit time
        return self.waiting[0]

    def _sort_by_submit(self) -> None:
        """Stable in-place sort by submit time (FCFS), skipped when already in that order."""
        if not self.by_submit:
            self.waiting.sort(key=self.submit.__getitem__)
            self.by_submit = True
            self.by_key = len(self.waiting) <= 1

    def _sort_by_key_rank(self) -> None:
        """Stable in-place sort by a static key, skipped when already in that order."""
        if not self.by_key:
            assert self.key_rank is not None
            self.waiting.sort(key=self.key_rank.__getitem__)
            self.by_key = True
            self.by_submit = len(self.waiting) <= 1

    def _sort_by_dynamic_key(self) -> None:
        """Stable sort by a time-dependent key, evaluated at the current time."""
        waiting = self.waiting
        if len(waiting) <= 1:
            return
        index = np.array(waiting)
        columns = self.key.vector(
            self.submit_np[index], self.estimate_np[index], self.procs_np[index], self.t
        )
        keys = list(zip(*(c.tolist() for c in columns), strict=True))
        order = sorted(range(len(waiting)), key=keys.__getitem__)
        self.waiting = [waiting[i] for i in order]
        self.by_submit = False

    def _start(self, job: int) -> None:
        """Step 2 for one job (the caller has removed it from the waiting list)."""
        self.start[job] = self.t
        self.last_start = self.t
        self.free -= self.nodes[job]
        self.rank += 1
        heapq.heappush(self.running, (self.t + self.run_time[job], self.rank, job))

    def _step(self) -> bool:
        """One event: the next arrival (wins ties) or one completion. True for an arrival."""
        job = self.next_arrival
        if job < self.count and (not self.running or self.submit[job] <= self.running[0][0]):
            waiting = self.waiting
            if waiting:
                last = waiting[-1]
                self.by_submit = self.by_submit and self.submit[job] >= self.submit[last]
                if self.key_rank is not None:
                    self.by_key = self.by_key and self.key_rank[job] >= self.key_rank[last]
            else:
                self.by_submit = self.by_key = True
            waiting.append(job)
            self.t = self.submit[job]
            self.next_arrival = job + 1
            return True
        end, _, job = heapq.heappop(self.running)
        self.free += self.nodes[job]
        self.t = end
        return False

    # --- backfilling (section 4) ----------------------------------------------------------------

    def _wait_backfilling(self, head: int) -> None:
        """Head test, backfill scan, one event step; repeated until the head fits."""
        shadow = self._shadow(head)
        fresh: int | None = None  # after an arrival: the only job that can newly pass
        while self.nodes[head] > self.free:
            self._sort_by_submit()
            if fresh is None:
                self._scan(shadow)
            else:
                self._try_backfill(fresh, shadow)
            before = self.t
            arrived = self._step()
            fresh = self.next_arrival - 1 if arrived and self.t >= before else None

    def _shadow(self, head: int) -> int:
        """Reservation time of the blocking head, from estimated ends (start + r).

        Re-ranks the running jobs in (estimated end, old rank) order, which is what the
        artifact's persistent stable re-sort of its running list does to completion ties.
        """
        by_estimate = sorted(
            self.running, key=lambda e: (self.start[e[2]] + self.estimate[e[2]], e[1])
        )
        self.running = []
        for end, _, job in by_estimate:
            self.rank += 1
            self.running.append((end, self.rank, job))
        heapq.heapify(self.running)
        ppn = self.jobs.ppn
        need = self.procs[head]
        available = self.free * ppn
        shadow: int = self.t
        for _, _, job in by_estimate:
            available += self.nodes[job] * ppn
            shadow = self.start[job] + self.estimate[job]
            if available >= need:
                break
        return shadow

    def _scan(self, shadow: int) -> None:
        """Walk the (FCFS-ordered) waiting list once, starting every job that passes."""
        if self.free < self.min_nodes:
            return
        kept = []
        for job in self.waiting:
            if self.t + self.estimate[job] < shadow and self.nodes[job] <= self.free:
                self._start(job)
            else:
                kept.append(job)
        self.waiting = kept

    def _try_backfill(self, job: int, shadow: int) -> None:
        """The scan's test for a single job (the one that just arrived)."""
        if self.t + self.estimate[job] < shadow and self.nodes[job] <= self.free:
            self.waiting.remove(job)
            self._start(job)

    # --- metrics (section 5) --------------------------------------------------------------------

    def result(self, index: int, first: int) -> SequenceResult:
        """Bounded slowdown, utilisation, wait and makespan of the finished schedule."""
        run = self.jobs.run[first : first + self.count]
        start = np.array(self.start, dtype=np.int64)
        return score_sequence(
            index, first, self.submit_np, start, run, self.procs_np, self.jobs.max_procs
        )
