"""The controller's side of failures: what the agents' sensors found (hangs, GPU faults,
unhealthy nodes), nodes that went silent and tasks that vanished, turned into the job's
restart policy's action (docs/FAILURES.md); the fencing of tasks that reappear after their
node was declared lost, and the relaunch of jobs restarting in place.

Every function here runs with the controller's lock held. A retried failure stops the job's
tasks and, once all have exited, reports ``JobExited(requeue=True, exclude_nodes=…,
not_before=…)`` to the core, which queues the job again (see :func:`endings.job_may_have_ended`);
a job that may not be requeued (``sbatch --no-requeue``) fails instead, saying so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fusesched.api.wire import Heartbeat
from fusesched.controller import in_place, late_exits, task_usage
from fusesched.controller.hang import (
    DEFAULT_HANG_POLICIES,
    Action,
    ActionKind,
    Failure,
    FailureKind,
    HangPolicy,
    RestartMode,
    RestartPolicy,
    next_action,
)
from fusesched.controller.metrics import metrics_for
from fusesched.controller.monitor import Finding, JobInfo
from fusesched.controller.records import LiveTask
from fusesched.controller.step_cpus import release_unended
from fusesched.core.requeue import NOT_REQUEUED
from fusesched.model.events import JobCheckpointed, NodeStateChanged
from fusesched.model.node import NodeState
from fusesched.model.phases import node_failure
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller

#: The exit code a job failed by the controller (not by its own exit) reports.
FAILED_BY_CONTROLLER = -1
#: Failures that, ending a job, end it as Slurm's ``NODE_FAIL`` (its reason marked by
#: :func:`~fusesched.model.phases.node_failure`): its node lost, or its task gone from a
#: node whose agent still answers (as Slurm fails a batch job missing from its node).
NODE_FAILURES = frozenset({FailureKind.NODE, FailureKind.TASK_LOST})


def restart_policy(request: JobRequest) -> RestartPolicy:
    r = request.restart
    return RestartPolicy(
        mode=RestartMode(r.mode),
        max_restarts=r.max_restarts,
        backoff_s=r.backoff_s,
        retry_application_failures=r.retry_application_failures,
    )


def hang_policy(live: LiveJob) -> HangPolicy | None:
    """The job's own hang thresholds, or None for its type's default."""
    h = live.request.hang
    if h.enabled is None and h.window_s is None and h.startup_s is None:
        return None
    base = DEFAULT_HANG_POLICIES[live.spec.type]
    return replace(
        base,
        enabled=base.enabled if h.enabled is None else h.enabled,
        window_s=base.window_s if h.window_s is None else h.window_s,
        startup_s=base.startup_s if h.startup_s is None else h.startup_s,
    )


def job_failed(ctl: Controller, live: LiveJob, failure: Failure, now: float) -> None:
    """Apply ``live``'s restart policy to ``failure``: notify, fail, or stop and requeue."""
    if live.requeue is not None or live.relaunch is not None:
        return  # already being restarted
    if live.stopping is not None or live.exit_sent:
        return  # already ending
    action = planned_action(ctl, live, failure)
    ctl.persist.job_event(live.id, f"Job{failure.kind.value.title()}", action.reason, now)
    if action.kind is ActionKind.NOTIFY:
        return
    if action.kind is ActionKind.FAIL:
        if live.first_failure is None:
            live.first_failure = (FAILED_BY_CONTROLLER, action.reason)
        ctl.stop_tasks(live, action.reason)
        return
    if action.kind is ActionKind.RESTART_IN_PLACE and live.pool is None:  # same nodes kept
        live.relaunch = (now + action.delay_s, action.reason)
    else:
        live.requeue = (action.exclude_nodes, now + action.delay_s, action.reason)
    ctl.stop_tasks(live, action.reason)


def planned_action(ctl: Controller, live: LiveJob, failure: Failure) -> Action:
    """What ``live``'s restart policy does about ``failure``, its restarts so far counted."""
    rec = ctl.core.jobs.get(live.id)
    # (the runs before a controller restart too: the core counts from zero when handed the
    # job again, which gave a recovered job a fresh budget)
    attempts = live.attempt_base + (rec.attempts if rec is not None else 0) + live.in_place
    action = next_action(failure, attempts, restart_policy(live.request))
    if action.kind is ActionKind.REQUEUE and not live.request.requeue:
        # (sbatch --no-requeue: a node failure ends it, as Slurm's NODE_FAIL)
        what = failure.reason or failure.kind.value
        action = Action(ActionKind.FAIL, reason=f"{what}; {NOT_REQUEUED}")
    if action.kind is ActionKind.FAIL and failure.kind in NODE_FAILURES:
        action = replace(action, reason=node_failure(action.reason))  # (sacct: NODE_FAIL)
    return action


