"""What the agents' sensors last said, as a controller's metrics keep it per node.

A full heartbeat's task samples become each task's :class:`TaskUse` (its counters and the
busy cores between its two newest samples), its GPU entries a :class:`GpuReading` per GPU,
and two readings of a GPU in a row the joules it drew between them (:func:`gpu_energy`). The
series built from them are :mod:`fusesched.controller.metrics`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fusesched.api.wire import TaskSampleWire

#: Two power readings further apart than this are not integrated (the gap is not measured).
MAX_GAP_S = 300.0


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's latest readings as the controller holds them; ``None``: not reported."""

    utilization_pct: float | None = None
    memory_used_bytes: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    energy_j: float | None = None  # the GPU's own cumulative counter, where it has one


@dataclass(slots=True)
class GpuState:
    """A GPU's latest reading, when it came, and the energy measured on it so far."""

    reading: GpuReading
    at: float  # controller time of the reading
    energy_j: float = 0.0  # measured since this controller first heard of the GPU


@dataclass(slots=True)
class TaskUse:
    """A task's newest sample, and its busy cores between its two newest samples."""

    time: float
    cpu_seconds: float
    rss_bytes: int
    rate: float | None = None  # busy cores between the two newest samples
    gpus: tuple[int, ...] = ()
    gpu_util_pct: float | None = None
    gpu_memory_bytes: int | None = None


@dataclass(slots=True)
class NodeReadings:
    """One node's latest readings: its GPUs by index, its tasks by id."""

    gpus: dict[int, GpuState] = field(default_factory=dict)
    tasks: dict[str, TaskUse] = field(default_factory=dict)


def _finite(value: object) -> float | None:
    """``value`` as a finite, non-negative float; ``None`` for anything else."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def gpu_reading(gpu: object) -> GpuReading:
    """The readings a heartbeat's GPU entry (``GpuHealthWire``) carries: utilisation,
    memory used, power, temperature and energy where the wire has such fields (read by
    name, so older agents that send none of them are fine)."""
    return GpuReading(
        utilization_pct=_finite(getattr(gpu, "utilization_pct", None)),
        memory_used_bytes=_finite(getattr(gpu, "memory_used_bytes", None)),
        power_w=_finite(getattr(gpu, "power_w", None)),
        temperature_c=_finite(getattr(gpu, "temperature_c", None)),
        energy_j=_finite(getattr(gpu, "energy_j", None)),
    )


def gpu_energy(gpu: GpuState, reading: GpuReading, now: float) -> tuple[float, float] | None:
    """(joules, seconds) the GPU drew since its previous reading; None: not measured."""
    seconds = now - gpu.at
    if seconds <= 0 or seconds > MAX_GAP_S:
        return None
    before, after = gpu.reading.energy_j, reading.energy_j
    if before is not None and after is not None and after >= before:
        return after - before, seconds
    if gpu.reading.power_w is None or reading.power_w is None:
        return None
    return (gpu.reading.power_w + reading.power_w) / 2.0 * seconds, seconds


def take_sample(node: NodeReadings, sample: TaskSampleWire) -> None:
    """Keep a task's newest sample (a repeated beat's is ignored)."""
    use = node.tasks.get(sample.task_id)
    rate = None
    if use is not None:
        if sample.time <= use.time:
            return  # a repeated beat
        rate = max(0.0, (sample.cpu_seconds - use.cpu_seconds) / (sample.time - use.time))
    node.tasks[sample.task_id] = TaskUse(
        time=sample.time,
        cpu_seconds=sample.cpu_seconds,
        rss_bytes=sample.rss_bytes,
        rate=rate,
        gpus=tuple(sample.gpu_indices),
        gpu_util_pct=sample.gpu_util_mean,
        gpu_memory_bytes=sample.gpu_memory_bytes,
    )
