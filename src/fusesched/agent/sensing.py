"""The agent's sensor loop: task samples and node health every ``interval_s``, for heartbeats.

:class:`Sensing` runs in its own thread (the health-check program may hold it for up to its
timeout), never in the agent's work or report loops. Each round collects a sample of every live
task (:func:`fusesched.agent.sensors.collect`) and the node's health
(:class:`~fusesched.agent.health.HealthMonitor`: the health-check program when due, and the
GPUs). The next full heartbeat carries each task's newest sample not yet delivered and the
latest health; a sample counts as delivered once a beat carrying it is answered.

When a task's main process exits, the runtime's poll takes one *final* sample of the task
(:meth:`Sensing.final`) before it is reaped, so the CPU time since the last round is not lost;
it travels with the task's exit report (in a quick report too: :meth:`Sensing.pending` with the
ended tasks), and the controller counts a beat's samples before its reports.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Sequence

from fusesched.agent.config import AgentConfig
from fusesched.agent.gpus import load_nvml
from fusesched.agent.health import HealthCheckProgram, HealthMonitor, NodeHealth, gpu_health
from fusesched.agent.nvml_sensor import NvmlGpuSensor
from fusesched.agent.sensors import (
    GpuSample,
    SensorBackend,
    Sensors,
    TaskSample,
    TaskWatch,
    collect,
)
from fusesched.agent.task_process import Usage
from fusesched.api.wire import SAMPLE_COUNTERS, GpuHealthWire, NodeHealthWire, TaskSampleWire

log = logging.getLogger(__name__)

MAX_XIDS_PER_GPU = 20  # XIDs reported per GPU (the newest distinct codes)


def sample_to_wire(sample: TaskSample, gpu_indices: Sequence[int]) -> TaskSampleWire:
    """A task sample as sent to the controller: GPU readings summarised, ``nan`` as None."""
    readings = [g for g in sample.gpus if not g.lost]
    util = [g.utilization_pct for g in readings if math.isfinite(g.utilization_pct)]
    memory = [g.memory_used_bytes for g in readings if g.memory_used_bytes >= 0]
    return TaskSampleWire(
        **{name: getattr(sample, name) for name in SAMPLE_COUNTERS},
        gpu_indices=list(gpu_indices),
        gpu_util_mean=sum(util) / len(util) if util else None,
        gpu_memory_bytes=sum(memory) if memory else None,
        gpus_lost=sum(1 for g in sample.gpus if g.lost),
    )


class Sensing:
    """Samples tasks and node health; holds what the next full heartbeat carries.

    ``backend``: real sensors (:meth:`from_config`) or scripted ones
    (:class:`~fusesched.agent.fake_sensors.FakeSensors`). ``interval_s`` 0 disables the loop.
    ``clock``: wall-clock seconds (sample times are compared with checkpoint file times).
    """

    def __init__(
        self,
        backend: SensorBackend,
        *,
        interval_s: float = 10.0,
        monitor: HealthMonitor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.interval_s = interval_s
        self.monitor = monitor if monitor is not None else HealthMonitor()
        self._clock = clock
        self._lock = threading.Lock()  # the sensor thread writes, the work thread reads
        self._samples: dict[str, TaskSampleWire] = {}  # newest undelivered, per task
        # final samples of exited tasks, kept until a beat carrying them is answered (a round
        # that no longer sees the task does not drop them)
        self._finals: dict[str, TaskSampleWire] = {}
        self._health: NodeHealthWire | None = None
        self._watched: set[str] = set()
        self._xids: dict[int, list[int]] = {}  # per GPU, since the agent started
        self._faulty: set[int] = set()  # GPUs that gave a reason once (sticky, as XIDs are)

    @classmethod
    def from_config(cls, config: AgentConfig) -> Sensing:
        """psutil task sensors, NVML GPU sensors (unless ``nvml: false``) and the configured
        health-check program."""
        check = config.health_check
        program = (
            None
            if check is None
            else HealthCheckProgram(
                check.argv, timeout_s=check.timeout_s, interval_s=check.interval_s
            )
        )
        gpus = NvmlGpuSensor(load_nvml()) if config.nvml else None
        return cls(
            Sensors(gpus=gpus),
            interval_s=config.sample_interval_s,
            monitor=HealthMonitor(program),
        )

    def sample(self, watches: Sequence[TaskWatch]) -> NodeHealth:
        """One round: sample every watched task and the node's health; the health."""
        now = self._clock()
        tasks, gpus = collect(self.backend, watches, now)
        health = self.monitor.update(gpus, now)
        indices = {w.task_id: w.gpu_indices for w in watches}
        live = set(indices)
        if isinstance(self.backend, Sensors):
            for task_id in self._watched - live:
                self.backend.tasks.forget(task_id)
        self._watched = live
        wire_health = NodeHealthWire(
            healthy=health.healthy,
            reasons=list(health.reasons),
            warnings=list(health.warnings),
            gpus=[self._gpu(g) for g in gpus],
        )
        with self._lock:
            for sample in tasks:
                gpu_indices = indices.get(sample.task_id, ())
                self._samples[sample.task_id] = sample_to_wire(sample, gpu_indices)
            for task_id in set(self._samples) - live:  # ended: the controller forgets it
                del self._samples[task_id]
            self._health = wire_health
        return health

    def _gpu(self, g: GpuSample) -> GpuHealthWire:
        seen = self._xids.setdefault(g.index, [])
        for code in g.xid_errors:
            if code in seen:
                seen.remove(code)
            seen.append(code)
        del seen[:-MAX_XIDS_PER_GPU]
        reasons, _ = gpu_health([g], ecc_threshold=self.monitor.ecc_threshold)
        if reasons:
            self._faulty.add(g.index)
        return GpuHealthWire(
            index=g.index,
            uuid=g.uuid,
            lost=g.lost,
            faulty=g.index in self._faulty,
            ecc_uncorrected=g.ecc_uncorrected,
            xids=list(seen),
            utilization_pct=_reading(g.utilization_pct),
            memory_used_bytes=g.memory_used_bytes if g.memory_used_bytes >= 0 else None,
            power_w=_reading(g.power_w),
            temperature_c=_reading(g.temperature_c),
        )

    def final(self, watch: TaskWatch) -> None:
        """Take the final sample of a task whose main process has exited (not yet reaped):
        one look at its processes, no GPU reading (that would take the node's XID events from
        the next round). Kept for the beat that carries the task's exit. Never raises; does
        nothing when sampling is off (``interval_s`` 0)."""
        if self.interval_s <= 0:
            return
        try:
            samples = self.backend.sample_tasks([watch], self._clock())
        except Exception:  # a sensor failure must not stop the exit's report
            log.exception("final sample of task %s failed", watch.task_id)
            return
        with self._lock:
            for sample in samples:
                if sample.task_id == watch.task_id:
                    self._finals[sample.task_id] = sample_to_wire(sample, watch.gpu_indices)

    def reaped(self, task_id: str, usage: Usage) -> None:
        """Complete a task's final sample with what the kernel counted once it was reaped: a
        child the sampler never saw (shorter than the sampling interval, or gone by its last
        look) still counts, and the sample's resident memory becomes the task's peak (the
        zombie's own is 0). The larger of each reading is kept. Nothing without a final
        sample (sampling off, or it failed)."""
        with self._lock:
            sample = self._finals.get(task_id)
            if sample is None:
                return
            self._finals[task_id] = sample.model_copy(
                update={
                    "cpu_seconds": max(sample.cpu_seconds, usage.cpu_seconds),
                    "rss_bytes": max(sample.rss_bytes, usage.max_rss_bytes or 0),
                }
            )

    def pending(
        self, ended: Collection[str] | None = None
    ) -> tuple[list[TaskSampleWire], NodeHealthWire | None]:
        """What the next full heartbeat carries: each task's newest undelivered sample (a
        final one included) and the latest health. With ``ended`` (a quick report's exits):
        the newest undelivered samples of those tasks alone, and no health."""
        with self._lock:
            newest = dict(self._samples)
            for task_id, sample in self._finals.items():
                current = newest.get(task_id)
                if current is None or current.time <= sample.time:
                    newest[task_id] = sample
            health = self._health
        if ended is not None:
            wanted = set(ended)
            newest = {k: v for k, v in newest.items() if k in wanted}
            health = None
        return sorted(newest.values(), key=lambda s: s.task_id), health

    def delivered(self, samples: Sequence[TaskSampleWire]) -> None:
        """A beat carrying ``samples`` was answered: they need not be sent again."""
        with self._lock:
            for sample in samples:
                for held in (self._samples, self._finals):
                    current = held.get(sample.task_id)
                    if current is not None and current.time <= sample.time:
                        del held[sample.task_id]

    def close(self) -> None:
        """Release NVML (real sensors only)."""
        if isinstance(self.backend, Sensors) and self.backend.gpus is not None:
            self.backend.gpus.close()

    def run(self, stop: threading.Event, watches: Callable[[], list[TaskWatch]]) -> None:
        """Sample every ``interval_s`` until ``stop`` is set (the sensor thread's body)."""
        while not stop.is_set():
            try:
                self.sample(watches())
            except Exception:  # a sensor failure must not end the loop
                log.exception("sensor round failed")
            stop.wait(self.interval_s)


def _reading(value: float) -> float | None:
    """A sensor reading for the wire: None where the device gave none (NaN or negative)."""
    return None if math.isnan(value) or value < 0 else float(value)
