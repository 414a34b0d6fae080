"""Training a learned queue order in the simulator (cross-entropy method).

The policy is a direction ``w`` over the features of :mod:`.model` (only the direction
matters: the order is the same for any positive multiple). Each candidate is scored by
replaying sampled job sequences of the training traces through the general scheduling core
with the reference preset's backfilling and runtime prediction (``heuristic``: EASY and
``user-last2-request``; so only the queue order differs) and comparing with that preset on the
same sequences:

    J(w) = mean over sequences of  log(bsld(w) / bsld(ref))
           + λ · mean over sequences of  log(kWh(w) / kWh(ref))

where bsld is the average bounded slowdown (10 s threshold) and kWh the energy of the
simulated cluster under Slurm-style power saving (``idle-timeout``; computed only when
λ > 0, since it needs the slower power hook). Lower is better; J = 0 is the reference.

The cross-entropy method samples a population around a mean direction, keeps the best
quarter and moves the mean and spread to them. It starts at SJF on the predicted run time
(``w`` = log-estimate only), evaluates that start first, and returns the best candidate seen,
so the result is never worse than SJF on the training sequences.
Everything is seeded: the same traces, budget and seed give the same weights.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fusesched.model.node import NodeSpec
from fusesched.policies.learned.model import (
    DEFAULT_SCALES,
    FEATURES,
    PREFIX,
    LearnedModel,
    save_model,
)
from fusesched.policies.presets import PRESETS
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.protocols.rlscheduler import BSLD_THRESHOLD_S, sequence_starts
from fusesched.sim.protocols.rlscheduler_core import sequence_jobs
from fusesched.sim.workload import homogeneous_nodes
from fusesched.traces.swf import load_swf, rlscheduler_jobs

__all__ = [
    "Metrics",
    "TrainSequence",
    "TrainSpec",
    "evaluate",
    "git_commit",
    "run_sequence",
    "train",
    "training_sequences",
]

FloatArray = npt.NDArray[np.float64]
Progress = Callable[[int, int, float], None]

#: Power saving used to meter energy (the Slurm-style baseline of docs/ENERGY.md), with a
#: 5-minute control interval to keep training affordable.
POWER_POLICY = "idle-timeout"
POWER_TICK_S = 300.0


@dataclass(frozen=True)
class TrainSequence:
    """One job sequence of a trace, on its cluster, ready to replay."""

    trace: str
    start: int
    nodes: tuple[NodeSpec, ...]
    jobs: tuple[SimJob, ...]


@dataclass(frozen=True)
class Metrics:
    bsld: float  # average bounded slowdown
    wait_s: float  # average wait
    kwh: float  # energy (NaN when not metered)


@dataclass(frozen=True)
class TrainSpec:
    """What to train: objective weight ``lam`` (λ), number of candidate evaluations
    ``budget``, population size, random ``seed``."""

    lam: float = 0.0
    budget: int = 96
    population: int = 12
    seed: int = 0
    init: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 0.0)  # SJF on the (predicted) estimate
    sigma0: float = 0.5
    min_sigma: float = 0.05
    reference: str = "heuristic"  # the preset the objective compares with
    extra_meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError("the budget must allow at least one evaluation")
        if self.population < 2:
            raise ValueError("the population needs at least two candidates")
        if not math.isfinite(self.lam) or self.lam < 0:
            raise ValueError("λ must be a non-negative number")
        if len(self.init) != len(FEATURES):
            raise ValueError(f"the initial weights need {len(FEATURES)} entries")


def training_sequences(
    paths: Sequence[Path],
    per_trace: int,
    *,
    seed: int = 2,
    length: int = 1024,
    skip: int = 0,
) -> list[TrainSequence]:
    """``per_trace`` sampled sequences of ``length`` jobs from each SWF trace (cleaned as the
    RLScheduler protocol does; starts drawn with ``seed`` over the trace's jobs after the first
    ``skip``, so that with ``skip`` = 10,000 no training sequence shares a job with the
    protocol's sequences, which lie in the first 10,000 jobs)."""
    if skip < 0:
        raise ValueError("skip must be non-negative")
    out: list[TrainSequence] = []
    for path in paths:
        jobs = rlscheduler_jobs(load_swf(path))
        nodes = homogeneous_nodes(jobs.max_nodes, jobs.max_procs)
        if skip >= len(jobs):
            raise ValueError(f"{Path(path).name} has {len(jobs)} jobs, none after the first {skip}")
        starts = sequence_starts(
            len(jobs) - skip, seed=seed, sequence_length=length, iterations=per_trace
        )
        for first in (skip + s for s in starts):
            out.append(
                TrainSequence(
                    Path(path).name, first, nodes, tuple(sequence_jobs(jobs, first, length))
                )
            )
    return out


def run_sequence(seq: TrainSequence, config: CoreConfig, energy: bool) -> Metrics:
    """Replay one sequence under ``config``; meter energy (power saving on) if asked."""
    power = PowerSim(PowerSetup(POWER_POLICY, tick_s=POWER_TICK_S)) if energy else None
    result = Simulation(seq.nodes, list(seq.jobs), config, power=power).run()
    done = [o for o in result.outcomes if not o.rejected]
    submit = np.array([o.submit for o in done])
    start = np.array([o.start for o in done])
    run = np.array([o.runtime for o in done])
    wait = start - submit
    bsld = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD_S))
    kwh = result.power.energy_kwh if result.power is not None else math.nan
    return Metrics(float(bsld.mean()), float(wait.mean()), kwh)


