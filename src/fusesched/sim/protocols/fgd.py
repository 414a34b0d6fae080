"""The FGD (USENIX ATC'23) GPU-placement evaluation, replayed from its protocol.

Implements ``anchors/fgd/PROTOCOL.md`` sections 1-5 (checklist in section 7): the GPU nodes of
``openb_node_list_gpu_node.csv``; a seeded shuffle of the name-sorted pods, then workload tuning
to 130 % of GPU capacity (append uniform resamples, or drop random pods when above); a seeded
random node priority that breaks score ties; every pod offered once, placed or dropped for good,
nothing departs; integer scores from :mod:`fusesched.policies.gpu_scores`; after every pod the
allocated and arrived milli-GPU and the fragmentation against the fixed target workload, binned
by rounded arrived %.

Randomness: Go's ``math/rand`` stream (and its racy call order) cannot be reproduced, so a run
uses ``numpy.random.default_rng(seed)`` for, in this order, one discarded integer, the shuffle,
the tuning draws and the node permutation, and ``default_rng([seed, 1])`` for Random's node and
GPU draws. Seeds 42-51 are thus other samples from the same distribution as the published runs;
compare means over seeds, not single runs.

Speed: per node the simulator keeps the free CPU / memory / per-GPU milli, the largest free GPU
and the number of fully free GPUs; FGD and ``default`` read a
:class:`~fusesched.policies.gpu_frag.FragIndex` (per node and target class the fitting-GPU count
and sub-threshold sum, and per pod shape the cached integer score of every node). A placement
refreshes one node; a decision is a filter, a cache refresh of the nodes changed since that pod
shape was last seen, and an argmax, all vector operations over the nodes. ``default`` keeps a
second index against the target it learns from the arrivals (its classes also by memory) and
the scarce classes' pressure per node (learned at the same arrivals), keeps a GPU pod to the
nodes of least pressure (:func:`~fusesched.policies.gpu_scores.scarce_tier`) and applies
:func:`~fusesched.policies.gpu_scores.default_keys` (stranding first) to those within
``FGD_WINDOW`` points of their best score; the fragmentation metric always uses the protocol's
fixed target.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import FragIndex
from fusesched.policies.gpu_power import cpu_need_per_gpu, lexicographic_best
from fusesched.policies.gpu_scores import (
    FGD_WINDOW,
    GPU_MILLI,
    GPU_SCORERS,
    MAX_GPUS,
    TAG_COLUMNS,
    Candidates,
    PodRequest,
    ScoreContext,
    TargetWorkload,
    default_keys,
    pod_tag,
    scarce_pressure,
    scarce_tier,
    select_gpus,
    target_workload,
)
from fusesched.traces.openb import OpenbNodes, OpenbPods

__all__ = [
    "DEFAULT_SEEDS",
    "TUNE_RATIO",
    "FgdResult",
    "FgdRun",
    "arrival_sequence",
    "run_fgd",
    "run_fgd_seeds",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_SEEDS = tuple(range(42, 52))
TUNE_RATIO = 1.3
MAX_ARRIVED_PCT = 130


@dataclass(frozen=True, eq=False)
class FgdRun:
    """One (pods, policy, seed) run.

    ``sequence`` indexes the loaded pods in arrival order (resampled clones repeat an index);
    ``node[i]`` is the node index (in the loaded node list) of the i-th arrival, -1 if it failed;
    ``gpus[i]`` marks the GPUs it took. The curves have one entry per arrived % 0-130 (the mean
    over events in that rounded bin, section 5): GPU allocation %, fragmentation as % of GPU
    capacity and as % of the idle GPU capacity.
    """

    policy: str
    seed: int
    total_gpus: int
    sequence: IntArray
    node: IntArray
    gpus: BoolArray
    arrived_milli: IntArray  # after each arrival
    allocated_milli: IntArray
    frag_milli: FloatArray
    alloc_curve: FloatArray
    frag_curve: FloatArray
    frag_ratio_curve: FloatArray

    @property
    def failed(self) -> int:
        return int((self.node < 0).sum())

    @property
    def arrived_pct(self) -> float:
        if len(self.arrived_milli) == 0:
            return 0.0
        return float(self.arrived_milli[-1] / (self.total_gpus * GPU_MILLI) * 100)

    @property
    def gpu_alloc_pct_at_100(self) -> float:
        return float(self.alloc_curve[100])

    @property
    def gpu_alloc_pct_at_130(self) -> float:
        return float(self.alloc_curve[130])

    @property
    def unallocated_gpus_at_130(self) -> float:
        return self.total_gpus * (100.0 - self.gpu_alloc_pct_at_130) / 100.0

    @property
    def frag_pct_at_130(self) -> float:
        return float(self.frag_curve[130])


@dataclass(frozen=True)
class FgdResult:
    """All seeds of one policy; the headline values are means over the runs."""

    policy: str
    runs: tuple[FgdRun, ...]

    def _mean(self, values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    @property
    def gpu_alloc_pct_at_100(self) -> float:
        return self._mean([r.gpu_alloc_pct_at_100 for r in self.runs])

    @property
    def gpu_alloc_pct_at_130(self) -> float:
        return self._mean([r.gpu_alloc_pct_at_130 for r in self.runs])

    @property
    def unallocated_gpus_at_130(self) -> float:
        return self._mean([r.unallocated_gpus_at_130 for r in self.runs])

    @property
    def frag_pct_at_130(self) -> float:
        return self._mean([r.frag_pct_at_130 for r in self.runs])

    @property
    def sd_gpu_alloc_pct_at_130(self) -> float:
        values = [r.gpu_alloc_pct_at_130 for r in self.runs]
        return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def arrival_sequence(
    pods: OpenbPods, capacity_milli: int, rng: np.random.Generator, tune: float = TUNE_RATIO
) -> IntArray:
    """Section 2 steps 1-4: the pod indices in arrival order, tuned to ``tune``·capacity."""
    order = np.array(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
    rng.integers(2**31)  # the artifact draws (and discards) one integer first
    sequence = order[rng.permutation(len(order))]
    request = pods.gpu_request
    share = pods.gpu_milli
    total = int(request.sum())
    limit = tune * capacity_milli
    if total < limit:
        extra: list[int] = []
        while True:
            pick = int(order[int(rng.integers(len(order)))])
            if total + int(share[pick]) > limit:
                break
            extra.append(pick)
            total += int(request[pick])
        return np.concatenate([sequence, np.array(extra, dtype=np.int64)])
    kept = list(sequence.tolist())
    while total > limit:
        drop = kept.pop(int(rng.integers(len(kept))))
        total -= int(request[drop])
    return np.array(kept, dtype=np.int64)


def run_fgd_seeds(
    nodes: OpenbNodes,
    pods: OpenbPods,
    policy: str,
    seeds: tuple[int, ...] | list[int] = DEFAULT_SEEDS,
    *,
    tune: float = TUNE_RATIO,
) -> FgdResult:
    """:func:`run_fgd` for every seed."""
    return FgdResult(policy, tuple(run_fgd(nodes, pods, policy, s, tune=tune) for s in seeds))


def run_setup(
    nodes: OpenbNodes, pods: OpenbPods, seed: int, tune: float, protocol: str
) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], TargetWorkload]:
    """What every run of an openb protocol starts from, with its input checks: the GPU
    capacity (milli), the seeded pod arrival sequence, the seeded node tie-break priority
    and the target workload (the FGD protocol's; PWR's is the same)."""
    if len(nodes) == 0 or nodes.total_gpus == 0:
        raise ValueError(f"the {protocol} protocol needs at least one GPU node")
    if int(nodes.gpus.max()) > MAX_GPUS:
        raise ValueError(f"a node has more than {MAX_GPUS} GPUs")
    if len(pods) == 0 or int(pods.gpu_request.sum()) == 0:
        raise ValueError(f"the {protocol} protocol needs pods with a GPU request")
    capacity = nodes.total_gpus * GPU_MILLI
    rng = np.random.default_rng(seed)
    sequence = arrival_sequence(pods, capacity, rng, tune)
    by_name = sorted(range(len(nodes)), key=lambda i: nodes.names[i])
    priority = np.empty(len(nodes), dtype=np.int64)
    priority[np.array(by_name, dtype=np.int64)] = rng.permutation(len(nodes))
    target = target_workload(
        pods.cpu_milli.tolist(), pods.gpu_milli.tolist(), pods.num_gpu.tolist(), pods.gpu_spec
    )
    return capacity, sequence, priority, target


def run_fgd(
    nodes: OpenbNodes,
    pods: OpenbPods,
    policy: str,
    seed: int,
    *,
    tune: float = TUNE_RATIO,
    incremental: bool = True,
) -> FgdRun:
    """One run of the protocol: ``policy`` is a key of ``GPU_SCORERS``.

    ``incremental=False`` scores FGD and ``default`` from scratch on every decision (same
    placements, much slower; kept as the reference for tests).
    """
    if policy not in GPU_SCORERS:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(GPU_SCORERS)}")
    capacity, sequence, priority, target = run_setup(nodes, pods, seed, tune, "FGD")
    sim = _Cluster(
        nodes, target, policy, priority, np.random.default_rng([seed, 1]), incremental=incremental
    )
    n = len(sequence)
    placed = np.full(n, -1, dtype=np.int64)
    gpus = np.zeros((n, MAX_GPUS), dtype=np.bool_)
    arrived = np.zeros(n, dtype=np.int64)
    allocated = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.float64)
    total_arrived = total_alloc = 0
    for step, p in enumerate(sequence.tolist()):
        memory = int(pods.memory_mib[p])
        pod = PodRequest(
            int(pods.cpu_milli[p]), int(pods.gpu_milli[p]), int(pods.num_gpu[p]), memory
        )
        node, taken = sim.place(pod, memory, pods.gpu_spec[p])
        total_arrived += pod.total_gpu
        if node >= 0:
            placed[step] = node
            gpus[step, taken] = True
            total_alloc += pod.total_gpu
        arrived[step] = total_arrived
        allocated[step] = total_alloc
        frag[step] = sim.metric.total_frag
    alloc_curve, frag_curve, ratio_curve = _curves(arrived, allocated, frag, capacity)
    return FgdRun(
        policy,
        seed,
        nodes.total_gpus,
        sequence,
        placed,
        gpus,
        arrived,
        allocated,
        frag,
        alloc_curve,
        frag_curve,
        ratio_curve,
    )


def _bin_means(rounded: FloatArray, values: FloatArray) -> FloatArray:
    """Mean per bin x = 0..130; the ±1 window when empty (section 5).

    Extension for clusters far smaller than the traces' (one pod can then jump several
    bins): a bin still empty takes the last event at or below it (the first event if none).
    It never fires on the published traces.
    """
    out = np.full(MAX_ARRIVED_PCT + 1, np.nan)
    if len(values) == 0:
        return out  # every pod was tuned away
    for x in range(MAX_ARRIVED_PCT + 1):
        hit = rounded == x
        if not hit.any():
            hit = np.abs(rounded - x) <= 1
        if hit.any():
            out[x] = float(values[hit].mean())
        else:
            below = np.flatnonzero(rounded <= x)
            out[x] = float(values[below[-1] if len(below) else 0])
    return out


def _curves(
    arrived: IntArray, allocated: IntArray, frag: FloatArray, capacity: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Section 5's binning: mean per rounded arrived %, rounded to 2 decimals."""
    rounded = np.round(arrived / capacity * 100)
    alloc_pct = np.round(allocated / capacity * 100, 2)
    idle = capacity - allocated
    ratio = np.round(np.divide(frag, idle, out=np.zeros_like(frag), where=idle > 0) * 100, 2)
    return (
        np.round(_bin_means(rounded, alloc_pct), 2),
        np.round(_bin_means(rounded, frag / capacity * 100), 2),
        _bin_means(rounded, ratio),
    )


