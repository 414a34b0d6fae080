"""The PWR (CCGrid'25) power-aware GPU-placement evaluation, replayed from its protocol.

``shared/anchors/pwr/PROTOCOL.md`` is a delta on the FGD protocol, and so is this module: the
cluster, arrival sequence, tuning, node priority, filters, FGD score and fragmentation metric are
those of :mod:`fusesched.sim.protocols.fgd` (same seed → same sequence and node order as
``run_fgd``). Added: the power model of :mod:`fusesched.policies.gpu_power`, evaluated after
every offered pod (datacenter watts = Σ over all nodes, idle ones included, with its CPU and GPU
parts), and the policies of :data:`~fusesched.policies.gpu_power.POWER_POLICIES` (PWR, the
PWR+FGD weighted sums, FGD itself, fusesched's ``pwr-guard``).

Curves (section 6): x = arrived milli-GPU / capacity; each run is resampled onto x = 0, 0.005,
…, 1 (:func:`resample`: duplicates of x dropped keeping the first, grid points merged into the
rows, linear interpolation *by row position*, then forward/backward fill); the seeds are
averaged point-wise; savings vs FGD = (P_FGD − P)/P_FGD·100 and GRAR = mean used / mean arrived
are computed on those means (:func:`savings_pct`, :attr:`PwrResult.grar`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_default import default_keys
from fusesched.policies.gpu_frag import GPU_MILLI, MAX_GPUS
from fusesched.policies.gpu_inputs import PodRequest
from fusesched.policies.gpu_power import (
    POWER_POLICIES,
    NodePower,
    PowerPolicy,
    cpu_need_per_gpu,
    guard_keys,
    guard_window,
    lexicographic_best,
    normalise_scores,
    pwr_gpu_choice,
    stranded,
)
from fusesched.policies.gpu_scores import TargetWorkload, select_gpus
from fusesched.sim.protocols.fgd import (
    DEFAULT_SEEDS,
    TUNE_RATIO,
    FgdRun,
    _curves,
    run_setup,
)
from fusesched.sim.protocols.fgd_cluster import _Cluster
from fusesched.traces.openb import OpenbNodes, OpenbPods

__all__ = [
    "GRID",
    "PwrResult",
    "PwrRun",
    "resample",
    "run_pwr",
    "run_pwr_seeds",
    "savings_pct",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: The protocol's x grid: arrived fraction of GPU capacity 0, 0.005, …, 1.0 (201 points).
GRID: FloatArray = np.round(np.arange(201) * 0.005, 3)


def resample(x: FloatArray, values: FloatArray, grid: FloatArray = GRID) -> FloatArray:
    """One run's per-event ``values`` at the grid points, as the PWR notebook does it.

    ``x`` (non-decreasing) is the arrived fraction after each event. Rows whose x repeats are
    dropped (the first kept); the grid points are merged into the rows; a grid point that equals
    a row's x takes its value; the others are interpolated linearly by *position* between the
    neighbouring rows (k grid points in one gap get the fractions 1/(k+1) … k/(k+1)); before the
    first row and after the last the nearest row's value is used (bfill / ffill).
    """
    if len(x) == 0:
        return np.full(len(grid), np.nan)
    keep = np.ones(len(x), dtype=np.bool_)
    keep[1:] = x[1:] != x[:-1]
    xs, vs = x[keep], values[keep].astype(np.float64)
    i = np.searchsorted(xs, grid, side="left")  # rows strictly below each grid point
    exact = (i < len(xs)) & (xs[np.minimum(i, len(xs) - 1)] == grid)
    out = np.empty(len(grid), dtype=np.float64)
    out[exact] = vs[i[exact]]
    gap = ~exact
    before, after = gap & (i == 0), gap & (i == len(xs))
    out[before] = vs[0]
    out[after] = vs[-1]
    inner = np.flatnonzero(gap & ~before & ~after)
    if len(inner):
        gid = i[inner]
        # rank of each grid point inside its gap, and the gap's size
        starts = np.r_[True, gid[1:] != gid[:-1]]
        first = np.maximum.accumulate(np.where(starts, np.arange(len(gid)), 0))
        rank = np.arange(len(gid)) - first + 1
        _, inverse, counts = np.unique(gid, return_inverse=True, return_counts=True)
        size = counts[inverse]
        lo, hi = vs[gid - 1], vs[gid]
        out[inner] = lo + (hi - lo) * rank / (size + 1)
    return out


def savings_pct(reference: FloatArray, power: FloatArray) -> FloatArray:
    """Power savings vs the reference (FGD) in %: (P_ref − P)/P_ref·100."""
    out: FloatArray = (reference - power) / reference * 100.0
    return out


@dataclass(frozen=True, eq=False)
class PwrRun:
    """One (pods, policy, seed) run: the FGD-protocol record plus watts after every event."""

    base: FgdRun
    power_w: IntArray  # datacenter watts after each arrival
    power_cpu_w: IntArray
    power_gpu_w: IntArray

    @property
    def policy(self) -> str:
        return self.base.policy

    @property
    def x(self) -> FloatArray:
        """Arrived fraction of GPU capacity after each event."""
        out: FloatArray = self.base.arrived_milli / float(self.base.total_gpus * GPU_MILLI)
        return out

    def on_grid(self, values: IntArray | FloatArray) -> FloatArray:
        return resample(self.x, values.astype(np.float64))

    @property
    def power_curve(self) -> FloatArray:
        return self.on_grid(self.power_w)

    @property
    def used_curve(self) -> FloatArray:
        return self.on_grid(self.base.allocated_milli)

    @property
    def arrived_curve(self) -> FloatArray:
        return self.on_grid(self.base.arrived_milli)


@dataclass(frozen=True)
class PwrResult:
    """All seeds of one policy; curves are point-wise seed means on :data:`GRID`."""

    policy: str
    runs: tuple[PwrRun, ...]

    def _mean(self, name: str) -> FloatArray:
        out: FloatArray = np.mean([getattr(r, name) for r in self.runs], axis=0)
        return out

    @property
    def power(self) -> FloatArray:
        """Mean datacenter watts at each grid point."""
        return self._mean("power_curve")

    @property
    def cpu_power(self) -> FloatArray:
        out: FloatArray = np.mean([r.on_grid(r.power_cpu_w) for r in self.runs], axis=0)
        return out

    @property
    def gpu_power(self) -> FloatArray:
        out: FloatArray = np.mean([r.on_grid(r.power_gpu_w) for r in self.runs], axis=0)
        return out

    @property
    def used(self) -> FloatArray:
        """Mean allocated milli-GPU at each grid point."""
        return self._mean("used_curve")

    @property
    def arrived(self) -> FloatArray:
        return self._mean("arrived_curve")

    @property
    def grar(self) -> FloatArray:
        """GPU Resource Allocation Ratio: mean used / mean arrived (1 where nothing arrived)."""
        arrived = self.arrived
        out: FloatArray = np.divide(
            self.used, arrived, out=np.ones_like(arrived), where=arrived > 0
        )
        return out


def run_pwr_seeds(
    nodes: OpenbNodes,
    pods: OpenbPods,
    policy: str,
    seeds: tuple[int, ...] | list[int] = DEFAULT_SEEDS,
    *,
    tune: float = TUNE_RATIO,
    until: float | None = None,
) -> PwrResult:
    """:func:`run_pwr` for every seed."""
    runs = tuple(run_pwr(nodes, pods, policy, s, tune=tune, until=until) for s in seeds)
    return PwrResult(policy, runs)


def run_pwr(
    nodes: OpenbNodes,
    pods: OpenbPods,
    policy: str,
    seed: int,
    *,
    tune: float = TUNE_RATIO,
    until: float | None = None,
) -> PwrRun:
    """One run; ``policy`` is a key of :data:`POWER_POLICIES`.

    ``until`` (a fraction of GPU capacity, e.g. 1.0) ends the run after the first pod whose
    arrival brings the arrived request to at least that fraction: enough for the protocol's
    curves (x ≤ 1), and nothing before it changes. The FGD-protocol curves of ``base`` beyond
    that point are then meaningless.
    """
    if policy not in POWER_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POWER_POLICIES)}")
    capacity, sequence, priority, target = run_setup(nodes, pods, seed, tune, "PWR")
    sim = _PowerCluster(nodes, target, POWER_POLICIES[policy], priority, seed)
    stop = None if until is None else until * capacity
    n = len(sequence)
    placed = np.full(n, -1, dtype=np.int64)
    gpus = np.zeros((n, MAX_GPUS), dtype=np.bool_)
    arrived = np.zeros(n, dtype=np.int64)
    allocated = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.float64)
    watts = np.zeros((n, 2), dtype=np.int64)
    total_arrived = total_alloc = 0
    steps = 0
    for step, p in enumerate(sequence.tolist()):
        pod = PodRequest(int(pods.cpu_milli[p]), int(pods.gpu_milli[p]), int(pods.num_gpu[p]))
        node, taken = sim.place(pod, int(pods.memory_mib[p]), pods.gpu_spec[p])
        total_arrived += pod.total_gpu
        if node >= 0:
            placed[step] = node
            gpus[step, taken] = True
            total_alloc += pod.total_gpu
        arrived[step] = total_arrived
        allocated[step] = total_alloc
        frag[step] = sim.metric.total_frag
        watts[step] = sim.cpu_total, sim.gpu_total
        steps = step + 1
        if stop is not None and total_arrived >= stop:
            break
    cut = slice(0, steps)
    alloc_curve, frag_curve, ratio_curve = _curves(
        arrived[cut], allocated[cut], frag[cut], capacity
    )
    base = FgdRun(
        policy,
        seed,
        nodes.total_gpus,
        sequence[cut],
        placed[cut],
        gpus[cut],
        arrived[cut],
        allocated[cut],
        frag[cut],
        alloc_curve,
        frag_curve,
        ratio_curve,
    )
    cpu_w, gpu_w = watts[cut, 0].copy(), watts[cut, 1].copy()
    return PwrRun(base, cpu_w + gpu_w, cpu_w, gpu_w)


class _PowerCluster(_Cluster):
    """The FGD protocol's cluster (FGD through its incremental index) plus per-node watts.

    ``place`` filters as FGD does, then scores by the policy's weights: α·PWR (normalised −ΔP)
    + (1000 − α)·FGD, or ``pwr-guard``'s rule; one feasible node is taken unscored. A policy
    with ``learn`` runs on the cluster of ``default`` (its job mix learned from the arrivals).
    """

    def __init__(
        self,
        nodes: OpenbNodes,
        target: TargetWorkload,
        spec: PowerPolicy,
        priority: IntArray,
        seed: int,
    ) -> None:
        base = "default" if spec.learn else "fgd"
        super().__init__(nodes, target, base, priority, np.random.default_rng([seed, 1]))
        self.spec = spec
        self.capacity = int(self.gpu_count.sum()) * GPU_MILLI
        self.watts = NodePower.of(nodes.cpu_milli, nodes.gpus, nodes.model)
        self.node_cpu_w = self.watts.cpu(self.free_cpu)
        self.node_gpu_w = self.watts.gpu(self.free_gpu)
        self.cpu_total = int(self.node_cpu_w.sum())
        self.gpu_total = int(self.node_gpu_w.sum())
        self.median_wake = self.watts.median_wake_w()
        self.need = cpu_need_per_gpu(target)  # with ``learn``: the learned mix's (``_learn``)

    def place(self, pod: PodRequest, memory: int, spec: tuple[str, ...]) -> tuple[int, IntArray]:
        pod = self._observe(pod, memory, spec)
        cands = np.flatnonzero(self._feasible(pod, memory, spec))
        if len(cands) == 0:
            return -1, np.zeros(0, dtype=np.int64)
        node = int(cands[0]) if len(cands) == 1 else self._choose(cands, pod)
        taken = self._gpus(node, pod)
        self._bind(node, pod, memory, taken)
        self._repower(node)
        return node, taken

    def _delta(self, rows: IntArray, pod: PodRequest) -> IntArray:
        return self.watts.delta(
            rows,
            self.free_cpu[rows],
            self.free_gpu[rows],
            pod.score_cpu,
            pod.gpu_milli,
            pod.num_gpu,
        )

    def _choose(self, cands: IntArray, pod: PodRequest) -> int:
        # (FGD's fixed-target index has no memory and ignores the pod's)
        _, score = self.frag.drops(pod.score_cpu, pod.gpu_milli, pod.num_gpu, pod.memory_mib)
        fgd = score[cands]
        alpha = self.spec.alpha
        if self.spec.guard:
            window = self.spec.window
            if self.spec.wide > 0:
                used = self.capacity - int(self.free_gpu.sum())
                window = guard_window(window, self.spec.wide, used, self.capacity)
            near = cands[fgd >= fgd.max() - window]
            keys = self._guard_keys(near, pod)
            if self.online:  # ties: default's keys after its window
                keys += default_keys(
                    pod,
                    score[near],
                    self.free_cpu[near],
                    self.frag.idle[near],
                    self.free_gpu[near],
                    self.frag.target,
                )[1:]
            top = near[lexicographic_best(keys)]
        elif alpha == 0:
            top = cands[fgd == fgd.max()]
        else:
            pwr = normalise_scores(-self._delta(cands, pod))
            total = alpha * pwr + (1000 - alpha) * fgd
            top = cands[total == total.max()]
        return int(top[np.argmin(self.priority[top])])

    def _guard_keys(self, rows: IntArray, pod: PodRequest) -> list[IntArray]:
        free_cpu = self.free_cpu[rows]
        delta = self._delta(rows, pod)
        delta_cpu = self.watts.cpu(free_cpu - pod.score_cpu, rows) - self.watts.cpu(free_cpu, rows)
        delta_gpu = delta - delta_cpu
        cheap = delta_gpu <= max(pod.num_gpu, 1) * self.median_wake
        # a sharing pod is counted as taking no whole GPU
        took = 0 if pod.sharing else pod.num_gpu
        full = self.full[rows]
        strand = stranded(free_cpu - pod.score_cpu, full - took, self.need) - stranded(
            free_cpu, full, self.need
        )
        idle = self.frag.idle[rows]
        return guard_keys(pod.num_gpu, cheap, strand, delta, delta_cpu, idle)

    def _learn(self, pod: PodRequest, spec: tuple[str, ...]) -> None:
        """Learn as ``default`` does; the stranding key then uses the learned mix's CPU per GPU
        (nothing read from pods still to come), recomputed only when the mix was rebuilt."""
        learned = self.frag
        super()._learn(pod, spec)
        if self.frag is not learned:
            self.need = cpu_need_per_gpu(self.frag.target)

    def _gpus(self, node: int, pod: PodRequest) -> IntArray:
        if pod.sharing and self.spec.gpu_rule == "pwr":
            gpu = pwr_gpu_choice(self.free_gpu[node], int(self.gpu_count[node]), pod.gpu_milli)
            return np.array([gpu], dtype=np.int64)
        row = np.array([node], dtype=np.int64)
        return select_gpus(self.policy, self._candidates(row), pod, self.ctx)

    def _repower(self, node: int) -> None:
        row = np.array([node], dtype=np.int64)
        cpu_w = int(self.watts.cpu(self.free_cpu[row], row)[0])
        gpu_w = int(self.watts.gpu(self.free_gpu[row], row)[0])
        self.cpu_total += cpu_w - int(self.node_cpu_w[node])
        self.gpu_total += gpu_w - int(self.node_gpu_w[node])
        self.node_cpu_w[node], self.node_gpu_w[node] = cpu_w, gpu_w
