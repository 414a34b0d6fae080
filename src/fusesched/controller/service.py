"""The live shell around the scheduling core.

The controller owns one :class:`SchedulerCore` and feeds it events on the wall clock:
submissions and cancels from the API, node registrations and task exits from the agents. It
turns the core's decisions into work for the agents (:class:`TaskLaunch`, :class:`KillTask`)
and writes every change through to the store. API handlers and the scheduling loop run in
different threads; one lock guards the core and the live state, and the scheduling loop runs
a cycle whenever something changed (at most every ``min_cycle_s``; for submissions alone, at
most every ``submit_cycle_s``, so that a stream of them is scheduled in shared cycles).

This module holds the :class:`Controller` itself: its state, the loop, the scheduling cycle
and the queries the API asks. Its parts live beside it as functions that take the controller
first: submissions (``submissions``), the exchange with the agents (``agents``), how tasks
and jobs end (``endings``), failures (``failures``), crash recovery (``recovery`` for the
queue, ``adoption`` for the jobs left running), external pools (``federation``), data
staging (``data``), read-only views of the nodes and queues (``snapshots``), job steps
(``steps``), a job's priority asked for now (``priorities``); the loop's wake-up is
:class:`~.wake.Wake`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from fusesched.agent.step_gpus import GpuAsk
from fusesched.api.wire import Heartbeat, HeartbeatReply, KillTask, NodeInventory
from fusesched.backends.routing import Route
from fusesched.controller import (
    adoption,
    agents,
    attendance,
    completing,
    data,
    endings,
    failures,
    federation,
    late_exits,
    priorities,
    pty_tasks,
    recovery,
    reservations,
    step_pty,
    step_warning,
    steps,
    submissions,
)
from fusesched.controller.auth import Authenticator
from fusesched.controller.drivers import AgentPool, PoolDriver
from fusesched.controller.forecasts import Forecasts
from fusesched.controller.logs import LogStore
from fusesched.controller.metrics import metrics_for
from fusesched.controller.monitor import Monitor
from fusesched.controller.notify import JobNotices
from fusesched.controller.persist import Persistence
from fusesched.controller.power import PowerManager
from fusesched.controller.pty_relay import PtyRelay
from fusesched.controller.records import (
    ControllerConfig,
    LiveJob,
    LiveNode,
    LiveTask,
    UnknownJobError,
)
from fusesched.controller.remote import RemotePool, Update
from fusesched.controller.step_cpus import CpuMemAsk
from fusesched.controller.steps import StepStdin
from fusesched.controller.wake import Wake
from fusesched.core.pending_reasons import take_reasons
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    Event,
    JobCancelRequested,
    JobCheckpointed,
    PreemptJob,
    RejectJob,
    ReserveJob,
    StartJob,
    StopJob,
)
from fusesched.model.node import NodeSpec, NodeState
from fusesched.policies.priority import PriorityBreakdown
from fusesched.submit.request import JobRequest
from fusesched.submit.terminal import Terminal

log = logging.getLogger("fusesched.controller")


class Controller:
    """Thread-safe; start the scheduling loop with :meth:`start`, stop it with :meth:`stop`."""

    def __init__(
        self,
        persist: Persistence,
        logs: LogStore,
        config: ControllerConfig | None = None,
        clock: Callable[[], float] = time.time,
        auth: Authenticator | None = None,
    ) -> None:
        self.config = config or ControllerConfig()
        self.persist = persist
        self.auth = auth
        self.logs = logs
        self.clock = clock
        self.core = SchedulerCore(self.config.core, rng=np.random.default_rng(0))
        self.lock = threading.RLock()
        self.work = threading.Condition(self.lock)  # wakes long-polling heartbeats
        self.jobs: dict[str, LiveJob] = {}
        self.nodes: dict[str, LiveNode] = {}
        self.tasks: dict[str, tuple[str, LiveTask]] = {}  # task id -> (job id, task)
        self.finished: dict[str, LiveTask] = {}  # tasks of ended jobs, newest last (bounded)
        self.outliving: dict[str, LiveTask] = {}  # of those, not ended yet (late_exits.py)
        self.events: list[Event] = []
        self.decisions: list[Decision] = []  # every decision, for the parity test
        self.keep_decisions = False
        self._wake = Wake()
        self._last_cycle = 0.0  # time.monotonic() at the end of the loop's last cycle
        self.stopped = threading.Event()  # set by stop(): the loop and long polls end
        self._thread: threading.Thread | None = None
        self.cycles = 0
        self.cycle_waiters = 0  # heartbeats and priority queries waiting for the next cycle
        self.monitor = Monitor(check_interval_s=self.config.hang_check_s)
        self.forecasts = Forecasts()  # expected starts of waiting jobs (GET /v1/starts)
        self._health_at = 0.0
        self.step_warnings_at = -math.inf  # monotonic: the last look for steps' warnings due
        self.adopt_until = 0.0  # jobs left running wait for their nodes until then (tasks too)
        self.adopt_held: set[str] = set()  # nodes kept DRAINING until their jobs are adopted
        self.expected_nodes: set[str] = set()  # nodes the store knew (up) at the restart
        self.held: list[Event] = []  # recovered submissions, sent once the nodes are back
        # recovered jobs no node back can hold yet; jobs behind one the core lacks (unsubmitted)
        self.waiting: list[Event] = []
        # arrays of before the restart whose ended members the core was told of (each once)
        self.arrays_recalled: set[str] = set()
        # federation: pools and routing; external clusters' workers and nodes
        self.federation = self.config.federation or federation.default_config()
        self.pools: dict[str, RemotePool] = {}
        self.agents = AgentPool(self)  # the local agents' pools
        self.drivers: dict[str, PoolDriver] = {}  # external clusters' pools, by name
        power = self.config.power
        self.power = PowerManager(power) if power is not None else None
        self.remote_nodes: dict[str, tuple[str, str, NodeState]] = {}  # name -> pool, own name
        self.remote_specs: dict[str, NodeSpec] = {}
        if self.config.federation is not None:
            pools_dir = self.config.pools_dir or Path("fusesched-data") / "pools"
            federation.build_pools(self, self.config.federation, pools_dir)
        # job notifications, fed by the transitions written to the store (recovery's too)
        self.notices = JobNotices(self.config.notify, clock)
        self.persist.notices = self.notices
        reservations.recover(self)  # (before the recovered jobs that may run in one)
        recovery.recover(self)
        self.holders = attendance.recovered(self)  # (InactiveLimit: a fresh limit for each)
        # terminals' sessions (api/pty_routes.py), in memory
        self.pty_relay = PtyRelay(pty_tasks.recovered(self))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for pool in self.pools.values():
            pool.start()
        self.notices.start()
        self._thread = threading.Thread(target=self._loop, name="fusesched-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for pool in self.pools.values():
            pool.stop()
        self.notices.stop()
        with self.work:
            self.work.notify_all()

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self._wake.wait(timeout=1.0)
            if self.stopped.is_set():
                return
            self._wake.clear()
            try:
                self.run_cycle()
                self._check_nodes()
                self._check_health()
                self._check_power()
                attendance.check(self)
                step_warning.check(self)
            except Exception:  # the loop must outlive one bad cycle: say so and go on
                log.exception("scheduling cycle failed")
            self._last_cycle = time.monotonic()
            time.sleep(self.config.min_cycle_s)

    def wake(self) -> None:
        """Run a scheduling cycle soon (something changed outside the loop)."""
        self._wake.set()

    def _check_power(self) -> None:
        if self.power is not None:
            with self.lock:
                self.power.tick(self, self.clock())

    def _check_health(self) -> None:
        now = self.clock()
        if now - self._health_at < self.config.health_check_s:
            return
        self._health_at = now
        with self.work:
            failures.relaunch_due(self, now)
            findings = self.monitor.check(now, failures.running_tasks(self))
            if findings:
                failures.act_on(self, findings, now)
                self._wake.set()

    def _check_nodes(self) -> None:
        now = self.clock()
        with self.lock:
            if self.adopt_until and now >= self.adopt_until:
                self.adopt_until = 0.0
                adoption.expire(self, now)
                recovery.release_held(self)
                late_exits.never_back(self, now)
            for name, node in self.nodes.items():
                late = now - node.last_seen > self.config.node_timeout_s
                if late and node.state in (NodeState.UP, NodeState.DRAINING):
                    failures.set_node_state(self, name, NodeState.DOWN, "no heartbeat", now)
                    failures.node_lost(self, name, now)
                    self._wake.set()

    # ------------------------------------------------------------------ submission

    def submit(self, requests: Sequence[JobRequest], user: str = "") -> list[str]:
        """Validate, store and queue jobs; returns their ids (array parents for arrays)
        (:func:`submissions.submit`)."""
        ids = submissions.submit(self, requests, user, self.clock())
        # at once after a quiet spell; while submissions stream in, one cycle per
        # ``submit_cycle_s`` takes all that came meanwhile
        self._wake.set_at(self._last_cycle + self.config.submit_cycle_s)
        return ids

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> list[str]:
        """Cancel a job (or every member of an array); returns the ids affected."""
        with self.lock:
            targets = [job_id] if job_id in self.jobs else []
            if not targets:
                targets = [j for j, live in self.jobs.items() if live.spec.array_parent == job_id]
            if not targets:
                if self.persist.job_exists(job_id):
                    return []  # already finished: nothing to do
                raise UnknownJobError(job_id)
            cancels = [JobCancelRequested(target, reason) for target in targets]
            self.events.extend(recovery.cancel_unsubmitted(self, cancels))  # (restarts)
        self._wake.set()
        return targets

    def owner(self, job_id: str) -> tuple[str, str] | None:
        """(user, tenant) of a job or of an array's members; ``None`` for an unknown id."""
        with self.lock:
            live = self.jobs.get(job_id)
            if live is None:
                live = next((j for j in self.jobs.values() if j.spec.array_parent == job_id), None)
            if live is not None:
                return live.spec.user, live.spec.tenant
        view = self.persist.get_job(job_id)
        return None if view is None else (view.user, view.tenant)

    # ------------------------------------------------------------------ agents

    def register(self, inventory: NodeInventory) -> None:
        """A node's agent (re)starts (:func:`agents.register`)."""
        agents.register(self, inventory)

    def leaving(self, name: str) -> NodeState:
        """A node's agent is stopping: its node is lost at once (:func:`agents.leaving`)."""
        return agents.leaving(self, name)

    def heartbeat(
        self,
        beat: Heartbeat,
        wait_s: float | None = None,
        launch: bool = False,
        signals: bool = True,
        probes: bool = True,
        outputs: bool = True,
        pty: bool = True,
    ) -> HeartbeatReply:
        """An agent's beat and the work in the reply, a long poll (:func:`agents.heartbeat`)."""
        return agents.heartbeat(self, beat, wait_s, launch, signals, probes, outputs, pty)

    def on_node(self, task_id: str, node: str) -> bool:
        """Whether the task (live, recently finished, or outliving its job) ran on ``node``."""
        entry = self.tasks.get(task_id)
        task = entry[1] if entry is not None else self.finished.get(task_id)
        task = task or self.outliving.get(task_id)
        return task is not None and task.node == node

    def remote_launch(
        self,
        job_id: str,
        node: str,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        step: int | None = None,
    ) -> str:
        """Start a helper process of a running job on one of its nodes (mpirun's orted;
        ``step``: of that running job step's mpirun)."""
        return agents.remote_launch(self, job_id, node, argv, env or {}, step)

    def create_step(
        self,
        job_id: str,
        slots: Mapping[str, int],
        overlap: bool,
        launches: Sequence[tuple[str, list[str], Mapping[str, str]]],
        het: Mapping[int, Mapping[str, int]] | None = None,
        gpus: GpuAsk | None = None,
        name: str | None = None,
        pty: Terminal | None = None,
        resources: CpuMemAsk | None = None,
        stdin: StepStdin | None = None,
    ) -> tuple[int, list[str]]:
        """A job step's share of the job's slots (``het``: of a heterogeneous job's
        components), GPUs, CPUs and memory (``resources``), and its tasks
        (:func:`steps.create_step`); ``pty``: its one task runs on that terminal
        (controller/step_pty.py); ``stdin``: ``srun``'s standard input, for its tasks."""
        with self.work:  # (the terminal is in the launch before a heartbeat can send it)
            if pty is not None:
                step_pty.within_cap(self, job_id)
            created = steps.create_step(
                self, job_id, slots, overlap, launches, het, gpus, name, resources, stdin
            )
            if pty is not None:
                step_pty.give_terminal(self, created[1][0], pty)
        return created

    def remote_kill(self, task_id: str) -> None:
        """Stop a running remote task of a job (a job step's)."""
        agents.remote_kill(self, task_id)

    def task_status(self, task_id: str) -> tuple[str, int | None, str]:
        """(state, exit code, reason) of a live or recently finished task."""
        return agents.task_status(self, task_id)

    # ------------------------------------------------------------------ scheduling

    def run_cycle(self) -> list[Decision]:
        with self.work, metrics_for(self).cycle_timer():
            now = self.clock()
            completing.settle(self, now)  # (nodes ended runs held, free now)
            events, self.events = self.events, []
            decisions: list[Decision] = []
            for event in events:
                try:
                    decisions.extend(self.core.handle(event, now))
                except (KeyError, ValueError) as exc:  # a stale event must not stop the loop
                    log.error("event %r refused by the core: %s", event, exc)
            decisions.extend(self.core.cycle(now))
            self.cycles += 1
            for decision in decisions:
                self._apply(decision, now)
            endings.settle_terminal(self, now)
            reasons = take_reasons(self.core)  # (why jobs wait: written where it changed)
            if reasons is not None:
                self.persist.wait_reasons(reasons)
            self.persist.flush()
            if self.keep_decisions:
                self.decisions.extend(decisions)
            if self.cycle_waiters or any(
                n.outbox or n.kills or n.stage for n in self.nodes.values()
            ):
                self.work.notify_all()
            return decisions

    def _apply(self, decision: Decision, now: float) -> None:
        if isinstance(decision, StartJob):
            self._start(decision, now)
        elif isinstance(decision, StopJob):
            self._stop_job(decision.job_id, decision.reason)
        elif isinstance(decision, PreemptJob):
            live = self.jobs.get(decision.job_id)
            if live is not None:
                self.persist.job_event(live.id, "JobPreemptNotice", decision.reason, now)
                self.stop_tasks(live, decision.reason, decision.grace_s)
        elif isinstance(decision, ReserveJob):
            data.stage_for(self, decision)
        elif isinstance(decision, RejectJob):
            self.jobs.pop(decision.job_id, None)
            rec = self.core.jobs[decision.job_id]
            self.persist.job_finished(decision.job_id, rec.phase, None, decision.reason, now)

    def _start(self, decision: StartJob, now: float) -> None:
        live = self.jobs[decision.job_id]
        if live.exit_sent:  # requeued and started again in one cycle: settle the old run first
            reason = live.requeue[2] if live.requeue is not None else "requeued"
            endings.requeued(self, live, reason, self.core.jobs[live.id].attempts, now)
        if live.spec.reservation is not None:  # ("reservation … starts at" no more)
            self.persist.job_reason(live.id, "")
        self.driver(federation.pool_of(self, decision)).start(live, decision, now)

    def driver(self, pool: str | None) -> PoolDriver:
        """How a pool runs jobs: an external cluster's worker, else the local agents."""
        return self.drivers.get(pool or "", self.agents)

    def _stop_job(self, job_id: str, reason: str) -> None:
        live = self.jobs.get(job_id)
        if live is None:
            return
        live.stopping = reason
        for task in live.tasks.values():
            self.kill_task(task, reason)

    def stop_tasks(self, live: LiveJob, reason: str, grace_s: float | None = None) -> None:
        """Stop every task of a job that is not being cancelled (a preemption's notice, a
        failure's restart): the exits are reported to the core as usual."""
        for task in live.tasks.values():
            self.kill_task(task, reason, grace_s)

    def kill_task(self, task: LiveTask, reason: str, grace_s: float | None = None) -> None:
        """Stop one task through its pool's driver (nothing when it has exited)."""
        if task.state != "exited":
            self.driver(task.pool).kill(task, reason, grace_s)

    def finish_task(self, task: LiveTask, code: int, reason: str, now: float) -> None:
        """``task`` exited with ``code`` (:func:`endings.finish_task`)."""
        endings.finish_task(self, task, code, reason, now)

    def kill_now(self, task: LiveTask, reason: str) -> KillTask:
        """A kill for an agent to carry out at once (no grace period)."""
        return KillTask(task_id=task.launch.task_id, grace_s=0.0, reason=reason)

    # ------------------------------------------------------------------ external pools

    def remote_update(self, updates: list[Update]) -> None:
        """What an external pool's worker learned (called from its thread)."""
        with self.work:
            federation.apply(self, updates, self.clock())
            self.persist.flush()
        self._wake.set()

    def route(self, request: JobRequest) -> Route:
        """How ``request`` would be routed now (SubmitError when no pool can take it)."""
        with self.lock:
            return federation.explain(self, request.identified())

    def node_spec(self, name: str) -> NodeSpec | None:
        node = self.nodes.get(name)
        return node.spec if node is not None else self.remote_specs.get(name)

    # ------------------------------------------------------------------ helpers

    def checkpointed(self, job_id: str, at: float | None = None) -> float:
        """A running job says it wrote a checkpoint at ``at`` (now when None, never later
        than now); returns the time noted. UnknownJobError when it is not running."""
        now = self.clock()
        with self.lock:
            live = self.jobs.get(job_id)
            if live is None or not live.tasks:
                raise UnknownJobError(job_id)
            when = now if at is None else min(at, now)
            if when > live.last_checkpoint:
                live.last_checkpoint = when
                self.events.append(JobCheckpointed(job_id, when))
        return when

    def priority(self, job_id: str) -> PriorityBreakdown:
        """The job's multifactor priority now (raises UnknownJobError, or ValueError when
        the controller runs without tenancy): :func:`priorities.priority`."""
        return priorities.priority(self, job_id)
