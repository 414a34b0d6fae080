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

from fusesched.api.wire import KillTask
from fusesched.controller.launchenv import task_slots
from fusesched.controller.records import LiveJob, LiveTask, with_devices
from fusesched.controller.run_launches import RunLaunches
from fusesched.model.events import StartJob
from fusesched.model.node import LABEL_POOL
from fusesched.model.resources import CPU, Resources
from fusesched.submit.launch_mode import batch_mode

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


class PoolDriver(Protocol):
    def start(self, live: LiveJob, decision: StartJob, now: float) -> None:
        """Run the job where the core placed it (every node of ``decision`` is this pool's)."""
        ...

    def kill(self, task: LiveTask, reason: str, grace_s: float | None) -> None:
        """Stop one task (for a cluster: the whole job it stands for); its exit is reported
        back as usual."""
        ...


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
        launched = slots[:1] if batch_mode(live.request) else slots
        per_task = {g.group: g.resources for g in decision.groups}
        devices = {g.group: g.devices for g in decision.groups}
        run = RunLaunches.of(ctl, live, slots, per_task, attempt, now)
        for slot in launched:
            # the node pool pins CPUs; the devices are the core's decision
            cpus = ctl.nodes[slot.node].pool.take(Resources({CPU: per_task[slot.group].get(CPU)}))
            assigned = devices[slot.group]
            grant = with_devices(cpus, assigned.tasks[slot.index] if assigned is not None else None)
            launch = run.launch(slot, grant)
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
