"""Failures for the digital twin: node and GPU failures from MTBFs, hangs, and goodput lost.

Deterministic: every draw comes from a NumPy generator seeded by the caller; same inputs, same
seed → same failures and the same report. Independent of :mod:`fusesched.sim.engine`: it
*draws events* the engine can later consume (:func:`draw_failures`, :func:`outage_timeline`)
and *post-processes job runs* (:func:`assess`, :func:`compare`).

**Failure model.** Each device type (a node class: "h200-node", "cpu-node", …) has a node
MTBF and a per-GPU MTBF (:class:`Reliability`). Failures of one device form a Poisson process
(exponential times between failures, rate 1/MTBF) over the time span; a failed node or GPU
is repaired ``repair_h`` hours later. Hangs strike a *running job* at ``hang_rate_per_hour``
per GPU (per node for CPU-only jobs) of running time.

**What a failure costs a job** (:func:`assess`), per :class:`RecoveryMode`:

* ``AUTO_RESUME`` — detected automatically (node: heartbeat timeout; GPU: XID/lost within a
  sample interval; hang: the detector's window), then requeued and resumed from the last
  checkpoint: the work since that checkpoint, the detection latency and the restart overhead
  are lost;
* ``AUTO_RESTART`` — detected and requeued the same way but restarted from zero (no
  checkpoints used): all progress is lost;
* ``NONE`` — no automation: a crash ends the job (noticed by the heartbeat timeout) and the
  user resubmits it from zero after ``manual_resubmit_s``; a hang is never detected and holds
  its GPUs until the walltime kills it (``hang_unnoticed_s`` without a walltime).

The first attempt of a job sees the drawn device failures of its own nodes and GPUs; later
attempts (after a requeue, on other devices) draw failures from the job's total device failure
rate (memoryless, so the same distribution). Each job's random stream is seeded by
``(seed, job index)``, the same in every mode (common random numbers), so modes compare on the
same luck.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np

HOUR = 3600.0


class FailureType(StrEnum):
    NODE = "node"
    GPU = "gpu"
    HANG = "hang"


class RecoveryMode(StrEnum):
    AUTO_RESUME = "auto-resume"  # detect, requeue, resume from the last checkpoint
    AUTO_RESTART = "auto-restart"  # detect, requeue, restart from zero
    NONE = "none"  # crashes resubmitted by hand from zero; hangs wait for the walltime


@dataclass(frozen=True, slots=True)
class Reliability:
    """Mean time between failures of one device type (hours) and its repair time."""

    node_mtbf_h: float = float("inf")
    gpu_mtbf_h: float = float("inf")  # per GPU
    node_repair_h: float = 4.0
    gpu_repair_h: float = 24.0

    def __post_init__(self) -> None:
        if min(self.node_mtbf_h, self.gpu_mtbf_h) <= 0:
            raise ValueError("MTBF must be positive (inf: never fails)")
        if min(self.node_repair_h, self.gpu_repair_h) < 0:
            raise ValueError("repair times must not be negative")


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    device_type: str
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class FailureModel:
    reliability: Mapping[str, Reliability]  # device type → MTBFs
    hang_rate_per_hour: float = 0.0  # per GPU (per node for CPU-only jobs) of running time
    node_detect_s: float = 30.0  # heartbeat timeout
    gpu_detect_s: float = 10.0  # sample interval (XID events, lost GPU)
    hang_detect_s: float = 1800.0  # the hang detector's window
    detect_jitter_s: float = 10.0  # + uniform(0, this): where in the sampling period it fell
    restart_overhead_s: float = 300.0  # requeue, start-up, loading the checkpoint
    manual_resubmit_s: float = 4 * HOUR  # NONE: until a person resubmits (no GPU held)
    hang_unnoticed_s: float = 24 * HOUR  # NONE: a hang without walltime holds this long
    max_restarts: int = 3  # as the controller's RestartPolicy

    def __post_init__(self) -> None:
        values = (
            self.hang_rate_per_hour,
            self.node_detect_s,
            self.gpu_detect_s,
            self.hang_detect_s,
            self.detect_jitter_s,
            self.restart_overhead_s,
            self.manual_resubmit_s,
            self.hang_unnoticed_s,
            self.max_restarts,
        )
        if min(values) < 0:
            raise ValueError("rates, latencies and budgets must not be negative")

    def of(self, node: SimNode) -> Reliability:
        try:
            return self.reliability[node.device_type]
        except KeyError:
            raise ValueError(f"no reliability for device type {node.device_type!r}") from None


@dataclass(frozen=True, slots=True)
class FailureEvent:
    time: float
    type: FailureType
    node: str
    gpu: int | None = None  # for GPU failures
    repaired_at: float = float("inf")


def _rate(mtbf_h: float) -> float:
    return 0.0 if np.isinf(mtbf_h) else 1.0 / (mtbf_h * HOUR)


def expected_failures(
    nodes: Sequence[SimNode], span_s: float, model: FailureModel
) -> tuple[float, float]:
    """(node failures, GPU failures) expected over ``span_s`` seconds."""
    node = sum(_rate(model.of(n).node_mtbf_h) for n in nodes) * span_s
    gpu = sum(_rate(model.of(n).gpu_mtbf_h) * n.gpus for n in nodes) * span_s
    return node, gpu


def draw_failures(
    nodes: Sequence[SimNode], span_s: float, model: FailureModel, rng: np.random.Generator
) -> tuple[FailureEvent, ...]:
    """Node and GPU failures over ``[0, span_s)``, ordered by (time, type, node, gpu).

    Each device's failures are a Poisson process of rate 1/MTBF: a Poisson count over the
    span, placed uniformly (vectorised over all devices).
    """
    if span_s < 0:
        raise ValueError("span_s must not be negative")
    events: list[FailureEvent] = []
    node_rates = np.array([_rate(model.of(n).node_mtbf_h) for n in nodes], dtype=np.float64)
    node_counts = rng.poisson(node_rates * span_s) if len(nodes) else np.zeros(0, np.int64)
    node_times = rng.uniform(0.0, span_s, int(node_counts.sum()))
    owners = np.repeat(np.arange(len(nodes)), node_counts)
    for owner, t in zip(owners.tolist(), node_times.tolist(), strict=True):
        node = nodes[owner]
        repair = model.of(node).node_repair_h * HOUR
        events.append(FailureEvent(t, FailureType.NODE, node.name, None, t + repair))
    gpu_owner = (
        np.repeat(np.arange(len(nodes)), [n.gpus for n in nodes])
        if nodes
        else np.zeros(0, np.int64)
    )
    gpu_index = (
        np.concatenate([np.arange(n.gpus) for n in nodes]) if nodes else np.zeros(0, np.int64)
    )
    gpu_rates = np.array([_rate(model.of(nodes[o]).gpu_mtbf_h) for o in gpu_owner.tolist()])
    gpu_counts = rng.poisson(gpu_rates * span_s) if gpu_owner.size else np.zeros(0, np.int64)
    gpu_times = rng.uniform(0.0, span_s, int(gpu_counts.sum()))
    which = np.repeat(np.arange(gpu_owner.size), gpu_counts)
    for slot, t in zip(which.tolist(), gpu_times.tolist(), strict=True):
        node = nodes[int(gpu_owner[slot])]
        repair = model.of(node).gpu_repair_h * HOUR
        events.append(FailureEvent(t, FailureType.GPU, node.name, int(gpu_index[slot]), t + repair))
    events.sort(key=lambda e: (e.time, e.type.value, e.node, -1 if e.gpu is None else e.gpu))
    return tuple(events)


def outage_timeline(events: Sequence[FailureEvent]) -> list[tuple[float, str, int | None, bool]]:
    """(time, node, gpu, up?) transitions in time order: what an engine would feed its core
    as ``NodeStateChanged`` (node DOWN at the failure, UP at ``repaired_at``) or as a GPU
    taken out of (and put back into) a node's capacity."""
    out: list[tuple[float, str, int | None, bool]] = []
    for e in events:
        if e.type is FailureType.HANG:
            continue
        out.append((e.time, e.node, e.gpu, False))
        if np.isfinite(e.repaired_at):
            out.append((e.repaired_at, e.node, e.gpu, True))
    out.sort(key=lambda x: (x[0], x[3], x[1], -1 if x[2] is None else x[2]))
    return out


