"""The DL protocol runner: a deterministic event simulation of GPU training jobs.

Events are arrivals (from the trace), completions, and stops at checkpoint boundaries of jobs
chosen for preemption; preemptive policies are also re-evaluated every ``tick_s`` while jobs
wait. At each event time the runner performs one *scheduling pass*:

1. snapshot — the attained service (GPUs × progress seconds) of running jobs is brought up to
   date in the observable columns that the policy sees (:class:`DlView`);
2. order — the policy orders the active jobs, best first;
3. select — preemptive policies: the *desired* set is the greedy prefix of that order that fits
   the cluster's GPUs (a job that does not fit is skipped, smaller later ones may still fit);
   running jobs outside it are marked to stop at their next checkpoint (a job that would
   finish first is left alone); marked jobs that are desired again are unmarked;
4. place and start — waiting desired jobs (non-preemptive policies: waiting jobs in order; a
   strict policy stops at the first that does not fit) are placed with GPU locality
   (:mod:`fusesched.sim.dl.placement`) as GPUs allow;
5. re-consolidate — only for a policy with a true ``consolidate`` attribute: a running job on a
   spread placement for which a consolidated placement is free (counting its own GPUs) is moved
   there at its next checkpoint boundary, if that placement is still free then, and pays the
   restart cost once (:meth:`_Run.plan_moves`, :meth:`_Run.move`).

A job that resumes after a preemption holds its GPUs ``restart_s`` before it progresses; a job
on a spread placement progresses at ``spread_speed``. Event order at equal times is
(completions, stops and moves by sequence, then arrivals in trace order), so a run is a pure
function of its inputs: no randomness, no wall clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Sequence

import numpy as np

from fusesched.policies.dl_base import (
    DONE,
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    DlPolicy,
    DlView,
    IntArray,
)
from fusesched.sim.dl.model import DlCluster, DlJob, DlResult
from fusesched.sim.dl.placement import Allocation, place

_FINISH, _STOP, _MOVE = 0, 1, 2


class _Run:
    """Mutable state of one simulation (one policy over one workload)."""

    def __init__(
        self, jobs: Sequence[DlJob], cluster: DlCluster, policy: DlPolicy, record: bool
    ) -> None:
        if not jobs:
            raise ValueError("the DL protocol needs at least one job")
        too_big = [j for j in jobs if j.gpus > cluster.total_gpus]
        if too_big:
            raise ValueError(
                f"job {too_big[0].id} needs {too_big[0].gpus} GPUs; the cluster has "
                f"{cluster.total_gpus}"
            )
        submits = [j.submit_s for j in jobs]
        if any(b < a for a, b in itertools.pairwise(submits)):
            raise ValueError("jobs must be sorted by submit time")
        n = len(jobs)
        self.cluster = cluster
        self.policy = policy
        self.consolidate = bool(getattr(policy, "consolidate", False))
        self.record = record
        self.log: list[tuple[float, str, int, float]] = []
        self.submit = np.array(submits, dtype=np.float64)
        self.gpus = np.array([j.gpus for j in jobs], dtype=np.int64)
        self._dur = np.array([j.duration_s for j in jobs], dtype=np.float64)  # runner-only
        self.state = np.zeros(n, dtype=np.int8)
        self.attained = np.zeros(n, dtype=np.float64)
        self.executed = np.zeros(n, dtype=np.float64)
        self.wait_since = np.zeros(n, dtype=np.float64)
        self.runs = np.zeros(n, dtype=np.int64)
        groups: dict[str, int] = {}
        self.group = np.array([groups.setdefault(j.tag, len(groups)) for j in jobs], np.int64)
        self.view = DlView(
            self.submit,
            self.gpus,
            self.state,
            self.attained,
            self.executed,
            self.wait_since,
            self.runs,
            self.group,
            cluster.total_gpus,
        )
        # per running segment
        self.progress = np.zeros(n)  # progress seconds at the segment's start
        self.seg_start = np.zeros(n)
        self.ready = np.zeros(n)  # when progress resumes (after the restart cost)
        self.speed = np.ones(n)
        self.exec_base = np.zeros(n)
        self.marked = np.zeros(n, dtype=bool)
        self.spread = np.zeros(n, dtype=bool)  # running on a spread placement
        self.moving = np.zeros(n, dtype=bool)  # to re-consolidate at its next checkpoint
        self.version = np.zeros(n, dtype=np.int64)
        self.alloc: dict[int, Allocation] = {}
        self.finish = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.free = np.full(cluster.nodes, cluster.gpus_per_node, dtype=np.int64)
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.next_arrival = 0
        self.low = 0  # every job below this index is done
        self.waiting = 0
        self.done = 0
        self.restart_gpu_s = 0.0
        self.spread_starts = 0
        self.migrations = 0
        self.spots_changed = True  # GPUs released (or a move candidate returned) since last check
        self.starts = 0
        self.busy_gpu_s = 0.0
        self.passes = 0
        self.n_marked = 0

    # ------------------------------------------------------------------ bookkeeping

    def _note(self, now: float, what: str, job: int) -> None:
        """Record (time, what, job, progress seconds at the segment start) when asked to."""
        if self.record:
            self.log.append((now, what, job, float(self.progress[job])))

    def _push(self, at: float, kind: int, job: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, job, int(self.version[job])))

    def _progress_at(self, job: int, now: float) -> float:
        return float(self.progress[job] + max(0.0, now - self.ready[job]) * self.speed[job])

    def _release(self, job: int, now: float) -> None:
        self.spread[job] = False
        self.spots_changed = True
        for node, count in self.alloc.pop(job):
            self.free[node] += count
        held = now - self.seg_start[job]
        self.busy_gpu_s += held * self.gpus[job]
        self.exec_base[job] += held
        self.executed[job] = self.exec_base[job]
        if self.runs[job] > 1:  # this segment was a resumption: its restart time was overhead
            self.restart_gpu_s += (min(now, self.ready[job]) - self.seg_start[job]) * self.gpus[job]

    # ------------------------------------------------------------------ events

    def arrive(self, job: int, now: float) -> None:
        self.state[job] = WAITING
        self.wait_since[job] = now
        self.waiting += 1
        self._note(now, "arrive", job)

    def complete(self, job: int, now: float) -> None:
        self._release(job, now)
        self.state[job] = DONE
        self.attained[job] = self._dur[job] * self.gpus[job]
        self.finish[job] = now
        self.done += 1
        self._note(now, "finish", job)
        self.policy.finished(now, self.view, job)

    def stop(self, job: int, now: float) -> None:
        """A marked job reached its checkpoint: it leaves its GPUs and waits again."""
        self.progress[job] = self._progress_at(job, now)
        self.attained[job] = self.progress[job] * self.gpus[job]
        self._release(job, now)
        self.state[job] = WAITING
        self.wait_since[job] = now
        self.waiting += 1
        self.marked[job] = False
        self.n_marked -= 1
        self.version[job] += 1  # the pending completion is void
        self.preemptions[job] += 1
        self._note(now, "stop", job)

    def start(self, job: int, now: float) -> bool:
        placed = place(self.free, int(self.gpus[job]), self.cluster.gpus_per_node)
        if placed is None:
            return False
        alloc, consolidated = placed
        for node, count in alloc:
            self.free[node] -= count
        self.alloc[job] = alloc
        self.state[job] = RUNNING
        self.waiting -= 1
        resumed = self.runs[job] > 0
        self.runs[job] += 1
        self.starts += 1
        self.seg_start[job] = now
        self.ready[job] = now + (self.cluster.restart_s if resumed else 0.0)
        self.speed[job] = 1.0 if consolidated else self.cluster.spread_speed
        self.spread[job] = not consolidated
        self.moving[job] = False
        self.spread_starts += 0 if consolidated else 1
        self.version[job] += 1
        left = self._dur[job] - self.progress[job]
        self._push(self.ready[job] + left / self.speed[job], _FINISH, job)
        self._note(now, "start", job)
        return True

    def mark(self, job: int, now: float) -> None:
        """Preempt at the next checkpoint boundary (at once if it is on one now)."""
        step = self.cluster.checkpoint_s
        now_progress = self._progress_at(job, now)
        boundary = math.ceil(now_progress / step - 1e-9) * step
        if boundary >= self._dur[job]:
            return  # it finishes before its next checkpoint: let it
        self.marked[job] = True
        self.moving[job] = False
        self.n_marked += 1
        self.version[job] += 1
        if boundary <= now_progress + 1e-9:
            at = now
        else:
            at = self.ready[job] + (boundary - self.progress[job]) / self.speed[job]
        self._push(at, _STOP, job)
        # the completion must stay valid if the job is unmarked: re-push it under the new version
        left = self._dur[job] - self.progress[job]
        self._push(self.ready[job] + left / self.speed[job], _FINISH, job)
        self._note(now, "mark", job)

    def unmark(self, job: int, now: float) -> None:
        self.marked[job] = False
        self.spots_changed = True
        self.n_marked -= 1
        self.version[job] += 1
        left = self._dur[job] - self.progress[job]
        self._push(self.ready[job] + left / self.speed[job], _FINISH, job)
        self._note(now, "unmark", job)

    def _consolidated_spot(self, job: int) -> bool:
        """Would the job fit on the minimum number of nodes if it gave back its own GPUs?"""
        free = self.free.copy()
        for node, count in self.alloc[job]:
            free[node] += count
        placed = place(free, int(self.gpus[job]), self.cluster.gpus_per_node)
        return placed is not None and placed[1]

    def plan_moves(self, now: float) -> None:
        """Re-consolidation (policies with ``consolidate``): a running job on a spread placement
        for which a consolidated one is now free moves there at its next checkpoint boundary,
        paying the restart cost once, unless it would finish first or is marked for preemption.
        """
        if not self.consolidate or not self.spots_changed:
            return  # a consolidated place only appears when GPUs are released
        self.spots_changed = False
        if not self.spread.any():
            return
        step = self.cluster.checkpoint_s
        candidates = np.flatnonzero(self.spread & ~self.moving & ~self.marked)
        for job in candidates.tolist():
            if not self._consolidated_spot(job):
                continue
            now_progress = self._progress_at(job, now)
            boundary = math.ceil(now_progress / step - 1e-9) * step
            if boundary >= self._dur[job]:
                continue
            self.moving[job] = True
            if boundary <= now_progress + 1e-9:
                at = now
            else:
                at = self.ready[job] + (boundary - self.progress[job]) / self.speed[job]
            self._push(at, _MOVE, job)  # same version: the completion event stays valid
            self._note(now, "plan-move", job)

    def move(self, job: int, now: float) -> None:
        """At a checkpoint: take a consolidated placement if one is still free, else stay."""
        self.moving[job] = False
        self.spots_changed = True  # a candidate again
        if not self._consolidated_spot(job):
            self._note(now, "move-cancelled", job)
            return
        self.progress[job] = self._progress_at(job, now)
        self.attained[job] = self.progress[job] * self.gpus[job]
        self._release(job, now)
        placed = place(self.free, int(self.gpus[job]), self.cluster.gpus_per_node)
        assert placed is not None and placed[1]
        alloc, _ = placed
        for node, count in alloc:
            self.free[node] -= count
        self.alloc[job] = alloc
        self.runs[job] += 1
        self.migrations += 1
        self.seg_start[job] = now
        self.ready[job] = now + self.cluster.restart_s
        self.speed[job] = 1.0
        self.spread[job] = False
        self.version[job] += 1
        left = self._dur[job] - self.progress[job]
        self._push(self.ready[job] + left / self.speed[job], _FINISH, job)
        self._note(now, "move", job)

    # ------------------------------------------------------------------ scheduling pass

    def active(self) -> IntArray:
        while self.low < self.next_arrival and self.state[self.low] == DONE:
            self.low += 1
        window = self.state[self.low : self.next_arrival]
        found = np.flatnonzero((window == WAITING) | (window == RUNNING)) + self.low
        return found.astype(np.int64)

    def schedule(self, now: float) -> None:
        if self.waiting == 0:
            if self.n_marked:  # nobody needs their GPUs any more
                for job in np.flatnonzero(self.marked).tolist():
                    self.unmark(job, now)
            self.plan_moves(now)
            return
        self.passes += 1
        active = self.active()
        running = active[self.state[active] == RUNNING]
        if len(running):
            gained = np.maximum(0.0, now - self.ready[running]) * self.speed[running]
            self.attained[running] = (self.progress[running] + gained) * self.gpus[running]
            self.executed[running] = self.exec_base[running] + (now - self.seg_start[running])
        if not self.policy.preemptive:
            self._start_in_order(now, active[self.state[active] == WAITING])
            self.plan_moves(now)
            return
        order = self.policy.order(now, self.view, active)
        desired = self._desired(order)
        chosen = order[desired]
        for job in order[~desired].tolist():
            if self.state[job] == RUNNING and not self.marked[job]:
                self.mark(job, now)
        for job in chosen.tolist():
            if self.state[job] == RUNNING and self.marked[job]:
                self.unmark(job, now)
        free = int(self.free.sum())
        for job in chosen.tolist():
            if self.state[job] == WAITING and self.gpus[job] <= free and self.start(job, now):
                free -= int(self.gpus[job])
        self.plan_moves(now)

    def _start_in_order(self, now: float, waiting: IntArray) -> None:
        free = int(self.free.sum())
        if free == 0 or len(waiting) == 0:
            return
        for job in self.policy.order(now, self.view, waiting).tolist():
            if self.gpus[job] <= free and self.start(job, now):
                free -= int(self.gpus[job])
                if free == 0:
                    return
            elif self.policy.strict:
                return

    def _desired(self, order: IntArray) -> np.ndarray:
        """Greedy by priority: take each job that still fits the cluster's GPUs."""
        sizes = self.gpus[order]
        total = self.cluster.total_gpus
        desired = np.zeros(len(order), dtype=bool)
        fit = int(np.searchsorted(np.cumsum(sizes), total, side="right"))
        desired[:fit] = True
        budget = total - int(sizes[:fit].sum())
        if budget > 0 and fit < len(order):
            rest = sizes[fit:]
            suffix_min = np.minimum.accumulate(rest[::-1])[::-1]
            for i in range(len(rest)):
                if suffix_min[i] > budget:
                    break
                if rest[i] <= budget:
                    desired[fit + i] = True
                    budget -= int(rest[i])
        return desired

    # ------------------------------------------------------------------ main loop

    def run(self) -> None:
        n = len(self.submit)
        tick = self.cluster.tick_s
        next_tick = math.inf
        while self.done < n:
            t_arrival = self.submit[self.next_arrival] if self.next_arrival < n else math.inf
            t_event = self.heap[0][0] if self.heap else math.inf
            t_tick = next_tick if self.policy.preemptive and self.waiting else math.inf
            now = min(t_arrival, t_event, t_tick)
            if now == math.inf:
                raise RuntimeError("simulation stalled with unfinished jobs")  # pragma: no cover
            while self.heap and self.heap[0][0] <= now:
                _, _, kind, job, version = heapq.heappop(self.heap)
                if version != self.version[job] or self.state[job] != RUNNING:
                    continue
                if kind == _FINISH:
                    self.complete(job, now)
                elif kind == _MOVE:
                    if self.moving[job]:
                        self.move(job, now)
                elif self.marked[job]:
                    self.stop(job, now)
            while self.next_arrival < n and self.submit[self.next_arrival] <= now:
                self.arrive(self.next_arrival, now)
                self.next_arrival += 1
            self.schedule(now)
            next_tick = (math.floor(now / tick) + 1) * tick


def run_dl(
    jobs: Sequence[DlJob], cluster: DlCluster, policy: DlPolicy, record: bool = False
) -> DlResult:
    """Replay ``jobs`` (sorted by submit time) on ``cluster`` under ``policy``."""
    started = time.perf_counter()
    sim = _Run(jobs, cluster, policy, record)
    sim.run()
    assert (sim.state == DONE).all() and not (sim.state == NOT_ARRIVED).any()
    first = float(sim.submit.min())
    result = DlResult(
        policy=policy.name,
        jct=sim.finish - sim.submit,
        finish=sim.finish,
        preemptions=sim.preemptions,
        restart_gpu_s=sim.restart_gpu_s,
        spread_starts=sim.spread_starts,
        migrations=sim.migrations,
        starts=sim.starts,
        busy_gpu_s=sim.busy_gpu_s,
        makespan_s=float(np.nanmax(sim.finish)) - first,
        total_gpus=cluster.total_gpus,
        passes=sim.passes,
        log=sim.log,
    )
    result.wall_s = time.perf_counter() - started
    return result
