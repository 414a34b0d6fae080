"""The DL protocol's inputs and outputs: jobs, the cluster model, results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusesched.policies.dl_base import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class DlJob:
    """One training job of a trace. ``duration_s`` is its run time on a consolidated placement;
    the protocol keeps it away from the policies."""

    id: str
    submit_s: float
    duration_s: float
    gpus: int
    tag: str = ""  # the virtual cluster or trace cluster it came from

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: gpus must be ≥ 1")
        if not (math.isfinite(self.submit_s) and math.isfinite(self.duration_s)):
            raise ValueError(f"job {self.id}: submit and duration must be finite")
        if self.duration_s < 0:
            raise ValueError(f"job {self.id}: duration must be ≥ 0")


@dataclass(frozen=True, slots=True)
class DlCluster:
    """Homogeneous GPU nodes, and the costs of preemption and of spread placement.

    * ``checkpoint_s``: a job checkpoints every this many seconds of progress; a job chosen for
      preemption keeps running until its next checkpoint and loses no work;
    * ``restart_s``: a resumed job holds its GPUs this long (reload, warm-up) before progressing;
    * ``spread_speed``: a job placed on more nodes than it needs (ceil(GPUs / GPUs per node))
      runs at this fraction of its speed — the locality penalty;
    * ``tick_s``: preemptive policies are re-evaluated this often (and at every arrival and
      completion) while jobs wait.
    """

    nodes: int
    gpus_per_node: int = 8
    checkpoint_s: float = 600.0
    restart_s: float = 60.0
    spread_speed: float = 0.8
    tick_s: float = 300.0

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("a cluster needs at least one node and one GPU per node")
        if self.checkpoint_s <= 0 or self.restart_s < 0 or self.tick_s <= 0:
            raise ValueError("checkpoint_s and tick_s must be positive, restart_s ≥ 0")
        if not 0 < self.spread_speed <= 1:
            raise ValueError("spread_speed must be in (0, 1]")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class DlResult:
    policy: str
    jct: FloatArray  # per job, in input order
    finish: FloatArray
    preemptions: IntArray  # per job
    restart_gpu_s: float  # GPU-seconds spent restarting after preemptions
    spread_starts: int
    starts: int
    busy_gpu_s: float  # GPU-seconds GPUs were held
    makespan_s: float
    total_gpus: int
    passes: int
    wall_s: float = 0.0
    migrations: int = 0  # moves of spread jobs to a consolidated placement (at a checkpoint)
    log: list[tuple[float, str, int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, float | int]:
        jct = self.jct
        return {
            "jobs": len(jct),
            "avg_jct_s": float(jct.mean()),
            "p50_jct_s": float(np.percentile(jct, 50)),
            "p95_jct_s": float(np.percentile(jct, 95)),
            "p99_jct_s": float(np.percentile(jct, 99)),
            "max_jct_s": float(jct.max()),
            "makespan_s": self.makespan_s,
            "utilization": self.busy_gpu_s / (self.total_gpus * self.makespan_s)
            if self.makespan_s > 0
            else 0.0,
            "preemptions": int(self.preemptions.sum()),
            "jobs_preempted": int(np.count_nonzero(self.preemptions)),
            "restart_gpu_h": self.restart_gpu_s / 3600.0,
            "spread_starts": self.spread_starts,
            "migrations": self.migrations,
            "starts": self.starts,
            "passes": self.passes,
            "wall_s": self.wall_s,
        }
