"""Tasks a running job starts on its own nodes besides its tasks (remote tasks): a helper
process such as mpirun's orted (:func:`fusesched.controller.agents.remote_launch`) or a job
step's task (:mod:`fusesched.controller.steps`). Which jobs may start one and on which node
(:func:`running_job`, :func:`check_remote_node`, :func:`check_step_runs`), and the launch sent
to the node's agent (:func:`launch_remote`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fusesched.agent.step_plan import settable
from fusesched.api.wire import TaskLaunch
from fusesched.controller.job_steps import share_of
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob, LiveTask, UnknownJobError
from fusesched.controller.step_gpus import job_gpus, job_gpus_env
from fusesched.model.node import NodeState
from fusesched.submit.errors import SubmitError

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: What a remote task does not take from its job's environment: OpenMPI's settings (for
#: the batch script's mpirun) and a job step's marks (controller/job_steps.py)
_NOT_INHERITED = ("OMPI_MCA_", "FUSESCHED_STEP_")
#: ... but for the transports the job's MPI may use, which are the whole job's: on nodes of
#: one machine, OpenMPI without shared memory (launchenv.shared_host_env), which a step's
#: mpirun started from salloc's shell would not otherwise have
_INHERITED = ("OMPI_MCA_btl",)


def running_job(ctl: Controller, job_id: str) -> LiveJob:
    """The live record of a job whose tasks run; :class:`UnknownJobError` otherwise, and
    for one that is ending (cancelled, requeued, restarting, or its tasks have exited): a
    task started then would outlive the job, which stops only the tasks it has when it ends."""
    live = ctl.jobs.get(job_id)
    if live is None or not live.tasks:
        raise UnknownJobError(job_id)
    ending = live.requeue is not None or live.relaunch is not None
    if ending or live.stopping is not None or live.exit_sent:
        raise UnknownJobError(job_id)
    return live


def check_remote_node(ctl: Controller, live: LiveJob, node: str) -> None:
    """Refuse (:class:`SubmitError`) a remote task on a node that is not the job's, that
    no agent of ours runs, or whose agent has stopped heartbeating (the launch would wait
    there, and a step's task hold its slots, for as long as the node is down), or of a job
    a restarted controller has not adopted yet (its nodes are not all back)."""
    if live.adopting:
        raise SubmitError(
            f"job {live.id} runs and waits to be adopted after a controller restart: "
            "try again once its nodes are back"
        )
    if node not in live.nodes:
        raise SubmitError(f"node {node!r} is not allocated to job {live.id}")
    if node not in ctl.nodes:  # an external pool's node: no agent of ours runs there
        raise SubmitError(
            f"node {node!r} of job {live.id} is in pool {live.pool}, not run by an agent: "
            "its tasks start through that pool"
        )
    if ctl.nodes[node].state is NodeState.DOWN:
        raise SubmitError(f"node {node!r} of job {live.id} is down (its agent is not heard)")


def launch_remote(
    ctl: Controller,
    live: LiveJob,
    node: str,
    argv: list[str],
    marks: dict[str, str],
    env: Mapping[str, str] | None = None,
    gpus: Sequence[int] = (),
    cpu_ids: Sequence[int] = (),
    memory_bytes: int | None = None,
    files: Mapping[str, str] | None = None,
) -> str:
    """Send ``node``'s agent a task of ``live`` running ``argv`` (with the job's own
    environment, less OpenMPI's settings but its transports and any step's marks; over it
    the launch's own variables ``env``, less what the job, the node or the task gives
    (``settable``); over those the controller's ``marks``), seeing the job's GPUs ``gpus``
    there (controller/step_gpus.py; the job holds them: the task holds none), pinned to
    ``cpu_ids`` (none: not pinned) and limited to ``memory_bytes`` (a step's task's own:
    controller/step_cpus.py; the caller took the ids from the node's pool), with ``files``
    written into its folder (a step's task's standard input: controller/steps.py); its id. The
    caller holds the lock and has checked the node (:func:`check_remote_node`). ``env``
    travels in the launch (an agent of any age applies a launch's ``env``), is kept in
    memory only, never stored or shown, and reaches the task's process environment, not its
    command line."""
    live.remote_count += 1
    task_id = f"{live.id}.remote.{live.remote_count}"  # (counted on over restarts: adoption.py)
    # (a task whose launch an agent gave back, not one rebuilt from the store: adoption.py)
    known = [t for t in live.tasks.values() if not t.rebuilt] or list(live.tasks.values())
    base = known[0].launch
    launch = TaskLaunch(
        task_id=task_id,
        job_id=live.id,
        user=base.user,
        argv=argv,
        env={
            k: v for k, v in base.env.items() if k in _INHERITED or not k.startswith(_NOT_INHERITED)
        }
        | settable(env or {})
        | marks
        | job_gpus_env(job_gpus(ctl, live).get(node, ()))
        | {"FUSESCHED_NODE": node, "FUSESCHED_TASK_ID": task_id},
        grace_s=ctl.config.grace_s,
        image=base.image,
        gpu_indices=list(gpus),
        cpu_ids=list(cpu_ids),
        memory_bytes=memory_bytes,
        files=dict(files or {}),
    )
    task = LiveTask(launch, node, Grant(tuple(cpu_ids)), remote=True, start_time=ctl.clock())
    live.tasks[task_id] = task
    ctl.tasks[task_id] = (live.id, task)
    ctl.persist.tasks_started(live.id, [task], task.start_time or 0.0)
    ctl.nodes[node].outbox.append(launch)
    return task_id


def check_step_runs(live: LiveJob, step: int) -> None:
    """Refuse (:class:`SubmitError`) a helper of step ``step`` of ``live`` when no task of
    that step runs."""
    for task in live.tasks.values():
        share = share_of(task.launch.env) if task.remote and task.state != "exited" else None
        if share is not None and share.step_id == step:
            return
    raise SubmitError(f"job {live.id} has no step {step} running")
