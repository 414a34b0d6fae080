"""Running jobs kept sorted by estimated end, as arrays for reservation arithmetic."""

from __future__ import annotations

import numpy as np

from fusesched.core.cluster import IntArray
from fusesched.core.records import delete_rows, insert_row


class RunningSet:
    """Running job ids sorted by estimated end (ties: start order), with their totals."""

    def __init__(self, width: int) -> None:
        self.ids: list[str] = []
        self.ends = np.zeros(0, dtype=np.float64)
        self.totals = np.zeros((0, width), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.ids

    def widen(self, width: int) -> None:
        if self.totals.shape[1] < width:
            pad = np.zeros((len(self.ids), width - self.totals.shape[1]), dtype=np.int64)
            self.totals = np.hstack([self.totals, pad])

    def add(self, job_id: str, est_end: float, total: IntArray) -> None:
        pos = int(self.ends.searchsorted(est_end, side="right"))
        self.ids.insert(pos, job_id)
        self.ends = insert_row(self.ends, pos, est_end)
        row = np.zeros(self.totals.shape[1], dtype=np.int64)
        row[: len(total)] = total
        self.totals = insert_row(self.totals, pos, row)

    def remove(self, job_id: str, est_end: float) -> None:
        pos = int(self.ends.searchsorted(est_end, side="left"))
        while self.ids[pos] != job_id:
            pos += 1
        del self.ids[pos]
        self.ends = delete_rows(self.ends, [pos])
        self.totals = delete_rows(self.totals, [pos])
