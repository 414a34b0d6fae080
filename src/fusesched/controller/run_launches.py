"""The launches of one run of a job on the local agents (:class:`RunLaunches`): what its
tasks share (the hostfiles, Slurm's view of the job, torchrun's world, the job's credential,
its power cap) and what each one gets of its own (its ranks, its CPUs and devices). Built
when a job starts (controller/drivers.py) and, after a controller restart, for the tasks of
an adopted run whose launch no agent gave back, when the run restarts in place
(controller/in_place.py).

A batch script (sbatch's, or a job's mpirun: the one task launched of a job that starts in
batch mode) sees, as Slurm's batch step, all of its job's whole GPUs on its node (a
heterogeneous job's: component 0's), not only its own task's: its launch names them in
:data:`~fusesched.api.wire.BATCH_GPUS_ENV`, which the agent turns into its
``CUDA_VISIBLE_DEVICES``, while its grant and its launch's ``gpu_indices`` stay its own
task's (what adoption, metrics, persistence and power caps read). Not for a container's
script, nor for MIG instances, which keep their own.

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.api.wire import BATCH_GPUS_ENV, TaskLaunch
from fusesched.controller.data import dataset_wires
from fusesched.controller.hetjob_env import Component, components, het_files, het_slurm_env
from fusesched.controller.launchenv import (
    HOSTFILE_NAME,
    SlurmJob,
    TaskSlot,
    hostfile,
    shared_host_env,
    slurm_env,
    task_env,
)
from fusesched.controller.output_files import NO_OUTPUTS, launch_outputs, start_dirs
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob
from fusesched.controller.signals import launch_signal
from fusesched.controller.step_gpus import NodeGpus, job_gpus
from fusesched.controller.torchrun_env import TorchrunWorld
from fusesched.model.resources import CPU, Resources
from fusesched.submit.launch_mode import batch_mode, torchrun_groups

if TYPE_CHECKING:
    from fusesched.controller.service import Controller
    from fusesched.submit.request import JobRequest
    from fusesched.submit.task_group import TaskGroupRequest

#: The variable that carries a running job's credential to its tasks (mpirun's launcher).
JOB_TOKEN_ENV = "FUSESCHED_JOB_TOKEN"


def revoke_job_tokens(ctl: Controller, job_ids: Collection[str]) -> None:
    """Revoke every credential :meth:`RunLaunches.of` issued to the jobs ``job_ids``: their
    runs' tasks and helpers may call no more. Each path that ends or requeues a job that ran
    calls it (controller/endings.py; after a restart, adoption.py and recovery.py), as does
    one that launches a run again under a new credential (controller/in_place.py)."""
    if ctl.auth is not None and ctl.auth.enabled:
        ctl.persist.store.revoke_job_tokens(job_ids)


def _slurm_job(
    live: LiveJob, attempt: int, now: float, gpus: Mapping[str, Sequence[int]]
) -> SlurmJob:
    """What the Slurm variables of ``live``'s tasks say of it (``slurm_env`` jobs) when it
    starts at ``now`` holding the GPUs ``gpus`` (per node)."""
    spec, request = live.spec, live.request
    millicores = spec.task_groups[0].resources.get(CPU, 0)
    array = spec.array
    span = None
    if array is not None:
        indices = range(array.start, array.stop + 1, array.step)
        span = (array.start, indices[-1], array.step, len(indices))
    return SlurmJob(
        job_id=live.id,
        name=request.name,
        user=spec.user,
        queue=spec.queue,
        account=spec.tenant,
        qos=str(spec.qos),
        cpus_per_task=millicores // 1000 if millicores and millicores % 1000 == 0 else None,
        restarts=attempt,
        array_parent=spec.array_parent,
        array=span,
        array_index=spec.array_index,
        per_task={group.name: group.resources for group in spec.task_groups},
        start_time=now,
        walltime_s=spec.walltime_s,
        submit_host=request.submit_host,
        reservation=spec.reservation,
        told=request.slurm_options.variables() if request.slurm_options is not None else {},
        gpus=gpus,
    )


@dataclass(frozen=True, slots=True)
class RunLaunches:
    """Run ``attempt`` of ``live`` over ``slots`` (all its tasks, in rank order), each task
    of a group holding ``per_task`` of it; :meth:`launch` builds one task's launch."""

    ctl: Controller
    live: LiveJob
    slots: Sequence[TaskSlot]
    per_task: Mapping[str, Resources]
    attempt: int
    now: float
    addresses: Mapping[str, str]
    secret: Mapping[str, str]
    power_cap: Mapping[str, float]
    slurm: SlurmJob | None
    het: Sequence[Component]
    files: Mapping[str, str]
    world: TorchrunWorld | None
    batch_gpus: NodeGpus  # what a batch script sees on its node (module doc); {}: not batch

    @classmethod
    def of(
        cls,
        ctl: Controller,
        live: LiveJob,
        slots: Sequence[TaskSlot],
        per_task: Mapping[str, Resources],
        attempt: int,
        now: float,
    ) -> RunLaunches:
        addresses = {name: node.inventory.address for name, node in ctl.nodes.items()}
        secret: dict[str, str] = {}
        if ctl.auth is not None and ctl.auth.enabled:
            token = ctl.auth.issue_job(live.id, live.spec.user, live.spec.tenant)
            secret[JOB_TOKEN_ENV] = token
        tenants = ctl.core.tenants  # the job's QoS tier may cap its power
        power_cap = dict(tenants.tier(live.spec).power_cap) if tenants is not None else {}
        slurm = (
            _slurm_job(live, attempt, now, job_gpus(ctl, live)) if live.request.slurm_env else None
        )
        groups = [g.name for g in live.request.groups]
        het = components(groups, slots, per_task) if live.request.hetjob else []
        files = {HOSTFILE_NAME: hostfile(slots)} | het_files(het)
        world = TorchrunWorld.of(slots, torchrun_groups(live.request), addresses)
        batch_gpus: NodeGpus = {}
        if batch_mode(live.request):  # (a hetjob's script: component 0's)
            batch_gpus = job_gpus(ctl, live, [het[0].group] if het else None)
        return cls(
            ctl,
            live,
            slots,
            per_task,
            attempt,
            now,
            addresses,
            secret,
            power_cap,
            slurm,
            het,
            files,
            world,
            batch_gpus,
        )

    def launch(self, slot: TaskSlot, grant: Grant) -> TaskLaunch:
        """The launch of ``slot``'s task, holding ``grant`` on its node."""
        live, slots, batch = self.live, self.slots, batch_mode(self.live.request)
        group = next(g for g in live.request.groups if g.name == slot.group)
        # the submitting shell's environment (sbatch's --export=ALL; not into a container),
        # under everything the job names or fusesched and Slurm set
        inherited = live.request.submit_env if group.image is None else None
        env = dict(inherited or {}) | shared_host_env(slots, self.addresses) | dict(group.env)
        env.update(
            task_env(
                job_id=live.id,
                job_name=live.request.name,
                slot=slot,
                slots=slots,
                addresses=self.addresses,
                seq=live.seq,
                controller_url=self.ctl.config.url,
                array_index=live.spec.array_index,
                batch=batch,
            )
        )
        world, slurm, het = self.world, self.slurm, self.het
        if world is not None and slot.task_id in world.node_ranks:
            env.update(world.env(env, group.env, slot))  # (torchrun reads PET_* itself)
        if slurm is not None and het:  # (the batch script: component 0's allocation)
            env = slurm_env(slurm, slot, het[0].slots, batch) | het_slurm_env(slurm, het) | env
        elif slurm is not None:  # (before fusesched's own: those win)
            env = slurm_env(slurm, slot, slots, batch) | env
        env.update(self.secret)
        env["FUSESCHED_RESTART_COUNT"] = str(self.attempt)
        # the batch script's output files (sbatch -o/-e; not a container's), and the working
        # directory of its tasks (not a container's): where sbatch or run ran unless -D says
        # otherwise
        native = group.image is None
        scripted = batch and native
        output, error, append = launch_outputs(live, slot.node) if scripted else NO_OUTPUTS
        submitted = live.request.submit_dir if native else None
        workdir, submit_dir = start_dirs(group.workdir, submitted)
        if slurm is not None and live.request.submit_dir is not None:
            env.setdefault("SLURM_SUBMIT_DIR", live.request.submit_dir)
        env.pop(BATCH_GPUS_ENV, None)  # (the controller's word alone: never the job's)
        seen = self.batch_gpus.get(slot.node, ()) if scripted and not grant.gpu_uuids else ()
        if seen:
            env[BATCH_GPUS_ENV] = ",".join(map(str, seen))
        return TaskLaunch(
            task_id=slot.task_id,
            job_id=live.id,
            user=live.spec.user,
            argv=list(group.argv) or script_args(live.request, group),
            script=group.script,
            env=env,
            workdir=workdir,
            cpu_ids=list(grant.cpu_ids),
            gpu_indices=list(grant.gpu_indices),
            gpu_uuids=list(grant.gpu_uuids),
            memory_bytes=self.per_task[slot.group].get("memory") or None,
            image=group.image,
            walltime_s=live.spec.walltime_s,
            grace_s=self.ctl.config.grace_s,
            files=dict(self.files),
            checkpoint_dir=live.request.checkpoint_dir,
            power_cap=dict(self.power_cap),
            datasets=dataset_wires(live.spec.datasets),
            signal=launch_signal(live.request),
            output_file=output,
            error_file=error,
            output_append=append,
            submit_dir=submit_dir,
            liveness=group.liveness,
            readiness=group.readiness,
            pty=live.request.pty,
        )


def script_args(request: JobRequest, group: TaskGroupRequest) -> list[str]:
    """The batch script's arguments (``sbatch job.sh ARGS…``: ``$1 $2 …``), for the task
    group that runs it (the first: a heterogeneous job's script is its first component's);
    the agent hands a launch's ``argv`` to its script (agent/spawn.py ``script_command``)."""
    scripted = group.script is not None and group is request.groups[0]
    return list(request.script_args or ()) if scripted else []
