"""Crash recovery: a restarted controller adopts the jobs its predecessor left running.

At start (:func:`recover_running`) every job the store shows running gets its live record
back, with a task per task of its run the store shows (those that ended before the restart
as ended: its gang's, launched again should the run restart in place,
controller/in_place.py) and the nodes the store shows it started on, and waits. Each node
that registers again says which of its tasks still run and with what (CPU ids, GPUs, launch
files: :func:`on_register`); a node of a waiting job joins the core as ``DRAINING``, so
nothing new lands on resources it holds (as does a node where a task of a job that ended
before the restart still dies: controller/completing.py). When all of a job's nodes are
back, the core gets ``JobAdopted`` and books the job where it runs (:func:`try_adopt`): its
launched tasks, and the task slots its hostfile gives it where nothing was launched (a batch
job's other nodes: :func:`held_slots`), so that ``srun`` in it reaches all its nodes again;
exits reported in the meantime are kept and passed on right after. A run whose task had
failed before the restart gets that first failure back from the store
(:func:`_failed_before`), and its other tasks are stopped again. A job whose node is still
missing after ``node_timeout_s`` is given up on that node: its tasks there are declared lost
(fenced if the node returns), the others are killed, and the job's restart policy decides, as
for a node lost while it ran (:func:`give_up`): back to the queue for a new run, or failed.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from fusesched.agent.step_het import het_hostfile_name
from fusesched.agent.step_plan import read_hostfile
from fusesched.api.wire import NodeInventory, TaskLaunch
from fusesched.controller import endings, failures, federation, late_exits
from fusesched.controller.completion import recovered
from fusesched.controller.hang import ActionKind, Failure, FailureKind
from fusesched.controller.launchenv import HOSTFILE_NAME
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob, LiveTask, recovered_spec, stored_request
from fusesched.controller.run_launches import revoke_job_tokens
from fusesched.controller.step_cpus import release_unended
from fusesched.controller.step_gpus import adopted_gpus
from fusesched.core.requeue import NOT_REQUEUED
from fusesched.model.events import AdoptedTask, JobAdopted, JobCancelRequested, JobSubmitted
from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase
from fusesched.store import JobDetail
from fusesched.store.records import JobRow, JobState, TaskRow

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

_RESTART = re.compile(r"-r(\d+)$")
_REMOTE = re.compile(r"\.remote\.(\d+)$")


def attempt_of(task_id: str) -> int:
    """The run a task id belongs to (``<job>-r<attempt>.<group>.<i>``; 0 without suffix)."""
    found = _RESTART.search(task_id.split(".", 1)[0])
    return int(found.group(1)) if found else 0


def next_attempt(tasks: tuple[TaskRow, ...]) -> int:
    """The attempt number a stored job's next run takes (0 when it never ran)."""
    return max((attempt_of(t.task_id) for t in tasks), default=-1) + 1


def run_tasks(tasks: tuple[TaskRow, ...], attempt: int) -> list[TaskRow]:
    """The stored tasks of a job's run ``attempt``: its own (``<job>-r<attempt>.…``), and
    the remote tasks (``<job>.remote.<n>``, an id that names no run) started since the first
    of those; not an earlier run's, which the store may still show running."""
    own = [t for t in tasks if ".remote." not in t.task_id and attempt_of(t.task_id) == attempt]
    since = min((t.start_time for t in own if t.start_time is not None), default=None)
    ids = {t.task_id for t in own}
    return [
        t
        for t in tasks
        if t.task_id in ids
        or (".remote." in t.task_id and since is not None and (t.start_time or 0.0) >= since)
    ]


def remote_count(tasks: tuple[TaskRow, ...]) -> int:
    """How many remote tasks (``<job>.remote.<n>``) a stored job's runs started: its next
    one's number follows (an id of an earlier run's task, stored, maybe still dying, is
    never taken again)."""
    return max((int(m.group(1)) for t in tasks if (m := _REMOTE.search(t.task_id))), default=0)


