"""The controller's side of federation: pools, routing, and jobs run by external clusters.

Every node the scheduling core sees belongs to a pool (label ``fusesched.io/pool``): the local
agents' nodes to ``local`` (unless an agent says otherwise), an external cluster's nodes to
that cluster's pool, named ``<pool>:<node>``. At submission each job is routed
(``backends/routing.py``): the rules give the pools that may take it in order of preference,
which become a requirement and preferences of its placement, so the core itself overflows to
the next pool when the first is full — under one queue, one quota and one fair share.

When the core starts a job on an external pool's nodes, the job is handed to that pool's
:class:`~fusesched.controller.remote.RemotePool` as one :class:`LiveTask` standing for the
whole cluster job; the pool's updates (accepted, running, output, exit) come back through
:func:`apply`. Every function here runs with the controller's lock held, except
:func:`build_pools`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fusesched.api.wire import LogChunk, NodeInventory, TaskLaunch
from fusesched.backends.base import Backend, RemoteJob, RemotePlacement, RemoteState, RemoteStatus
from fusesched.backends.federation_config import FederationConfig, parse_federation
from fusesched.backends.routing import PoolLoad, Route, RouteError, route, routed_placement
from fusesched.controller import failures
from fusesched.controller.drivers import ClusterPool
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.pools import Grant
from fusesched.controller.records import LiveJob, LiveTask
from fusesched.controller.remote import RemotePool, Update
from fusesched.model.events import NodeAdded, NodeStateChanged, StartJob
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_POOL, LOCAL_POOL, NodeSpec, NodeState
from fusesched.model.phases import OOM_REASON, node_failure
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller.federation")


def default_config() -> FederationConfig:
    """No federation file: the local agents' pool only."""
    return parse_federation({}, "<built-in>")


def remote_name(pool: str, node: str) -> str:
    return f"{pool}:{node}"


def make_backend(kind: str, options: dict[str, object], log_dir: Path) -> Backend:
    """The driver for one external pool of the federation file."""
    if kind == "slurm":
        from fusesched.backends.slurm import SlurmBackend, SlurmOptions

        return SlurmBackend(SlurmOptions.parse(options, log_dir))
    if kind == "kubernetes":
        from fusesched.backends.kubernetes import KubernetesBackend

        try:
            return KubernetesBackend.from_options(**options)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ValueError(f"Kubernetes pool options: {exc}") from None
    raise ValueError(f"no back end for pool kind {kind!r}")


def build_pools(ctl: Controller, config: FederationConfig, data_dir: Path) -> None:
    """Create (not start) a worker for every external pool of ``config``."""
    for pool in config.pools:
        if pool.kind == "local":
            continue
        backend = make_backend(pool.kind, dict(pool.options), data_dir / "pools" / pool.name)
        ctl.pools[pool.name] = RemotePool(pool.name, backend, ctl.remote_update)
        ctl.drivers[pool.name] = ClusterPool(ctl, pool.name)


# ---------------------------------------------------------------------- routing


def loads(ctl: Controller) -> dict[str, PoolLoad]:
    """How full each pool is now (booked share of its CPUs), and whether it is up."""
    cluster = ctl.core.cluster
    used: dict[str, list[float]] = {}
    cpu = cluster.columns.get("cpu")
    for name, row in cluster.index.items():
        spec = ctl.node_spec(name)
        if spec is None or cpu is None:
            continue
        pool = spec.labels.get(LABEL_POOL, LOCAL_POOL)
        total = float(cluster.capacity[row, cpu])
        entry = used.setdefault(pool, [0.0, 0.0])
        entry[0] += total - float(cluster.free[row, cpu])
        entry[1] += total
    out = {p: PoolLoad(u / t if t else 1.0) for p, (u, t) in used.items()}
    for name, worker in ctl.pools.items():
        load = out.get(name, PoolLoad(1.0))
        out[name] = PoolLoad(load.used_fraction, up=worker.reachable and name in out)
    return out