def liveness_failed(ctl: Controller, job_id: str, task: LiveTask, reason: str, now: float) -> None:
    """The agent stopped ``task`` because its liveness probe failed (``reason``, "liveness
    probe failed: …"): a failure of the job, not of its node, that its restart policy answers
    (restart in place or requeue, counted against ``max_restarts``)."""
    live = ctl.jobs.get(job_id)
    if live is not None and not task.remote:
        job_failed(ctl, live, Failure(FailureKind.LIVENESS, task.node, reason), now)


def act_on(ctl: Controller, findings: list[Finding], now: float) -> None:
    """Turn the monitor's findings into actions."""
    for finding in findings:
        if finding.kind == "node":
            set_node_state(ctl, finding.node, NodeState.DRAINING, finding.reason, now)
        elif finding.kind == "node-healthy":
            node = ctl.nodes.get(finding.node)
            if node is not None and node.state is NodeState.DRAINING:
                set_node_state(ctl, finding.node, NodeState.UP, finding.reason, now)
        elif finding.job_id is not None:
            live = ctl.jobs.get(finding.job_id)
            if live is None:
                continue
            kind = FailureKind.HANG if finding.kind == "hang" else FailureKind.GPU
            job_failed(ctl, live, Failure(kind, finding.node, finding.reason), now)


def set_node_state(ctl: Controller, name: str, state: NodeState, reason: str, now: float) -> None:
    """Change a node's state for the core and the store; a node an operator drained comes
    back (health, power saving, adoption) as DRAINING, not UP."""
    node = ctl.nodes.get(name)
    if node is None:
        return
    if state is NodeState.UP and node.drain is not None:
        state, reason = NodeState.DRAINING, f"{reason}; drained by an operator: {node.drain}"
    if node.state is state:
        return
    node.state = state
    ctl.events.append(NodeStateChanged(name, state, reason))
    ctl.persist.node_state(name, state, now, reason)


def running_tasks(ctl: Controller) -> dict[str, JobInfo]:
    """What the monitor needs to judge each running task."""
    out: dict[str, JobInfo] = {}
    for task_id, (job_id, task) in ctl.tasks.items():
        if task.state != "running" or task.remote or task.pool is not None:
            continue  # helpers, and jobs an external cluster runs, are not watched here
        live = ctl.jobs.get(job_id)
        if live is None or live.stopping is not None:
            continue
        if live.requeue is None and live.relaunch is None:
            out[task_id] = (job_id, live.spec.type, hang_policy(live))
    return out


def node_lost(ctl: Controller, name: str, now: float, reason: str | None = None) -> None:
    """``name`` stopped heartbeating (or its agent said it is stopping: ``reason``): its
    tasks are lost (fenced if they show up again), launches not yet sent there are dropped
    (no agent will take them), and their jobs are handled as node failures — as is every
    job whose allocation includes the node, even with no task of it there (a batch job whose
    script runs on another of its nodes: Slurm's NODE_FAIL), but for one whose own tasks
    there had all exited 0 (:func:`done_on`)."""
    reason = reason or f"node {name} stopped heartbeating"
    failed = allocation_lost(ctl, name, reason, now)
    for job_id, task in list(ctl.tasks.values()):
        if task.node != name or task.state not in ("launching", "delivered", "running"):
            continue
        live = ctl.jobs.get(job_id)
        if live is not None and job_id not in failed:  # (once per job)
            failed.add(job_id)
            job_failed(ctl, live, Failure(FailureKind.NODE, name, reason), now)
        if task.state == "launching":  # never sent (job_failed may have dropped it already)
            ctl.kill_task(task, "node lost")
            continue
        task.lost = True
        ctl.finish_task(task, FAILED_BY_CONTROLLER, "node lost", now)
    late_exits.lost(ctl, name, (), "node lost", now, code=FAILED_BY_CONTROLLER)


def allocation_lost(ctl: Controller, name: str, reason: str, now: float) -> set[str]:
    """The local jobs allocated node ``name`` (:attr:`LiveJob.nodes`, rebuilt from the
    hostfile after a controller restart) fail as if a task of theirs was lost there, unless
    their work there is done (:func:`done_on`). Jobs an external pool runs are that
    cluster's to fail; jobs still waiting to be adopted are requeued by
    :func:`adoption.expire`; jobs already ending or restarting are left alone
    (:func:`job_failed`). Returns the ids of the jobs failed here."""
    failed: set[str] = set()
    for live in list(ctl.jobs.values()):
        if name not in live.nodes or live.pool is not None or live.adopting:
            continue
        if not done_on(live, name):
            failed.add(live.id)
            job_failed(ctl, live, Failure(FailureKind.NODE, name, reason), now)
    return failed