def recover_running(ctl: Controller, details: list[JobDetail], now: float) -> None:
    """Give each job the store shows running its live record back; it waits for adoption."""
    cancels = _cancels_stored(ctl, [d.job for d in details])
    environments = ctl.persist.store.environments(d.job.env_id for d in details)
    for detail in details:
        row = detail.job
        request = stored_request(row, environments)
        spec = recovered_spec(request, row)
        live = LiveJob(spec.id, row.seq, spec, request)
        live.attempt_base = next_attempt(detail.tasks) - 1 if detail.tasks else 0
        live.remote_count = remote_count(detail.tasks)
        live.started_at = row.start_time if row.start_time is not None else now
        live.adopting = True
        argv = {g.name: list(g.argv) for g in request.groups}
        run = run_tasks(detail.tasks, live.attempt_base)
        for t in run:
            if t.node is None or (t.state is not JobState.RUNNING and not _own_ended(ctl, row, t)):
                continue
            remote = ".remote." in t.task_id
            launch = TaskLaunch(
                task_id=t.task_id,
                job_id=spec.id,
                user=spec.user,
                argv=argv.get(t.group) or ["true"],
                grace_s=ctl.config.grace_s,
                # (a run --pty job's own task ran on its terminal: its agent relays what it
                # kept even if the task ended meanwhile; a step's is known once reported)
                pty=None if remote else request.pty,
            )
            task = LiveTask(
                launch,
                t.node,
                _grant(t.devices),
                remote=remote,
                state="delivered",
                start_time=t.start_time,
                rebuilt=True,  # (until its agent gives its launch back: on_register)
            )
            if t.state is not JobState.RUNNING:  # (ended before: a task of its gang all the same)
                task.state, task.exit_code, task.end_time = "exited", t.exit_code, t.end_time
                task.reason = t.reason or ""  # (the OOM killer's: the job ends OUT_OF_MEMORY)
            if row.pool in ctl.pools:  # an external cluster runs it: follow it there again
                if t.external_id is None:
                    continue  # never confirmed by the cluster: run it again
                task.pool, task.external_id, task.state = row.pool, t.external_id, "running"
                live.pool = row.pool
            live.tasks[t.task_id] = task
            ctl.tasks[t.task_id] = (spec.id, task)
        if row.pool not in ctl.pools:  # all its nodes, not only its tasks': adopted when back
            live.nodes = tuple(row.nodes)
        live.cancel_asked = cancels.get(row.id)
        lost = _failed_before(live, run)
        recovered(live, run)  # (a completes_job group done before that failure: it completes)
        ctl.jobs[spec.id] = live
        if live.first_failure is None and lost:
            # lost before the restart (its node or agent lost it): the old controller had
            # decided what its restart policy says, or would have; so does this one (chaos:
            # killed 10 ms after deciding to requeue, the run was failed for the exit -1)
            _lost_before(ctl, live, now)
        elif not any(not t.remote and t.state != "exited" for t in live.tasks.values()):
            if row.pool in ctl.pools:  # never confirmed by its cluster: handed over again
                requeue(ctl, live, "no task of it was running", now)
            else:  # its tasks gone from their nodes: lost, as its agent no longer listing them
                gone = Failure(FailureKind.TASK_LOST, None, "no task of it was running")
                give_up(ctl, live, gone, now)
    ctl.adopt_until = now + ctl.config.node_timeout_s


#: The event a running job's cancel is stored as when asked for (:func:`remember_cancels`).
CANCEL_ASKED: Final = "CancelAsked"
#: The event stored when a job's run starts (controller/persist.py).
STARTED: Final = "JobStarted"


def remember_cancels(ctl: Controller, events: list[JobCancelRequested]) -> list[JobCancelRequested]:
    """Store the cancels of running jobs, so that a controller that dies while their tasks
    are being killed does not lose them (the job ends, and is written, only once they have
    exited): a restarted one cancels the job it adopts (:func:`_cancels_stored`). A job being
    adopted keeps its cancel until then (the core does not hold it yet). The cancels for the
    core to take."""
    now = ctl.clock()
    out = []
    for event in events:
        live = ctl.jobs.get(event.job_id)
        if live is not None and (live.adopting or live.tasks):
            ctl.persist.job_event(live.id, CANCEL_ASKED, event.reason, now)
        if live is not None and live.adopting:
            live.cancel_asked = event.reason
        else:
            out.append(event)
    return out


