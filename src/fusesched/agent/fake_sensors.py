"""Scripted sensors for tests: counters that advance as told, and injected GPU faults.

Same interface as :class:`fusesched.agent.sensors.Sensors`, no processes or GPUs needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fusesched.agent.sensors import GpuSample, TaskSample, TaskWatch


@dataclass(slots=True)
class _FakeTask:
    cpu: float = 0.0
    rss: int = 0
    io: int = 0
    log: int = 0
    checkpoint: float | None = None
    processes: int = 1


class FakeSensors:
    """Scripted samples for tests: counters that advance as told, and injected GPU faults.

    ``advance(task, cpu=…, io=…, log=…)`` adds to a task's counters; ``checkpoint(task, t)``
    sets its newest checkpoint time; ``gpu(index, util=…, memory=…)`` sets readings;
    ``lose_gpu``, ``xid`` and ``ecc`` inject faults (an XID is reported by the next sample).
    """

    def __init__(self, gpus: int = 0, *, memory_bytes: int = 80 * 2**30) -> None:
        self.tasks: dict[str, _FakeTask] = {}
        self.memory_bytes = memory_bytes
        self.gpus: dict[int, GpuSample] = {
            i: GpuSample(i, f"GPU-fake-{i}", 0.0, 0.0, 0, 70.0, 40.0) for i in range(gpus)
        }
        self._xids: dict[int, list[int]] = {}

    def advance(
        self, task_id: str, *, cpu: float = 0.0, io: int = 0, log: int = 0, rss: int | None = None
    ) -> None:
        task = self.tasks.setdefault(task_id, _FakeTask())
        task.cpu += cpu
        task.io += io
        task.log += log
        if rss is not None:
            task.rss = rss

    def checkpoint(self, task_id: str, mtime: float) -> None:
        self.tasks.setdefault(task_id, _FakeTask()).checkpoint = mtime

    def end(self, task_id: str) -> None:
        self.tasks.setdefault(task_id, _FakeTask()).processes = 0

    def gpu(
        self,
        index: int,
        *,
        util: float | None = None,
        memory: int | None = None,
        power: float | None = None,
        temperature: float | None = None,
    ) -> None:
        g = self.gpus[index]
        self.gpus[index] = replace(
            g,
            utilization_pct=g.utilization_pct if util is None else util,
            memory_used_bytes=g.memory_used_bytes if memory is None else memory,
            power_w=g.power_w if power is None else power,
            temperature_c=g.temperature_c if temperature is None else temperature,
        )

    def lose_gpu(self, index: int) -> None:
        self.gpus[index] = replace(self.gpus[index], lost=True)

    def xid(self, index: int, code: int) -> None:
        self._xids.setdefault(index, []).append(code)

    def ecc(self, index: int, uncorrected: int) -> None:
        g = self.gpus[index]
        self.gpus[index] = replace(g, ecc_uncorrected=g.ecc_uncorrected + uncorrected)

    def sample_tasks(self, watches: Sequence[TaskWatch], now: float) -> list[TaskSample]:
        out = []
        for watch in watches:
            t = self.tasks.setdefault(watch.task_id, _FakeTask())
            out.append(
                TaskSample(
                    task_id=watch.task_id,
                    time=now,
                    cpu_seconds=t.cpu,
                    rss_bytes=t.rss,
                    read_chars=t.io,
                    log_bytes=t.log,
                    checkpoint_mtime=t.checkpoint,
                    processes=t.processes,
                )
            )
        return out

    def close(self) -> None:
        """Nothing to release (as :class:`~fusesched.agent.sensors.GpuSensor`)."""

    def sample_gpus(self, now: float) -> list[GpuSample]:
        xids, self._xids = self._xids, {}
        out = []
        for index, g in sorted(self.gpus.items()):
            if g.lost:
                out.append(
                    GpuSample(index, g.uuid, now, xid_errors=tuple(xids.get(index, ())), lost=True)
                )
            else:
                out.append(replace(g, time=now, xid_errors=tuple(xids.get(index, ()))))
        return out