# --- what failures cost ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRun:
    """A job's failure-free run, as a simulation produced it."""

    job_id: str
    start: float
    end: float
    nodes: tuple[str, ...]
    gpus: tuple[tuple[str, int], ...] = ()  # (node, GPU index)
    checkpoint_interval_s: float | None = None  # None: no checkpoints
    walltime_s: float | None = None

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"{self.job_id}: ends before it starts")
        if not self.nodes:
            raise ValueError(f"{self.job_id}: runs on no node")


@dataclass(frozen=True, slots=True)
class LatencyStats:
    count: int = 0
    mean_s: float = float("nan")
    p50_s: float = float("nan")
    p95_s: float = float("nan")
    max_s: float = float("nan")

    @staticmethod
    def of(values: Sequence[float]) -> LatencyStats:
        if not values:
            return LatencyStats()
        a = np.asarray(values, dtype=np.float64)
        return LatencyStats(
            int(a.size),
            float(a.mean()),
            float(np.percentile(a, 50)),
            float(np.percentile(a, 95)),
            float(a.max()),
        )


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    mode: RecoveryMode
    jobs: int
    completed: int
    abandoned: int  # gave up after ``max_restarts``
    failures: Mapping[FailureType, int]
    restarts: int
    gpu_hours_allocated: float
    gpu_hours_useful: float
    gpu_hours_lost: float
    lost_by_cause: Mapping[FailureType, float]  # GPU-hours
    node_hours_lost: float
    delay_hours: float  # completion later than failure-free, summed over jobs
    detection: Mapping[FailureType, LatencyStats]

    @property
    def goodput(self) -> float:
        """Useful GPU-hours over allocated GPU-hours (1.0 when no GPU was allocated)."""
        total = self.gpu_hours_allocated
        return self.gpu_hours_useful / total if total > 0 else 1.0


