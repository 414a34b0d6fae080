"""torchrun's own defaults for the tasks of the job's torchrun world: the groups of
``submit/launch_mode.py``'s ``torchrun_groups`` (a Kubeflow PyTorchJob's Master and Worker
replicas, or any group started one process per task whose launcher is ``torchrun``).

``torchrun`` reads each of its options from ``PET_<OPTION>`` when the command line leaves it
out, so with these a bare ``torchrun train.py`` in every task of the world forms one
rendezvous, as the Kubeflow training operator arranges for a PyTorchJob's pods:
``PET_NNODES`` (the world's tasks), ``PET_NODE_RANK`` (the task's place among them: every task
is a torchrun "node", even where two share a machine), ``PET_MASTER_ADDR`` (the node of the
world's first task, which hosts the rendezvous) and ``PET_MASTER_PORT`` (the job's
``MASTER_PORT``). The job's other groups (a parameter server, a launcher, a group run
``torchrun --standalone``) are no part of it and get none: counted, they would have the world
wait for ranks that never join. ``PET_NPROC_PER_NODE`` is the group's to give (its ``env``);
when it is a number, ``WORLD_SIZE`` counts the processes (world tasks × that), as the operator
sets it. What the group's ``env`` gives itself is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fusesched.controller.launchenv import TaskSlot

NPROC_PER_NODE = "PET_NPROC_PER_NODE"


@dataclass(frozen=True, slots=True)
class TorchrunWorld:
    """The tasks of one started job that form its torchrun world."""

    node_ranks: Mapping[str, int]  # task id → its PET_NODE_RANK
    master_addr: str  # the address of the world's first task's node

    @classmethod
    def of(
        cls, slots: Sequence[TaskSlot], groups: Sequence[str], addresses: Mapping[str, str]
    ) -> TorchrunWorld | None:
        """The world of ``groups``' tasks among ``slots`` (None when it has none)."""
        members = [s for s in slots if s.group in groups]
        if not members:
            return None
        ranks = {slot.task_id: rank for rank, slot in enumerate(members)}
        return cls(ranks, addresses.get(members[0].node, "127.0.0.1"))

    def env(self, env: Mapping[str, str], own: Mapping[str, str], slot: TaskSlot) -> dict[str, str]:
        """What to add to ``env`` (the task's variables, fusesched's rendezvous ones included)
        for ``slot``, a task of the world whose group's own ``env`` is ``own``."""
        size = len(self.node_ranks)
        wanted = {
            "PET_NNODES": str(size),
            "PET_NODE_RANK": str(self.node_ranks[slot.task_id]),
            "PET_MASTER_ADDR": self.master_addr,
            "PET_MASTER_PORT": env["MASTER_PORT"],
        }
        out = {name: value for name, value in wanted.items() if name not in own}
        nproc = own.get(NPROC_PER_NODE, "")
        if nproc.isascii() and nproc.isdigit() and int(nproc) > 0:
            out["WORLD_SIZE"] = str(size * int(nproc))
        return out
