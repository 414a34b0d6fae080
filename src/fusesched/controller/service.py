"""The live shell around the scheduling core.

The controller owns one :class:`SchedulerCore` and feeds it events on the wall clock:
submissions and cancels from the API, node registrations and task exits from the agents. It
turns the core's decisions into work for the agents (:class:`TaskLaunch`, :class:`KillTask`)
and writes every change through to the store. API handlers and the scheduling loop run in
different threads; one lock guards the core and the live state, and the scheduling loop runs
a cycle whenever something changed (at most every ``min_cycle_s``; for submissions alone, at
most every ``submit_cycle_s``, so that a stream of them is scheduled in shared cycles).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    KillTask,
    NodeInventory,
    TaskLaunch,
    TaskReport,
    TaskState,
)
from fusesched.backends.routing import Route
from fusesched.controller import adoption, data, failures, federation
from fusesched.controller.auth import Authenticator
from fusesched.controller.drivers import AgentPool, PoolDriver
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.logs import LogStore
from fusesched.controller.metrics import metrics_for
from fusesched.controller.monitor import Monitor
from fusesched.controller.persist import Persistence
from fusesched.controller.pools import Grant, NodePool
from fusesched.controller.power import PowerManager
from fusesched.controller.records import (
    ControllerConfig,
    LiveJob,
    LiveNode,
    LiveTask,
    NotReadyError,
    UnknownJobError,
    UnknownNodeError,
    array_size,
    node_spec,
    recovered_spec,
)
from fusesched.controller.remote import RemotePool, Update
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    Event,
    JobCancelRequested,
    JobCheckpointed,
    JobExited,
    JobSubmitted,
    NodeAdded,
    NodeStateChanged,
    PreemptJob,
    RejectJob,
    ReserveJob,
    StartJob,
    StopJob,
)
from fusesched.model.job import JobSpec
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources
from fusesched.policies.priority import PriorityBreakdown
from fusesched.power.saving import PowerState
from fusesched.submit.errors import SubmitError
from fusesched.submit.feasibility import check_feasible
from fusesched.submit.request import JobRequest

log = logging.getLogger("fusesched.controller")

#: Tasks of finished jobs whose status stays queryable (mpirun's launcher asks after the end).
FINISHED_TASKS_KEPT = 10_000
#: A launch sent in reply to a quick report is not taken for lost, for this long, when a full
#: beat does not list it: the agent's two threads send beats independently, so a full beat may
#: list the node's tasks before the launch started, and arrive after it was sent. Past this, a
#: task its agent never reports (a reply lost on the way) is lost as usual.
UNCONFIRMED_GRACE_S = 10.0


class _Wake:
    """When the scheduling loop runs its next cycle: as soon as it may (:meth:`set`: an exit,
    a node, a cancel), or at a given time (:meth:`set_at`: a submission, so that a stream of
    them shares a cycle instead of paying for one each)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._now = False
        self._at: float | None = None  # time.monotonic() of a cycle asked for later

    def set(self) -> None:
        with self._cv:
            self._now = True
            self._cv.notify_all()

    def set_at(self, at: float) -> None:
        with self._cv:
            if self._at is None or at < self._at:
                self._at = at
                self._cv.notify_all()

    def is_set(self) -> bool:
        with self._cv:
            return self._now

    def clear(self) -> None:
        with self._cv:
            self._now = False
            self._at = None

    def wait(self, timeout: float) -> None:
        """Until :meth:`set`, the time given to :meth:`set_at`, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._now:
                until = deadline if self._at is None else min(deadline, self._at)
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._cv.wait(left)


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
        self.events: list[Event] = []
        self.decisions: list[Decision] = []  # every decision, for the parity test
        self.keep_decisions = False
        self._wake = _Wake()
        self._last_cycle = 0.0  # time.monotonic() at the end of the loop's last cycle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cycles = 0
        self._cycle_waiters = 0  # heartbeats waiting for the next cycle to end
        self.monitor = Monitor(check_interval_s=self.config.hang_check_s)
        self._health_at = 0.0
        self.adopt_until = 0.0  # jobs left running wait for their nodes until then
        self.adopt_held: set[str] = set()  # nodes kept DRAINING until their jobs are adopted
        self.expected_nodes: set[str] = set()  # nodes the store knew (up) at the restart
        self.held: list[Event] = []  # recovered submissions, sent once the nodes are back
        self.waiting: list[Event] = []  # recovered jobs the nodes back so far cannot hold
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
        self._recover()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for pool in self.pools.values():
            pool.start()
        self._thread = threading.Thread(target=self._loop, name="fusesched-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for pool in self.pools.values():
            pool.stop()
        with self.work:
            self.work.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.run_cycle()
                self._check_nodes()
                self._check_health()
                self._check_power()
            except Exception:  # the loop must outlive one bad cycle: say so and go on
                log.exception("scheduling cycle failed")
            self._last_cycle = time.monotonic()
            time.sleep(self.config.min_cycle_s)

    def _recover(self) -> None:
        """Jobs left pending by a previous controller go back into the queue; jobs it had
        running wait for their agents to report in and are adopted (controller/adoption.py)."""
        pending, running = self.persist.unfinished_jobs()
        if self.auth is not None and self.auth.enabled:
            self.persist.store.revoke_job_tokens(keep=[d.job.id for d in running])
        # queued jobs wait for the nodes to come back (else no node would fit them yet)
        self.expected_nodes = {  # local agents' nodes (external pools' are named pool:node)
            n.name
            for n in self.persist.store.list_nodes()
            if n.state is not NodeState.DOWN and ":" not in n.name
        }
        if pending and self.expected_nodes:
            self.adopt_until = self.clock() + self.config.node_timeout_s
        for detail in pending:
            row = detail.job
            request = JobRequest.model_validate(row.request)
            spec = recovered_spec(request, row)
            try:
                spec = federation.routed(self, request, spec)
            except SubmitError as exc:  # the pools changed since: it may still fit somewhere
                log.warning("job %s: %s; queued without a route", spec.id, exc)
            live = LiveJob(spec.id, row.seq, spec, request)
            live.attempt_base = adoption.next_attempt(detail.tasks)
            self.jobs[spec.id] = live
            self.held.append(JobSubmitted(spec))
        if not self.expected_nodes:
            self._release_held()
        if running:
            adoption.recover_running(self, running, self.clock())

    # ------------------------------------------------------------------ submission

    def submit(self, requests: Sequence[JobRequest], user: str = "") -> list[str]:
        """Validate, store and queue jobs; returns their ids (array parents for arrays)."""
        now = self.clock()
        with self.lock:
            node_specs = federation.node_specs(self)
            if not node_specs:
                raise NotReadyError("no node has registered yet; start an agent first")
            requests = [r.identified() for r in requests]
            sizes = [array_size(r) for r in requests]
            first = self.persist.allocate_seqs(sum(sizes))
            prepared: list[tuple[int, JobRequest, JobSpec]] = []
            for request, size in zip(requests, sizes, strict=True):
                if user and not request.user:
                    request = request.model_copy(update={"user": user})
                spec = federation.routed(self, request, request.to_job_spec(str(first), now))
                for dep in spec.dependencies:
                    known = dep.job_id in self.core.jobs or self.persist.job_exists(dep.job_id)
                    if not known:
                        raise SubmitError(f"dependency on unknown job {dep.job_id!r}")
                reason = check_feasible(spec, node_specs)
                if not reason and self.core.tenants is not None:
                    reason = self.core.tenants.refuse(spec)
                if reason:
                    raise SubmitError(reason)
                prepared.append((first, request, spec))
                first += size
            ids: list[str] = []
            for seq, request, spec in prepared:
                children = spec.expand_array()
                seqs = range(seq, seq + len(children))
                self.persist.jobs_submitted(seqs, request, children, now)
                for child_seq, child in zip(seqs, children, strict=True):
                    self.jobs[child.id] = LiveJob(child.id, child_seq, child, request)
                self.events.append(JobSubmitted(spec))
                ids.append(spec.id)
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
            for target in targets:
                self.events.append(JobCancelRequested(target, reason))
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
        _check_node_identity(inventory)
        now = self.clock()
        with self.lock:
            known = self.nodes.get(inventory.name)
            if known is None:
                spec = node_spec(inventory)
                node = LiveNode(inventory, spec, NodePool.of(inventory), now)
                if adoption.holds(self, inventory.name):  # nothing new beside adopted tasks
                    node.state = NodeState.DRAINING
                    self.adopt_held.add(inventory.name)
                self.nodes[inventory.name] = node
                self.events.append(NodeAdded(spec, node.state))
            else:  # an agent restarted: whatever it ran is gone
                known.inventory = inventory
                known.last_seen = now
                self._lose_tasks(inventory.name, set(), "agent restarted", now)
                asleep = self.power is not None and self.power.state_of(inventory.name) in (
                    PowerState.SUSPENDING,
                    PowerState.SUSPENDED,
                    PowerState.RESUMING,
                )
                if known.state is not NodeState.UP and not asleep:  # power saving decides
                    known.state = NodeState.UP
                    self.events.append(NodeStateChanged(inventory.name, NodeState.UP, "back"))
            self.persist.node_registered(inventory, now)
            if self.power is not None:
                self.power.heard(self, inventory.name, registered=True, now=now)
            if known is None and self.adopt_held:
                adoption.on_register(self, inventory, now)
            if self.held and self.expected_nodes <= self.nodes.keys():
                self._release_held()
            if self.waiting:
                self.retry_waiting()
        self._wake.set()

    def heartbeat(
        self, beat: Heartbeat, wait_s: float | None = None, launch: bool = False
    ) -> HeartbeatReply:
        """Take what an agent reports; the reply carries its work (launches, kills, datasets
        to stage).

        A full beat (``beat.running`` set) waits up to ``wait_s`` for work (a long poll). A
        quick report (``running`` None) gets work only when its agent says it takes some
        (``launch``); then, if it reported an exit, it waits (up to ``wait_s``) for the
        scheduling cycle that handles the exit, so the launch that takes the freed room comes
        back in the same exchange. Either kind of beat that reported an exit waits for that
        cycle, not for the whole long poll.
        """
        now = self.clock()
        wait = self.config.long_poll_s if wait_s is None else wait_s
        quick = beat.running is None
        with self.work:
            node = self.nodes.get(beat.node)
            if node is None:
                raise UnknownNodeError(beat.node)
            node.last_seen = now
            fenced = failures.fence(self, beat) if not quick else 0
            if node.state is NodeState.DOWN and not fenced:  # back, and its stale tasks gone
                failures.set_node_state(self, beat.node, NodeState.UP, "heartbeat", now)
                self._wake.set()
            if self.power is not None:
                self.power.heard(self, beat.node, registered=False, now=now)
            if beat.samples or beat.health is not None:
                failures.observe(self, beat, now)
            data.heard(self, beat)
            # a node speaks only for its own tasks: it can neither write another node's task
            # logs nor end another node's tasks
            for chunk in beat.logs:
                if self.on_node(chunk.task_id, beat.node):
                    self.logs.write(chunk)
            for report in beat.reports:
                if self.on_node(report.task_id, beat.node):
                    self._task_report(report, now)
            if beat.running is not None:
                alive = set(beat.running) | {r.task_id for r in beat.reports}
                self._lose_tasks(beat.node, alive, "lost by its agent", now, beat=True)
                for task_id in alive - self.tasks.keys() - self.finished.keys():
                    node.kills.append(  # a stray from before a controller restart
                        KillTask(task_id=task_id, grace_s=self.config.grace_s, reason="unknown job")
                    )
            self.persist.flush()
            if quick and not launch:
                # an agent that does not take work on quick reports starts work only from its
                # full beats, before it lists its live tasks again (else a task could look
                # lost in between)
                return HeartbeatReply()
            # an exit reported (events to schedule): the next cycle may bring work
            ended = any(r.state is not TaskState.RUNNING for r in beat.reports)
            cycle = self.cycles + 1 if ended and self.events else None
            if not (node.outbox or node.kills or node.stage) and wait > 0:
                if cycle is not None:
                    # some pending events (checkpoints, sensor findings) do not wake the loop
                    # themselves: the cycle this beat waits for must come now
                    self._wake.set()
                    self._cycle_waiters += 1
                    node.cycle_waiters += 1
                    try:
                        self.work.wait_for(
                            lambda: (
                                bool(node.outbox or node.kills or node.stage)
                                or self.cycles >= cycle
                                or self._stop.is_set()
                            ),
                            timeout=wait,
                        )
                    finally:
                        self._cycle_waiters -= 1
                        node.cycle_waiters -= 1
                        self.work.notify_all()  # a long poll of this node may answer now
                elif not quick:
                    # while a report of this node waits for its cycle, that report takes the
                    # work the cycle brings (one exchange, not two, per turnover)
                    self.work.wait_for(
                        lambda: (
                            (
                                bool(node.outbox or node.kills or node.stage)
                                and not node.cycle_waiters
                            )
                            or self._stop.is_set()
                        ),
                        timeout=wait,
                    )
            reply = HeartbeatReply(launch=node.outbox, kill=node.kills, stage=node.stage)
            for sent in node.outbox:
                task = self.tasks[sent.task_id][1]
                task.state = "delivered"
                # the agent's full beat may have listed its tasks before it started this one
                task.unconfirmed_until = now + UNCONFIRMED_GRACE_S if quick else 0.0
            node.outbox, node.kills, node.stage = [], [], []
        return reply

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

    def on_node(self, task_id: str, node: str) -> bool:
        entry = self.tasks.get(task_id)
        task = entry[1] if entry is not None else self.finished.get(task_id)
        return task is not None and task.node == node

    def remote_launch(self, job_id: str, node: str, argv: list[str]) -> str:
        """Start a helper process of a running job on one of its nodes (mpirun's orted)."""
        with self.work:
            live = self.jobs.get(job_id)
            if live is None or not live.tasks:
                raise UnknownJobError(job_id)
            if node not in live.nodes:
                raise SubmitError(f"node {node!r} is not allocated to job {job_id}")
            live.remote_count += 1
            task_id = f"{job_id}.remote.{live.remote_count}"
            base = next(iter(live.tasks.values())).launch
            launch = TaskLaunch(
                task_id=task_id,
                job_id=job_id,
                user=base.user,
                argv=argv,
                env={k: v for k, v in base.env.items() if not k.startswith("OMPI_MCA_")}
                | {"FUSESCHED_NODE": node, "FUSESCHED_TASK_ID": task_id},
                grace_s=self.config.grace_s,
                image=base.image,
            )
            task = LiveTask(launch, node, Grant(), remote=True, start_time=self.clock())
            live.tasks[task_id] = task
            self.tasks[task_id] = (job_id, task)
            self.persist.tasks_started(job_id, [task], task.start_time or 0.0)
            self.nodes[node].outbox.append(launch)
            self.work.notify_all()
        return task_id

    def task_status(self, task_id: str) -> tuple[str, int | None, str]:
        with self.lock:
            entry = self.tasks.get(task_id)
            task = entry[1] if entry is not None else self.finished.get(task_id)
            if task is None:
                raise UnknownJobError(task_id)
            return task.state, task.exit_code, task.reason

    # ------------------------------------------------------------------ scheduling

    def run_cycle(self) -> list[Decision]:
        with self.work, metrics_for(self).cycle_timer():
            now = self.clock()
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
            self._settle_terminal(now)
            self.persist.flush()
            if self.keep_decisions:
                self.decisions.extend(decisions)
            if self._cycle_waiters or any(
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
            self._requeued(live, reason, self.core.jobs[live.id].attempts, now)
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
            self._kill(task, reason)

    def stop_tasks(self, live: LiveJob, reason: str, grace_s: float | None = None) -> None:
        """Stop every task of a job that is not being cancelled (a preemption's notice, a
        failure's restart): the exits are reported to the core as usual."""
        for task in live.tasks.values():
            self._kill(task, reason, grace_s)

    def _kill(self, task: LiveTask, reason: str, grace_s: float | None = None) -> None:
        if task.state != "exited":
            self.driver(task.pool).kill(task, reason, grace_s)

    # ------------------------------------------------------------------ task reports

    def _task_report(self, report: TaskReport, now: float) -> None:
        entry = self.tasks.get(report.task_id)
        if entry is None:
            return  # a task this controller does not know (from before a restart): ignore
        task = entry[1]
        if report.state is TaskState.RUNNING:
            if task.state == "running" and task.pid == report.pid:
                return  # said twice (a full beat and a quick report both carried it)
            if task.state != "exited":
                task.state = "running"
                task.pid = report.pid
                if report.reason:  # something the agent wants the user to know (a power cap)
                    self.persist.job_event(entry[0], "TaskNote", report.reason, now)
            return
        code = report.exit_code if report.exit_code is not None else 127
        self._finish_task(task, code, report.reason, now)

    def _lose_tasks(
        self, node: str, alive: set[str], reason: str, now: float, beat: bool = False
    ) -> None:
        """End the node's tasks not in ``alive`` as lost (``beat``: ``alive`` is what a full
        beat listed, which may predate a launch sent on a quick report)."""
        for job_id, task in list(self.tasks.values()):
            running = task.state in ("delivered", "running")
            if beat and task.node == node and task.launch.task_id in alive:
                task.unconfirmed_until = 0.0  # a full beat lists it: judged as usual from now
            if running and task.node == node and task.launch.task_id not in alive:
                if beat and now < task.unconfirmed_until:
                    # sent on a quick report after the beat listed the node's tasks (it may
                    # have reported RUNNING meanwhile, on another quick report)
                    continue
                live = self.jobs.get(job_id)
                if live is not None and not task.remote:
                    # no node blamed: its agent is alive and answering
                    lost = Failure(FailureKind.TASK_LOST, None, f"task {reason}")
                    failures.job_failed(self, live, lost, now)
                self._finish_task(task, -1, reason, now)

    def finish_task(self, task: LiveTask, code: int, reason: str, now: float) -> None:
        self._finish_task(task, code, reason, now)

    def _finish_task(self, task: LiveTask, code: int, reason: str, now: float) -> None:
        if task.state == "exited":
            return
        job_id = self.tasks[task.launch.task_id][0]
        task.state, task.exit_code, task.reason, task.end_time = "exited", code, reason, now
        live = self.jobs.get(job_id)
        if live is None:
            return
        if not task.remote:
            node = self.nodes.get(task.node)
            if node is not None:
                node.pool.give(task.grant, node.inventory)
        self.persist.task_ended(task, now)
        if code != 0 and live.first_failure is None and not task.remote:
            live.first_failure = (code, reason)
            if self.config.kill_on_bad_exit and live.stopping is None:
                for other in live.tasks.values():
                    self._kill(other, f"task {task.launch.task_id} failed")
        self.job_may_have_ended(live, now)

    def kill_now(self, task: LiveTask, reason: str) -> KillTask:
        return KillTask(task_id=task.launch.task_id, grace_s=0.0, reason=reason)

    def job_may_have_ended(self, live: LiveJob, now: float) -> None:
        """When every task of the gang has exited, tell the core how the run ended (not
        before the core has it: a job waiting for adoption keeps its exits until then)."""
        job_id = live.id
        main = [t for t in live.tasks.values() if not t.remote]
        if live.adopting:
            return
        if not live.exit_sent and main and all(t.state == "exited" for t in main):
            code, why = live.first_failure or (0, "")
            restarting = live.requeue is not None or live.relaunch is not None
            if code != 0 and not restarting and live.stopping is None:
                self._retry_exit(live, code, why, now)  # may set requeue or relaunch
            if live.relaunch is not None:  # restarted in place once the delay is over
                for other in live.tasks.values():
                    self._kill(other, "restarting in place")
                self._wake.set()
                return
            live.exit_sent = True
            for other in live.tasks.values():  # stray orteds end with their job
                self._kill(other, "job ended")
            if live.requeue is not None:
                exclude, not_before, why = live.requeue
                self.events.append(
                    JobExited(
                        job_id,
                        code or -1,
                        why,
                        requeue=True,
                        exclude_nodes=exclude,
                        not_before=not_before,
                    )
                )
            else:
                timed_out = "walltime" in why
                self.events.append(
                    JobExited(job_id, exit_code=code, reason=why, timed_out=timed_out)
                )
            self._wake.set()

    def _retry_exit(self, live: LiveJob, code: int, why: str, now: float) -> None:
        """A job that exited non-zero on its own: retried only if its policy says so."""
        rec = self.core.jobs.get(live.id)
        if not live.request.restart.retry_application_failures or rec is None:
            return
        if rec.preempt_reason is not None or "walltime" in why:
            return
        failures.job_failed(self, live, Failure(FailureKind.EXIT, None, why), now)
        if live.requeue is None:
            live.first_failure = (code, why)  # failed for good: keep the job's own reason

    def _settle_terminal(self, now: float) -> None:
        """Write every job the core finished (exits, cancels, failed dependencies) and forget it."""
        ended: list[str] = []
        for job_id in list(self.jobs):
            rec = self.core.jobs.get(job_id)
            if rec is None or not rec.phase.terminal:
                if rec is not None and rec.phase is JobPhase.QUEUED:
                    live = self.jobs[job_id]
                    if live.exit_sent:
                        self._requeued(live, rec.history[-1].reason, rec.attempts, now)
                continue
            live = self.jobs.pop(job_id)
            if live.tasks:
                ended.append(job_id)
                energy = metrics_for(self).job_energy(live, now)
                total = energy.measured_j + energy.estimated_j
                self.persist.job_energy(job_id, total, energy.measured_j)
            reason = rec.history[-1].reason if rec.history else ""
            self.persist.job_finished(job_id, rec.phase, rec.exit_code, reason, now)
            for task_id, task in live.tasks.items():
                self.tasks.pop(task_id, None)
                self.finished[task_id] = task
            while len(self.finished) > FINISHED_TASKS_KEPT:
                del self.finished[next(iter(self.finished))]
        if ended and self.auth is not None and self.auth.enabled:
            self.persist.store.revoke_job_tokens(ended)  # their helpers may call no more

    def _requeued(self, live: LiveJob, reason: str, attempt: int, now: float) -> None:
        """The core queued a job again after its run ended: forget the run's tasks."""
        for task_id, task in live.tasks.items():
            self.tasks.pop(task_id, None)
            self.finished[task_id] = task
            self.monitor.forget(task_id)
        live.tasks = {}
        live.nodes = ()
        live.exit_sent = False
        live.first_failure = None
        live.requeue = None
        live.stopping = None
        self.persist.job_requeued(live.id, JobPhase.QUEUED, reason, attempt, now)
        if self.auth is not None and self.auth.enabled:
            self.persist.store.revoke_job_tokens([live.id])

    def _release_held(self) -> None:
        for event in self.held:
            self.resubmit(event)
        self.held = []
        self._wake.set()

    def resubmit(self, event: Event) -> None:
        """Hand the core a job recovered after a restart, unless the nodes back so far cannot
        hold it (a gang while one of its nodes' agents is still restarting): the core would
        reject it for good; it waits, pending, until a node registers that lets it fit."""
        if isinstance(event, JobSubmitted) and check_feasible(
            event.job, federation.node_specs(self)
        ):
            self.waiting.append(event)
        else:
            self.events.append(event)

    def retry_waiting(self) -> None:
        waiting, self.waiting = self.waiting, []
        for event in waiting:
            self.resubmit(event)

    def _check_nodes(self) -> None:
        now = self.clock()
        with self.lock:
            if self.adopt_until and now >= self.adopt_until:
                self.adopt_until = 0.0
                adoption.expire(self, now)
                self._release_held()
            for name, node in self.nodes.items():
                late = now - node.last_seen > self.config.node_timeout_s
                if late and node.state in (NodeState.UP, NodeState.DRAINING):
                    failures.set_node_state(self, name, NodeState.DOWN, "no heartbeat", now)
                    failures.node_lost(self, name, now)
                    self._wake.set()

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
        the controller runs without tenancy)."""
        with self.work:
            live = self.jobs.get(job_id)
            if live is not None and job_id not in self.core.jobs:
                if not self._submitting(live):
                    raise ValueError(
                        f"job {job_id} is not in the scheduler's queue yet (after a restart it "
                        "waits for its nodes to come back); it has a priority once it is queued"
                    )
                # submitted just now: the core learns of it at the next cycle (submissions
                # share cycles), which runs at once for this question
                self._wake.set()
                self._cycle_waiters += 1
                try:
                    self.work.wait_for(
                        lambda: job_id in self.core.jobs or self._stop.is_set(), timeout=2.0
                    )
                finally:
                    self._cycle_waiters -= 1
            try:
                return self.core.priority(job_id, self.clock())
            except KeyError:
                raise UnknownJobError(job_id) from None

    def _submitting(self, live: LiveJob) -> bool:
        """Whether ``live``'s submission waits for the next cycle (not a job recovered after
        a restart that waits for its nodes); called with the lock held."""
        ids = {live.id, live.spec.array_parent}
        return any(isinstance(e, JobSubmitted) and e.job.id in ids for e in self.events)

    def queue_counts(self) -> list[tuple[str, int, int]]:
        """(queue, pending, running) for every queue with live jobs, by name."""
        with self.lock:
            counts: dict[str, list[int]] = {}
            for live in self.jobs.values():
                entry = counts.setdefault(live.spec.queue, [0, 0])
                entry[1 if live.nodes else 0] += 1
        return [(name, p, r) for name, (p, r) in sorted(counts.items())]

    def snapshot_nodes(self) -> list[tuple[NodeInventory, NodeState, float, Resources]]:
        """Each node with its state, last heartbeat and free resources (from the core)."""
        with self.lock:
            cluster = self.core.cluster
            out = []
            for name, node in self.nodes.items():
                row = cluster.index.get(name)
                free = Resources()
                if row is not None:
                    free = Resources(
                        {c: int(cluster.free[row, k]) for c, k in cluster.columns.items()}
                    )
                out.append((node.inventory, node.state, node.last_seen, free))
            for name, spec in self.remote_specs.items():
                out.append(self._remote_snapshot(name, spec))
            return out

    def _remote_snapshot(
        self, name: str, spec: NodeSpec
    ) -> tuple[NodeInventory, NodeState, float, Resources]:
        cluster = self.core.cluster
        row = cluster.index.get(name)
        free = Resources()
        if row is not None:
            free = Resources({c: int(cluster.free[row, k]) for c, k in cluster.columns.items()})
        inventory = NodeInventory(
            name=name, address="", resources=spec.capacity.to_spec(), labels=dict(spec.labels)
        )
        return inventory, self.remote_nodes[name][2], self.clock(), free


#: what an agent may call its node and give as its address: they name things in commands
#: (power-saving templates, mpirun's host list), so no option-like or template-like words;
#: ":" is kept for external pools' nodes (``<pool>:<node>``)
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:%_-]{0,252}$")


def _check_node_identity(inventory: NodeInventory) -> None:
    if not _NODE_NAME.match(inventory.name):
        raise SubmitError(
            f"invalid node name {inventory.name!r}: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    if not _ADDRESS.match(inventory.address):
        raise SubmitError(f"invalid node address {inventory.address!r}: a host name or IP")