def _cancels_stored(ctl: Controller, rows: list[JobRow]) -> dict[str, str]:
    """The reason of the cancel stored for the run each of ``rows`` shows running, by job id
    (a job without one has no key): its last ``CancelAsked``, when that came after its last
    ``JobStarted`` in the order stored (a new run: an earlier one's cancel is not its). Not
    after ``row.start_time``: an external pool's job has the start its cluster reports
    (federation.py), which may come after a cancel asked while it waited in that cluster's
    queue. One read for all the jobs (one query per 500), not one per job."""
    found = ctl.persist.store.events_of_jobs([r.id for r in rows], (STARTED, CANCEL_ASKED))
    asked: dict[str, str] = {}
    for job_id, records in found.items():
        last = records[-1].event
        if last.kind == CANCEL_ASKED:
            asked[job_id] = str(last.data.get("reason") or "cancelled by user")
    return asked


def _own_ended(ctl: Controller, row: JobRow, task: TaskRow) -> bool:
    """Whether ``task`` is one of the job's own that ended before the restart, on a node of
    the controller's agents: part of its run all the same, launched again should the run
    restart in place (controller/in_place.py)."""
    return (
        row.pool not in ctl.pools and ".remote." not in task.task_id and task.end_time is not None
    )


def _failed_before(live: LiveJob, rows: list[TaskRow]) -> bool:
    """The first failure of ``live``'s run as its stored tasks show it (the first of its own
    to exit non-zero), with that task's group: how the run ends and whether its group's
    ``retry_exits`` restarts it, rather than the exit of a task it stopped (-15). True, and
    no first failure set, when that first is a task lost (-1, no exit status: its node or
    agent lost it, controller/endings.py ``lose_tasks``, failures.py ``node_lost``; an
    external pool's, federation.py), no failure of the run's own: the tasks stopped after
    it (-15) are not either."""
    failed = [
        t
        for t in rows
        if ".remote." not in t.task_id and t.exit_code not in (None, 0) and t.end_time is not None
    ]
    if not failed:
        return False
    lost = failures.FAILED_BY_CONTROLLER
    first = min(failed, key=lambda t: (t.end_time or 0.0, t.exit_code == lost))  # (ties: exits)
    assert first.exit_code is not None
    if first.exit_code == lost:
        return True
    live.first_failure, live.failed_group = (first.exit_code, ""), first.group
    return False


def _lost_before(ctl: Controller, live: LiveJob, now: float) -> None:
    """``live``'s run lost a task before the restart: what its restart policy says, as the
    old controller had decided or would have (:func:`give_up`)."""
    reason = "a task of it was lost before the controller restarted"
    give_up(ctl, live, Failure(FailureKind.TASK_LOST, None, reason), now)


def give_up(ctl: Controller, live: LiveJob, failure: Failure, now: float) -> None:
    """A job left running that cannot be adopted (``failure``: its node did not come back,
    its task was lost): its restart policy decides as for the same failure while it ran
    (:func:`failures.planned_action`, its restarts so far counted from the store's runs):
    the same ``Job<Kind>`` event and reason, then requeued (``…: requeued``), or failed
    (``--no-requeue``, ``notify``, its budget spent: a node failure, NODE_FAIL). A restart
    in place cannot be (the job holds no nodes here yet): it is requeued instead. Queued
    again at once, on any node: its lost node, not back, takes nothing meanwhile (excluding
    it would leave a job bound to it waiting for ever instead)."""
    action = failures.planned_action(ctl, live, failure)
    ctl.persist.job_event(live.id, f"Job{failure.kind.value.title()}", action.reason, now)
    if action.kind in (ActionKind.FAIL, ActionKind.NOTIFY):
        requeue(ctl, live, action.reason, now, fail=action.reason)
    else:
        requeue(ctl, live, f"requeued ({action.reason})", now)


