"""Node scores of the FGD paper's six GPU-placement policies, and their GPU choice.

Exactly the definitions of ``shared/anchors/fgd/PROTOCOL.md`` section 3 (scores) and section 4
(fragmentation measure, target workload). Every function is pure and vectorised over the
candidate nodes: the caller passes a :class:`Candidates` snapshot of the feasible nodes and a
:class:`PodRequest`, and gets one integer score (0-100, truncated like Go's float→int) per node.

GPU matrices are ``nodes × MAX_GPUS`` of free milli-GPU; GPUs a node does not have are padded
with 0, which no formula can tell from a fully allocated GPU (and needs not to).

FGD's fragmentation measure and its incremental index live in
:mod:`fusesched.policies.gpu_frag` (exact integer units, so a score does not depend on which
other nodes are scored with it).

A seventh policy, ``default``, is fusesched's own recommendation (not from the paper): FGD's
integer score ⌊100·σ(ΔF/1000)⌋, computed against a target workload *learned online* from
the pods that have arrived so far (:class:`fusesched.sim.protocols.fgd` refreshes it at 1, 2,
4, … arrivals; never from the pod list) whose GPU classes also carry their memory, so that a
node left without the memory of a typical GPU pod counts its idle GPUs as fragment (FGD's
measure looks at CPU only; needs :attr:`PodRequest.memory_mib` and
:attr:`Candidates.free_mem`). A GPU pod first takes the nodes of least *scarce pressure*
(:func:`scarce_pressure`, :func:`scarce_tier`): GPUs that a scarce pod class seen so far (one
that only nodes with at most :data:`SCARCE_SHARE` % of the GPUs could host: a GPU-model
constraint, or a size too big for most nodes) will want are left to it, unless the pod eases
the node's stranding. :func:`default_keys` then decides among those nodes within
:data:`FGD_WINDOW` (1) point of their best FGD score: first the fewest newly *stranded* milli-GPU
(:func:`strand_delta`: idle GPU that the node's free CPU can no longer serve at the learned
mix's CPU per GPU), then FGD's score, then whole-GPU pods least CPU + GPU left (BestFit's s),
CPU-only pods least idle GPU then s, sharing pods the least look-ahead waste
(:func:`waste_delta`: how much the pod raises the milli-GPU its GPU is expected to leave idle
once filled by later pods of the learned mix, in 20-milli steps), and the remaining ties to the
seeded node order, which consolidates. Sharing pods take, on the chosen node, the GPU with
FGD's best score and then the least look-ahead waste. What was tried and measured is in
``docs/FGD.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import (
    GPU_MILLI,
    MAX_GPUS,
    NO_FIT,
    TargetWorkload,
    fragment_counts,
    node_fragmentation,
    share_drop_units,
    sigmoid_score,
    target_workload,
    whole_drop_units,
)
from fusesched.policies.gpu_power import cpu_need_per_gpu

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "FGD_WINDOW",
    "GPU_MILLI",
    "GPU_SCORERS",
    "MAX_CPU_MILLI",
    "MAX_GPUS",
    "MAX_GPU_MILLI",
    "SCARCE_SHARE",
    "TAG_COLUMNS",
    "WASTE_STEP",
    "Candidates",
    "PodRequest",
    "ScoreContext",
    "TargetWorkload",
    "default_keys",
    "fgd_drop_units",
    "fragment_counts",
    "node_fragmentation",
    "pod_tag",
    "scarce_pressure",
    "scarce_tier",
    "select_gpus",
    "strand_delta",
    "stranded_units",
    "target_workload",
    "waste_delta",
]

MAX_CPU_MILLI = 128_000  # "max node spec" constants of the score plugins
MAX_GPU_MILLI = 8_000
TAG_COLUMNS = MAX_GPUS + 1  # Clustering tags: column 0 = "share", column k = "k-gpu"


@dataclass(frozen=True)
class PodRequest:
    """What a pod asks for. ``cpu_milli`` is the request as filed (0 scores as 100)."""

    cpu_milli: int
    gpu_milli: int  # per-GPU share; 0 for CPU-only pods
    num_gpu: int
    memory_mib: int = 0  # read only by a target workload with memory (``default``'s)

    @property
    def score_cpu(self) -> int:
        return self.cpu_milli if self.cpu_milli > 0 else 100

    @property
    def total_gpu(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < GPU_MILLI


@dataclass(frozen=True, eq=False)
class Candidates:
    """The feasible nodes of one pod, as the score plugins see them (state before placement).

    ``tags`` (nodes × TAG_COLUMNS, bool) is only read by Clustering. ``type_ok``,
    ``fit_count`` and ``sub_sum`` (nodes × M) are only read by FGD; the counts are computed
    from ``free_gpu`` when absent (a simulator passes incrementally maintained ones).
    """

    free_cpu: IntArray  # (n,)
    free_gpu: IntArray  # (n, MAX_GPUS)
    gpu_count: IntArray  # (n,)
    tags: BoolArray | None = None
    type_ok: BoolArray | None = None
    fit_count: IntArray | None = None
    sub_sum: IntArray | None = None
    free_mem: IntArray | None = None  # (n,) MiB; only for a target workload with memory
    pressure: IntArray | None = None  # (n,) %; only ``default`` (:func:`scarce_pressure`)

    def __len__(self) -> int:
        return int(self.free_cpu.shape[0])

    @property
    def idle_gpu(self) -> IntArray:
        idle: IntArray = self.free_gpu.sum(axis=1)
        return idle

    def row(self, i: int) -> Candidates:
        """The one-node snapshot of candidate ``i``."""
        s = slice(i, i + 1)
        return Candidates(
            self.free_cpu[s],
            self.free_gpu[s],
            self.gpu_count[s],
            _cut(self.tags, s),
            _cut(self.type_ok, s),
            _cut(self.fit_count, s),
            _cut(self.sub_sum, s),
            _cut(self.free_mem, s),
            _cut(self.pressure, s),
        )


ArrayT = TypeVar("ArrayT", bound=npt.NDArray[Any])


def _cut(array: ArrayT | None, rows: slice) -> ArrayT | None:
    return None if array is None else cast(ArrayT, array[rows])


@dataclass(frozen=True, eq=False)
class ScoreContext:
    """What some policies need besides the nodes: Random's generator, FGD's target."""

    rng: np.random.Generator | None = None
    target: TargetWorkload | None = None


def pod_tag(pod: PodRequest) -> int:
    """Clustering's tag column of a GPU pod: 0 = "share", k = "k-gpu"."""
    return 0 if pod.sharing else pod.num_gpu


