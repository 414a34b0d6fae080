"""torchrun's own defaults for the tasks of a ``launcher: torchrun`` group started one per task
(a Kubeflow PyTorchJob's replicas, or any gang whose command runs ``torchrun``).

``torchrun`` reads each of its options from ``PET_<OPTION>`` when the command line leaves it
out, so with these a bare ``torchrun train.py`` in every task forms one rendezvous across the
gang, as the Kubeflow training operator arranges for a PyTorchJob's pods: ``PET_NNODES`` (the
job's tasks), ``PET_NODE_RANK`` (the task's rank: every task is a torchrun "node", even where
two share a machine), ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` (the job's ``MASTER_ADDR``
and ``MASTER_PORT``). ``PET_NPROC_PER_NODE`` is the group's to give (its ``env``); when it is a
number, ``WORLD_SIZE`` counts the processes (tasks × that), as the operator sets it. What the
group's ``env`` gives itself is kept. A group whose command runs ``torchrun --standalone`` (a
rendezvous of its own on each task's machine) gets none: ``PET_NNODES`` would have each wait
for the others, which never join it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fusesched.controller.launchenv import TaskSlot
from fusesched.submit.identify import command_words
from fusesched.submit.task_group import TaskGroupRequest

NPROC_PER_NODE = "PET_NPROC_PER_NODE"


def torchrun_env(
    env: Mapping[str, str], own: Mapping[str, str], slot: TaskSlot, slots: Sequence[TaskSlot]
) -> dict[str, str]:
    """What to add to ``env`` (the task's variables, fusesched's rendezvous ones included) for
    a task of a torchrun group whose own ``env`` is ``own``."""
    wanted = {
        "PET_NNODES": str(len(slots)),
        "PET_NODE_RANK": str(slot.rank),
        "PET_MASTER_ADDR": env["MASTER_ADDR"],
        "PET_MASTER_PORT": env["MASTER_PORT"],
    }
    out = {name: value for name, value in wanted.items() if name not in own}
    nproc = own.get(NPROC_PER_NODE, "")
    if nproc.isascii() and nproc.isdigit() and int(nproc) > 0:
        out["WORLD_SIZE"] = str(len(slots) * int(nproc))
    return out


def standalone(group: TaskGroupRequest) -> bool:
    """Whether ``group``'s command runs ``torchrun --standalone`` (it takes no ``PET_*``)."""
    return "--standalone" in command_words(group)
