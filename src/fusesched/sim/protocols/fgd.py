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

The simulated cluster a run places the pods on, and how it keeps a decision fast, is
:mod:`fusesched.sim.protocols.fgd_cluster`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import GPU_MILLI, MAX_GPUS, TargetWorkload, target_workload
from fusesched.policies.gpu_inputs import PodRequest
from fusesched.policies.gpu_scores import GPU_SCORERS
from fusesched.sim.protocols.fgd_cluster import _Cluster
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
