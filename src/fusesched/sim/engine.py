"""Deterministic discrete-event simulation around the scheduling core.

The simulated cluster knows each job's true runtime; the core never sees it (it only has the
requested walltime). Events are ordered by (time, priority, sequence): at one instant, all job
exits are applied, then all arrivals, then the core runs one scheduling cycle. Same input, same
seed → same decisions.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    Event,
    JobExited,
    JobSubmitted,
    NodeAdded,
    NodeStateChanged,
    PreemptJob,
    RejectJob,
    StartJob,
    StopJob,
)
from fusesched.model.fast import builder, fast_init
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.resources import CPU
from fusesched.policies.registry import CoreConfig

if TYPE_CHECKING:
    from fusesched.sim.data import DataSim
    from fusesched.sim.power import PowerReport, PowerSim
    from fusesched.sim.reservations import SimReservation

EXIT, ARRIVAL = 0, 1  # priorities within one instant
NAN = float("nan")
KILLED_EXIT_CODE = -9  # what a job stopped at its walltime reports (as after SIGKILL)
PREEMPTED_EXIT_CODE = 143  # what a preempted job reports (as after SIGTERM)

#: A job's exit, made per replayed job: built without calling the class (see
#: fusesched.model.fast.builder).
_job_exited: Callable[[str, int, str, bool], JobExited] = builder(JobExited)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building or replaying big workloads.

    The replay creates no reference cycles (reference counting frees everything), but the
    collector would rescan the hundreds of thousands of live job records again and again:
    about a quarter of a whole-trace replay's time. When it is enabled again, what the pause
    left in the young generation (everything it allocated, mostly records that outlive the
    replay) is moved to the oldest generation as it is (``gc.freeze`` then ``gc.unfreeze``)
    rather than scanned by one young collection over all of it; it is looked at by the
    next full collection like any other old object. (Not when someone else froze objects:
    unfreezing would undo that.)
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@fast_init
@dataclass(frozen=True, slots=True)
class SimJob:
    """A job as the simulator sees it: the spec the core gets, and the truth it does not."""

    spec: JobSpec
    runtime: float
    exit_code: int = 0


@dataclass(slots=True)
class JobOutcome:
    job_id: str
    queue: str
    submit: float
    start: float = float("nan")
    end: float = float("nan")
    runtime: float = 0.0
    cpus: float = 0.0
    nodes: int = 0
    backfilled: bool = False
    rejected: str = ""
    timed_out: bool = False
    preemptions: int = 0
    lost_s: float = 0.0  # run time thrown away by preemptions (work since the last checkpoint)
    failures: int = 0  # runs ended by an injected node outage (see :class:`Outage`)


@dataclass(frozen=True, slots=True)
class Outage:
    """Nodes that fail at ``time`` and come back ``duration_s`` later (never: ``inf``).

    The nodes go DOWN (they take no new jobs); every job running on one of them ends at once
    and is queued again by the core (a node failure the shell retries), keeping its work up to
    its last checkpoint (``checkpoint_interval_s``) or none; a restart costs the simulation's
    ``restart_overhead_s``.
    """

    time: float
    nodes: tuple[str, ...]
    duration_s: float = float("inf")
    reason: str = "node failure"


@dataclass(slots=True)
class SimResult:
    outcomes: list[JobOutcome]
    total_cpus: float
    decisions: int
    cycles: int
    log: list[Decision] = field(default_factory=list)
    power: PowerReport | None = None  # energy, when the simulation had a power hook


class Simulation:
    """Replays ``jobs`` (sorted by submit time) on ``nodes`` through one ``SchedulerCore``."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        jobs: Sequence[SimJob],
        config: CoreConfig,
        *,
        seed: int = 0,
        kill_at_walltime: bool = False,
        keep_log: bool = False,
        checkpoint_on_notice: bool = False,
        restart_overhead_s: float = 0.0,
        power: PowerSim | None = None,
        outages: Sequence[Outage] = (),
        data: DataSim | None = None,
        reservations: Sequence[SimReservation] = (),
    ) -> None:
        self.core = SchedulerCore(config, rng=np.random.default_rng(seed))
        self.nodes = nodes
        expanded = (
            [
                SimJob(child, job.runtime, job.exit_code) if job.spec.array else job
                for job in jobs
                for child in (job.spec.expand_array() if job.spec.array else (job.spec,))
            ]  # each array child runs as long as its template says
            if any(job.spec.array for job in jobs)
            else jobs
        )
        self.jobs = sorted(expanded, key=attrgetter("spec.submit_time"))
        self.jobs_by_id = {j.spec.id: j for j in self.jobs}
        self.kill_at_walltime = kill_at_walltime
        self.keep_log = keep_log
        # preemption: a job that checkpoints (``checkpoint_interval_s``) keeps the work up to
        # its last checkpoint, or all of it with ``checkpoint_on_notice``; a restart costs
        # ``restart_overhead_s`` of extra run time
        self.checkpoint_on_notice = checkpoint_on_notice
        self.restart_overhead_s = restart_overhead_s
        # energy and power saving (sim/power.py); None: every node always on, not metered
        self.power = power
        # injected node failures (none: the replay below never looks at them)
        self.outages = tuple(outages)
        # datasets, node caches and transfer times (sim/data.py); None: no data model
        self.data = data
        # advance reservations, handed to the core when they are made (sim/reservations.py;
        # none: the replay never looks at them)
        self.reservations = tuple(reservations)
        if self.reservations:
            from fusesched.sim.reservations import check

            check(nodes, self.reservations)

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        """Replay every job (with the cyclic garbage collector paused, see :func:`paused_gc`)."""
        with paused_gc():
            return self._run(progress)

    def _run(self, progress: Callable[[int], None] | None) -> SimResult:
        core = self.core
        for node in self.nodes:
            core.handle(NodeAdded(node), 0.0)
        power = self.power
        if power is not None:
            power.attach(core, self.nodes)
        total_cpus = float(core.cluster.capacity[:, core.cluster.columns["cpu"]].sum()) / 1000.0
        fates = self._fates()
        heap: list[
            tuple[float, int, int, str, int, bool]
        ] = []  # (end, EXIT, seq, id, code, timeout)
        seq = 0
        arrivals = iter(self.jobs)
        next_job = next(arrivals, None)
        log: list[Decision] = []
        decisions = 0
        # with tenancy the core may preempt: keep each run's (start, end, heap seq)
        preemptive = core.tenants is not None
        # injected outages: (time, up?, nodes, reason) in time order, and each running job's
        # node rows (kept only when there are outages)
        outages = self._outage_timeline()
        next_outage = 0
        n_outages = len(outages)
        on_nodes: dict[str, frozenset[int]] = {}
        # advance reservations: (when made, the core's event) in time order
        booking = self._booking_timeline()
        next_booking = 0
        n_bookings = len(booking)
        tracked = preemptive or bool(outages)
        runs: dict[str, tuple[float, float, int]] = {}
        done: dict[str, float] = {}  # preempted jobs: work kept from earlier runs
        wakeup = None
        now = 0.0
        inf = float("inf")
        heappush, heappop = heapq.heappush, heapq.heappop
        step = core.step
        data = self.data
        keep_log = self.keep_log
        restart_overhead_s = self.restart_overhead_s
        submit_at = next_job.spec.submit_time if next_job is not None else inf
        while (
            heap
            or next_job is not None
            or wakeup is not None
            or (power is not None and power.active())
            or (next_outage < n_outages and len(core.queue) > 0)
        ):
            now = heap[0][0] if heap else inf
            if submit_at < now:
                now = submit_at
            if wakeup is not None and wakeup < now:
                now = wakeup
            if next_outage < n_outages and outages[next_outage][0] < now:
                now = outages[next_outage][0]
            if next_booking < n_bookings and booking[next_booking][0] < now:
                now = booking[next_booking][0]
            events: list[Event] = []
            first_exit = 0
            if power is not None:
                now = min(now, power.next_time())
                events.extend(power.due(now))
                first_exit = len(events)
            while heap and heap[0][0] == now:
                _, _, _, job_id, code, timed_out = heappop(heap)
                if tracked:
                    del runs[job_id]
                    on_nodes.pop(job_id, None)
                events.append(_job_exited(job_id, code, "", timed_out))
            # (counted only for those who read them: two calls per cycle otherwise)
            finished = len(events) - first_exit if progress is not None else 0
            while next_outage < n_outages and outages[next_outage][0] == now:
                _, up, names, reason = outages[next_outage]
                next_outage += 1
                state = NodeState.UP if up else NodeState.DOWN
                events.extend(NodeStateChanged(name, state, reason) for name in names)
                if power is not None:  # its views of these nodes are stale from now on
                    power.nodes_changed(names)
                if not up:
                    rows = {core.cluster.index[name] for name in names}
                    for job_id in [j for j, r in on_nodes.items() if not r.isdisjoint(rows)]:
                        self._fail(job_id, now, runs, done, fates, heap)
                        del on_nodes[job_id]
                        events.append(JobExited(job_id, -1, reason, requeue=True))
            exits_end = len(events) if power is not None else 0
            while next_booking < n_bookings and booking[next_booking][0] == now:
                events.append(booking[next_booking][1])  # made before the jobs arriving now
                next_booking += 1
            while next_job is not None and submit_at == now:
                events.append(JobSubmitted(next_job.spec))
                next_job = next(arrivals, None)
                submit_at = next_job.spec.submit_time if next_job is not None else inf
            out = step(now, events)
            decisions += len(out)
            for decision in out:
                if type(decision) is StartJob:
                    job_id = decision.job_id
                    outcome, runtime, code, killed = fates[job_id]
                    if killed:
                        outcome.timed_out = True
                    if outcome.preemptions or outcome.failures:
                        # a restart: the rest of the work, and its cost
                        runtime = runtime - done[job_id] + restart_overhead_s
                    else:
                        outcome.start = now
                    if data is not None:  # reading its data takes time too
                        runtime = data.started(core, decision, now, runtime)
                    end = now + runtime
                    outcome.end = end
                    groups = decision.groups
                    outcome.nodes = (
                        len(groups[0].rows)
                        if len(groups) == 1
                        else sum(len(g.rows) for g in groups)
                    )
                    outcome.backfilled = decision.backfilled
                    seq += 1
                    heappush(heap, (end, EXIT, seq, job_id, code, killed))
                    if tracked:
                        runs[job_id] = (now, end, seq)
                        if outages:
                            on_nodes[job_id] = frozenset(
                                int(r) for g in decision.groups for r in g.rows.tolist()
                            )
                elif isinstance(decision, PreemptJob):
                    seq += 1
                    self._preempt(decision, now, runs, done, fates, heap, seq)
                elif isinstance(decision, RejectJob):
                    fates[decision.job_id][0].rejected = decision.reason
                elif isinstance(decision, StopJob):  # pragma: no cover - no cancels in replay
                    raise RuntimeError(f"unexpected stop of {decision.job_id}")
            if power is not None:
                exits = events[first_exit:exits_end]
                power.after_step(now, [e.job_id for e in exits if isinstance(e, JobExited)], out)
            if keep_log:
                log.extend(out)
            if progress is not None and finished:
                progress(finished)
            wakeup = core.next_wakeup()
            if n_bookings and wakeup is not None and not heap and next_job is None:
                wakeup = _still_waiting(core, wakeup)
        return SimResult(
            outcomes=[fate[0] for fate in fates.values()],
            total_cpus=total_cpus,
            decisions=decisions,
            cycles=core.stats.cycles,
            log=log,
            power=power.finish(now) if power is not None else None,
        )

    def _preempt(
        self,
        decision: PreemptJob,
        now: float,
        runs: dict[str, tuple[float, float, int]],
        done: dict[str, float],
        fates: dict[str, tuple[JobOutcome, float, int, bool]],
        heap: list[tuple[float, int, int, str, int, bool]],
        seq: int,
    ) -> None:
        """The job gets its notice now and stops after its grace time, unless it ends first;
        what it keeps of its work is up to its last checkpoint (or all with
        ``checkpoint_on_notice``)."""
        job_id = decision.job_id
        start, end, entry = runs[job_id]
        stop = now + decision.grace_s
        if stop >= end:
            return  # it ends on its own before the grace time is over
        outcome, runtime, _, _ = fates[job_id]
        kept_before = done.get(job_id, 0.0)
        overhead = self.restart_overhead_s if outcome.preemptions else 0.0
        ran = max(0.0, stop - start - overhead)  # useful work in this run
        interval = self.jobs_by_id[job_id].spec.checkpoint_interval_s
        if self.checkpoint_on_notice and interval is not None:
            kept = ran
        elif interval is not None:
            kept = (kept_before + ran) // interval * interval - kept_before
            kept = max(0.0, kept)
        else:
            kept = -kept_before  # no checkpoints: everything is lost, from zero again
        done[job_id] = min(runtime, kept_before + kept)
        outcome.preemptions += 1
        outcome.lost_s += (stop - start) - max(0.0, kept)
        heap.remove((end, EXIT, entry, job_id, *fates[job_id][2:4]))
        heapq.heapify(heap)
        heapq.heappush(heap, (stop, EXIT, seq, job_id, PREEMPTED_EXIT_CODE, False))
        runs[job_id] = (start, stop, seq)

    def _outage_timeline(self) -> list[tuple[float, bool, tuple[str, ...], str]]:
        """(time, up?, nodes, reason) of every outage's start and end, in time order (at one
        instant, recoveries before failures)."""
        out: list[tuple[float, bool, tuple[str, ...], str]] = []
        known = {n.name for n in self.nodes}
        for o in self.outages:
            unknown = [n for n in o.nodes if n not in known]
            if unknown:
                raise ValueError(f"outage at {o.time:g}: unknown node {unknown[0]!r}")
            if o.time < 0 or not o.duration_s > 0:
                raise ValueError(f"outage at {o.time:g}: bad time or duration")
            out.append((o.time, False, o.nodes, o.reason))
            if o.duration_s != float("inf"):
                out.append((o.time + o.duration_s, True, o.nodes, "repaired"))
        out.sort(key=lambda x: (x[0], not x[1]))
        return out

    def _fail(
        self,
        job_id: str,
        now: float,
        runs: dict[str, tuple[float, float, int]],
        done: dict[str, float],
        fates: dict[str, tuple[JobOutcome, float, int, bool]],
        heap: list[tuple[float, int, int, str, int, bool]],
    ) -> None:
        """A running job's node failed at ``now``: its run ends; it keeps its work up to its
        last checkpoint (none without checkpoints)."""
        start, _, _ = runs.pop(job_id)
        heap[:] = [e for e in heap if e[3] != job_id]
        heapq.heapify(heap)
        outcome, runtime, _, _ = fates[job_id]
        kept_before = done.get(job_id, 0.0)
        overhead = self.restart_overhead_s if (outcome.preemptions or outcome.failures) else 0.0
        ran = max(0.0, now - start - overhead)
        interval = self.jobs_by_id[job_id].spec.checkpoint_interval_s
        kept = (kept_before + ran) // interval * interval if interval else 0.0
        done[job_id] = min(runtime, kept)
        outcome.failures += 1
        outcome.lost_s += (now - start) - max(0.0, done[job_id] - kept_before)

    def _booking_timeline(self) -> list[tuple[float, Event]]:
        if not self.reservations:
            return []
        from fusesched.sim.reservations import timeline

        return list(timeline(self.reservations))

    def _fates(self) -> dict[str, tuple[JobOutcome, float, int, bool]]:
        """Per job id: its outcome record, and how long it runs, with which exit code and
        whether it is stopped at its walltime once started (``kill_at_walltime``)."""
        # jobs of one shape often share their groups' tuple: count its CPUs once (by
        # identity, cheaper than hashing the groups; the entry holds the tuple alive)
        cpus: dict[int, tuple[tuple[TaskGroup, ...], float]] = {}
        fates: dict[str, tuple[JobOutcome, float, int, bool]] = {}
        for job in self.jobs:
            spec = job.spec
            groups = spec.task_groups
            known = cpus.get(id(groups))
            if known is not None and known[0] is groups:
                count = known[1]
            else:
                count = sum(g.replicas * g.resources.get(CPU) for g in groups) / 1000
                cpus[id(groups)] = (groups, count)
            # (by position, start and end not yet known: cheaper than by keyword)
            outcome = JobOutcome(
                spec.id, spec.queue, spec.submit_time, NAN, NAN, job.runtime, count
            )
            walltime = spec.walltime_s
            if self.kill_at_walltime and walltime is not None and job.runtime > walltime:
                fates[spec.id] = (outcome, walltime, KILLED_EXIT_CODE, True)
            else:
                fates[spec.id] = (outcome, job.runtime, job.exit_code, False)
        return fates


def _still_waiting(core: SchedulerCore, wakeup: float) -> float | None:
    """``wakeup``, or None when no job waits any more: with nothing running or to come, a
    reservation's end (or a job's flip) has nothing left to change, so the replay ends
    with its last job rather than running on to the end of the last window."""
    from fusesched.core.reservations import WAITING

    bookings = core.bookings
    if bookings is None or any(r.phase in WAITING for r in bookings.waiting.values()):
        return wakeup
    return None


def replay(
    nodes: Sequence[NodeSpec],
    jobs: Iterable[SimJob],
    config: CoreConfig,
    *,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> SimResult:
    """Convenience wrapper: build a :class:`Simulation` and run it."""
    return Simulation(nodes, list(jobs), config, seed=seed).run(progress)