def route_job(ctl: Controller, request: JobRequest) -> Route:
    try:
        return route(ctl.federation, request, loads(ctl))
    except RouteError as exc:
        raise SubmitError(str(exc)) from None


def explain(ctl: Controller, request: JobRequest) -> Route:
    """The route of ``request`` now, with its explanation (no federation file: every node)."""
    if ctl.config.federation is None:
        routed(ctl, request, request.to_job_spec("route", 0.0))  # the image check
        return Route(
            (LOCAL_POOL,),
            None,
            ("no federation file (--pools): every node of the local agents may take it",),
        )
    return route_job(ctl, request)


def routed(ctl: Controller, request: JobRequest, spec: JobSpec) -> JobSpec:
    """``spec`` with its placement limited to the pools its route allows (no federation
    file: unchanged, but a registry image has nowhere to run)."""
    if ctl.config.federation is None:
        for group in request.groups:
            if group.registry_image:
                raise SubmitError(
                    f"group {group.name!r}: image {group.image!r} is a registry image, which "
                    "only a Kubernetes pool runs, and this cluster has none (see --pools); give "
                    "the absolute path of a root filesystem directory or tarball instead"
                )
        return spec
    chosen = route_job(ctl, request)
    return replace(spec, placement=routed_placement(spec.placement, chosen))


def node_specs(ctl: Controller) -> list[NodeSpec]:
    """Every node a job could be placed on: local agents' and external pools'."""
    return [n.spec for n in ctl.nodes.values()] + list(ctl.remote_specs.values())


# ---------------------------------------------------------------------- nodes


def _inventory(spec: NodeSpec) -> NodeInventory:
    return NodeInventory(
        name=spec.name, address="", resources=spec.capacity.to_spec(), labels=dict(spec.labels)
    )


def _apply_nodes(ctl: Controller, update: Update, now: float) -> None:
    pool = update.pool
    seen: set[str] = set()
    for node in update.nodes:
        name = remote_name(pool, node.name)
        seen.add(name)
        state = NodeState.UP if node.up else NodeState.DOWN
        known = ctl.remote_nodes.get(name)
        if known is None:
            labels = {**node.labels, LABEL_POOL: pool}
            spec = NodeSpec(name, node.capacity, labels)
            ctl.remote_nodes[name] = (pool, node.name, state)
            ctl.remote_specs[name] = spec
            ctl.events.append(NodeAdded(spec, state))
            ctl.persist.node_registered(_inventory(spec), now)
            if state is not NodeState.UP:
                ctl.persist.node_state(name, state, now, f"{pool} reports it down")
            continue
        if known[2] is not state:
            ctl.remote_nodes[name] = (pool, node.name, state)
            reason = f"{pool} reports it {'up' if node.up else 'down'}"
            ctl.events.append(NodeStateChanged(name, state, reason))
            ctl.persist.node_state(name, state, now, reason)
    if any(live.adopting for live in ctl.jobs.values()):
        from fusesched.controller import adoption

        adoption.try_adopt(ctl, now)  # jobs left running here by a previous controller
    if ctl.waiting:  # (after: what waits behind a job adopted now goes now too)
        from fusesched.controller import recovery

        recovery.retry_waiting(ctl)  # recovered jobs these nodes may now hold
    for name, (owner, cluster_name, state) in list(ctl.remote_nodes.items()):
        if owner == pool and name not in seen and state is not NodeState.DOWN:
            ctl.remote_nodes[name] = (owner, cluster_name, NodeState.DOWN)
            ctl.events.append(NodeStateChanged(name, NodeState.DOWN, f"{pool} no longer lists it"))
            ctl.persist.node_state(name, NodeState.DOWN, now, f"{pool} no longer lists it")


def _pool_down(ctl: Controller, pool: str, reason: str, now: float) -> None:
    """The cluster cannot be reached: place nothing new there until it answers again."""
    for name, (owner, cluster_name, state) in list(ctl.remote_nodes.items()):
        if owner == pool and state is NodeState.UP:
            ctl.remote_nodes[name] = (owner, cluster_name, NodeState.DOWN)
            why = f"{pool} unreachable: {reason}"
            ctl.events.append(NodeStateChanged(name, NodeState.DOWN, why))
            ctl.persist.node_state(name, NodeState.DOWN, now, why)


