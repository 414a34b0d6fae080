"""How far the twin is from what really happened: the snapshot's own start times against the
twin's replay of the same snapshot (no scenario changes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fusesched.twin.build import build
from fusesched.twin.runner import RunOptions, TwinResult, observed, run
from fusesched.twin.scenario import Scenario
from fusesched.twin.snapshot import Snapshot

AGGREGATES = (
    "avg_wait_s",
    "p95_wait_s",
    "avg_response_s",
    "avg_bounded_slowdown",
    "utilization",
    "makespan_s",
)


@dataclass
class Validation:
    jobs: int  # jobs that started both live and in the twin
    mean_wait_s: float  # live
    start_error_mean_s: float
    start_error_p95_s: float
    start_error_max_s: float
    latency_s: float = 0.0  # the dispatch latency the twin modelled
    aggregates: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    # metric -> (live, twin, relative error)

    @property
    def start_error_share(self) -> float:
        """Mean per-job start-time error over the live mean wait."""
        return self.start_error_mean_s / self.mean_wait_s if self.mean_wait_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["start_error_share"] = self.start_error_share
        return out


def compare(live: TwinResult, twin: TwinResult) -> Validation:
    common = sorted(set(live.starts) & set(twin.starts))
    errors = np.array([abs(twin.starts[j] - live.starts[j]) for j in common], dtype=np.float64)
    aggregates: dict[str, tuple[float, float, float]] = {}
    for name in AGGREGATES:
        a = float(live.overall[name])
        b = float(twin.overall[name])
        aggregates[name] = (a, b, abs(b - a) / abs(a) if a else abs(b - a))
    return Validation(
        jobs=len(common),
        mean_wait_s=float(live.overall["avg_wait_s"]),
        start_error_mean_s=float(errors.mean()) if errors.size else 0.0,
        start_error_p95_s=float(np.percentile(errors, 95)) if errors.size else 0.0,
        start_error_max_s=float(errors.max()) if errors.size else 0.0,
        aggregates=aggregates,
    )


def validate(
    snapshot: Snapshot, seed: int = 0, latency: float | None = None
) -> tuple[Validation, TwinResult, TwinResult]:
    """(validation, live metrics, twin metrics) of ``snapshot``; ``latency``: the dispatch
    latency the twin models (None: measured from the snapshot)."""
    live = observed(snapshot)
    options = RunOptions(energy=False, fragmentation=False, starts=True)
    scenario = Scenario(name="twin", dispatch_latency_s=latency)
    twin = run(snapshot, scenario, seed, options)
    result = compare(live, twin)
    result.latency_s = build(snapshot, scenario, seed).latency
    return result, live, twin


def markdown(v: Validation) -> str:
    lines = [
        f"Jobs compared: {v.jobs}; live mean wait {v.mean_wait_s:.3f} s; dispatch latency "
        f"modelled: {v.latency_s * 1000:.1f} ms.",
        "",
        "| per-job start-time error | seconds | share of the live mean wait |",
        "|---|---:|---:|",
    ]
    for label, x in (
        ("mean", v.start_error_mean_s),
        ("p95", v.start_error_p95_s),
        ("max", v.start_error_max_s),
    ):
        share = x / v.mean_wait_s if v.mean_wait_s > 0 else 0.0
        lines.append(f"| {label} | {x:.3f} | {share:.1%} |")
    lines += ["", "| metric | live | twin | relative error |", "|---|---:|---:|---:|"]
    for name, (a, b, err) in v.aggregates.items():
        lines.append(f"| {name} | {a:.4g} | {b:.4g} | {err:.2%} |")
    return "\n".join(lines)