@dataclass(slots=True)
class _Tally:
    failures: dict[FailureType, int]
    lost: dict[FailureType, float]  # seconds × devices, GPU weight
    lost_nodes: float
    latencies: dict[FailureType, list[float]]
    restarts: int = 0
    allocated: float = 0.0
    useful: float = 0.0
    delay: float = 0.0
    completed: int = 0
    abandoned: int = 0


def _job_rate(run: JobRun, by_name: Mapping[str, SimNode], model: FailureModel) -> float:
    rate = 0.0
    for name in run.nodes:
        rate += _rate(model.of(by_name[name]).node_mtbf_h)
    for name, _ in run.gpus:
        rate += _rate(model.of(by_name[name]).gpu_mtbf_h)
    return rate


def _first_device_failure(
    run: JobRun,
    index: Mapping[tuple[str, int | None], list[FailureEvent]],
    since: float,
    until: float,
) -> FailureEvent | None:
    best: FailureEvent | None = None
    keys: list[tuple[str, int | None]] = [(n, None) for n in run.nodes] + list(run.gpus)
    for key in keys:
        for e in index.get(key, ()):
            if since <= e.time < until and (best is None or e.time < best.time):
                best = e
                break  # per device, events are in time order
            if e.time >= until:
                break
    return best


def _assess_job(
    run: JobRun,
    seq: int,
    index: Mapping[tuple[str, int | None], list[FailureEvent]],
    by_name: Mapping[str, SimNode],
    model: FailureModel,
    mode: RecoveryMode,
    seed: int,
    tally: _Tally,
) -> None:
    rng = np.random.default_rng((seed, seq))
    work = run.end - run.start
    gpus = len(run.gpus)
    weight_hang = gpus if gpus else len(run.nodes)
    device_rate = _job_rate(run, by_name, model)
    saved = 0.0  # progress a restart resumes from
    t = run.start  # wall clock at the start of this attempt
    overhead = 0.0  # restart overhead paid at the start of this attempt
    allocated = 0.0  # device-seconds held (per device: multiply by weights at the end)
    attempt = 0
    pending_cause: FailureType | None = None
    while True:
        need = work - saved
        progress_start = t + overhead
        hang_in = (
            float(rng.exponential(HOUR / (model.hang_rate_per_hour * weight_hang)))
            if model.hang_rate_per_hour > 0
            else np.inf
        )
        if attempt == 0:
            event = _first_device_failure(run, index, progress_start, progress_start + need)
            device_at = event.time if event is not None else np.inf
            device_type = event.type if event is not None else FailureType.NODE
        else:
            device_at = progress_start + (
                rng.exponential(1.0 / device_rate) if device_rate > 0 else np.inf
            )
            device_type = FailureType.NODE
            if device_rate > 0:  # which kind: node or GPU, in proportion to their rates
                gpu_rate = sum(_rate(model.of(by_name[n]).gpu_mtbf_h) for n, _ in run.gpus)
                if rng.random() < gpu_rate / device_rate:
                    device_type = FailureType.GPU
        jitter = float(rng.uniform(0.0, model.detect_jitter_s)) if model.detect_jitter_s else 0.0
        hang_at = progress_start + hang_in
        fail_at = min(device_at, hang_at)
        if pending_cause is not None:  # the overhead of this restart is the last failure's cost
            tally.lost[pending_cause] += overhead * gpus
            tally.lost_nodes += overhead * len(run.nodes)
        if fail_at >= progress_start + need:  # finishes
            allocated += overhead + need
            tally.completed += 1
            tally.useful += work * gpus
            tally.delay += (progress_start + need) - run.end
            break
        cause = FailureType.HANG if hang_at < device_at else device_type
        done = fail_at - progress_start
        if cause is FailureType.HANG and mode is RecoveryMode.NONE:
            if run.walltime_s is not None:  # the walltime ends it, counted from the start
                latency = max(0.0, t + run.walltime_s - fail_at)
            else:  # nobody notices for hang_unnoticed_s after it hangs
                latency = model.hang_unnoticed_s
        else:
            base = {
                FailureType.NODE: model.node_detect_s,
                FailureType.GPU: model.gpu_detect_s,
                FailureType.HANG: model.hang_detect_s,
            }[cause]
            if mode is RecoveryMode.NONE:
                base = model.node_detect_s  # the job just dies; the controller notices
            latency = base + jitter
        if mode is RecoveryMode.AUTO_RESUME and run.checkpoint_interval_s:
            step = run.checkpoint_interval_s
            new_saved = max(saved, np.floor((saved + done) / step) * step)
            new_saved = min(new_saved, work)
        else:
            new_saved = 0.0
        gained = new_saved - saved if mode is RecoveryMode.AUTO_RESUME else 0.0
        held = overhead + done + latency
        allocated += held
        lost = done + latency - gained
        tally.failures[cause] += 1
        tally.latencies[cause].append(latency)
        tally.lost[cause] += lost * gpus
        tally.lost_nodes += lost * len(run.nodes)
        attempt += 1
        if attempt > model.max_restarts:  # give up: what was kept is worth nothing now
            tally.abandoned += 1
            tally.lost[cause] += new_saved * gpus
            tally.lost_nodes += new_saved * len(run.nodes)
            break
        tally.restarts += 1
        saved = new_saved
        pending_cause = cause
        overhead = model.restart_overhead_s
        wait = model.manual_resubmit_s if mode is RecoveryMode.NONE else 0.0
        t = fail_at + latency + wait
    tally.allocated += allocated * gpus


