"""Messages between the controller and its node agents (JSON over HTTP, pydantic-validated).

The agent *pulls*: it registers once, then heartbeats; each heartbeat carries what happened on
the node since the last one (task starts, exits, log chunks) and its answer carries what the
node must do next (launch these tasks, kill those). Only agents open connections, so a node
behind NAT or a firewall still works, and a restarted controller loses nothing it cannot learn
again at the next heartbeat.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from fusesched.model.resources import QuantityError, Resources
from fusesched.model.text import NUL, refuse_nul
from fusesched.submit.probes import LivenessProbe, Probe
from fusesched.submit.terminal import Terminal

#: In a TaskLaunch's env values, the agent replaces this with the task's own directory.
TASK_DIR_PLACEHOLDER = "{task_dir}"
#: In a batch script's launch env: all of its job's whole GPUs on its node, by index
#: (``0,1,2``), which the agent shows the script (``CUDA_VISIBLE_DEVICES``) beside its own
#: task's and does not pass on; set by the controller alone (controller/run_launches.py,
#: agent/task_env.py). The ``FUSESCHED_STEP_`` prefix keeps it off what a job's steps and
#: helpers inherit from the script's launch (controller/remote_tasks.py) and off what
#: ``srun`` may send (agent/step_plan.py), as a step's other marks.
BATCH_GPUS_ENV = "FUSESCHED_STEP_BATCH_GPUS"

#: A float that is never NaN or infinite (JSON has neither); unknown readings are ``None``.
Finite = Annotated[float, Field(allow_inf_nan=False)]


#: Free text an agent reports (a task's failure reason, the health check's output): a NUL
#: character, which the store cannot keep, becomes U+FFFD instead of refusing the heartbeat.
NodeText = Annotated[str, AfterValidator(lambda text: text.replace(NUL, "\ufffd"))]


#: A file a task's output is copied to: an absolute path, without NUL characters.
OutputPath = Annotated[str, Field(min_length=2, max_length=4096, pattern=r"^/[^\x00]*$")]
#: A folder on the nodes: an absolute path (``/`` included), without NUL characters.
FolderPath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$")]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Stored(_Wire):
    """A part of a node's registration, which the store keeps: no text holds a NUL character
    (heartbeats are not refused for one, so a task's output cannot lock its agent out: their
    free texts are :data:`NodeText`)."""

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        return refuse_nul(value)


class DeviceInfo(_Stored):
    """One accelerator (or one MIG instance of one) on the node."""

    kind: str = "nvidia.com/gpu"  # resource name it counts towards (MIG: nvidia.com/mig-1g.10gb)
    index: int  # the index CUDA_VISIBLE_DEVICES uses (MIG: the parent GPU's index)
    uuid: str = ""  # MIG instances are selected by UUID ("MIG-...")
    model: str = ""  # e.g. "H200", "V100"
    memory_bytes: int = 0
    mig_profile: str | None = None  # e.g. "1g.10gb" for a MIG instance


class NodeInventory(_Stored):
    """What an agent discovered about its node, sent at registration."""

    name: str
    address: str = "127.0.0.1"  # how peers (MASTER_ADDR, mpirun) reach this node
    resources: dict[str, str]  # quantities as strings, e.g. {"cpu": "16", "memory": "64Gi"}
    labels: dict[str, str] = Field(default_factory=dict)
    devices: list[DeviceInfo] = Field(default_factory=list)
    cpu_ids: list[int] = Field(default_factory=list)  # logical CPUs tasks may be pinned to
    # tasks it still runs from before (sent when it registers again with a restarted
    # controller, which adopts them)
    running: list[TaskLaunch] = Field(default_factory=list)

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, str]) -> dict[str, str]:
        try:
            Resources.parse(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("cpu_ids")
    @classmethod
    def _cpu_ids(cls, value: list[int]) -> list[int]:
        if any(cpu < 0 for cpu in value) or len(set(value)) != len(value):
            raise ValueError("CPU ids must be distinct and not negative")
        return value


class DatasetWire(_Wire):
    """A dataset to give a task (at ``$FUSESCHED_DATA_<NAME>``) or to stage into the cache."""

    name: str
    source: str  # an absolute path or file:// URI on shared storage
    size_bytes: int = 0


class LaunchSignal(_Wire):
    """A signal the agent sends a task once, ``before_s`` seconds before its time limit
    (``sbatch --signal``); ``main_only``: to its main process, else to its process group."""

    name: str  # bare signal name: "USR1"
    before_s: float = Field(gt=0, allow_inf_nan=False)
    main_only: bool = False


class TaskLaunch(_Wire):
    """Start one task (an OS process, maybe in a container) on this node."""

    task_id: str  # "<job id>.<group>.<index>"
    job_id: str
    user: str = ""  # whose job: the agent runs it under that user's unprivileged uid
    argv: list[str] = Field(default_factory=list)  # the command, or empty when script is set
    script: str | None = None  # a batch script, run by its #! interpreter (else bash)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    cpu_ids: list[int] = Field(default_factory=list)  # affinity; empty: no pinning
    gpu_indices: list[int] = Field(default_factory=list)  # -> CUDA_VISIBLE_DEVICES
    gpu_uuids: list[str] = Field(default_factory=list)  # MIG instances, by UUID
    memory_bytes: int | None = None  # hard limit where the kernel lets the agent set one
    image: str | None = None  # container root filesystem: a directory or a tarball
    walltime_s: float | None = None  # the agent kills the task when it runs longer
    grace_s: float = 10.0  # SIGTERM -> SIGKILL delay on cancel or walltime
    files: dict[str, str] = Field(default_factory=dict)  # name -> text, written to the task dir
    # the task's checkpoint folder (FUSESCHED_CHECKPOINT_DIR); None: <task dir>/checkpoints
    checkpoint_dir: str | None = None
    # caps of the job's QoS tier ({"gpu_watts": 250}); the agent's power hooks apply them
    power_cap: dict[str, float] = Field(default_factory=dict)
    datasets: list[DatasetWire] = Field(default_factory=list)  # FUSESCHED_DATA_<NAME> for each
    # the warning before the time limit; None (left out of the JSON: agents and controllers
    # older than it refuse fields they do not know): none
    signal: LaunchSignal | None = Field(default=None, exclude_if=lambda value: value is None)
    # the group's probes, run by the agent (submit/probes.py, agent/probes.py); None (left out
    # of the JSON, as ``signal``): none. A controller sends them only to agents that say
    # ``probes=true``
    liveness: LivenessProbe | None = Field(default=None, exclude_if=lambda value: value is None)
    readiness: Probe | None = Field(default=None, exclude_if=lambda value: value is None)
    # a batch task's output files (sbatch -o/-e: absolute paths, written as the task's user,
    # agent/output_files.py) and whether they are added to rather than emptied at its start
    # (sbatch --open-mode=append); left out of the JSON (as ``signal``) when there are none
    output_file: OutputPath | None = Field(default=None, exclude_if=lambda value: value is None)
    error_file: OutputPath | None = Field(default=None, exclude_if=lambda value: value is None)
    output_append: bool = Field(default=False, exclude_if=lambda value: not value)
    # the folder its job was submitted from (sbatch's default working directory): a task with
    # no ``workdir`` starts there if this node has it and its user can reach it, else in its
    # task folder, with a line in its log saying so; left out (as ``signal``) when None. A
    # controller sends it and the output files only to agents that say ``outputs=true``
    submit_dir: FolderPath | None = Field(default=None, exclude_if=lambda value: value is None)
    # ``fusesched run --pty``: the task runs on a pseudo-terminal of this type and size, which
    # the agent relays through the controller (agent/pty_bridge.py); left out when None. A
    # controller sends it only to agents that say ``pty=true``
    pty: Terminal | None = Field(default=None, exclude_if=lambda value: value is None)


NodeInventory.model_rebuild()  # its ``running`` names TaskLaunch, defined after it


class TaskState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    FAILED_TO_START = "failed-to-start"


class TaskReport(_Wire):
    task_id: str
    state: TaskState
    exit_code: int | None = None  # for EXITED: the code, or -signal when killed by a signal
    reason: NodeText = ""  # e.g. "cancelled", "walltime exceeded", "image not found: ..."
    pid: int | None = None
    # EXITED: the agent stopped it because its liveness probe failed (``reason`` says how);
    # left out when False (controllers older than it refuse fields they do not know)
    liveness_failed: bool = Field(default=False, exclude_if=lambda value: not value)


class LogChunk(_Wire):
    """Part of a task's log (its stdout and stderr together) from byte ``offset``.

    A chunk with no ``data`` is the log's end mark: the task has ended and its log is
    ``offset`` bytes long, all of it sent (the controller then serves the log as complete).
    Agents send it after the task's last output, with its exit report when they can; agents
    older than it send none (the controller takes the log as complete once their beats leave
    the task out), and controllers older than it write nothing for it."""

    task_id: str
    offset: int = Field(ge=0, le=1 << 40)  # byte offset of ``data`` in the task's log
    data: str


#: Fields a task sample has alike on the agent (``TaskSample``) and on the wire.
SAMPLE_COUNTERS = (
    "task_id",
    "time",
    "cpu_seconds",
    "rss_bytes",
    "read_bytes",
    "write_bytes",
    "read_chars",
    "write_chars",
    "log_bytes",
    "checkpoint_mtime",
    "checkpoint_bytes",
    "processes",
)


class TaskSampleWire(_Wire):
    """One sample of a task's activity (see ``fusesched.agent.sensors.TaskSample``).

    Counters are cumulative and never decrease; ``time`` is the agent's wall clock.
    """

    task_id: str
    time: Finite
    cpu_seconds: Finite = 0.0
    rss_bytes: int = 0  # resident now; in an exited task's final sample, its peak (kernel's count)
    read_bytes: int = 0  # storage I/O
    write_bytes: int = 0
    read_chars: int = 0  # every read()/write() syscall
    write_chars: int = 0
    log_bytes: int = 0  # size of the task's output log
    checkpoint_mtime: Finite | None = None  # newest file in its checkpoint folder; None: none
    checkpoint_bytes: int = 0
    processes: int = 0  # live processes found (0: none left)
    gpu_indices: list[int] = Field(default_factory=list)  # the task's GPUs
    gpu_util_mean: Finite | None = None  # mean utilisation (%) of its GPUs; None: no reading
    gpu_memory_bytes: int | None = None  # memory used on its GPUs, summed; None: no reading
    gpus_lost: int = 0  # how many of its GPUs are lost


class GpuHealthWire(_Wire):
    """One GPU's health as the agent last saw it."""

    index: int
    uuid: str = ""
    lost: bool = False
    faulty: bool = False  # lost, a node-fatal XID since the agent started, or ECC errors
    ecc_uncorrected: int = 0
    xids: list[int] = Field(default_factory=list)  # XIDs seen since the agent started
    # the latest readings (None where the device does not report them): metrics, job energy
    utilization_pct: Finite | None = None
    memory_used_bytes: int | None = None
    power_w: Finite | None = None
    temperature_c: Finite | None = None