# ---------------------------------------------------------------------- jobs


def pool_of(ctl: Controller, decision: StartJob) -> str | None:
    """The external pool a decision's nodes belong to (None: local agents)."""
    entry = ctl.remote_nodes.get(decision.nodes[0]) if decision.nodes else None
    return entry[0] if entry is not None else None


def start(ctl: Controller, live: LiveJob, decision: StartJob, pool: str, now: float) -> None:
    """Hand a job the core started on ``pool``'s nodes to the pool's worker."""
    from fusesched.controller.launchenv import task_slots

    attempt = live.attempt_base + ctl.core.jobs[live.id].attempts + live.in_place
    slots = task_slots(decision, attempt)
    placements = tuple(
        RemotePlacement(
            group=g.group,
            tasks_per_node={
                ctl.remote_nodes[n][1]: c for n, c in zip(g.nodes, g.counts, strict=True)
            },
            resources=g.resources,
        )
        for g in decision.groups
    )
    env = {
        "FUSESCHED_JOB_ID": live.id,
        "FUSESCHED_JOB_NAME": live.request.name,
        "FUSESCHED_POOL": pool,
        "FUSESCHED_RESTART_COUNT": str(attempt),
    }
    if live.request.checkpoint_dir:
        env["FUSESCHED_CHECKPOINT_DIR"] = live.request.checkpoint_dir
    run = slots[0].task_id.split(".", 1)[0]  # <job> or <job>-r<attempt>: its own files
    job = RemoteJob(live.id, live.request, placements, env, run=run)
    group = live.request.groups[0]
    launch = TaskLaunch(
        task_id=slots[0].task_id,
        job_id=live.id,
        user=live.spec.user,
        argv=list(group.argv),
        script=group.script,
        env=env,
        workdir=group.workdir,
        walltime_s=live.spec.walltime_s,
    )
    task = LiveTask(launch, decision.nodes[0], Grant(), start_time=now, pool=pool)
    task.state = "delivered"  # handed to the pool's worker
    live.nodes = decision.nodes
    live.pool = pool
    live.tasks[launch.task_id] = task
    ctl.tasks[launch.task_id] = (live.id, task)
    ctl.persist.job_started(live.id, decision.nodes, now, [task], pool=pool)
    ctl.persist.job_event(live.id, "JobHandedOver", f"submitting to pool {pool}", now)
    ctl.pools[pool].submit(launch.task_id, job)


def follow(ctl: Controller, live: LiveJob, task: LiveTask) -> None:
    """Have the pool's worker follow a job submitted before a controller restart."""
    assert task.pool is not None and task.external_id is not None
    own = ctl.remote_nodes[task.node][1] if task.node in ctl.remote_nodes else task.node
    group = live.request.groups[0]
    placement = RemotePlacement(group.name, {own: 1}, group.resource_amounts)
    job = RemoteJob(live.id, live.request, (placement,), run=task.launch.task_id.split(".", 1)[0])
    ctl.pools[task.pool].adopt(task.launch.task_id, job, task.external_id)


def cancel(ctl: Controller, task: LiveTask) -> None:
    if task.pool is not None and task.pool in ctl.pools:
        ctl.pools[task.pool].cancel(task.launch.task_id)


def apply(ctl: Controller, updates: Sequence[Update], now: float) -> None:
    """What the pools' workers learned (see :class:`~fusesched.controller.remote.Update`)."""
    for update in updates:
        if update.kind == "nodes":
            _apply_nodes(ctl, update, now)
        elif update.kind == "down":
            _pool_down(ctl, update.pool, update.reason, now)
        else:
            entry = ctl.tasks.get(update.task_id)
            if entry is None:
                continue
            live = ctl.jobs.get(entry[0])
            if live is not None:
                _apply_task(ctl, live, entry[1], update, now)


