"""How tasks and jobs end: what the agents report of their tasks (:func:`task_report`), tasks
they no longer list (:func:`lose_tasks`), a task's end (:func:`finish_task`) and, once the
whole gang has exited, the ``JobExited`` the core gets (:func:`job_may_have_ended`, with the
retry of an application failure its restart policy asks for, and the restart after an exit 0
that ``restart.always`` asks for); after a cycle, the jobs the core finished or queued again
are written and their runs forgotten (:func:`settle_terminal`, :func:`requeued`).

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskReport, TaskState
from fusesched.controller import failures, late_exits, task_usage
from fusesched.controller.completion import group_completed
from fusesched.controller.hang import ActionKind, Failure, FailureKind
from fusesched.controller.holds import HELD
from fusesched.controller.inactive import ended_by_limit
from fusesched.controller.metrics import group_of, metrics_for
from fusesched.controller.run_launches import revoke_job_tokens
from fusesched.controller.step_cpus import release_unended, returned
from fusesched.model.events import JobExited, JobHoldRequested
from fusesched.model.phases import OOM_REASON, JobPhase, oom_killed
from fusesched.submit.task_group import RetryExits

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveTask
    from fusesched.controller.service import Controller

#: Tasks of finished jobs whose status stays queryable (mpirun's launcher asks after the end).
FINISHED_TASKS_KEPT = 10_000


def task_report(ctl: Controller, report: TaskReport, now: float) -> None:
    """A task's agent says it runs (with its pid) or has exited."""
    entry = ctl.tasks.get(report.task_id)
    if entry is None:  # a task of a run forgotten, or from before a restart (ignored)
        late_exits.exited(ctl, report, now)
        return
    task = entry[1]
    if report.state is TaskState.RUNNING:
        if task.state == "running" and task.pid == report.pid:
            return  # said twice (a full beat and a quick report both carried it)
        if task.state != "exited":
            task.state = "running"
            task.pid = report.pid
            if report.reason:  # something the agent wants the user to know (a power cap)
                ctl.persist.job_event(entry[0], "TaskNote", report.reason, now)
        return
    code = report.exit_code if report.exit_code is not None else 127
    if report.liveness_failed:  # its restart policy applies, before the exit is counted
        failures.liveness_failed(ctl, entry[0], task, report.reason, now)
    started = report.state is not TaskState.FAILED_TO_START
    finish_task(ctl, task, code, report.reason, now, started=started)


def lose_tasks(
    ctl: Controller, node: str, alive: set[str], reason: str, now: float, beat: bool = False
) -> None:
    """End the node's tasks not in ``alive`` as lost (``beat``: ``alive`` is what a full
    beat listed, which may predate a launch sent on a quick report)."""
    for job_id, task in list(ctl.tasks.values()):
        running = task.state in ("delivered", "running")
        if beat and task.node == node and task.launch.task_id in alive:
            task.unconfirmed_until = 0.0  # a full beat lists it: judged as usual from now
        if running and task.node == node and task.launch.task_id not in alive:
            if beat and now < task.unconfirmed_until:
                # sent on a quick report after the beat listed the node's tasks (it may
                # have reported RUNNING meanwhile, on another quick report)
                continue
            live = ctl.jobs.get(job_id)
            if live is not None and not task.remote:
                # no node blamed: its agent is alive and answering
                lost = Failure(FailureKind.TASK_LOST, None, f"task {reason}")
                failures.job_failed(ctl, live, lost, now)
            finish_task(ctl, task, -1, reason, now)
    late_exits.lost(ctl, node, alive, reason, now, beat)  # (tasks outliving their job's run)


def finish_task(
    ctl: Controller, task: LiveTask, code: int, reason: str, now: float, *, started: bool = True
) -> None:
    """``task`` exited with ``code``: give its resources back, write it, and see whether its
    job ended (the first failure of a gang kills the rest with ``kill_on_bad_exit``). A task
    that never ``started`` (127) failed before its command could exit: its group's
    ``retry_exits`` does not judge that failure (as Kubernetes' StartError, exit 128)."""
    if task.state == "exited":
        return
    job_id = ctl.tasks[task.launch.task_id][0]
    task.state, task.exit_code, task.reason, task.end_time = "exited", code, reason, now
    live = ctl.jobs.get(job_id)
    if live is None:
        return
    node = ctl.nodes.get(task.node)
    if node is not None:  # (a step's task: its own CPU ids, those no other task holds)
        node.pool.give(returned(ctl, task, live), node.inventory)
    ctl.persist.task_ended(task, now)
    task_usage.task_ended(ctl, task)
    if code != 0 and live.first_failure is None and not task.remote:
        live.first_failure = (code, reason)
        live.failed_group = group_of(task.launch.task_id) if started else None
        if ctl.config.kill_on_bad_exit and live.stopping is None:
            for other in live.tasks.values():
                ctl.kill_task(other, f"task {task.launch.task_id} failed")
    if code == 0:  # (a completes_job group's last task: the job is complete)
        group_completed(ctl, live, task, now)
    if code == 0 and live.request.restart.always and not task.remote:
        _restart_after_success(ctl, live, task, now)
    job_may_have_ended(ctl, live, now)


