"""What the controller keeps about live jobs, tasks and nodes, and the small conversions
between the wire, the store and the core (node specs, recovered specs, device grants)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fusesched.api.wire import (
    DatasetWire,
    KillTask,
    NodeInventory,
    NodeLoadWire,
    TaskLaunch,
    TaskLimit,
    TaskSignal,
)
from fusesched.controller.inactive import DEFAULT_INACTIVE_LIMIT_S
from fusesched.controller.pools import Grant, NodePool
from fusesched.controller.pty_cap import DEFAULT_PER_USER
from fusesched.core.device_specs import MIG_PREFIX, Device, DeviceError, with_device_capacity
from fusesched.core.devices import TaskDevices
from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_POOL, LOCAL_POOL, NodeSpec, NodeState
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.store.records import JobRow
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.backends.federation_config import FederationConfig
    from fusesched.controller.notify_send import NotifyConfig
    from fusesched.controller.power import PowerConfig

log = logging.getLogger("fusesched.controller")


class UnknownJobError(KeyError):
    pass


class NotReadyError(RuntimeError):
    """The request is valid but the controller cannot take it now (no nodes yet, say)."""


@dataclass(frozen=True)
class ControllerConfig:
    core: CoreConfig = field(default_factory=lambda: CoreConfig(placement="best-fit"))
    url: str = "http://127.0.0.1:8642"  # how tasks (and mpirun's launcher) reach the API
    min_cycle_s: float = 0.005
    # submissions alone run a cycle at most this often (the first after a quiet spell at once)
    submit_cycle_s: float = 0.02
    long_poll_s: float = 1.0  # how long a heartbeat with nothing to say waits for work
    node_timeout_s: float = 30.0
    grace_s: float = 5.0  # SIGTERM -> SIGKILL on cancel
    # a job's booking on a node where tasks of it outlive it is freed after this long even
    # if they still run (controller/completing.py)
    completing_timeout_s: float = 120.0
    kill_on_bad_exit: bool = True  # a task failing stops the rest of its gang
    health_check_s: float = 1.0  # how often sensor findings (hangs, GPU faults) are acted on
    hang_check_s: float = 60.0  # how often each running task is judged for a hang
    federation: FederationConfig | None = None  # pools and routing rules (None: local only)
    pools_dir: Path | None = None  # where external pools keep job scripts and output
    power: PowerConfig | None = None  # power saving (None: every node stays on)
    notify: NotifyConfig | None = None  # mail and webhook for job notifications (None: none)
    # the file ``core.tenancy`` was read from: re-read by ``fusesched reconfigure`` and SIGHUP
    # (controller/reconfigure.py); None: none to re-read
    tenancy_file: Path | None = None
    # Slurm's InactiveLimit: an attended job (salloc's, run's) whose command has not said it
    # is alive for this many seconds is ended (controller/inactive.py); 0: never
    inactive_limit_s: float = DEFAULT_INACTIVE_LIMIT_S
    # the most open terminals (run --pty jobs, srun --pty steps) of one user (pty_cap.py)
    pty_sessions_per_user: int = DEFAULT_PER_USER


@dataclass(slots=True)
class LiveTask:
    launch: TaskLaunch
    node: str
    grant: Grant
    remote: bool = False  # started by mpirun's launcher, not part of the gang
    state: str = "launching"  # launching -> delivered -> running -> exited
    exit_code: int | None = None
    reason: str = ""
    pid: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    lost: bool = False  # declared lost (its node went silent): fenced if it shows up again
    pool: str | None = None  # run by this external pool (the task stands for the whole job)
    external_id: str | None = None  # the external cluster's id for it, once accepted
    remote_state: str = ""  # the cluster's last state for it (pending, running, …)
    kill_requested: bool = False
    # delivered in reply to a quick report: not lost for missing from full beats until then
    unconfirmed_until: float = 0.0
    # its readiness probe's verdict, as its agent last said, and since when (controller/probes.py);
    # None: not said (no probe, not yet, or an agent too old for probes)
    ready: bool | None = None
    ready_since: float | None = None
    # its launch rebuilt from the store after a controller restart (its id and command only), no
    # agent having given it back: built again in full should it restart in place (in_place.py)
    rebuilt: bool = False


@dataclass(slots=True)
class LiveJob:
    """A job the controller is still responsible for (not yet finished)."""

    id: str
    seq: int
    spec: JobSpec
    request: JobRequest
    tasks: dict[str, LiveTask] = field(default_factory=dict)
    remote_count: int = 0
    nodes: tuple[str, ...] = ()
    stopping: str | None = None
    first_failure: tuple[int, str] | None = None
    failed_group: str | None = None  # the group of the task whose exit is first_failure
    exit_sent: bool = False
    # a failure the restart policy retries: (excluded nodes, not before, reason)
    requeue: tuple[tuple[str, ...], float, str] | None = None
    last_checkpoint: float = 0.0  # newest checkpoint time seen by the agents' sensors
    attempt_base: int = 0  # runs before the core's count (from the store, after a restart)
    in_place: int = 0  # restarts in place so far (the core does not count them)
    relaunch: tuple[float, str] | None = None  # restart in place: (when, why) once all exited
    adopting: bool = False  # left running by a previous controller, not yet adopted
    # a cancel asked for while it was being adopted, or stored before the restart: carried
    # out once adopted (controller/adoption.py)
    cancel_asked: str | None = None
    started_at: float = 0.0  # its run's start (for adoption)
    pool: str | None = None  # the external pool running it (None: local agents)
    hold: str | None = None  # why it is held (controller/holds.py); None: not held
    hold_after_requeue: str | None = None  # requeued on request, to be held once queued
    hold_admin: bool = False  # its hold (or hold after requeue) is a cluster-admin's
    # the run (its start) whose warning signal is due, and its step tasks warned so far
    # (controller/step_warning.py)
    step_warned: tuple[float, set[str]] | None = None


@dataclass(slots=True)
class LiveNode:
    inventory: NodeInventory
    spec: NodeSpec  # what the core was told at the first registration
    pool: NodePool
    last_seen: float
    state: NodeState = NodeState.UP
    drain: str | None = None  # why an operator drained it (controller/drains.py); None: not
    outbox: list[TaskLaunch] = field(default_factory=list)
    kills: list[KillTask] = field(default_factory=list)
    limits: list[TaskLimit] = field(default_factory=list)  # running tasks' new time limits
    # tasks here whose time limit was changed while they ran: each full beat's reply carries
    # their limit again (a reply lost on the way would leave the agent with the old one)
    relimited: set[str] = field(default_factory=set)
    signals: list[TaskSignal] = field(default_factory=list)  # for running tasks (signals.py)
    takes_signals: bool = False  # its latest beat said its agent understands signals
    datasets: frozenset[str] | None = None  # what its cache holds (None: no cache reported)
    stage: list[DatasetWire] = field(default_factory=list)  # to send: stage these ahead
    staging: dict[str, float] = field(default_factory=dict)  # asked to stage (when), not held yet
    cycle_waiters: int = 0  # its beats waiting for the cycle that handles the exits they report
    # its agent said it is stopping (agents.leaving): down, whatever beats were already on
    # their way, until it registers again
    left: bool = False
    # its free memory and load averages as its latest full beat said (None: not said, as an
    # agent older than them says nothing): sinfo's %e %O, scontrol's FreeMem and CPULoad
    load: NodeLoadWire | None = None

    def has_work(self) -> bool:
        """Whether its agent's next reply carries something (launches, kills, new time
        limits, datasets to stage)."""
        return bool(self.outbox or self.kills or self.limits or self.signals or self.stage)


class UnknownNodeError(KeyError):
    pass


class NodeChangedError(ValueError):
    """A known node registers again with other resources, devices, CPU ids or labels than
    the scheduler was told: they are fixed for the controller's lifetime."""


