"""Expected start times of waiting jobs (Slurm's ``squeue --start``).

The core is run forward on a copy of its state: every running job ends at its estimated end
(its time limit, or its predicted run time where run-time prediction is on), every job that
starts in the projection runs for its estimate, nothing new is submitted, no node fails. Each
waiting job's first start in that projection is its expected start, on the nodes it would get.
The copy runs the same policies (queue order, backfilling, placement, quotas, fair share), so
the projection is what the scheduler would do if every estimate were right — in practice jobs
end before their limits, so starts come earlier than projected, rarely later.

Pure: no clock and no I/O; the shell passes the time. The live core is only read (it is copied
first, sharing the records of jobs that have ended, which the projection never changes).
"""

from __future__ import annotations

import copy
import copyreg
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fusesched.core import completing
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    CompletingEnded,
    Event,
    JobExited,
    JobSubmitted,
    NodeStateChanged,
    PreemptJob,
    RejectJob,
    StartJob,
)
from fusesched.model.job import JobSpec
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase

#: what a preempted job reports in the projection (as after SIGTERM)
PREEMPTED_CODE = 143
#: how far ahead the projection looks by default (seconds): a week
DEFAULT_HORIZON_S = 7 * 86_400.0
#: at most this many projected scheduling steps (each an instant where something happens)
DEFAULT_MAX_STEPS = 20_000

WAITING = (JobPhase.PENDING, JobPhase.QUEUED)


@dataclass(frozen=True, slots=True)
class ExpectedStart:
    """A waiting job's projected start and the nodes it would start on (``start`` None: not
    within the horizon); ``phase`` is the job's when the projection began."""

    job_id: str
    phase: JobPhase
    start: float | None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Forecast:
    """The projection's answer: every waiting job that is not held, those that start within
    the horizon first (in start order), then the others (by id)."""

    now: float
    horizon_s: float
    jobs: tuple[ExpectedStart, ...]
    complete: bool  # False: the step budget ran out before the horizon
    rejected: tuple[tuple[str, str], ...] = ()  # extra jobs the core refused: (id, why)

    @property
    def starts(self) -> tuple[ExpectedStart, ...]:
        return tuple(j for j in self.jobs if j.start is not None)

    @property
    def beyond(self) -> tuple[str, ...]:
        return tuple(j.job_id for j in self.jobs if j.start is None)


def _proxy(mapping: MappingProxyType[Any, Any]) -> tuple[type, tuple[dict[Any, Any]]]:
    return MappingProxyType, (dict(mapping),)


# the models keep their mappings behind read-only views, which copy cannot copy by itself
copyreg.pickle(MappingProxyType, _proxy)


def clone(core: SchedulerCore) -> SchedulerCore:
    """A copy of ``core`` that can be run forward without touching it. Records of ended jobs,
    job and node specs are shared (none changes once made); the rest is deep-copied."""
    memo: dict[int, object] = {id(spec): spec for spec in core.cluster.specs}
    for rec in core.jobs.values():
        memo[id(rec.spec)] = rec.spec
        if rec.base_spec is not None:
            memo[id(rec.base_spec)] = rec.base_spec
        if rec.phase.terminal:
            memo[id(rec)] = rec
    sim = copy.deepcopy(core, memo)
    # the backfill policy's cached reservation is worked out again (it may hold arrays the
    # copy recomputes), and the first cycle looks at the whole queue
    sim.reservation = None
    sim._changed = True
    names = sim.cluster.names
    for job_id, held in list(sim.completing.items()):  # (gone within a kill's grace: now)
        completing.ended(sim, CompletingEnded(job_id, tuple(names[row] for row in held)))
    return sim