def _grant(devices: tuple[str, ...]) -> Grant:
    """The stored device names (``gpu:<index>``, MIG UUIDs) as a grant."""
    indices = tuple(
        int(d[4:]) for d in devices if d.startswith("gpu:") and d[4:].isascii() and d[4:].isdigit()
    )
    uuids = tuple(d for d in devices if not d.startswith("gpu:"))
    return Grant((), indices, uuids)


def holds(ctl: Controller, node: str) -> bool:
    """Whether a job waiting for adoption has a task on ``node``, or ran there, or a task
    of a job that ended before the restart still dies there (late_exits.node_back: the
    core holds nothing of its job's, so the node takes nothing new until it is gone)."""
    return late_exits.on_node(ctl, node) or any(
        live.adopting and (node in live.nodes or any(t.node == node for t in live.tasks.values()))
        for live in ctl.jobs.values()
    )


def on_register(ctl: Controller, inventory: NodeInventory, now: float) -> None:
    """A node is back: take its own account of the tasks it runs, then adopt what can be."""
    node = ctl.nodes[inventory.name]
    for launch in inventory.running:
        entry = ctl.tasks.get(launch.task_id)
        if entry is None or entry[1].node != inventory.name:
            continue  # not ours: its next heartbeat lists it and it is killed
        task = entry[1]
        task.launch, task.rebuilt = launch, False
        task.grant = Grant(
            tuple(launch.cpu_ids), tuple(launch.gpu_indices), tuple(launch.gpu_uuids)
        )
        # (a step's task holds its CPU ids; a remote task's devices are the job's)
        node.pool.claim(task.grant if not task.remote else Grant(task.grant.cpu_ids))
    try_adopt(ctl, now)


def try_adopt(ctl: Controller, now: float) -> None:
    """Hand the core every waiting job whose nodes are all back."""
    for live in list(ctl.jobs.values()):
        if not live.adopting:
            continue
        nodes = [t.node for t in live.tasks.values() if not t.remote] + list(live.nodes)
        nodes += [n for n, _ in read_hostfile(_reported_files(live).get(HOSTFILE_NAME, ""))]
        if all(n in ctl.nodes or n in ctl.remote_specs for n in nodes):
            _adopt(ctl, live, now)
    release_held_nodes(ctl, now)


def held_slots(live: LiveJob) -> dict[str, list[tuple[str, int]]] | None:
    """The task slots ``live`` holds, by task group: (node, tasks) in allocation order, from
    the hostfile its agents reported with its tasks' launches (a heterogeneous job's
    components', each group its own); None when no launch reported one."""
    files = _reported_files(live)
    groups = [g.name for g in live.request.groups]
    if not files or (not live.request.hetjob and len(groups) != 1):
        return None
    if not live.request.hetjob:
        return {groups[0]: read_hostfile(files[HOSTFILE_NAME])}
    names = [het_hostfile_name(i) for i in range(len(groups))]
    if any(n not in files for n in names):
        return None
    return {g: read_hostfile(files[n]) for g, n in zip(groups, names, strict=True)}


def _reported_files(live: LiveJob) -> dict[str, str]:
    """The launch files (hostfiles) an agent reported with one of ``live``'s tasks, or {}."""
    for task in live.tasks.values():
        if not task.remote and HOSTFILE_NAME in task.launch.files:
            return task.launch.files
    return {}


