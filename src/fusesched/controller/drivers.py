"""How the controller runs a job on a pool: one interface for every pool.

The scheduling core decides where a job runs; a :class:`PoolDriver` makes it run there and
stops it. Every pool has one: the local fusesched agents (:class:`AgentPool`, the default:
tasks go out in heartbeat replies, their reports come back in heartbeats) and each external
cluster (:class:`ClusterPool`: its worker thread hands the job to the cluster's back end —
Slurm, Kubernetes — and reports back through ``Controller.remote_update``). Capacity reaches
the core the same way for both (nodes registering, or the cluster's node list), and so do job
states (task reports, or the cluster's statuses): the rest of the controller does not care
which kind of pool a job is in.

Both run with the controller's lock held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from fusesched.api.wire import KillTask, TaskLaunch
from fusesched.controller.data import dataset_wires
from fusesched.controller.hetjob_env import components, het_files, het_slurm_env
from fusesched.controller.launchenv import (
    HOSTFILE_NAME,
    SlurmJob,
    hostfile,
    shared_host_env,
    slurm_env,
    task_env,
    task_slots,
)
from fusesched.controller.output_files import NO_OUTPUTS, launch_outputs, start_dirs
from fusesched.controller.records import LiveJob, LiveTask, with_devices
from fusesched.controller.signals import launch_signal
from fusesched.controller.torchrun_env import TorchrunWorld
from fusesched.model.events import StartJob
from fusesched.model.node import LABEL_POOL
from fusesched.model.resources import CPU, Resources
from fusesched.submit.launch_mode import batch_mode, torchrun_groups

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The variable that carries a running job's credential to its tasks (mpirun's launcher).
JOB_TOKEN_ENV = "FUSESCHED_JOB_TOKEN"


class PoolDriver(Protocol):
    def start(self, live: LiveJob, decision: StartJob, now: float) -> None:
        """Run the job where the core placed it (every node of ``decision`` is this pool's)."""
        ...

    def kill(self, task: LiveTask, reason: str, grace_s: float | None) -> None:
        """Stop one task (for a cluster: the whole job it stands for); its exit is reported
        back as usual."""
        ...


def _slurm_job(live: LiveJob, attempt: int, now: float) -> SlurmJob:
    """What the Slurm variables of ``live``'s tasks say of it (``slurm_env`` jobs) when it
    starts at ``now``."""
    spec = live.spec
    millicores = spec.task_groups[0].resources.get(CPU, 0)
    array = spec.array
    span = None
    if array is not None:
        indices = range(array.start, array.stop + 1, array.step)
        span = (array.start, indices[-1], array.step, len(indices))
    return SlurmJob(
        job_id=live.id,
        name=live.request.name,
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
    )


class AgentPool:
    """The local fusesched agents' nodes (every pool that is not an external cluster)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    def start(self, live: LiveJob, decision: StartJob, now: float) -> None:
        ctl = self.ctl
        live.pool = None
        live.nodes = decision.nodes
        attempt = live.attempt_base + ctl.core.jobs[live.id].attempts + live.in_place
        slots = task_slots(decision, attempt)
        addresses = {name: node.inventory.address for name, node in ctl.nodes.items()}
        batch = batch_mode(live.request)
        launched = slots[:1] if batch else slots
        secret: dict[str, str] = {}
        if ctl.auth is not None and ctl.auth.enabled:
            token = ctl.auth.issue_job(live.id, live.spec.user, live.spec.tenant)
            secret[JOB_TOKEN_ENV] = token
        tenants = ctl.core.tenants  # the job's QoS tier may cap its power
        power_cap = dict(tenants.tier(live.spec).power_cap) if tenants is not None else {}
        group_of = {g.name: g for g in live.request.groups}
        slurm = _slurm_job(live, attempt, now) if live.request.slurm_env else None
        per_task = {g.group: g.resources for g in decision.groups}
        devices = {g.group: g.devices for g in decision.groups}
        groups = [g.name for g in live.request.groups]
        het = components(groups, slots, per_task) if live.request.hetjob else []
        files = {HOSTFILE_NAME: hostfile(slots)} | het_files(het)
        world = TorchrunWorld.of(slots, torchrun_groups(live.request), addresses)
        for slot in launched:
            group = group_of[slot.group]
            # the node pool pins CPUs; the devices are the core's decision
            cpus = ctl.nodes[slot.node].pool.take(Resources({CPU: per_task[slot.group].get(CPU)}))
            assigned = devices[slot.group]
            grant = with_devices(cpus, assigned.tasks[slot.index] if assigned is not None else None)
            env = shared_host_env(slots, addresses) | dict(group.env)
            env.update(
                task_env(
                    job_id=live.id,
                    job_name=live.request.name,
                    slot=slot,
                    slots=slots,
                    addresses=addresses,
                    seq=live.seq,
                    controller_url=ctl.config.url,
                    array_index=live.spec.array_index,
                    batch=batch,
                )
            )
            if world is not None and slot.task_id in world.node_ranks:
                env.update(world.env(env, group.env, slot))  # (torchrun reads PET_* itself)
            if slurm is not None and het:  # (the batch script: component 0's allocation)
                env = slurm_env(slurm, slot, het[0].slots, batch) | het_slurm_env(slurm, het) | env
            elif slurm is not None:  # (before fusesched's own: those win)
                env = slurm_env(slurm, slot, slots, batch) | env
            env.update(secret)
            env["FUSESCHED_RESTART_COUNT"] = str(attempt)
            # the batch script's output files (sbatch -o/-e; not a container's), and the
            # working directory of its tasks (not a container's): where sbatch or run ran
            # unless -D says otherwise
            native = group.image is None
            scripted = batch and native
            output, error, append = launch_outputs(live, slot.node) if scripted else NO_OUTPUTS
            submitted = live.request.submit_dir if native else None
            workdir, submit_dir = start_dirs(group.workdir, submitted)
            if slurm is not None and live.request.submit_dir is not None:
                env.setdefault("SLURM_SUBMIT_DIR", live.request.submit_dir)
            launch = TaskLaunch(
                task_id=slot.task_id,
                job_id=live.id,
                user=live.spec.user,
                argv=list(group.argv),
                script=group.script,
                env=env,
                workdir=workdir,
                cpu_ids=list(grant.cpu_ids),
                gpu_indices=list(grant.gpu_indices),
                gpu_uuids=list(grant.gpu_uuids),
                memory_bytes=per_task[slot.group].get("memory") or None,
                image=group.image,
                walltime_s=live.spec.walltime_s,
                grace_s=ctl.config.grace_s,
                files=files,
                checkpoint_dir=live.request.checkpoint_dir,
                power_cap=power_cap,
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
            task = LiveTask(launch, slot.node, grant, start_time=now)
            live.tasks[slot.task_id] = task
            ctl.tasks[slot.task_id] = (live.id, task)
            ctl.nodes[slot.node].outbox.append(launch)
        pool = ctl.nodes[decision.nodes[0]].spec.labels.get(LABEL_POOL)
        started = [live.tasks[s.task_id] for s in slots if s.task_id in live.tasks]
        ctl.persist.job_started(live.id, decision.nodes, now, started, pool)

    def kill(self, task: LiveTask, reason: str, grace_s: float | None) -> None:
        ctl = self.ctl
        node = ctl.nodes.get(task.node)
        if node is None:
            return
        if task.state == "launching":  # never sent: drop it from the outbox
            node.outbox = [t for t in node.outbox if t.task_id != task.launch.task_id]
            ctl.finish_task(task, -15, reason, ctl.clock())
            return
        grace = ctl.config.grace_s if grace_s is None else grace_s
        node.kills.append(KillTask(task_id=task.launch.task_id, grace_s=grace, reason=reason))


class ClusterPool:
    """An external cluster: its worker thread (controller/remote.py) runs the job there."""

    def __init__(self, ctl: Controller, name: str) -> None:
        self.ctl = ctl
        self.name = name

    def start(self, live: LiveJob, decision: StartJob, now: float) -> None:
        from fusesched.controller import federation

        federation.start(self.ctl, live, decision, self.name, now)

    def kill(self, task: LiveTask, reason: str, grace_s: float | None) -> None:
        task.kill_requested = True  # the cluster stops it; its exit comes back as a status
        self.ctl.pools[self.name].cancel(task.launch.task_id)