def job_may_have_ended(ctl: Controller, live: LiveJob, now: float) -> None:
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
            _retry_exit(ctl, live, code, why, now)  # may set requeue or relaunch
        if live.relaunch is not None and live.stopping is not None:
            live.relaunch = None  # stopped (cancelled, timed out) while restarting: it ends
        if live.relaunch is not None:  # restarted in place once the delay is over
            for other in live.tasks.values():
                ctl.kill_task(other, "restarting in place")
            ctl.wake()
            return
        live.exit_sent = True
        for other in live.tasks.values():  # stray orteds end with their job
            ctl.kill_task(other, "job ended")
        # (its booking on the nodes of those still running stays held: completing.py)
        left = late_exits.nodes_left(ctl, live.tasks.values())
        if live.requeue is not None:
            exclude, not_before, why = live.requeue
            ctl.events.append(
                JobExited(
                    job_id,
                    code or -1,
                    why,
                    requeue=True,
                    exclude_nodes=exclude,
                    not_before=not_before,
                    completing=left,
                )
            )
            if live.hold_after_requeue is not None:  # held before the cycle could start it
                live.hold, live.hold_after_requeue = live.hold_after_requeue, None
                ctl.events.append(JobHoldRequested(job_id, live.hold))
        else:
            timed_out = "walltime" in why or ended_by_limit(why)  # (InactiveLimit: as Slurm)
            oom = not timed_out and _out_of_memory(live, code, why, main)
            if oom and not oom_killed(why):
                why = f"{OOM_REASON}; {why}" if why else OOM_REASON
            ended = JobExited(
                job_id, code, why, timed_out=timed_out, completing=left, out_of_memory=oom
            )
            ctl.events.append(ended)
        ctl.wake()


def _out_of_memory(live: LiveJob, code: int, why: str, main: list[LiveTask]) -> bool:
    """Whether the run ends as the kernel's OOM killer's (Slurm's ``OUT_OF_MEMORY``): its
    first failure says so, or the OOM killer killed a process of one of the job's own tasks
    (its agent's reason, :data:`OOM_REASON`) whatever that task's exit (a batch script that
    goes on after its child was killed exits 0), as Slurm ends a job whose batch step had an
    oom-kill event ``OUT_OF_MEMORY`` whatever its script's status. Not a run the controller
    ended (cancelled, out of time, preempted, a node lost, a ``completes_job`` group done,
    a failure its restart policy failed): that ends it as before. An ``srun`` step's task
    (``remote``) is its step's (sacct's step row), not the job's, as Slurm's."""
    if oom_killed(why):
        return True
    if live.stopping is not None or code == failures.FAILED_BY_CONTROLLER:
        return False
    return any(t.reason == OOM_REASON for t in main)


def _retry_exit(ctl: Controller, live: LiveJob, code: int, why: str, now: float) -> None:
    """A job that exited non-zero on its own: retried only if its policy says so."""
    rec = ctl.core.jobs.get(live.id)
    if not live.request.restart.retry_application_failures or rec is None:
        return
    if rec.preempt_reason is not None or "walltime" in why:
        return
    if not _exit_retried(ctl, live, code, why, now):
        return
    failures.job_failed(ctl, live, Failure(FailureKind.EXIT, None, why), now)
    if live.requeue is None:
        live.first_failure = (code, why)  # failed for good: keep the job's own reason


def _exit_retried(ctl: Controller, live: LiveJob, code: int, why: str, now: float) -> bool:
    """Whether the group whose task failed first retries an exit with ``code`` (its
    ``retry_exits``); one it does not is a permanent error, said in the job's events."""
    group = next((g for g in live.request.groups if g.name == live.failed_group), None)
    if group is None or group.retry_exits.retries(code):
        return True
    rule = _RETRY_RULES[group.retry_exits]
    said = f"{why}: exit code {code} of group {group.name} is a permanent error, not restarted"
    ctl.persist.job_event(live.id, "JobExit", f"{said} (retry_exits: {rule})", now)
    return False


