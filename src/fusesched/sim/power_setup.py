"""The simulator's power set-up and report (:mod:`fusesched.sim.power` runs them).

:class:`PowerSetup`: how the simulated cluster uses power (the policy, its settings, the
nodes' power models, the control interval, the metering window); :class:`PowerReport`: the
energy over the metering window and what power saving did. Re-exported by
:mod:`fusesched.sim.power`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fusesched.model.node import NodeSpec
from fusesched.model.resources import GPU
from fusesched.power.forecast import DAY, RISE_KEEP_MARGIN, RISE_WAKE_MARGIN, HoltWintersParams
from fusesched.power.model import CPU_NODE, DEFAULT_MODELS, GPU_NODE, PowerModel, per_month
from fusesched.power.saving import SavingConfig, get_policy

LABEL_POWER_MODEL = "fusesched.io/power-model"  # a node's power model by name (optional)
DEFAULT_POOL = "main"


def default_node_type(spec: NodeSpec) -> str:
    """The node's ``fusesched.io/power-model`` label, else ``gpu-node`` if it has GPUs, else
    ``cpu-node``."""
    label = spec.labels.get(LABEL_POWER_MODEL)
    if label:
        return label
    return GPU_NODE if spec.capacity.get(GPU) > 0 else CPU_NODE


@dataclass(frozen=True)
class PowerSetup:
    """How the simulated cluster uses power.

    ``meter``: the window (seconds) whose energy is reported; None: from 0 to the end.
    ``lookahead_s``: how far the forecast looks to wake nodes (None: the longest wake latency
    + ``tick_s``); ``keep_lookahead_s``: how far it looks before switching one off.
    ``rise_margin``, ``rise_keep_margin``: the ``predictive`` policy's margins over the forecast
    rise of demand within ``lookahead_s`` (what it wakes for) and within the idle threshold
    ``config.idle_threshold_s`` (what it keeps); None: that part of the policy off.
    ``surge_memory_days``, ``surge_warm_s``: how many days back the ``surge`` policy looks for
    the largest rise of demand, and how much history it needs before it suspends anything.
    ``wake_failure_rate``: share of resumes that never complete (they hit the resume
    timeout and the node is marked failed); drawn from ``seed``.
    """

    policy: str = "always-on"
    config: SavingConfig = field(default_factory=SavingConfig)
    models: Mapping[str, PowerModel] = field(default_factory=lambda: DEFAULT_MODELS)
    node_type: Callable[[NodeSpec], str] = default_node_type
    tick_s: float = 60.0
    meter: tuple[float, float] | None = None
    forecast_bin_s: float = 600.0
    forecast_margin: float = 0.5
    forecast_params: HoltWintersParams = field(default_factory=HoltWintersParams)
    lookahead_s: float | None = None
    keep_lookahead_s: float = 1800.0
    rise_margin: float | None = RISE_WAKE_MARGIN
    rise_keep_margin: float | None = RISE_KEEP_MARGIN
    surge_memory_days: int = 7
    surge_warm_s: float = DAY
    wake_failure_rate: float = 0.0
    seed: int = 0
    record: bool = False  # keep (time, watts, nodes awake, nodes busy) and busy per pool

    def __post_init__(self) -> None:
        get_policy(self.policy)  # raises for an unknown name
        if self.tick_s <= 0:
            raise ValueError("tick_s must be positive")
        if not 0.0 <= self.wake_failure_rate <= 1.0:
            raise ValueError("wake_failure_rate must be within [0, 1]")
        if self.meter is not None and self.meter[1] < self.meter[0]:
            raise ValueError("the metering window ends before it starts")


@dataclass(frozen=True, slots=True)
class PowerReport:
    """Energy over the metering window and what power saving did."""

    policy: str
    start_s: float
    end_s: float
    energy_kwh: float
    energy_by_type_kwh: Mapping[str, float]
    node_hours: Mapping[str, float]  # busy, idle, transition, suspended
    suspends: int
    resumes: int
    failed: int

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def kwh_per_month(self) -> float:
        """Energy scaled to a 30-day month."""
        return per_month(self.energy_kwh, self.span_s)

    @property
    def mean_power_kw(self) -> float:
        return self.energy_kwh * 3600.0 / self.span_s if self.span_s > 0 else 0.0
