"""The controller's side of failures: what the agents' sensors found (hangs, GPU faults,
unhealthy nodes), nodes that went silent and tasks that vanished, turned into the job's
restart policy's action (docs/FAILURES.md).

Every function here runs with the controller's lock held. A retried failure stops the job's
tasks and, once all have exited, reports ``JobExited(requeue=True, exclude_nodes=…,
not_before=…)`` to the core, which queues the job again (see ``Controller._finish_task``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fusesched.controller.hang import (
    DEFAULT_HANG_POLICIES,
    ActionKind,
    Failure,
    FailureKind,
    HangPolicy,
    RestartMode,
    RestartPolicy,
    next_action,
)
from fusesched.controller.monitor import Finding, JobInfo
from fusesched.model.events import NodeStateChanged
from fusesched.model.node import NodeState
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller

#: The exit code a job failed by the controller (not by its own exit) reports.
FAILED_BY_CONTROLLER = -1


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
    rec = ctl.core.jobs.get(live.id)
    attempts = (rec.attempts if rec is not None else 0) + live.in_place
    action = next_action(failure, attempts, restart_policy(live.request))
    ctl.persist.job_event(live.id, f"Job{failure.kind.value.title()}", action.reason, now)
    if action.kind is ActionKind.NOTIFY:
        return
    if action.kind is ActionKind.FAIL:
        if live.first_failure is None:
            live.first_failure = (FAILED_BY_CONTROLLER, action.reason)
        ctl.stop_tasks(live, action.reason)
        return
    if action.kind is ActionKind.RESTART_IN_PLACE:  # same nodes, resources kept
        live.relaunch = (now + action.delay_s, action.reason)
    else:
        live.requeue = (action.exclude_nodes, now + action.delay_s, action.reason)
    ctl.stop_tasks(live, action.reason)


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
    node = ctl.nodes.get(name)
    if node is None or node.state is state:
        return
    node.state = state
    ctl.events.append(NodeStateChanged(name, state, reason))
    ctl.persist.node_state(name, state, now, reason)


def running_tasks(ctl: Controller) -> dict[str, JobInfo]:
    """What the monitor needs to judge each running task."""
    out: dict[str, JobInfo] = {}
    for task_id, (job_id, task) in ctl.tasks.items():
        if task.state != "running" or task.remote:
            continue
        live = ctl.jobs.get(job_id)
        if live is None or live.stopping is not None:
            continue
        if live.requeue is None and live.relaunch is None:
            out[task_id] = (job_id, live.spec.type, hang_policy(live))
    return out


def node_lost(ctl: Controller, name: str, now: float) -> None:
    """``name`` stopped heartbeating: its tasks are lost (fenced if they show up again) and
    their jobs are handled as node failures."""
    for job_id, task in list(ctl.tasks.values()):
        if task.node != name or task.state not in ("delivered", "running"):
            continue
        live = ctl.jobs.get(job_id)
        if live is not None:
            reason = f"node {name} stopped heartbeating"
            job_failed(ctl, live, Failure(FailureKind.NODE, name, reason), now)
        task.lost = True
        ctl.finish_task(task, FAILED_BY_CONTROLLER, "node lost", now)