def assess(
    runs: Sequence[JobRun],
    failures: Sequence[FailureEvent],
    nodes: Sequence[SimNode],
    model: FailureModel,
    mode: RecoveryMode,
    *,
    seed: int = 0,
) -> RecoveryReport:
    """What ``failures`` (and drawn hangs) cost ``runs`` under recovery ``mode``."""
    by_name = {n.name: n for n in nodes}
    for run in runs:
        missing = [n for n in (*run.nodes, *(g[0] for g in run.gpus)) if n not in by_name]
        if missing:
            raise ValueError(f"{run.job_id}: unknown node {missing[0]!r}")
    index: dict[tuple[str, int | None], list[FailureEvent]] = {}
    for e in failures:  # already in time order
        if e.type is not FailureType.HANG:
            index.setdefault((e.node, e.gpu), []).append(e)
    for events in index.values():
        events.sort(key=lambda e: e.time)
    kinds = tuple(FailureType)
    tally = _Tally({k: 0 for k in kinds}, {k: 0.0 for k in kinds}, 0.0, {k: [] for k in kinds})
    for seq, run in enumerate(runs):
        _assess_job(run, seq, index, by_name, model, mode, seed, tally)
    lost = sum(tally.lost.values())
    return RecoveryReport(
        mode=mode,
        jobs=len(runs),
        completed=tally.completed,
        abandoned=tally.abandoned,
        failures=MappingProxyType(dict(tally.failures)),
        restarts=tally.restarts,
        gpu_hours_allocated=tally.allocated / HOUR,
        gpu_hours_useful=tally.useful / HOUR,
        gpu_hours_lost=lost / HOUR,
        lost_by_cause=MappingProxyType({k: v / HOUR for k, v in tally.lost.items()}),
        node_hours_lost=tally.lost_nodes / HOUR,
        delay_hours=tally.delay / HOUR,
        detection=MappingProxyType({k: LatencyStats.of(v) for k, v in tally.latencies.items()}),
    )


def compare(
    runs: Sequence[JobRun],
    failures: Sequence[FailureEvent],
    nodes: Sequence[SimNode],
    model: FailureModel,
    *,
    seed: int = 0,
) -> dict[RecoveryMode, RecoveryReport]:
    """:func:`assess` under every recovery mode, on the same failures and the same luck."""
    return {mode: assess(runs, failures, nodes, model, mode, seed=seed) for mode in RecoveryMode}