def _adopt(ctl: Controller, live: LiveJob, now: float) -> None:
    main = [t for t in live.tasks.values() if not t.remote]
    tasks = [
        AdoptedTask(t.launch.task_id.split(".")[-2], t.node, t.grant.gpu_indices, t.grant.gpu_uuids)
        for t in main
    ]
    files = _reported_files(live)  # (the job's nodes in allocation order)
    nodes = [n for n, _ in read_hostfile(files.get(HOSTFILE_NAME, ""))]
    nodes += [t.node for t in main]
    for group, hosts in (held_slots(live) or {}).items():  # where nothing was launched too
        for node, count in hosts:
            launched = sum(1 for t in tasks if t.group == group and t.node == node)
            # (the job's GPUs there, as its steps' tasks or its batch script's launch say)
            there = (t.launch.env for t in live.tasks.values() if t.node == node)
            held = AdoptedTask(group, node, adopted_gpus(there), launched=False)
            tasks += [held] * max(count - launched, 0)
    ctl.events.append(JobAdopted(live.spec, tuple(tasks), live.started_at))
    if live.cancel_asked is not None:  # (asked before the restart, or while adopted)
        ctl.events.append(JobCancelRequested(live.id, live.cancel_asked))
    live.adopting = False
    live.nodes = tuple(dict.fromkeys(nodes))
    ctl.persist.job_event(live.id, "JobAdopted", "running tasks adopted after a restart", now)
    if live.stopping is not None:  # (a completed task group's: the stop may never have left)
        ctl.stop_tasks(live, live.stopping)
    elif live.first_failure is not None and ctl.config.kill_on_bad_exit:  # (nor may this)
        for task in live.tasks.values():
            ctl.kill_task(task, f"a task of group {live.failed_group} failed")
    for task in main:
        if task.pool is not None and task.external_id is not None:
            federation.follow(ctl, live, task)
    endings.job_may_have_ended(ctl, live, now)  # exits reported while it waited


def release_held_nodes(ctl: Controller, now: float) -> None:
    """The nodes kept ``DRAINING`` after a restart that :func:`holds` no more are ``UP``."""
    for name in list(ctl.adopt_held):
        if not holds(ctl, name):
            ctl.adopt_held.discard(name)
            why = "its tasks of before the restart adopted or ended"
            failures.set_node_state(ctl, name, NodeState.UP, why, now)


def expire(ctl: Controller, now: float) -> None:
    """Past the deadline, jobs still waiting for a node are run again elsewhere."""
    if now < ctl.adopt_until:
        return
    for live in list(ctl.jobs.values()):
        if not live.adopting:
            continue
        if live.pool is not None:  # its cluster still runs it: wait for the cluster to answer
            continue  # (requeuing would run it twice; it is adopted when its nodes are listed)
        for task in live.tasks.values():
            if task.node in ctl.nodes and task.state != "exited":
                ctl.nodes[task.node].kills.append(ctl.kill_now(task, "its job was requeued"))
        why = "a node of it did not come back after a controller restart"
        give_up(ctl, live, Failure(FailureKind.NODE, None, why), now)
    release_held_nodes(ctl, now)


def requeue(ctl: Controller, live: LiveJob, reason: str, now: float, fail: str = "") -> None:
    """A job left running that cannot be adopted: forget its old run, queue a new one with
    ``reason``. Given ``fail`` (its restart policy's reason not to restart it:
    :func:`give_up`), or one that may not be requeued (``sbatch --no-requeue``), it fails
    instead with that reason, here (the core never had it, and would read its own
    dependencies, met before the restart, as on unknown jobs), and what waits on it (outside
    the core: unsubmitted.py) settles. Either way its old run's job token is revoked (here,
    or by ``end_here``), as when the core requeues or ends a job (controller/endings.py)."""
    from fusesched.controller import recovery  # (here, not above: recovery imports adoption)

    for task in live.tasks.values():
        task.lost = True  # fenced wherever it shows up again
    release_unended(ctl, live.tasks.values())  # (its tasks' ids claimed on register)
    for task_id, task in live.tasks.items():
        ctl.tasks.pop(task_id, None)
        ctl.finished[task_id] = task
    live.tasks = {}
    live.adopting = False
    live.nodes = ()
    if live.cancel_asked is not None:  # (cancelled before it could be adopted: it ends so)
        recovery.end_here(ctl, {live.id: live.cancel_asked})
        recovery.retry_waiting(ctl)
        return
    if fail or not live.request.requeue:
        why = fail or f"{reason}; {NOT_REQUEUED}"
        recovery.end_here(ctl, {live.id: why}, JobPhase.FAILED)
        recovery.retry_waiting(ctl)
        return
    live.attempt_base += 1
    ctl.persist.job_requeued(live.id, JobPhase.QUEUED, reason, live.attempt_base, now)
    revoke_job_tokens(ctl, [live.id])
    recovery.resubmit(ctl, JobSubmitted(live.spec))
