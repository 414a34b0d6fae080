"""The core's own mutable record of a job, and the ordered queue of waiting jobs."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import IntArray
from fusesched.core.placement import Allocation, GroupShape
from fusesched.model.job import JobSpec
from fusesched.model.phases import LEGAL, JobPhase, Transition, check_transition
from fusesched.policies.queue_order import FactArrays, JobFacts, QueueOrder


@dataclass(slots=True, eq=False)
class JobRecord:
    """Everything the core tracks about one job. Only the core mutates it."""

    spec: JobSpec
    seq: int
    phase: JobPhase
    groups: list[GroupShape] | None  # None: asks for a resource no node has
    total: IntArray
    bound: IntArray  # what it needs at least to start (total, or less with min_member)
    estimate: float
    facts: JobFacts
    fluid: bool = False
    history: list[Transition] = field(default_factory=list)
    waiting_on: set[str] = field(default_factory=set)
    key: tuple[float, ...] = ()
    start_time: float | None = None
    est_end: float | None = None
    end_time: float | None = None
    allocation: Allocation | None = None
    exit_code: int | None = None
    stop_requested: str | None = None
    never_fits: str = ""
    single_column: int = -1  # see SchedulerCore.fluid_column
    single_amount: int = 0

    @property
    def id(self) -> str:
        return self.spec.id

    def move(self, new: JobPhase, now: float, reason: str) -> None:
        if (self.phase, new) not in LEGAL:
            check_transition(self.id, self.phase, new)  # raises with the full story
        self.history.append(Transition(now, self.phase, new, reason))
        self.phase = new


def insert_row(array: npt.NDArray[Any], pos: int, row: object) -> npt.NDArray[Any]:
    """``np.insert`` along axis 0 without its generic overhead."""
    out = np.empty((len(array) + 1, *array.shape[1:]), dtype=array.dtype)
    out[:pos] = array[:pos]
    out[pos] = row
    out[pos + 1 :] = array[pos:]
    return out


def delete_rows(array: npt.NDArray[Any], positions: list[int]) -> npt.NDArray[Any]:
    """``np.delete`` along axis 0 without its generic overhead."""
    if len(positions) == 1:
        pos = positions[0]
        return np.concatenate((array[:pos], array[pos + 1 :]))
    keep = np.ones(len(array), dtype=np.bool_)
    keep[positions] = False
    return array[keep]


class WaitingQueue:
    """Waiting jobs in policy order, with array columns for vectorised scans.

    ``records[i]``, ``total[i]`` (what it needs at least to start) and ``estimate[i]``
    describe the i-th job in order; both arrays are views of one float matrix
    ``[estimate, total...]`` so that a push or a removal is one array operation. Static orders
    insert by binary search; dynamic ones are re-sorted by :meth:`reorder`.
    """

    def __init__(self, order: QueueOrder, width: int) -> None:
        self.order = order
        self.records: list[JobRecord] = []
        self._keys: list[tuple[tuple[float, ...], int]] = []
        self._rows: npt.NDArray[np.float64] = np.zeros((0, width + 1), dtype=np.float64)
        self._views()

    def _views(self) -> None:
        self.estimate: npt.NDArray[np.float64] = self._rows[:, 0]
        self.total: npt.NDArray[np.float64] = self._rows[:, 1:]

    def __len__(self) -> int:
        return len(self.records)

    def widen(self, width: int) -> None:
        extra = width + 1 - self._rows.shape[1]
        if extra > 0:
            self._rows = np.pad(self._rows, [(0, 0), (0, extra)])
            self._views()

    def push(self, rec: JobRecord, now: float) -> None:
        sort_key = (rec.key if not self.order.dynamic else (), rec.seq)
        pos = bisect.bisect_right(self._keys, sort_key) if not self.order.dynamic else len(self)
        self._keys.insert(pos, sort_key)
        self.records.insert(pos, rec)
        row = np.zeros(self._rows.shape[1], dtype=np.float64)
        row[0] = rec.estimate
        row[1 : 1 + len(rec.bound)] = rec.bound
        self._rows = insert_row(self._rows, pos, row)
        self._views()

    def remove_at(self, positions: list[int]) -> None:
        if not positions:
            return
        for pos in sorted(positions, reverse=True):
            del self.records[pos]
            del self._keys[pos]
        self._rows = delete_rows(self._rows, positions)
        self._views()

    def remove(self, rec: JobRecord) -> None:
        self.remove_at([self.records.index(rec)])

    def reorder(self, now: float) -> None:
        """Re-sort by the (time-dependent) policy key; ties by arrival sequence."""
        if not self.order.dynamic or len(self) < 2:
            return
        facts = FactArrays(
            submit=np.array([r.facts.submit for r in self.records]),
            estimate=np.array([r.facts.estimate for r in self.records]),
            procs=np.array([r.facts.procs for r in self.records]),
            priority=np.array([float(r.facts.priority) for r in self.records]),
            qos_rank=np.array([float(r.facts.qos_rank) for r in self.records]),
        )
        keys = self.order.keys(facts, now)
        seq = np.array([r.seq for r in self.records])
        perm = np.lexsort((seq, *reversed(keys)))
        self.records = [self.records[i] for i in perm]
        self._keys = [self._keys[i] for i in perm]
        self._rows = self._rows[perm]
        self._views()