def array_size(request: JobRequest) -> int:
    a = request.array
    return 1 if a is None else len(range(a.start, a.stop + 1, a.step))


def stored_request(row: JobRow, environments: Mapping[str, Mapping[str, str]]) -> JobRequest:
    """A stored job's request, with the submitting environment it inherits back
    (``environments``: :meth:`fusesched.store.Store.environments` of the jobs' ``env_id``),
    shared, not copied, by the jobs that have the same one (an array's members)."""
    request = JobRequest.model_validate(row.request)
    env = environments.get(row.env_id) if row.env_id else None
    return request if env is None else request.model_copy(update={"submit_env": env})


def recovered_spec(request: JobRequest, row: JobRow) -> JobSpec:
    """The spec of a stored pending job (an array member: its parent's member of its index,
    made alone; a restart recovers each member, so expanding the array for each would cost
    the square of its size)."""
    if row.array_parent is None:
        return request.to_job_spec(row.id, row.submit_time)
    parent = request.to_job_spec(row.array_parent, row.submit_time)
    try:
        return parent.array_member(row.id)
    except ValueError:
        raise ValueError(
            f"stored job {row.id} is not a member of array {row.array_parent}"
        ) from None


def with_devices(grant: Grant, devices: TaskDevices | None) -> Grant:
    """``grant`` (CPU ids) with the task's devices: MIG instances by UUID, others by index."""
    if devices is None:
        return grant
    pairs = list(zip(devices.kinds, devices.indices, devices.uuids, strict=True))
    indices = tuple(sorted(i for kind, i, _ in pairs if not kind.startswith(MIG_PREFIX)))
    uuids = tuple(u for kind, _, u in pairs if kind.startswith(MIG_PREFIX))
    return Grant(grant.cpu_ids, indices, uuids)


def node_spec(inventory: NodeInventory) -> NodeSpec:
    capacity = Resources.parse(inventory.resources)
    devices: tuple[Device, ...] = ()
    try:
        devices = tuple(
            Device(d.kind, d.index, d.model, d.uuid, d.mig_profile or "") for d in inventory.devices
        )
        with_device_capacity(capacity, devices)
    except DeviceError as exc:  # the agent's declared counts win; devices made up
        log.warning("node %s: %s; its devices are counted, not listed", inventory.name, exc)
        devices = ()
    labels = {LABEL_POOL: LOCAL_POOL, **inventory.labels}
    return NodeSpec(inventory.name, capacity, labels, devices=devices)