class NodeHealthWire(_Wire):
    """The node's health: its health-check program and its GPUs."""

    healthy: bool = True
    reasons: list[NodeText] = Field(default_factory=list)  # why not healthy
    warnings: list[NodeText] = Field(default_factory=list)
    gpus: list[GpuHealthWire] = Field(default_factory=list)

    def faulty_gpus(self) -> set[int]:
        return {g.index for g in self.gpus if g.faulty}


class NodeLoadWire(_Wire):
    """The node's free memory (the kernel's ``MemFree``, bytes) and its 1- and 5-minute load
    averages, as its agent read them for this beat (agent/node_load.py); None: not read."""

    free_memory_bytes: int | None = Field(default=None, ge=0, le=2**63 - 1)  # (int64, as /proc)
    load1: Finite | None = Field(default=None, ge=0)
    load5: Finite | None = Field(default=None, ge=0)


#: The heartbeat field that carries :class:`NodeLoadWire`: a controller older than it refuses
#: it (422), and the agent then sends its beats without it (agent/client.py).
LOAD_FIELD = "load"


class Heartbeat(_Wire):
    node: str
    reports: list[TaskReport] = Field(default_factory=list)
    logs: list[LogChunk] = Field(default_factory=list)
    # every task id still alive here, or None when this beat does not say (a quick report
    # sent between two full beats); the controller checks for lost tasks only on full beats
    running: list[str] | None = None
    # full beats only: each task's newest sample not yet delivered, and the node's health
    samples: list[TaskSampleWire] = Field(default_factory=list)
    health: NodeHealthWire | None = None
    # full beats only: the datasets the node's cache holds complete (None: no cache, or not said)
    datasets: list[str] | None = None
    # each task with a readiness probe whose ready state changed (full beats: all of them),
    # ready or not; left out when empty (a controller older than it refuses the field). A task
    # never named here (an older agent's) is of unknown readiness, not "not ready"
    ready: dict[str, bool] = Field(default_factory=dict, exclude_if=lambda value: not value)
    # full beats only: the node's free memory and load averages (Slurm's FreeMem and
    # CPULoad); left out when None. An agent older than it sends none (the node's figures
    # show as N/A); a controller older than it refuses it, and the agent leaves it out of
    # its beats from then on (:data:`LOAD_FIELD`)
    load: NodeLoadWire | None = Field(default=None, exclude_if=lambda value: value is None)