def forecast(
    core: SchedulerCore,
    now: float,
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    max_steps: int = DEFAULT_MAX_STEPS,
    wake_s: dict[str, float] | None = None,
    copied: bool = False,
    extra: Sequence[JobSpec] = (),
) -> Forecast:
    """Project ``core`` forward from ``now`` and say when each waiting job starts.

    ``wake_s``: nodes that are down now but come up by themselves (power-saved nodes the
    shell would resume), with the seconds they take to come up. ``copied``: ``core`` is
    already a private copy (see :func:`clone`) that may be changed. ``extra``: jobs to
    submit to the copy first (``sbatch --test-only``: when would this job start?); the
    projection then ends once they have started, and those the core refuses are in
    ``rejected``.
    """
    if not horizon_s > 0:
        raise ValueError(f"the horizon must be positive, not {horizon_s!r}")
    sim = core if copied else clone(core)
    rejected: list[tuple[str, str]] = []
    for spec in extra:
        for decision in sim.handle(JobSubmitted(spec), now):
            if isinstance(decision, RejectJob):
                rejected.append((decision.job_id, decision.reason))
    run = _Projection(sim, now)
    ids = {spec.id for spec in extra}
    targets = {
        j for j in run.waiting if j in ids or j.rpartition("_")[0] in ids
    }  # (an array's members are ``<id>_<index>``)
    for node, wake in (wake_s or {}).items():
        if node in run.sim.cluster.index:
            run.push(now + max(0.0, wake), _NODE_UP, node)
    end_at = now + horizon_s
    sim = run.sim
    run.step(now, [])  # what the next cycle would start (the queue may have changed since)
    steps = 1
    complete = True
    while run.waiting and (not extra or not targets.isdisjoint(run.waiting)):
        wakeup = sim.next_wakeup()
        nxt = run.heap[0][0] if run.heap else None
        if wakeup is not None and wakeup > run.t and (nxt is None or wakeup < nxt):
            nxt = wakeup
        if nxt is None or nxt > end_at:
            break
        if steps >= max_steps:
            complete = False
            break
        steps += 1
        run.step(max(nxt, run.t), run.due(max(nxt, run.t)))
    beyond = [ExpectedStart(j, run.waiting[j], None) for j in sorted(run.waiting)]
    return Forecast(now, horizon_s, (*run.starts, *beyond), complete, tuple(rejected))


_JOB_END = 0
_NODE_UP = 1


class _Projection:
    """The copied core and what the projection has seen so far."""

    def __init__(self, sim: SchedulerCore, now: float) -> None:
        self.sim = sim
        self.t = now
        self.waiting = {  # (with its phase now)
            job_id: rec.phase
            for job_id, rec in sim.jobs.items()
            if rec.phase in WAITING and rec.held is None and not rec.never_fits
        }
        self.starts: list[ExpectedStart] = []
        # (time, kind, order, job or node), and the running jobs' current projected ends
        self.heap: list[tuple[float, int, int, str]] = []
        self.ends: dict[str, float] = {}
        self._seq = 0
        tenants = sim.tenants
        for job_id in sim.running.ids():
            rec = sim.jobs[job_id]
            end = now if rec.est_end is None else max(rec.est_end, now)
            if rec.stop_requested is not None:  # being cancelled or stopped: ends now
                end = now
            elif rec.preempt_reason is not None and tenants is not None:
                end = min(end, now + tenants.grace(rec))  # preempted: by its grace at the latest
            self.end(job_id, end)

    def push(self, at: float, kind: int, name: str) -> None:
        heapq.heappush(self.heap, (at, kind, self._seq, name))
        self._seq += 1

    def end(self, job_id: str, at: float) -> None:
        self.ends[job_id] = at
        self.push(at, _JOB_END, job_id)

    def due(self, t: float) -> list[Event]:
        """The events of every entry due by ``t`` (stale job ends are dropped)."""
        events: list[Event] = []
        heap, ends = self.heap, self.ends
        while heap and heap[0][0] <= t:
            at, kind, _, name = heapq.heappop(heap)
            if kind == _NODE_UP:
                events.append(NodeStateChanged(name, NodeState.UP, "resumed"))
            elif ends.get(name) == at:  # (else ended or restarted since)
                del ends[name]
                rec = self.sim.jobs[name]
                events.append(JobExited(name, PREEMPTED_CODE if rec.preempt_reason else 0))
        return events

    def step(self, t: float, events: list[Event]) -> None:
        self.t = t
        sim = self.sim
        names = sim.cluster.names
        for decision in sim.step(t, events):
            if type(decision) is StartJob:
                job_id = decision.job_id
                phase = self.waiting.pop(job_id, None)
                if phase is not None:
                    rows = sorted({int(r) for g in decision.groups for r in g.rows.tolist()})
                    on = tuple(names[r] for r in rows)
                    self.starts.append(ExpectedStart(job_id, phase, t, on))
                self.end(job_id, t + sim.jobs[job_id].estimate)
            elif isinstance(decision, PreemptJob):
                stop = t + decision.grace_s
                if stop < self.ends.get(decision.job_id, float("inf")):
                    self.end(decision.job_id, stop)