#: What a group's ``retry_exits`` that did not retry an exit says of itself.
_RETRY_RULES = {
    RetryExits.SIGNALS: "signals restarts the job only after an exit by a signal, 128-255",
    RetryExits.NEVER: "never restarts the job after a failing exit of the group",
}


def _restart_after_success(ctl: Controller, live: LiveJob, task: LiveTask, now: float) -> None:
    """A task of a job restarted after every exit (``restart.always``, a Deployment's) exited
    0: the job restarts as after a failure, with the same back-off and ``max_restarts``. Not
    a job being stopped (cancelled, preempted, out of time) or already restarting; out of
    restarts, it is left to end as without the policy, once every task has exited."""
    rec = ctl.core.jobs.get(live.id)
    if rec is None or rec.stop_requested is not None or rec.preempt_reason is not None:
        return
    if live.stopping is not None or live.requeue is not None or live.relaunch is not None:
        return
    failure = Failure(FailureKind.EXIT, None, f"task {task.launch.task_id} exited 0")
    action = failures.planned_action(ctl, live, failure)
    if action.kind in (ActionKind.RESTART_IN_PLACE, ActionKind.REQUEUE):
        failures.job_failed(ctl, live, failure, now)
    else:
        ctl.persist.job_event(live.id, "JobExit", f"{action.reason}; not restarted", now)


def settle_terminal(ctl: Controller, now: float) -> None:
    """Write every job the core finished (exits, cancels, failed dependencies) and forget it."""
    ended: list[str] = []
    for job_id in list(ctl.jobs):
        rec = ctl.core.jobs.get(job_id)
        if rec is None or not rec.phase.terminal:
            if rec is not None and rec.phase in (JobPhase.QUEUED, JobPhase.PENDING):
                live = ctl.jobs[job_id]  # (pending: requeued and held at once)
                if live.exit_sent:
                    said = readable_wait(rec.history[-1].reason, rec.not_before)
                    requeued(ctl, live, said, rec.attempts, now)
            continue
        live = ctl.jobs.pop(job_id)
        ctl.holders.forget(job_id)  # (InactiveLimit: no holder to watch any more)
        if live.tasks:
            ended.append(job_id)
            energy = metrics_for(ctl).job_energy(live, now)
            total = energy.measured_j + energy.estimated_j
            ctl.persist.job_energy(job_id, total, energy.measured_j)
        reason = rec.history[-1].reason if rec.history else ""
        ctl.persist.job_finished(job_id, rec.phase, rec.exit_code, reason, now)
        release_unended(ctl, live.tasks.values())
        for task_id, task in live.tasks.items():
            ctl.tasks.pop(task_id, None)
            ctl.finished[task_id] = task
        while len(ctl.finished) > FINISHED_TASKS_KEPT:
            del ctl.finished[next(iter(ctl.finished))]
    if ended:
        revoke_job_tokens(ctl, ended)


def readable_wait(reason: str, not_before: float) -> str:
    """The core's reason for a job requeued with a back-off ends "eligible at <Unix seconds,
    6 digits>" (the simulator's clock has no calendar): the controller says the local time."""
    raw = f"eligible at {not_before:g}"
    if not reason.endswith(raw):
        return reason
    when = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(not_before))
    return f"{reason[: -len(raw)]}eligible at {when}"


def requeued(ctl: Controller, live: LiveJob, reason: str, attempt: int, now: float) -> None:
    """The core queued a job again after its run ended: forget the run's tasks."""
    release_unended(ctl, live.tasks.values())
    for task_id, task in live.tasks.items():
        ctl.tasks.pop(task_id, None)
        ctl.finished[task_id] = task
        ctl.monitor.forget(task_id)
    live.tasks = {}
    live.nodes = ()
    live.exit_sent = False
    live.first_failure = live.failed_group = None
    live.requeue = None
    live.stopping = None
    ctl.persist.job_requeued(live.id, JobPhase.QUEUED, reason, attempt, now)
    if live.hold is not None:  # requeued and held (scontrol requeuehold)
        ctl.persist.job_held(live.id, live.hold, HELD, now, by_admin=live.hold_admin)
    revoke_job_tokens(ctl, [live.id])
