"""The controller's side of job steps (``POST /v1/jobs/{id}/steps``): a step is given its
share of the job's slots and its tasks are started, in one go under the lock, or it is
refused (:mod:`fusesched.controller.job_steps` decides, without I/O).

Starting the tasks with the share, not in later calls, leaves nothing half made: a step
exists exactly while a task of it lives, whatever becomes of its ``srun``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.agent.step_gpus import GpuAsk
from fusesched.agent.step_het import het_hostfile_name
from fusesched.agent.step_plan import read_hostfile
from fusesched.agent.task_files import STDIN_FILE
from fusesched.controller import remote_tasks
from fusesched.controller.job_steps import (
    StepNeverFits,
    StepsBusy,
    StepShare,
    check_fits,
    component_share,
    next_step_id,
    running_shares,
    share_env,
    share_of,
    step_name_env,
)
from fusesched.controller.launchenv import HOSTFILE_NAME, node_held_env
from fusesched.controller.step_cpus import CpuMemAsk, step_cpus_memory, task_share
from fusesched.controller.step_gpus import (
    gpu_env,
    gpus_env,
    held_gpus,
    job_gpus,
    pick_gpus,
    task_gpus,
)
from fusesched.model.resources import CPU, mebibytes

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller


@dataclass(frozen=True)
class StepStdin:
    """``srun``'s standard input for a step's tasks (the step request's ``stdin`` and
    ``stdin_task``: api/step_schemas.py checks them): ``b64``, the bytes in base64, as the
    tasks' launches carry them (agent/step_stdin.py), for every task, or for the task at
    ``task`` (its index in the step's launches) alone."""

    b64: str
    task: int | None = None

    def __post_init__(self) -> None:
        if not self.b64:
            raise ValueError("a step's standard input cannot be empty (for none: None)")
        if self.task is not None and self.task < 0:
            raise ValueError(f"stdin task {self.task}: a task's index is at least 0")

    def files(self, index: int) -> dict[str, str] | None:
        """The launch files of the step's task ``index``: its standard input, or None."""
        gets = self.task is None or self.task == index
        return {STDIN_FILE: self.b64} if gets else None


def create_step(
    ctl: Controller,
    job_id: str,
    slots: Mapping[str, int],
    overlap: bool,
    launches: Sequence[tuple[str, list[str], Mapping[str, str]]],
    het: Mapping[int, Mapping[str, int]] | None = None,
    gpus: GpuAsk | None = None,
    name: str | None = None,
    resources: CpuMemAsk | None = None,
    stdin: StepStdin | None = None,
) -> tuple[int, list[str]]:
    """Give a step of ``job_id`` ``slots`` (tasks per node) and start its ``launches``
    (node, argv, the task's own variables) as remote tasks of the job; (step id, task ids
    in order). A heterogeneous job's step gives its share of each component it runs on
    (``het``: component → slots per node, whose sum is ``slots``; none: all of component
    0's), each counted against that component's slots. ``gpus``: the GPUs it asks for on
    each node, of the job's (controller/step_gpus.py; None: it sees all of them, holds
    none); ``name``: its name in accounting; ``resources``: its CPUs per task and memory
    (controller/step_cpus.py; None: the job's CPUs per task, no memory limit). Each task gets its
    node's share of the job (``SLURM_CPUS_ON_NODE``…: :func:`node_env`), or of its step.
    ``stdin``: ``srun``'s standard input, which each task that gets it is given as a file of
    its launch (:data:`STDIN_FILE`, never a variable), which its agent makes the task's
    standard input (None: every task's is ``/dev/null``).

    :class:`UnknownJobError` when the job does not run, :class:`StepNeverFits` (and
    :class:`SubmitError` for a launch off the step's nodes) when it can never start,
    :class:`StepsBusy` when it must wait for running steps to end (or for the job's
    adoption after a controller restart, when its tasks' steps are not all known yet);
    ValueError for a ``stdin`` of a task the step does not have."""
    if stdin is not None and stdin.task is not None and stdin.task >= len(launches):
        raise ValueError(f"stdin of task {stdin.task}: the step has {len(launches)} task(s)")
    with ctl.work:
        live = remote_tasks.running_job(ctl, job_id)
        if live.adopting:
            raise StepsBusy(
                "Requested nodes are busy: the job's running tasks are being adopted after "
                "a controller restart"
            )
        for node, _, _ in launches:
            if node not in slots:
                raise StepNeverFits(f"a task of the step on {node}, which the step has no slot on")
            remote_tasks.check_remote_node(ctl, live, node)
        parts = het_parts(live, slots, het)
        remote = [t for t in live.tasks.values() if t.remote]
        running = running_shares(t.launch.env for t in remote if t.state != "exited")
        if not parts:
            check_fits(job_slots(live), slots, overlap, running)
        for group, asked in parts:
            own = [component_share(s, group) for s in running]
            what = f"component {group} of the job"
            check_fits(component_slots(live, group), dict(asked), overlap, own, what)
        groups = [live.request.groups[g].name for g, _ in parts] if parts else None
        job = job_gpus(ctl, live, groups)
        held = held_gpus(t.launch.env for t in remote if t.state != "exited")
        picked = None if gpus is None else pick_gpus(job, gpus.per_node, overlap, held)
        count = {node: sum(1 for n, _, _ in launches if n == node) for node in slots}
        on = [node for node in slots if count[node]]
        portions = parts or ((0, tuple(slots.items())),)
        asks = resources or CpuMemAsk()
        cpus, memory, sizes = step_cpus_memory(ctl, live, portions, on, asks, overlap)
        shares = (share_of(t.launch.env) for t in remote)
        step_id = next_step_id(s.step_id for s in shares if s is not None)
        marks = share_env(StepShare(step_id, tuple(slots.items()), overlap, parts))
        marks |= (gpus_env(picked) if picked is not None else {}) | step_name_env(name)
        seen: dict[str, int] = {}
        task_ids: list[str] = []
        for index, (node, argv, env) in enumerate(launches):
            local = seen[node] = seen.get(node, -1) + 1
            on_node = job.get(node, ()) if picked is None else picked[node]
            sees = on_node if gpus is None else task_gpus(on_node, gpus.per_task, local)
            said = on_node if picked is not None or on_node else None
            extra = node_env(live, node, said, bool(parts))
            ids = task_share(cpus.get(node, ()), sizes.get(node, ()), count[node], local)
            limit = None if memory is None else memory[node] // count[node] or None
            if live.request.slurm_env:
                extra |= step_held_env(cpus.get(node), None if memory is None else memory[node])
            files = None if stdin is None else stdin.files(index)
            task_ids.append(
                remote_tasks.launch_remote(
                    ctl, live, node, argv, marks | extra, env, sees, ids, limit, files
                )
            )
        ctl.work.notify_all()
    return step_id, task_ids


def node_env(live: LiveJob, node: str, gpus: Sequence[int] | None, het: bool) -> dict[str, str]:
    """The Slurm variables of a step's task on ``node`` (a ``slurm_env`` job's) that say
    what is its node's: what the job holds there (``SLURM_CPUS_ON_NODE``,
    ``SLURM_MEM_PER_NODE``: its task group's per task, times its tasks there, unless the job
    was given ``--mem-per-cpu``; a
    heterogeneous job's step's ``srun`` gives those itself: agent/step_het.py) and the GPUs
    the step sees there (``gpus``: ``SLURM_GPUS_ON_NODE``, ``SLURM_STEP_GPUS``; None: it
    neither sees nor asked for any)."""
    if not live.request.slurm_env:
        return {}
    env: dict[str, str] = {}
    hosts = job_slots(live)
    if not het and hosts is not None and node in hosts:
        per_task = live.spec.task_groups[0].resources
        held = {name: amount * hosts[node] for name, amount in per_task.items()}
        told = live.request.slurm_options
        per_node = told is None or told.mem_per_cpu is None  # (else SLURM_MEM_PER_CPU only)
        env = node_held_env(held, bool(per_task.get(CPU)), per_node)
    return env | (gpu_env(gpus) if gpus is not None else {})


def step_held_env(cpus: Sequence[int] | None, memory: int | None) -> dict[str, str]:
    """What a step holds on a task's node, as Slurm says it there: ``SLURM_CPUS_ON_NODE``
    (its CPUs, where it was given some) and ``SLURM_MEM_PER_NODE`` (MiB, where it asked for
    memory and got some)."""
    env = {"SLURM_CPUS_ON_NODE": str(len(cpus))} if cpus else {}
    return env | ({"SLURM_MEM_PER_NODE": str(mebibytes(memory))} if memory else {})


def job_slots(live: LiveJob, name: str = HOSTFILE_NAME) -> dict[str, int] | None:
    """The job's tasks per node, as its hostfile (``name``: a component's) lists them (what
    ``srun`` places steps in); None when no launch of it that this controller holds carries
    one."""
    for task in live.tasks.values():
        text = task.launch.files.get(name)
        if not task.remote and text is not None:
            return dict(read_hostfile(text))
    return None


def component_slots(live: LiveJob, group: int) -> dict[str, int] | None:
    """A heterogeneous job's component ``group``'s tasks per node (its own hostfile)."""
    return job_slots(live, het_hostfile_name(group))


def het_parts(
    live: LiveJob, slots: Mapping[str, int], het: Mapping[int, Mapping[str, int]] | None
) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
    """A step's share of each component of ``live`` (empty for a job that is not
    heterogeneous); :class:`StepNeverFits` for a component the job does not have."""
    size = len(live.request.groups) if live.request.hetjob else 1
    if het is None:
        het = {0: slots}
    for group in het:
        if group >= size:
            why = (
                f"has no component {group} (its components: 0-{size - 1})"
                if size > 1
                else "is not a heterogeneous job (its one component is 0)"
            )
            raise StepNeverFits(f"--het-group={group}: job {live.id} {why}")
    if size == 1:
        return ()
    return tuple((group, tuple(own.items())) for group, own in sorted(het.items()))