def _trunc(x: FloatArray) -> IntArray:
    out: IntArray = np.trunc(x).astype(np.int64)
    return out


def random_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """One uniformly drawn node gets 100, the others 0."""
    if ctx.rng is None:
        raise ValueError("the random policy needs ScoreContext.rng")
    out = np.zeros(len(cand), dtype=np.int64)
    out[int(ctx.rng.integers(len(cand)))] = 100
    return out


def dot_product_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """⌊100·(1 − dot/2)⌋ of the normalised free (CPU, GPU) and request vectors."""
    dot = (cand.free_cpu / MAX_CPU_MILLI) * (pod.score_cpu / MAX_CPU_MILLI) + (
        cand.idle_gpu / MAX_GPU_MILLI
    ) * (pod.total_gpu / MAX_GPU_MILLI)
    return _trunc((1.0 - dot / 2.0) * 100.0)


def clustering_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """GPU-type affinity: base ⌊25·used/8000⌋ plus 75 / 50 / 25 / 0 by the node's tag set."""
    if pod.num_gpu == 0:
        return np.zeros(len(cand), dtype=np.int64)
    if cand.tags is None:
        raise ValueError("the clustering policy needs Candidates.tags")
    base = (25 * (MAX_GPU_MILLI - cand.idle_gpu)) // MAX_GPU_MILLI
    has = cand.tags[:, pod_tag(pod)]
    ntags = cand.tags.sum(axis=1)
    bonus = np.where(has & (ntags == 1), 75, np.where(has, 50, np.where(ntags == 0, 25, 0)))
    out: IntArray = (base + bonus).astype(np.int64)
    return out


