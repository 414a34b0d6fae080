"""Power model per node type: idle, peak and suspended watts, wake and suspend latency.

A node type has a CPU (host) part and, for GPU nodes, a GPU part of ``gpus`` devices. Each
part draws its idle power plus (peak − idle) × its utilisation, linear in between (the usual
first-order server model, cf. Fan, Weber and Barroso, "Power provisioning for a
warehouse-sized computer", ISCA 2007). A suspended node draws ``suspended_w`` (BMC and
power supplies on standby); a node that is waking up or shutting down draws its idle power for
``wake_s`` / ``suspend_s`` seconds.

**The defaults are estimates**, chosen to be typical of current hardware, not measurements of
any particular cluster:

* ``cpu-node`` — a two-socket server. Peak 450 W: two CPUs of 150–360 W TDP (e.g. AMD EPYC
  9654 360 W, Intel Xeon Platinum 8480+ 350 W, vendor data sheets) run at less than TDP on
  average, plus memory, disks and fans. Idle 110 W: published SPECpower_ssj2008 results of
  two-socket servers put "active idle" at roughly 15–30 % of the full-load power. Suspended
  (powered off, BMC on standby) 8 W. Wake 300 s: power-on, firmware and OS boot of a server
  (Slurm's ``ResumeTimeout`` is usually set to a few minutes for this reason); shut-down 60 s.
* ``gpu-node`` — an 8-GPU server of the HGX/DGX H100 class. GPU part: 8 × (idle 70 W, peak
  700 W); 700 W is the H100 SXM5 TDP (NVIDIA data sheet), ~60–80 W is what ``nvidia-smi``
  typically shows for an idle H100. Host part (two CPUs, NVSwitches, NICs, fans): idle 500 W,
  peak 2,500 W; node peak 8.1 kW, within the DGX H100's 10.2 kW maximum system power
  (NVIDIA DGX H100 data sheet). Suspended 30 W (several PSUs on standby). Wake 480 s: these
  servers train their GPUs and fabric at boot and take longer than CPU servers; shut-down 120 s.

Load one from a small dict or YAML (:func:`load_power_models`)::

    cpu-node: {idle_w: 110, peak_w: 450, suspended_w: 8, wake_s: 300, suspend_s: 60}
    gpu-node: {idle_w: 500, peak_w: 2500, gpus: 8, gpu_idle_w: 70, gpu_peak_w: 700,
               suspended_w: 30, wake_s: 480, suspend_s: 120}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from fusesched.yamlfile import read_yaml

CPU_NODE = "cpu-node"
GPU_NODE = "gpu-node"
HOUR = 3600.0
MONTH_S = 30.0 * 86400.0  # a "month" in kWh per month: 30 days


@dataclass(frozen=True, slots=True)
class PowerModel:
    """Power of one node type (watts) and its power-state latencies (seconds).

    ``idle_w``/``peak_w`` are the CPU (host) part; ``gpu_idle_w``/``gpu_peak_w`` are per GPU,
    for ``gpus`` GPUs. ``suspended_w`` is the whole node suspended.
    """

    idle_w: float
    peak_w: float
    suspended_w: float = 0.0
    wake_s: float = 300.0
    suspend_s: float = 60.0
    gpus: int = 0
    gpu_idle_w: float = 0.0
    gpu_peak_w: float = 0.0

    def __post_init__(self) -> None:
        values = (
            self.idle_w,
            self.peak_w,
            self.suspended_w,
            self.wake_s,
            self.suspend_s,
            self.gpus,
            self.gpu_idle_w,
            self.gpu_peak_w,
        )
        if min(values) < 0:
            raise ValueError("power model values must not be negative")
        if self.peak_w < self.idle_w or self.gpu_peak_w < self.gpu_idle_w:
            raise ValueError("peak power must be at least the idle power")
        if self.suspended_w > self.node_idle_w:
            raise ValueError("a suspended node must not draw more than an idle one")

    @property
    def node_idle_w(self) -> float:
        """The whole node, powered and idle."""
        return self.idle_w + self.gpus * self.gpu_idle_w

    @property
    def node_peak_w(self) -> float:
        """The whole node, every part at full utilisation."""
        return self.peak_w + self.gpus * self.gpu_peak_w

    def power(self, cpu_util: float, gpu_util: float = 0.0) -> float:
        """Watts of a powered node at these utilisations (each clipped to [0, 1])."""
        cpu = min(1.0, max(0.0, cpu_util))
        gpu = min(1.0, max(0.0, gpu_util))
        host = self.idle_w + (self.peak_w - self.idle_w) * cpu
        return host + self.gpus * (self.gpu_idle_w + (self.gpu_peak_w - self.gpu_idle_w) * gpu)

    def power_array(
        self, cpu_util: npt.NDArray[np.float64], gpu_util: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """:meth:`power` over arrays of utilisations."""
        cpu = np.clip(cpu_util, 0.0, 1.0)
        gpu = np.clip(gpu_util, 0.0, 1.0)
        out: npt.NDArray[np.float64] = (
            self.idle_w
            + (self.peak_w - self.idle_w) * cpu
            + self.gpus * (self.gpu_idle_w + (self.gpu_peak_w - self.gpu_idle_w) * gpu)
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PowerModel:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown power model field(s): {', '.join(unknown)}")
        if "idle_w" not in data or "peak_w" not in data:
            raise ValueError("a power model needs idle_w and peak_w")
        values: dict[str, Any] = {}
        for name, value in data.items():
            values[name] = int(value) if name == "gpus" else float(value)
        return cls(**values)


DEFAULT_MODELS: Mapping[str, PowerModel] = MappingProxyType(
    {
        CPU_NODE: PowerModel(idle_w=110.0, peak_w=450.0, suspended_w=8.0, wake_s=300.0),
        GPU_NODE: PowerModel(
            idle_w=500.0,
            peak_w=2500.0,
            suspended_w=30.0,
            wake_s=480.0,
            suspend_s=120.0,
            gpus=8,
            gpu_idle_w=70.0,
            gpu_peak_w=700.0,
        ),
    }
)


def load_power_models(source: Mapping[str, Any] | str | Path) -> dict[str, PowerModel]:
    """Node type → :class:`PowerModel` from a dict, a YAML text or a YAML file.

    Each entry may name ``base`` (a default type) and override some of its fields.
    """
    if isinstance(source, Path):
        data: Any = read_yaml(source, "power models")
    elif isinstance(source, str):
        data = yaml.safe_load(source)
    else:
        data = source
    if not isinstance(data, Mapping):
        raise ValueError("power models: expected a mapping of node type to its model")
    out: dict[str, PowerModel] = {}
    for name, entry in data.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"power model {name!r}: expected a mapping")
        values = dict(entry)
        base = values.pop("base", None)
        if base is not None:
            if base not in DEFAULT_MODELS:
                raise ValueError(f"power model {name!r}: unknown base {base!r}")
            merged = {f.name: getattr(DEFAULT_MODELS[base], f.name) for f in fields(PowerModel)}
            merged.update(values)
            values = merged
        try:
            out[str(name)] = PowerModel.from_dict(values)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"power model {name!r}: {exc}") from None
    return out


def kwh(joules: float) -> float:
    return joules / (1000.0 * HOUR)


def per_month(value: float, span_s: float) -> float:
    """``value`` accumulated over ``span_s`` seconds, scaled to a 30-day month."""
    return value * MONTH_S / span_s if span_s > 0 else 0.0
