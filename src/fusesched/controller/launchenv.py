"""How a started job becomes processes: task ranks, environment variables, hostfiles.

Pure functions of the core's :class:`StartJob` decision and the nodes' addresses, so the
simulator-vs-live parity test and the unit tests can check them without any process.

Two launch modes:

* **per task** (the default; PyTorch, DeepSpeed, services, plain commands): every task of the
  gang is one process on its node, with the ``torch.distributed`` variables set
  (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``NODE_RANK``, ``LOCAL_RANK``);
* **batch script** (``sbatch`` scripts and MPI jobs): one process, the script, on the first
  node — as Slurm does — with a hostfile of every allocated node and OpenMPI told to start its
  remote daemons through fusesched's launcher instead of ssh, so ``mpirun`` inside the script
  spans the allocation.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fusesched.api.wire import TASK_DIR_PLACEHOLDER
from fusesched.hostlist import compress_hostlist, tasks_per_node
from fusesched.model.events import StartJob
from fusesched.model.resources import CPU, GPU, MEMORY, mebibytes

#: Port range for MASTER_PORT; the job's sequence number picks one (distinct for 20,000 jobs).
MASTER_PORT_BASE = 29_500
MASTER_PORT_SPAN = 20_000

HOSTFILE_NAME = "fusesched.hostfile"
TASK_DIR = TASK_DIR_PLACEHOLDER
#: Told a job given ``--mem-per-cpu``, instead of ``SLURM_MEM_PER_NODE`` (as Slurm's).
MEM_PER_CPU = "SLURM_MEM_PER_CPU"


@dataclass(frozen=True, slots=True)
class TaskSlot:
    """One task of a started job: where it runs and its ranks."""

    task_id: str
    group: str
    index: int  # within its group
    rank: int  # within the whole job
    node: str
    node_rank: int  # position of its node among the job's distinct nodes
    local_rank: int  # position among the job's tasks on that node
    local_size: int  # the job's tasks on that node


def task_slots(decision: StartJob, attempt: int = 0) -> list[TaskSlot]:
    """Every task of the job in rank order (groups in order, tasks in placement order).

    A restarted job's tasks (``attempt`` > 0) get fresh ids: ``<job>-r<attempt>.<group>.<i>``.
    """
    prefix = decision.job_id if attempt == 0 else f"{decision.job_id}-r{attempt}"
    placed = [(t.group, t.node, t.first_index + k) for t in decision.tasks for k in range(t.count)]
    return ranked_slots(prefix, placed)


def ranked_slots(prefix: str, placed: Sequence[tuple[str, str, int]]) -> list[TaskSlot]:
    """The slots of tasks ``placed`` (group, node, index in its group), in rank order, with
    ids ``<prefix>.<group>.<index>``."""
    node_order = list(dict.fromkeys(node for _, node, _ in placed))
    node_rank = {node: i for i, node in enumerate(node_order)}
    local_size: dict[str, int] = {}
    for _, node, _ in placed:
        local_size[node] = local_size.get(node, 0) + 1
    seen: dict[str, int] = {}
    out: list[TaskSlot] = []
    for rank, (group, node, index) in enumerate(placed):
        local = seen.get(node, 0)
        seen[node] = local + 1
        out.append(
            TaskSlot(
                task_id=f"{prefix}.{group}.{index}",
                group=group,
                index=index,
                rank=rank,
                node=node,
                node_rank=node_rank[node],
                local_rank=local,
                local_size=local_size[node],
            )
        )
    return out


def master_port(seq: int) -> int:
    return MASTER_PORT_BASE + seq % MASTER_PORT_SPAN


def hostfile(slots: Sequence[TaskSlot]) -> str:
    """``<node> slots=<tasks>`` per node, the format both OpenMPI and DeepSpeed read."""
    counts: dict[str, int] = {}
    for slot in slots:
        counts[slot.node] = counts.get(slot.node, 0) + 1
    return "".join(f"{node} slots={n}\n" for node, n in counts.items())


def remote_launcher_command() -> str:
    """What OpenMPI runs instead of ssh: ``<this python> -m fusesched.agent.remote``."""
    return f"{sys.executable} -m fusesched.agent.remote"


def shared_host_env(slots: Sequence[TaskSlot], addresses: Mapping[str, str]) -> dict[str, str]:
    """What a job gets when two or more of its nodes are one machine (several agents on one
    host, as ``fusesched up --agents 2``): OpenMPI without its shared-memory transport. That
    transport names its files after the host name, the job and each rank's index on its node,
    so ranks of two such "nodes" open the same files and corrupt each other's memory (a
    segmentation fault in ``mca_btl_vader_poll_handle_frag`` with 2 ranks on each of two local
    agents); TCP over the loopback works. Nothing on a cluster of separate machines, and a
    job's own ``OMPI_MCA_btl`` wins (drivers apply this under the job's ``env``)."""
    seen: dict[str, str] = {}
    for node in dict.fromkeys(s.node for s in slots):
        address = addresses.get(node)
        if address is None:
            continue
        if address in seen:
            return {"OMPI_MCA_btl": "^vader"}
        seen[address] = node
    return {}


def task_env(
    *,
    job_id: str,
    job_name: str,
    slot: TaskSlot,
    slots: Sequence[TaskSlot],
    addresses: Mapping[str, str],
    seq: int,
    controller_url: str,
    array_index: int | None,
    batch: bool,
) -> dict[str, str]:
    """The variables every task gets (on top of the user's own ``env``)."""
    nodes = list(dict.fromkeys(s.node for s in slots))
    first = slots[0]
    env = {
        "FUSESCHED_JOB_ID": job_id,
        "FUSESCHED_JOB_NAME": job_name,
        "FUSESCHED_TASK_ID": slot.task_id,
        "FUSESCHED_NODE": slot.node,
        "FUSESCHED_NODELIST": ",".join(nodes),
        "FUSESCHED_NUM_NODES": str(len(nodes)),
        "FUSESCHED_NUM_TASKS": str(len(slots)),
        "FUSESCHED_CONTROLLER": controller_url,
        "MASTER_ADDR": addresses.get(first.node, "127.0.0.1"),
        "MASTER_PORT": str(master_port(seq)),
        "WORLD_SIZE": str(len(slots)),
        "RANK": str(slot.rank),
        "NODE_RANK": str(slot.node_rank),
        "LOCAL_RANK": str(slot.local_rank),
        "LOCAL_WORLD_SIZE": str(slot.local_size),
        "GROUP_RANK": str(slot.node_rank),
        "FUSESCHED_HOSTFILE": f"{TASK_DIR}/{HOSTFILE_NAME}",  # also DeepSpeed's hostfile format
    }
    if array_index is not None:
        env["FUSESCHED_ARRAY_INDEX"] = str(array_index)
        env["SLURM_ARRAY_TASK_ID"] = str(array_index)  # scripts written for Slurm keep working
    if batch:
        env.update(
            {
                "OMPI_MCA_plm_rsh_agent": remote_launcher_command(),
                "OMPI_MCA_orte_default_hostfile": f"{TASK_DIR}/{HOSTFILE_NAME}",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "1",
                "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            }
        )
    return env


def allocation_env(slots: Sequence[TaskSlot], suffix: str = "") -> dict[str, str]:
    """Slurm's variables for the nodes and tasks of ``slots`` (an allocation, or a
    heterogeneous job's component with ``suffix`` ``_HET_GROUP_<n>``): the node list
    (Slurm's short form, ``node[1-4]``, in the allocation's order: the first is rank 0's), the
    counts and the tasks per node."""
    nodes = list(dict.fromkeys(s.node for s in slots))
    per_node = [sum(1 for s in slots if s.node == node) for node in nodes]
    env = {
        "SLURM_JOB_NODELIST": compress_hostlist(nodes),
        "SLURM_NODELIST": compress_hostlist(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(len(slots)),
        "SLURM_NPROCS": str(len(slots)),
        "SLURM_TASKS_PER_NODE": tasks_per_node(per_node),
    }
    return {f"{name}{suffix}": value for name, value in env.items()}


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What a job's Slurm variables say of it beyond its ranks (:func:`slurm_env`)."""

    job_id: str
    name: str
    user: str
    queue: str  # SLURM_JOB_PARTITION
    account: str  # its tenant: SLURM_JOB_ACCOUNT
    qos: str
    cpus_per_task: int | None  # whole cores per task; None: a fraction
    restarts: int
    array_parent: str | None = None
    array: tuple[int, int, int, int] | None = None  # (first, last, step, count)
    array_index: int | None = None
    #: each task group's per-task resources (cpu in millicores, memory in bytes, GPUs)
    per_task: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    start_time: float | None = None  # SLURM_JOB_START_TIME (Unix seconds)
    walltime_s: float | None = None  # with the start: SLURM_JOB_END_TIME
    submit_host: str | None = None  # SLURM_SUBMIT_HOST
    reservation: str | None = None  # SLURM_JOB_RESERVATION
    #: the variables of the Slurm options given (submit/slurm_options.py: SLURM_NTASKS_PER_NODE…)
    told: Mapping[str, str] = field(default_factory=dict)
    #: the whole GPUs (indices) the job holds on each of its nodes: SLURM_JOB_GPUS
    gpus: Mapping[str, Sequence[int]] = field(default_factory=dict)


def slurm_env(
    job: SlurmJob, slot: TaskSlot, slots: Sequence[TaskSlot], batch: bool
) -> dict[str, str]:
    """The variables Slurm gives a job's tasks, for jobs submitted as Slurm's (``sbatch``,
    ``fusesched run``): scripts written for Slurm read ``$SLURM_JOB_ID``,
    ``$SLURM_CPUS_PER_TASK``, ``$SLURM_NTASKS``, ``$SLURM_PROCID``… A batch script (one task
    that starts the rest) gets the batch step's ranks (0); per-task jobs each their own, as
    ``srun``'s tasks do; and what the job was submitted with and the GPUs it holds on the
    task's node (:func:`told_env`). The node list is comma-separated (a valid Slurm host
    list). OpenMPI is kept off Slurm's launcher and allocation, which it would pick from these
    variables (there is no ``srun`` here): ``mpirun`` goes on using fusesched's launcher and
    hostfile."""
    nodes = list(dict.fromkeys(s.node for s in slots))
    own = slots[0] if batch else slot
    env = {
        "SLURM_JOB_ID": job.job_id,
        "SLURM_JOBID": job.job_id,
        "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_USER": job.user,
        "SLURM_JOB_PARTITION": job.queue,
        "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_QOS": job.qos,
        "SLURM_CLUSTER_NAME": "fusesched",
        **allocation_env(slots),
        "SLURM_PROCID": str(own.rank),
        "SLURM_LOCALID": str(own.local_rank),
        "SLURM_NODEID": str(own.node_rank),
        "SLURMD_NODENAME": own.node,
        "SLURM_RESTART_COUNT": str(job.restarts),
        # (mpirun would otherwise launch through srun and read the allocation from Slurm)
        "OMPI_MCA_plm": "rsh",
        "OMPI_MCA_ras": "^slurm",
    }
    if job.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(job.cpus_per_task)
    env.update(_node_shares(job, own.node, nodes, slots))
    env.update(told_env(job, own.node))
    if job.start_time is not None:
        env["SLURM_JOB_START_TIME"] = str(int(job.start_time))
        if job.walltime_s is not None:
            env["SLURM_JOB_END_TIME"] = str(int(job.start_time + job.walltime_s))
    if job.array_index is not None and job.array_parent is not None:
        env["SLURM_ARRAY_JOB_ID"] = job.array_parent
        env["SLURM_ARRAY_TASK_ID"] = str(job.array_index)
        if job.array is not None:
            first, last, step, count = job.array
            env["SLURM_ARRAY_TASK_MIN"] = str(first)
            env["SLURM_ARRAY_TASK_MAX"] = str(last)
            env["SLURM_ARRAY_TASK_STEP"] = str(step)
            env["SLURM_ARRAY_TASK_COUNT"] = str(count)
    return env


def _node_shares(
    job: SlurmJob, node: str, nodes: Sequence[str], slots: Sequence[TaskSlot]
) -> dict[str, str]:
    """What the job holds per node, as Slurm says it: ``SLURM_CPUS_ON_NODE`` (whole CPUs on
    ``node``, a fraction rounded up), ``SLURM_JOB_CPUS_PER_NODE`` (every node, ``4(x2),2``),
    ``SLURM_MEM_PER_NODE`` (MiB) and ``SLURM_GPUS_ON_NODE`` — each only when the job holds
    some of it."""
    totals: dict[str, dict[str, int]] = {name: {} for name in nodes}
    for slot in slots:
        held = totals[slot.node]
        for name, amount in job.per_task.get(slot.group, {}).items():
            held[name] = held.get(name, 0) + amount
    env: dict[str, str] = {}
    cpus = [-(-totals[name].get(CPU, 0) // 1000) for name in nodes]
    if any(cpus):
        env["SLURM_JOB_CPUS_PER_NODE"] = tasks_per_node(cpus)
    per_node = MEM_PER_CPU not in job.told
    return env | node_held_env(totals[node], any(cpus), per_node)


def told_env(job: SlurmJob, node: str) -> dict[str, str]:
    """What the job's tasks on ``node`` are told of how it was asked for, as Slurm tells
    them, each only when there is something to tell: ``SLURM_SUBMIT_HOST``,
    ``SLURM_JOB_RESERVATION``, the variables of its Slurm options (``SLURM_NTASKS_PER_NODE``,
    ``SLURM_MEM_PER_CPU``, ``SLURM_GPUS``…) and ``SLURM_JOB_GPUS`` (the whole GPUs it holds on
    ``node``, by index, as ``CUDA_VISIBLE_DEVICES`` names them: ``0,1``)."""
    env = dict(job.told)
    if job.submit_host is not None:
        env["SLURM_SUBMIT_HOST"] = job.submit_host
    if job.reservation is not None:
        env["SLURM_JOB_RESERVATION"] = job.reservation
    if job.gpus.get(node):
        env["SLURM_JOB_GPUS"] = ",".join(map(str, job.gpus[node]))
    return env


def node_held_env(
    held: Mapping[str, int], cpus: bool = True, memory: bool = True
) -> dict[str, str]:
    """What a job holds on one node (``held``: its tasks' resources there, summed) as Slurm
    says it: ``SLURM_CPUS_ON_NODE`` (whole CPUs, a fraction rounded up; with ``cpus``: the
    job holds CPUs somewhere), ``SLURM_MEM_PER_NODE`` (MiB; with ``memory``: not for a job
    given ``--mem-per-cpu``, which Slurm tells ``SLURM_MEM_PER_CPU`` instead) and
    ``SLURM_GPUS_ON_NODE``, the last two only when it holds some."""
    env: dict[str, str] = {}
    if cpus:
        env["SLURM_CPUS_ON_NODE"] = str(-(-held.get(CPU, 0) // 1000))
    if memory and held.get(MEMORY):
        env["SLURM_MEM_PER_NODE"] = str(mebibytes(held[MEMORY]))
    if held.get(GPU):
        env["SLURM_GPUS_ON_NODE"] = str(held[GPU])
    return env
