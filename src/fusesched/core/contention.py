"""Which waiting job waits for room and which waits behind another: squeue's ``Resources``
and ``Priority``, partition by partition as Slurm gives them.

Slurm's main scheduler walks the queue in priority order; the first job of a partition that
does not fit waits for ``Resources`` and closes its partition for the cycle, so every later
job of that partition waits for ``Priority``. fusesched has no configured partitions, so a
job's partition is derived from what it asks for:

* its **room**: the nodes it may use — up, allowed by its labels (pool, node selector,
  required terms, GPU model, its quota flavour's labels), each able to hold one of its tasks;
* its **kinds**: the scarce resources it asks for (GPUs, GPU shares, MIG profiles, FPGAs,
  RDMA…: every resource but CPU, memory and ephemeral storage); a job that asks for none of
  those competes for CPUs and memory.

A waiting job waits behind one ahead of it (``Priority``) when their rooms share a node and
they compete for a kind there; the first job of its partition — no job ahead of it competes
with it — waits for ``Resources``. A GPU job behind CPU jobs, an H100 job behind A100 jobs,
or a job of pool ``hpc`` behind jobs of pool ``ai`` waits for ``Resources``.

That holds only where the cycle tries the jobs behind a blocked one: without backfilling it
stops at the first job that does not fit, so only that job waits for ``Resources``;
conservative backfilling tries the first ``conservative_depth`` jobs, and those after them
wait for ``Priority``.

Cheap: one dictionary look-up per job; NumPy work once per shape family (jobs of one
family share their room). Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusesched.core.cluster import BoolArray
from fusesched.model.resources import CPU, MEMORY

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore

#: Resources every job asks for: they make no partition of their own.
COMMON = frozenset({CPU, MEMORY, "ephemeral-storage"})
#: The kind of a job that asks for none of the scarce ones (CPUs and memory).
_COMMON_KIND = -1


class Contention:
    """Walks the waiting jobs in queue order (:meth:`firsts`): whether each is the first of
    its partition (its reason ``Resources``) or waits behind a job ahead of it that competes
    with it (``Priority``)."""

    def __init__(self, core: SchedulerCore) -> None:
        self._core = core
        config = core.config
        # how many jobs in line the cycle tries at all (None: every job)
        self._depth: int | None = None
        if config.backfill == "none":
            self._depth = 1
        elif config.backfill == "conservative":
            self._depth = config.conservative_depth
        columns = core.cluster.columns
        self._common = frozenset(columns[name] for name in COMMON if name in columns)
        self._rooms: dict[tuple[bytes, tuple[int, ...]], int] = {}  # (nodes, kinds) -> number
        self._masks: list[BoolArray] = []
        self._kinds: list[tuple[int, ...]] = []
        self._empty: list[bool] = []  # per room: it has no node
        self._wanted: dict[int, BoolArray] = {}  # kind -> nodes the jobs ahead want it on

    def firsts(self, records: Sequence[JobRecord]) -> list[bool]:
        """Per job of ``records`` (the queue, in order): whether no job ahead of it
        competes with it."""
        depth = len(records) if self._depth is None else min(self._depth, len(records))
        out: list[bool] = []
        append = out.append
        # per shape family (or -shape-1): the answer for its later jobs (the room of its
        # first is ahead of them: they compete with it, unless the room has no node)
        settled: dict[int, bool] = {}
        get = settled.get
        for rec in records[:depth] if depth < len(records) else records:
            family = rec.family
            key = family if family >= 0 else -rec.shape_id - 1
            known = get(key)
            if known is None:
                room = self._room(rec)
                known = self._enter(room)
                settled[key] = self._empty[room]
            append(known)
        out.extend([False] * (len(records) - depth))  # (not tried: behind those tried)
        return out

    def _enter(self, room: int) -> bool:
        """Whether no job ahead wants a kind of ``room`` on its nodes; its first job is then
        ahead of the jobs after it."""
        mask = self._masks[room]
        wanted = self._wanted
        compete = False
        for kind in self._kinds[room]:
            taken = wanted.get(kind)
            if taken is None:
                wanted[kind] = mask.copy()
                continue
            if not compete and np.any(taken & mask):
                compete = True
            taken |= mask
        return not compete

    def _room(self, rec: JobRecord) -> int:
        """The number of ``rec``'s room and kinds (equal ones share a number)."""
        cluster = self._core.cluster
        size = cluster.size
        groups = rec.groups
        if not groups or not size:
            mask = np.zeros(size, dtype=np.bool_)
            kinds: tuple[int, ...] = (_COMMON_KIND,)
        else:
            holds = np.zeros(size, dtype=np.bool_)
            scarce: set[int] = set()
            capacity = cluster.capacity
            for group in groups:
                one = np.ones(size, dtype=np.bool_)
                if group.placement is not None:  # (its own label filters)
                    one &= cluster.allowed(group.placement)
                for col in group.cols.tolist():
                    one &= capacity[:, col] >= group.per_task[col]
                    if col not in self._common:
                        scarce.add(col)
                holds |= one
            mask = holds & cluster.eligible(rec.spec.placement)
            kinds = tuple(sorted(scarce)) or (_COMMON_KIND,)
        key = (mask.tobytes(), kinds)
        room = self._rooms.get(key)
        if room is None:
            room = self._rooms[key] = len(self._masks)
            self._masks.append(mask)
            self._kinds.append(kinds)
            self._empty.append(not mask.any())
        return room