def done_on(live: LiveJob, node: str) -> bool:
    """Whether ``live``'s own tasks on ``node`` have all exited 0 and nothing of it runs
    there any more: losing the node loses nothing of it (a job whose own tasks run the
    command, one of which finished there). A batch job's other node, where it holds slots
    for its steps and has no task of its own, is not done. (A later restart in place
    requeues it without the node instead: :func:`relaunch_due`.)"""
    there = [task for task in live.tasks.values() if task.node == node]
    own = [task for task in there if not task.remote]
    return (
        bool(own)
        and all(task.state == "exited" for task in there)
        and all(task.exit_code == 0 for task in own)
    )


def fence(ctl: Controller, beat: Heartbeat) -> int:
    """Kill tasks this node still runs that were declared lost while it was silent
    (their jobs were requeued); returns how many there are."""
    node = ctl.nodes[beat.node]
    stale = 0
    for task_id in beat.running or ():
        entry = ctl.tasks.get(task_id)
        task = entry[1] if entry is not None else ctl.finished.get(task_id)
        if task is not None and task.lost and task.node == beat.node:
            stale += 1
            node.kills.append(ctl.kill_now(task, "fenced: declared lost"))
    return stale


def observe(ctl: Controller, beat: Heartbeat, now: float) -> None:
    """Feed the monitor; report checkpoints the sensors saw to the core."""
    samples = [s for s in beat.samples if ctl.on_node(s.task_id, beat.node)]
    ctl.monitor.observe(beat.node, samples, beat.health, now)
    metrics_for(ctl).observe(beat, now)
    task_usage.observe(ctl, samples)
    for sample in samples:
        entry = ctl.tasks.get(sample.task_id)
        mtime = sample.checkpoint_mtime
        if entry is None or mtime is None:
            continue
        live = ctl.jobs.get(entry[0])
        if live is not None and mtime > live.last_checkpoint:
            live.last_checkpoint = mtime
            ctl.events.append(JobCheckpointed(live.id, mtime))


def relaunch_due(ctl: Controller, now: float) -> None:
    """Start again, on the same nodes and resources, every task of the run of the jobs
    restarting in place whose tasks have all exited and whose delay is over
    (:func:`in_place.relaunched`); those stopped meanwhile end instead, and those that cannot
    (a node lost, a batch script's launch lost with a controller restart) are requeued."""
    for live in list(ctl.jobs.values()):
        if live.relaunch is None or live.relaunch[0] > now:
            continue
        main = [t for t in live.tasks.values() if not t.remote]
        if not main or not all(t.state == "exited" for t in main):
            continue
        if live.stopping is not None:  # cancelled (or timed out) while it waited: it ends
            from fusesched.controller import endings  # (endings imports this module)

            live.relaunch = None
            endings.job_may_have_ended(ctl, live, now)
            continue
        reason = live.relaunch[1]
        live.relaunch = None
        down = sorted({t.node for t in main if _down(ctl, t.node)})
        if down or not in_place.rebuildable(live, main):
            from fusesched.controller import endings  # (endings imports this module)

            # (lost since its task there ended, done_on: requeued without it instead)
            lost = f"node {', '.join(down)} lost meanwhile" if down else in_place.UNKNOWN_ALLOCATION
            why = f"{reason}; {lost}: requeued"
            # (--no-requeue: the core fails it with this reason, its node lost: NODE_FAIL)
            why = node_failure(why) if down and not live.request.requeue else why
            live.requeue = (tuple(down), now, why)
            endings.job_may_have_ended(ctl, live, now)
            continue
        live.in_place += 1
        rec = ctl.core.jobs[live.id]
        attempt = live.attempt_base + rec.attempts + live.in_place
        release_unended(ctl, live.tasks.values())  # (before the old grants are claimed)
        fresh = in_place.relaunched(ctl, live, main, attempt, now)
        for task_id, task in live.tasks.items():
            ctl.tasks.pop(task_id, None)
            ctl.finished[task_id] = task
            ctl.monitor.forget(task_id)
        live.tasks = fresh
        live.first_failure = live.failed_group = None
        for task_id, task in fresh.items():
            ctl.tasks[task_id] = (live.id, task)
        ctl.persist.tasks_started(live.id, list(fresh.values()), now)
        ctl.persist.job_event(live.id, "JobRestartedInPlace", reason, now)
        ctl.work.notify_all()


def _down(ctl: Controller, name: str) -> bool:
    """Whether node ``name`` is lost (``DOWN``, or gone): nothing can be launched there."""
    node = ctl.nodes.get(name)
    return node is None or node.state is NodeState.DOWN
