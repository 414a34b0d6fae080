"""The window of samples a task's detectors read (:mod:`fusesched.controller.hang`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from fusesched.agent.sensors import TaskSample

#: Columns of a :class:`SampleWindow`, in order.
COLUMNS = (
    "time",
    "cpu_seconds",
    "rss_bytes",
    "io_bytes",
    "log_bytes",
    "checkpoint_mtime",  # nan: no checkpoint seen
    "checkpoint_bytes",
    "gpu_util_pct",  # mean over the task's GPUs; nan: no GPU readings
    "gpu_memory_bytes",  # sum over the task's GPUs; nan: no GPU readings
    "gpus_lost",
    "processes",
)
_COL = {name: i for i, name in enumerate(COLUMNS)}


class SampleWindow:
    """The last ``capacity`` samples of one task, as a NumPy ring buffer (oldest first)."""

    def __init__(self, task_id: str, capacity: int = 720) -> None:
        if capacity < 2:
            raise ValueError("a sample window needs room for at least two samples")
        self.task_id = task_id
        self.capacity = capacity
        self._data = np.full((capacity, len(COLUMNS)), np.nan)
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, sample: TaskSample) -> None:
        if sample.task_id != self.task_id:
            raise ValueError(f"sample of {sample.task_id} pushed to the window of {self.task_id}")
        if self._size and sample.time < self._data[(self._next - 1) % self.capacity, 0]:
            raise ValueError("samples must be pushed in time order")
        readings = [g for g in sample.gpus if not g.lost]
        util = [g.utilization_pct for g in readings if not np.isnan(g.utilization_pct)]
        mem = [g.memory_used_bytes for g in readings if g.memory_used_bytes >= 0]
        row = (
            sample.time,
            sample.cpu_seconds,
            sample.rss_bytes,
            sample.io_bytes,
            sample.log_bytes,
            np.nan if sample.checkpoint_mtime is None else sample.checkpoint_mtime,
            sample.checkpoint_bytes,
            float(np.mean(util)) if util else np.nan,
            float(sum(mem)) if mem else np.nan,
            sum(1 for g in sample.gpus if g.lost),
            sample.processes,
        )
        self._data[self._next] = row
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def array(self) -> npt.NDArray[np.float64]:
        """All held samples, oldest first, one row each (a copy), columns :data:`COLUMNS`."""
        if self._size < self.capacity:
            return self._data[: self._size].copy()
        return np.roll(self._data, -self._next, axis=0)

    def column(self, name: str, since: float | None = None) -> npt.NDArray[np.float64]:
        data = self.array()
        if since is not None:
            data = data[data[:, 0] >= since]
        return data[:, _COL[name]]

    def last(self, since: float | None = None) -> Mapping[str, npt.NDArray[np.float64]]:
        """Every column of the samples taken at or after ``since`` (all when None)."""
        data = self.array()
        if since is not None:
            data = data[data[:, 0] >= since]
        return {name: data[:, i] for name, i in _COL.items()}

    @property
    def newest_time(self) -> float | None:
        return None if not self._size else float(self._data[(self._next - 1) % self.capacity, 0])

    @property
    def oldest_time(self) -> float | None:
        return None if not self._size else float(self.array()[0, 0])