class Leaving(_Wire):
    """An agent that is stopping, and kills its tasks as it goes, says so first
    (``POST /v1/agents/leaving``): the controller takes the node for lost at once instead of
    after its node timeout."""

    node: str


class KillTask(_Wire):
    task_id: str
    grace_s: float = 10.0
    reason: str = "cancelled"


class TaskLimit(_Wire):
    """A running task's new time limit (``scontrol update TimeLimit``): the agent kills it
    once it has run ``walltime_s`` seconds since it started, as if its launch had said so (at
    once when it has run longer already)."""

    task_id: str
    walltime_s: float = Field(gt=0, allow_inf_nan=False)


class TaskSignal(_Wire):
    """Send a running task a signal now (``fusesched cancel --signal``): to its process
    group, or with ``main_only`` to its main process alone. It keeps running."""

    task_id: str
    signal: str  # bare signal name: "USR1"
    main_only: bool = False


class HeartbeatReply(_Wire):
    launch: list[TaskLaunch] = Field(default_factory=list)
    kill: list[KillTask] = Field(default_factory=list)
    limit: list[TaskLimit] = Field(default_factory=list)  # running tasks' new time limits
    # signals for running tasks; left out when empty (agents older than it refuse it)
    signal: list[TaskSignal] = Field(default_factory=list, exclude_if=lambda value: not value)
    stage: list[DatasetWire] = Field(default_factory=list)  # copy into the cache ahead of jobs
    interval_s: float = 1.0  # when to heartbeat next (the agent may long-poll sooner)