def _apply_task(ctl: Controller, live: LiveJob, task: LiveTask, update: Update, now: float) -> None:
    if update.kind == "submitted":
        task.external_id = update.external_id
        ctl.persist.task_handed_over(task.launch.task_id, update.external_id)
        ctl.persist.job_event(
            live.id,
            "JobSubmittedRemote",
            f"pool {update.pool} accepted it as {update.external_id}",
            now,
        )
        if live.stopping is not None or task.kill_requested:
            cancel(ctl, task)  # cancelled while it was being submitted
    elif update.kind == "failed":
        if update.requeue:
            live.requeue = ((), now, update.reason)
        elif live.first_failure is None:
            live.first_failure = (-1, update.reason)
        ctl.finish_task(task, -1, update.reason, now)
    elif update.kind == "logs":
        _write_logs(ctl, task, update.data)
    elif update.kind == "status" and update.status is not None:
        _apply_status(ctl, live, task, update, now)


def _apply_status(
    ctl: Controller, live: LiveJob, task: LiveTask, update: Update, now: float
) -> None:
    status = update.status
    assert status is not None
    if status.state is RemoteState.PENDING:
        if task.remote_state != "pending":
            task.remote_state = "pending"
            ctl.persist.job_reason(live.id, f"pending in pool {update.pool}: {status.reason}")
            ctl.persist.job_event(live.id, "JobPendingRemote", status.reason, now)
        return
    if (task.state != "running" and not status.state.terminal) or (
        task.state == "delivered" and status.start_time is not None
    ):
        started = min(status.start_time or now, now)
        task.state = "running"
        task.start_time = started
        ctl.persist.job_start_time(live.id, started)
        ctl.persist.job_reason(live.id, "")
    task.remote_state = status.state.value
    if not status.state.terminal:
        return
    code = status.exit_code
    if status.state is RemoteState.SUCCEEDED:
        code = 0
    elif code is None or code == 0:
        code = -1
    reason = status.reason
    if status.timed_out:
        reason = f"walltime exceeded ({reason})"
    if status.node_failed:  # (Slurm's NODE_FAIL: no exit status of its own; sacct NODE_FAIL)
        code, reason = -1, node_failure(reason)
        _node_failed(ctl, live, status, now)
    elif status.out_of_memory:  # (the cluster's OOM killer: sacct, squeue OUT_OF_MEMORY)
        reason = f"{OOM_REASON}: {reason}"
    if status.state is RemoteState.LOST:
        live.requeue = ((), now, status.reason)  # never a lost job: run it again
    end = min(status.end_time or now, now)
    ctl.finish_task(task, code, reason, end)


def _node_failed(ctl: Controller, live: LiveJob, status: RemoteStatus, now: float) -> None:
    """The cluster ended the job for a node of it failing (Slurm's NODE_FAIL, a pod evicted or
    its node lost): a node failure for the job's restart policy, as a local node lost
    (failures.py): requeued within its budget, or failed as NODE_FAIL (``--no-requeue``,
    ``notify``, its budget spent). No node is excluded: the cluster does not say which of
    its nodes failed, and marks that one down itself (the pool's next node list)."""
    failure = Failure(FailureKind.NODE, None, status.reason or f"{live.pool} node failure")
    failures.job_failed(ctl, live, failure, now)


def _write_logs(ctl: Controller, task: LiveTask, data: dict[str, bytes]) -> None:
    """The cluster's output files, as the task's log (stdout, then stderr if separate)."""
    parts = [data[k] for k in ("stdout", "stderr") if k in data]
    parts += [v for k, v in sorted(data.items()) if k not in ("stdout", "stderr")]
    text = b"".join(parts).decode(errors="replace")
    if not text:  # (an empty chunk is an agent's end mark: an empty copy is no end)
        ctl.logs.create(task.launch.task_id)
        return
    ctl.logs.write(LogChunk(task_id=task.launch.task_id, offset=0, data=text))
