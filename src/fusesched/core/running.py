"""Running jobs with their estimated ends and totals, as arrays for reservation arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fusesched.core.cluster import IntArray

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class RunningView:
    """Running jobs sorted by estimated end (ties: start order)."""

    ends: FloatArray
    totals: IntArray
    slots: IntArray
    names: list[str | None]  # job id per slot

    def __len__(self) -> int:
        return len(self.ends)

    def job_id(self, k: int) -> str:
        """The id of the k-th job in end order."""
        name = self.names[int(self.slots[k])]
        assert name is not None
        return name


class RunningSet:
    """Running jobs in slots: a start or an exit touches one slot, and the end-ordered view
    that reservations need is sorted only when asked for (and cached until the next change).

    ``_slot`` keeps its keys in start order (a dict keeps insertion order), so a stable sort
    by estimated end alone breaks ties by start order.
    """

    def __init__(self, width: int) -> None:
        self._ids: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._ends: FloatArray = np.zeros(0, dtype=np.float64)
        self._totals: IntArray = np.zeros((0, width), dtype=np.int64)
        self._view: RunningView | None = None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._slot

    def widen(self, width: int) -> None:
        extra = width - self._totals.shape[1]
        if extra > 0:
            self._totals = np.pad(self._totals, [(0, 0), (0, extra)])
            self._view = None

    def add(self, job_id: str, est_end: float, total: IntArray) -> None:
        if not self._free_slots:
            self._grow()
        slot = self._free_slots.pop()
        self._slot[job_id] = slot
        self._ids[slot] = job_id
        self._ends[slot] = est_end
        self._totals[slot, : len(total)] = total
        self._view = None

    def remove(self, job_id: str) -> None:
        slot = self._slot.pop(job_id)
        self._ids[slot] = None
        self._ends[slot] = np.inf
        self._totals[slot] = 0
        self._free_slots.append(slot)
        self._view = None

    def ids(self) -> list[str]:
        """The running job ids (in start order)."""
        return list(self._slot)

    def view(self) -> RunningView:
        """The running jobs sorted by (estimated end, start order)."""
        if self._view is None:
            slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
            order = slots[self._ends[slots].argsort(kind="stable")]
            self._view = RunningView(self._ends[order], self._totals[order], order, self._ids)
        return self._view

    def _grow(self) -> None:
        old = len(self._ends)
        new = max(16, 2 * old)
        self._ids.extend([None] * (new - old))
        self._ends = np.concatenate([self._ends, np.full(new - old, np.inf)])
        self._totals = np.vstack(
            [self._totals, np.zeros((new - old, self._totals.shape[1]), np.int64)]
        )
        self._free_slots.extend(range(new - 1, old - 1, -1))
