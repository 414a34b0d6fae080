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
from dataclasses import dataclass

from fusesched.api.wire import TASK_DIR_PLACEHOLDER
from fusesched.model.events import StartJob

#: Port range for MASTER_PORT; the job's sequence number picks one (distinct for 20,000 jobs).
MASTER_PORT_BASE = 29_500
MASTER_PORT_SPAN = 20_000

HOSTFILE_NAME = "fusesched.hostfile"
TASK_DIR = TASK_DIR_PLACEHOLDER


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