def _best_fit_free(cand: Candidates, pod: PodRequest) -> IntArray:
    """Free milli of each node's best-fit GPU (smallest f_j ≥ g); large if none fits."""
    masked = np.where(cand.free_gpu >= pod.gpu_milli, cand.free_gpu, np.iinfo(np.int64).max)
    best: IntArray = masked.min(axis=1)
    return best


def packing_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """Share a used GPU > open a free GPU on a used node > open an idle node."""
    n = len(cand)
    if pod.num_gpu == 0:
        return np.zeros(n, dtype=np.int64)
    full = (cand.free_gpu == GPU_MILLI).sum(axis=1)
    idle_node = full == cand.gpu_count
    g = cand.gpu_count
    idle_score = np.maximum(33 - g, g)
    if pod.sharing:
        f = _best_fit_free(cand, pod)
        used = np.where(f == GPU_MILLI, 49, np.maximum(100 - f // 100, 50))
    else:
        used = np.full(n, max(50 - pod.num_gpu, 33))
    out: IntArray = np.where(idle_node, idle_score, used).astype(np.int64)
    return out


def best_fit_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """⌊100·(1 − s)⌋, s = ½·left CPU/128000 + ½·left GPU/8000, min-max rescaled to 0-100."""
    s = (
        0.5 * (cand.free_cpu - pod.score_cpu) / MAX_CPU_MILLI
        + 0.5 * (cand.idle_gpu - pod.total_gpu) / MAX_GPU_MILLI
    )
    raw = _trunc(100.0 * (1.0 - s))
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.zeros(len(cand), dtype=np.int64)
    out: IntArray = (raw - lo) * 100 // (hi - lo)
    return out


def _fgd_parts(
    cand: Candidates, ctx: ScoreContext
) -> tuple[TargetWorkload, IntArray, IntArray, BoolArray]:
    if ctx.target is None:
        raise ValueError("the fgd policy needs ScoreContext.target")
    target = ctx.target
    if cand.fit_count is None or cand.sub_sum is None:
        fit_count, sub_sum = fragment_counts(cand.free_gpu, target)
    else:
        fit_count, sub_sum = cand.fit_count, cand.sub_sum
    type_ok = (
        cand.type_ok
        if cand.type_ok is not None
        else np.ones((len(cand), len(target)), dtype=np.bool_)
    )
    return target, fit_count, sub_sum, type_ok


def _share_pairs(cand: Candidates, pod: PodRequest) -> tuple[IntArray, IntArray]:
    """Distinct (node, free milli) pairs that fit the sharing pod (the score depends on f_j)."""
    rows_all, cols = np.nonzero(cand.free_gpu >= pod.gpu_milli)
    key = np.unique(rows_all * (GPU_MILLI + 1) + cand.free_gpu[rows_all, cols])
    rows: IntArray = key // (GPU_MILLI + 1)
    f: IntArray = key % (GPU_MILLI + 1)
    return rows, f


def _fgd_share_units(
    cand: Candidates, pod: PodRequest, ctx: ScoreContext, rows: IntArray, f: IntArray
) -> IntArray:
    """W·(F_before − F_after) of the sharing pod on a GPU with free ``f`` of node ``rows``."""
    target, fit_count, sub_sum, type_ok = _fgd_parts(cand, ctx)
    return share_drop_units(
        cand.idle_gpu[rows],
        cand.free_cpu[rows],
        fit_count[rows],
        sub_sum[rows],
        type_ok[rows],
        target,
        pod.score_cpu,
        pod.gpu_milli,
        f,
        free_mem=_mem(cand, target, rows),
        memory=pod.memory_mib,
    )


def _fgd_whole_units(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """W·(F_before − F_after) per node of a whole-GPU or CPU-only pod."""
    target, fit_count, sub_sum, type_ok = _fgd_parts(cand, ctx)
    return whole_drop_units(
        cand.idle_gpu, cand.free_cpu, fit_count, sub_sum, type_ok, target,
        pod.score_cpu, pod.num_gpu, free_mem=_mem(cand, target, None), memory=pod.memory_mib,
    )  # fmt: skip


def _mem(cand: Candidates, target: TargetWorkload, rows: IntArray | None) -> IntArray | None:
    """The candidates' free memory (gathered to ``rows``) when the target reads it."""
    if target.memory_mib is None:
        return None
    if cand.free_mem is None:
        raise ValueError("a target workload with memory needs Candidates.free_mem")
    return cand.free_mem if rows is None else cand.free_mem[rows]


def fgd_drop_units(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """W·ΔF per node (sharing pods: the best fitting GPU's; :data:`NO_FIT` if none fits)."""
    if not pod.sharing:
        return _fgd_whole_units(cand, pod, ctx)
    rows, f = _share_pairs(cand, pod)
    out = np.full(len(cand), NO_FIT, dtype=np.int64)
    np.maximum.at(out, rows, _fgd_share_units(cand, pod, ctx, rows, f))
    return out


def fgd_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """⌊100·σ((F_before − F_after)/1000)⌋; sharing pods: best over the GPUs that fit."""
    units = fgd_drop_units(cand, pod, ctx)
    assert ctx.target is not None
    out = sigmoid_score(units, ctx.target.total)
    out[units == NO_FIT] = 0
    return out


def _rank_score(keys: Sequence[IntArray]) -> IntArray:
    """Dense rank of the lexicographic keys (each higher-better), scaled to 0-100.

    The best key tuple gets 100, the worst 0; equal tuples get equal scores (they fall to the
    seeded node order), distinct tuples keep their order up to the 0-100 resolution below the
    top.
    """
    n = len(keys[0])
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort(tuple(reversed(keys)))
    step = np.zeros(n, dtype=np.int64)
    for k in keys:
        v = k[order]
        step[1:] |= v[1:] != v[:-1]
    dense = np.cumsum(step)
    top = int(dense[-1])
    if top == 0:
        out[:] = 100
        return out
    out[order] = (dense * 100) // top
    return out


#: Resolution (milli-GPU) of ``default``'s look-ahead waste key for sharing pods: coarse, so
#: that nodes within a step stay tied and keep consolidating in the seeded node order.
WASTE_STEP = 20.0


def waste_delta(free_gpu: IntArray, gpu_milli: int, table: FloatArray) -> FloatArray:
    """(nodes, GPUs): W(f − g) − W(f) of a sharing pod on each GPU; +inf where it does not fit.

    ``table`` is :attr:`TargetWorkload.waste_table`: the change in the expected milli-GPU that
    this GPU finally leaves idle.
    """
    fits = free_gpu >= gpu_milli
    left = np.maximum(free_gpu - gpu_milli, 0)
    out: FloatArray = np.where(fits, table[left] - table[free_gpu], np.inf)
    return out


#: FGD score points below the best within which ``default``'s own keys decide: one truncated
#: point is ≈ 40 milli-GPU of fragmentation change near ΔF = 0, about FGD's own resolution.
FGD_WINDOW = 1


def stranded_units(free_cpu: IntArray, idle: IntArray, need: int) -> IntArray:
    """need · (stranded milli-GPU): idle milli-GPU that the free CPU cannot serve at ``need``.

    ``need`` is milli-CPU per whole GPU (:func:`~fusesched.policies.gpu_power.cpu_need_per_gpu`
    of the learned target); the node's free CPU serves ``free_cpu · 1000 / need`` milli-GPU,
    the rest of its idle GPU is stranded: max(0, idle·need − free_cpu·1000), exact.
    """
    out: IntArray = np.maximum(0, idle * need - np.maximum(free_cpu, 0) * GPU_MILLI)
    return out


def strand_delta(pod: PodRequest, free_cpu: IntArray, idle: IntArray, need: int) -> IntArray:
    """Milli-GPU (rounded down) the pod newly strands on each node (negative: frees).

    The change of :func:`stranded_units` when the pod takes its CPU and GPU: a CPU-heavy pod
    on a node short of CPU strands more, a CPU-light one eases it; 0 where the CPU is ample
    before and after. No GPU in the mix (``need`` 0): 0 everywhere.
    """
    if need <= 0:
        return np.zeros(len(free_cpu), dtype=np.int64)
    after = stranded_units(free_cpu - pod.cpu_milli, idle - pod.total_gpu, need)
    out: IntArray = (after - stranded_units(free_cpu, idle, need)) // need
    return out


#: A GPU pod class is *scarce* when the nodes that could ever host it (a GPU model its spec
#: allows, at least its GPU count, total CPU and memory at least its request) hold at most this
#: share (%) of the cluster's GPUs: a model-constrained class, or one too big for most nodes.
SCARCE_SHARE = 25


def scarce_pressure(eligible: BoolArray, demand: IntArray, gpu_count: IntArray) -> IntArray:
    """Per node (%): how much of the node's GPUs the scarce pod classes seen so far will want.

    ``eligible`` (classes × nodes) marks the nodes that could host each GPU class when empty,
    ``demand`` (classes) the milli-GPU its arrivals asked for (every GPU class, so that the sum
    is all the GPU demand seen). A scarce class (its nodes hold at most :data:`SCARCE_SHARE` %
    of the GPUs) adds ⌊100 · (its share of the demand) / (its nodes' share of the GPUs)⌋ to
    each node it can use: 100 means its pods alone fill those nodes by the time the arrivals
    equal the cluster's capacity. Other classes add nothing; exact integers.
    """
    n = len(gpu_count)
    total = int(demand.sum())
    cap = int(gpu_count.sum())
    if total == 0 or cap == 0 or len(demand) == 0:
        return np.zeros(n, dtype=np.int64)
    cap_c = eligible.astype(np.int64) @ gpu_count
    scarce = (cap_c > 0) & (cap_c * 100 <= SCARCE_SHARE * cap)
    share = (demand[scarce].astype(np.int64) * cap * 100) // (total * cap_c[scarce])
    out: IntArray = share @ eligible[scarce].astype(np.int64)
    return out


def scarce_tier(
    pod: PodRequest, pressure: IntArray, free_cpu: IntArray, idle: IntArray, need: int
) -> IntArray:
    """Per node: the scarce pressure a GPU pod meets there (``default`` takes the least).

    The node's :func:`scarce_pressure`, except 0 where the pod eases the node's stranding
    (:func:`strand_delta` < 0): those idle GPUs lack the CPU for the mix's pods, scarce ones
    included, so a CPU-light pod may use them. CPU-only pods: 0 everywhere.
    """
    if pod.num_gpu == 0:
        return np.zeros(len(free_cpu), dtype=np.int64)
    eased = strand_delta(pod, free_cpu, idle, need) < 0
    out: IntArray = np.where(eased, 0, pressure)
    return out


def default_keys(
    pod: PodRequest,
    fgd: IntArray,
    free_cpu: IntArray,
    idle: IntArray,
    free_gpu: IntArray,
    target: TargetWorkload,
    tier: IntArray | None = None,
) -> list[IntArray]:
    """``default``'s lexicographic node keys (each higher-better).

    (0) With ``tier`` (:func:`scarce_tier`), the least scarce pressure; (1) FGD's integer score
    within :data:`FGD_WINDOW` of the best among the nodes of that least pressure (all nodes
    without ``tier``); (2) the fewest newly stranded milli-GPU (:func:`strand_delta` at the
    learned mix's CPU per GPU); (3) FGD's score; then whole-GPU pods least CPU + GPU left
    (BestFit's s ∝ free CPU + 16·idle GPU milli), CPU-only pods least idle GPU, then least s,
    sharing pods least look-ahead waste (:func:`waste_delta` of the node's best GPU, in steps
    of :data:`WASTE_STEP` milli). Arguments are per candidate node (including the best-scored
    one); ``target`` is the workload ``default`` learned online.
    """
    first = np.ones(len(fgd), dtype=np.bool_) if tier is None else tier == tier.min()
    window = (first & (fgd >= fgd[first].max() - FGD_WINDOW)).astype(np.int64)
    strand = -strand_delta(pod, free_cpu, idle, cpu_need_per_gpu(target))
    lead = [window] if tier is None else [-tier, window]
    if pod.sharing:
        best = waste_delta(free_gpu, pod.gpu_milli, target.waste_table).min(axis=1)
        steps = np.where(np.isfinite(best), np.round(best / WASTE_STEP), 1e9)
        return [*lead, strand, fgd, -steps.astype(np.int64)]
    left = -(free_cpu + (MAX_CPU_MILLI // MAX_GPU_MILLI) * idle)
    if pod.num_gpu == 0:
        return [*lead, strand, fgd, -idle, left]
    return [*lead, strand, fgd, left]


def default_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """fusesched's policy: :func:`default_keys` (least scarce pressure, then FGD's integer
    score within a window). ``Candidates.pressure`` absent: no scarce classes.

    The key tuple is dense-ranked into 0-100 so the secondary keys survive truncation.
    """
    target, *_ = _fgd_parts(cand, ctx)
    fgd = fgd_score(cand, pod, ctx)
    idle = cand.idle_gpu
    tier = None
    if cand.pressure is not None:
        need = cpu_need_per_gpu(target)
        tier = scarce_tier(pod, cand.pressure, cand.free_cpu, idle, need)
    keys = default_keys(pod, fgd, cand.free_cpu, idle, cand.free_gpu, target, tier)
    return _rank_score(keys)


Scorer = Callable[[Candidates, PodRequest, ScoreContext], IntArray]

GPU_SCORERS: Mapping[str, Scorer] = {
    "random": random_score,
    "dot-product": dot_product_score,
    "clustering": clustering_score,
    "packing": packing_score,
    "best-fit": best_fit_score,
    "fgd": fgd_score,
    "default": default_score,
}


def select_gpus(policy: str, node: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """The GPU indices the pod takes on the chosen node (a one-row :class:`Candidates`).

    Whole-GPU pods: the lowest-indexed fully free GPUs. Sharing pods: Random draws uniformly
    among fitting GPUs; FGD takes the first GPU reaching the best FGD score; ``default`` among
    those the one with the least look-ahead waste (:func:`waste_delta`), then the lowest index;
    all others take the best-fit GPU (smallest sufficient free milli, lowest index on ties).
    """
    if policy not in GPU_SCORERS:
        raise ValueError(f"unknown GPU policy {policy!r}; known: {', '.join(GPU_SCORERS)}")
    free = node.free_gpu[0]
    if pod.num_gpu == 0:
        return np.zeros(0, dtype=np.int64)
    if not pod.sharing:
        full = np.flatnonzero(free == GPU_MILLI)
        if len(full) < pod.num_gpu:
            raise ValueError("the node has too few fully free GPUs for the pod")
        return full[: pod.num_gpu].astype(np.int64)
    fits = np.flatnonzero(free >= pod.gpu_milli)
    if len(fits) == 0:
        raise ValueError("no GPU of the node fits the pod")
    if policy == "random":
        if ctx.rng is None:
            raise ValueError("the random policy needs ScoreContext.rng")
        return np.array([fits[int(ctx.rng.integers(len(fits)))]], dtype=np.int64)
    if policy in ("fgd", "default"):
        if ctx.target is None:
            raise ValueError(f"the {policy} policy needs ScoreContext.target")
        f = free[fits].astype(np.int64)
        units = _fgd_share_units(node, pod, ctx, np.zeros(len(fits), dtype=np.int64), f)
        scores = sigmoid_score(units, ctx.target.total)
        if policy == "fgd":
            return np.array([fits[int(np.argmax(scores))]], dtype=np.int64)
        # default: the best FGD score, then the least look-ahead waste, then the lowest index
        waste = waste_delta(f[None, :], pod.gpu_milli, ctx.target.waste_table)[0]
        return np.array([fits[np.lexsort((fits, waste, -scores))[0]]], dtype=np.int64)
    return np.array([fits[int(np.argmin(free[fits]))]], dtype=np.int64)