def evaluate(seqs: Sequence[TrainSequence], config: CoreConfig, energy: bool) -> list[Metrics]:
    return [run_sequence(seq, config, energy) for seq in seqs]


def objective(metrics: Sequence[Metrics], reference: Sequence[Metrics], lam: float) -> float:
    """J (see the module docstring); 0 for the reference itself."""
    slow = np.mean([math.log(m.bsld / r.bsld) for m, r in zip(metrics, reference, strict=True)])
    if lam == 0:
        return float(slow)
    kwh = np.mean([math.log(m.kwh / r.kwh) for m, r in zip(metrics, reference, strict=True)])
    return float(slow + lam * kwh)


def _unit(v: FloatArray) -> FloatArray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def train(
    seqs: Sequence[TrainSequence],
    spec: TrainSpec,
    progress: Progress | None = None,
) -> LearnedModel:
    """The best direction found within ``spec.budget`` candidate evaluations."""
    if not seqs:
        raise ValueError("no training sequences")
    energy = spec.lam > 0
    ref_config = PRESETS[spec.reference].config()
    reference = evaluate(seqs, ref_config, energy)
    rng = np.random.default_rng(spec.seed)
    dim = len(FEATURES)
    mean = _unit(np.asarray(spec.init, dtype=np.float64))
    sigma = np.full(dim, spec.sigma0)
    history: list[dict[str, Any]] = []
    best_w = mean
    best_j = math.inf
    done = 0
    with tempfile.TemporaryDirectory(prefix="fusesched-train-") as tmp:

        def score(w: FloatArray) -> float:
            nonlocal done, best_w, best_j
            model = LearnedModel(
                tuple(float(x) for x in w),
                DEFAULT_SCALES,
                backfill=ref_config.backfill,
                runtime_prediction=ref_config.runtime_prediction,
            )
            path = Path(tmp) / f"candidate-{done:05d}.json"
            save_model(model, path)
            config = CoreConfig(
                queue_order=PREFIX + str(path),
                backfill=ref_config.backfill,
                placement=ref_config.placement,
                runtime_prediction=ref_config.runtime_prediction,
            )
            j = objective(evaluate(seqs, config, energy), reference, spec.lam)
            done += 1
            if j < best_j:
                best_j, best_w = j, w
            if progress is not None:
                progress(done, spec.budget, best_j)
            return j

        score(mean)
        generation = 0
        while done < spec.budget:
            count = min(spec.population, spec.budget - done)
            cands = mean + sigma * rng.standard_normal((count, dim))
            cands = np.array([_unit(c) for c in cands])
            scores = np.array([score(c) for c in cands])
            elite = cands[np.argsort(scores, kind="stable")[: max(2, count // 4)]]
            mean = _unit(elite.mean(axis=0))
            sigma = np.maximum(0.5 * sigma + 0.5 * elite.std(axis=0), spec.min_sigma)
            generation += 1
            history.append(
                {
                    "generation": generation,
                    "best_J": best_j,
                    "generation_best_J": float(scores.min()),
                }
            )
    ref_mean = float(np.mean([m.bsld for m in reference]))
    meta: dict[str, Any] = {
        "objective": {
            "J": "mean log(bsld / bsld_ref) + lambda * mean log(kWh / kWh_ref)",
            "lambda": spec.lam,
            "reference": spec.reference,
            "energy": f"{POWER_POLICY} power saving, {POWER_TICK_S:g} s control interval"
            if energy
            else "not metered (lambda = 0)",
        },
        "training": {
            "traces": sorted({s.trace for s in seqs}),
            "sequences": [[s.trace, s.start, len(s.jobs)] for s in seqs],
            "method": "cross-entropy method",
            "budget": spec.budget,
            "population": spec.population,
            "seed": spec.seed,
            "best_J": best_j,
            "reference_mean_bsld": ref_mean,
            "history": history,
        },
        **spec.extra_meta,
    }
    return LearnedModel(
        tuple(float(x) for x in best_w),
        DEFAULT_SCALES,
        backfill=ref_config.backfill,
        runtime_prediction=ref_config.runtime_prediction,
        meta=meta,
    )


def git_commit(where: Path | None = None) -> str:
    """The checkout's commit, ``-dirty`` when it has changes (``unknown`` outside git)."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=where or Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