class _Cluster:
    """Mutable per-node state of one run; ``place`` runs filter → score → pick → bind.

    FGD and ``default`` read a :class:`FragIndex` (cached per-node drops, one node refreshed per
    placement) unless ``incremental`` is off, when they score the candidates from scratch like
    the other policies (the reference the tests compare the fast path with).
    """

    def __init__(
        self,
        nodes: OpenbNodes,
        target: TargetWorkload,
        policy: str,
        priority: IntArray,
        rng: np.random.Generator,
        *,
        incremental: bool = True,
    ) -> None:
        n = len(nodes)
        self.policy = policy
        self.scorer = GPU_SCORERS[policy]
        self.ctx = ScoreContext(rng=rng, target=target)
        self.target = target
        self.priority = priority
        self.models = nodes.model
        self.free_cpu = nodes.cpu_milli.astype(np.int64).copy()
        self.free_mem = nodes.memory_mib.astype(np.int64).copy()
        self.gpu_count = nodes.gpus.astype(np.int64).copy()
        self.free_gpu = np.where(
            np.arange(MAX_GPUS)[None, :] < self.gpu_count[:, None], GPU_MILLI, 0
        ).astype(np.int64)
        self.max_free = self.free_gpu.max(axis=1)
        self.full = (self.free_gpu == GPU_MILLI).sum(axis=1)
        self.tags = np.zeros((n, TAG_COLUMNS), dtype=np.bool_)
        # the protocol's fragmentation metric, always against the fixed target workload
        self.metric = FragIndex(self.free_cpu, self.free_gpu, target.type_ok(nodes.model), target)
        # what the policy reads: FGD the fixed target; default one learned from the arrivals
        self.frag = self.metric
        self.online = policy == "default"
        self.arrivals: list[tuple[int, int, int, tuple[str, ...], int]] = []  # default only
        self.fast = incremental and policy in ("fgd", "default")
        self._spec_masks: dict[tuple[str, ...], BoolArray] = {}
        self._has_gpu = self.gpu_count > 0
        # default only: per node the scarce classes' learned pressure (%), and the node sizes
        # that decide which classes a node could ever host
        self.pressure = np.zeros(n, dtype=np.int64)
        self.cpu_size = nodes.cpu_milli.astype(np.int64)
        self.mem_size = nodes.memory_mib.astype(np.int64)

    def _spec_mask(self, spec: tuple[str, ...]) -> BoolArray:
        mask = self._spec_masks.get(spec)
        if mask is None:
            mask = self._has_gpu & np.array([m in spec for m in self.models], dtype=np.bool_)
            if not spec:
                mask = self._has_gpu.copy()
            self._spec_masks[spec] = mask
        return mask

    def _candidates(self, rows: IntArray) -> Candidates:
        fgd = self.policy in ("fgd", "default")  # both read the incremental FGD counts
        return Candidates(
            self.free_cpu[rows],
            self.free_gpu[rows],
            self.gpu_count[rows],
            tags=self.tags[rows] if self.policy == "clustering" else None,
            type_ok=self.frag.type_ok[rows] if fgd else None,
            fit_count=self.frag.fit_count[rows] if fgd else None,
            sub_sum=self.frag.sub_sum[rows] if fgd else None,
            free_mem=self.free_mem[rows] if self.online else None,
            pressure=self.pressure[rows] if self.online else None,
        )

    def _feasible(self, pod: PodRequest, memory: int, spec: tuple[str, ...]) -> BoolArray:
        feasible = (self.free_cpu >= pod.cpu_milli) & (self.free_mem >= memory)
        if pod.num_gpu > 0:
            feasible &= self._spec_mask(spec)
            if pod.num_gpu == 1:
                feasible &= self.max_free >= pod.gpu_milli
            else:
                feasible &= self.full >= pod.num_gpu
        return feasible

    def place(self, pod: PodRequest, memory: int, spec: tuple[str, ...]) -> tuple[int, IntArray]:
        """Filter, score, pick and bind one pod; (-1, []) when no node is feasible."""
        pod = self._observe(pod, memory, spec)
        cands = np.flatnonzero(self._feasible(pod, memory, spec))
        if len(cands) == 0:
            return -1, np.zeros(0, dtype=np.int64)
        if len(cands) == 1:
            node = int(cands[0])
        elif self.fast:
            _, score = self.frag.drops(pod.score_cpu, pod.gpu_milli, pod.num_gpu, pod.memory_mib)
            if self.policy == "default" and pod.num_gpu > 0 and self.pressure.any():
                # the nodes where the pod meets the least scarce pressure
                need = cpu_need_per_gpu(self.frag.target)
                tier = scarce_tier(
                    pod, self.pressure[cands], self.free_cpu[cands], self.frag.idle[cands], need
                )
                cands = cands[tier == tier.min()]
            cand_score = score[cands]
            if self.policy == "default":  # its keys decide within FGD's score window
                top = cands[cand_score >= cand_score.max() - FGD_WINDOW]
                if len(top) > 1:
                    keys = default_keys(
                        pod,
                        score[top],
                        self.free_cpu[top],
                        self.frag.idle[top],
                        self.free_gpu[top],
                        self.frag.target,
                    )
                    top = top[lexicographic_best(keys)]
            else:
                top = cands[cand_score == cand_score.max()]
            node = int(top[np.argmin(self.priority[top])])
        else:
            scores = self.scorer(self._candidates(cands), pod, self.ctx)
            tied = cands[scores == scores.max()]
            node = int(tied[np.argmin(self.priority[tied])])
        row = np.array([node], dtype=np.int64)
        taken = select_gpus(self.policy, self._candidates(row), pod, self.ctx)
        self._bind(node, pod, memory, taken)
        return node, taken

    def _bind(self, node: int, pod: PodRequest, memory: int, taken: IntArray) -> None:
        self.free_cpu[node] -= pod.cpu_milli
        self.free_mem[node] -= memory
        if pod.num_gpu > 0:
            self.free_gpu[node, taken] -= pod.gpu_milli
            row = self.free_gpu[node]
            self.max_free[node] = row.max()
            self.full[node] = int((row == GPU_MILLI).sum())
            self.tags[node, pod_tag(pod)] = True
        self.metric.update(node)
        if self.frag is not self.metric:
            self.frag.update(node)

    def _observe(self, pod: PodRequest, memory: int, spec: tuple[str, ...]) -> PodRequest:
        """The pod as the policy sees it, recorded first when the policy learns online
        (``default``'s learned target also weighs memory, so the pod carries it)."""
        if not self.online:
            return pod
        if pod.memory_mib != memory:
            pod = replace(pod, memory_mib=memory)
        self._learn(pod, spec)
        return pod

    def _learn(self, pod: PodRequest, spec: tuple[str, ...]) -> None:
        """Record an arrival; at 1, 2, 4, … arrivals rebuild the target from those seen.

        ``default`` looks ahead on the job mix only through the pods that have arrived so
        far (every class seen, weighted by its count; FGD's 95 % cut is left out because on
        a growing sample it swaps rare classes in and out), never through the pod list. Its
        GPU classes carry their memory, so its fragmentation also counts the GPUs a node can
        no longer use for lack of memory (FGD's counts only those it lacks the CPU for). The
        scarce classes' pressure per node is relearned at the same arrivals.
        """
        self.arrivals.append((pod.cpu_milli, pod.gpu_milli, pod.num_gpu, spec, pod.memory_mib))
        seen = len(self.arrivals)
        if seen & (seen - 1):
            return  # not a power of two
        cpu, milli, count, specs, mem = zip(*self.arrivals, strict=True)
        target = target_workload(cpu, milli, count, specs, popularity=100, memory_mib=mem)
        ok = target.type_ok(self.models)
        self.frag = FragIndex(self.free_cpu, self.free_gpu, ok, target, self.free_mem)
        self.ctx = ScoreContext(rng=self.ctx.rng, target=target)
        self.pressure = self._scarce_pressure()

    def _scarce_pressure(self) -> IntArray:
        """:func:`scarce_pressure` of the GPU classes that have arrived so far.

        A class (CPU, memory, GPU count, spec) could be hosted by the nodes of an allowed
        model with at least its GPU count, CPU and memory when empty.
        """
        demand: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
        for cpu, milli, count, spec, mem in self.arrivals:
            if count > 0:
                key = (cpu, mem, count, tuple(sorted(set(spec))))
                demand[key] = demand.get(key, 0) + count * milli
        if not demand:
            return np.zeros(len(self.gpu_count), dtype=np.int64)
        classes = list(demand)
        c_cpu, c_mem, c_count = (
            np.array([c[i] for c in classes], dtype=np.int64) for i in range(3)
        )
        eligible = (
            np.stack([self._spec_mask(c[3]) for c in classes])
            & (self.gpu_count[None, :] >= c_count[:, None])
            & (self.cpu_size[None, :] >= c_cpu[:, None])
            & (self.mem_size[None, :] >= c_mem[:, None])
        )
        weights = np.array(list(demand.values()), dtype=np.int64)
        return scarce_pressure(eligible, weights, self.gpu_count)
