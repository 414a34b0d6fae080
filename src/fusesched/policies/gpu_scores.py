"""Node scores of the FGD paper's six GPU-placement policies, and their GPU choice.

Exactly the definitions of ``shared/anchors/fgd/PROTOCOL.md`` section 3 (scores) and section 4
(fragmentation measure, target workload). Every function is pure and vectorised over the
candidate nodes: the caller passes a :class:`Candidates` snapshot of the feasible nodes and a
:class:`PodRequest`, and gets one integer score (0-100, truncated like Go's float→int) per node.

GPU matrices are ``nodes × MAX_GPUS`` of free milli-GPU; GPUs a node does not have are padded
with 0, which no formula can tell from a fully allocated GPU (and needs not to).

A seventh policy, ``default``, is fusesched's own recommendation (not from the paper): FGD with
a best-fit tie-break for whole-GPU pods, least idle GPU then best fit for CPU-only pods, and the
tightest GPU among FGD's best for sharing pods. FGD's integer scores tie often
(⌊100·σ(ΔF/1000)⌋ is flat for large |ΔF|, and many nodes have the same ΔF), and the ties fall
to the seeded random node order. For a whole-GPU pod, ``default`` breaks them by least CPU + GPU
left (BestFit's s), keeping nodes with much spare CPU and many free GPUs whole for later large
pods. Measured on seeds 42-46 (seeds 47-51 only confirmed it): breaking FGD's ties helps,
refining FGD's own resolution does not.
Ranking by the exact ΔF lost about 1 point of allocation on the default trace, and sigmoid
scales of 500, 2000 or 4000 milli instead of 1000 lost 0.04-0.19 point (presumably the coarse
buckets, broken at random, spread near-equal placements that later pods can still use). A
best-fit tie-break for *sharing* pods lost ~0.3 point on gpushare100 (while gaining on
gpuspec33), so sharing pods keep FGD's node choice; every other deterministic tie-break tried
for them (a look-ahead on the target classes that still fit, CPU left) lost 1-2 points.
For CPU-only pods, preferring the node with the least idle GPU before best fit gained a few
hundredths on gpushare100 (within seed noise). Results in ``docs/FGD.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "GPU_MILLI",
    "GPU_SCORERS",
    "MAX_CPU_MILLI",
    "MAX_GPUS",
    "MAX_GPU_MILLI",
    "TAG_COLUMNS",
    "Candidates",
    "PodRequest",
    "ScoreContext",
    "TargetWorkload",
    "fragment_counts",
    "node_fragmentation",
    "pod_tag",
    "select_gpus",
    "target_workload",
]

GPU_MILLI = 1000
MAX_GPUS = 8
MAX_CPU_MILLI = 128_000  # "max node spec" constants of the score plugins
MAX_GPU_MILLI = 8_000
TAG_COLUMNS = MAX_GPUS + 1  # Clustering tags: column 0 = "share", column k = "k-gpu"


@dataclass(frozen=True)
class PodRequest:
    """What a pod asks for. ``cpu_milli`` is the request as filed (0 scores as 100)."""

    cpu_milli: int
    gpu_milli: int  # per-GPU share; 0 for CPU-only pods
    num_gpu: int

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
class TargetWorkload:
    """FGD's "typical pods" (section 4): M classes with their probabilities."""

    cpu_milli: IntArray  # (M,)
    gpu_milli: IntArray  # (M,) per-GPU; 0 = CPU-only class
    num_gpu: IntArray  # (M,)
    gpu_types: tuple[tuple[str, ...], ...]  # allowed models; () = any
    prob: FloatArray  # (M,), sums to 1

    def __len__(self) -> int:
        return len(self.gpu_types)

    def type_ok(self, models: Sequence[str]) -> BoolArray:
        """(nodes, M): whether each node's GPU model is allowed for each class."""
        out = np.ones((len(models), len(self)), dtype=np.bool_)
        for m, types in enumerate(self.gpu_types):
            if types:
                out[:, m] = [model in types for model in models]
        return out


def target_workload(
    cpu_milli: Sequence[int],
    gpu_milli: Sequence[int],
    num_gpu: Sequence[int],
    gpu_spec: Sequence[tuple[str, ...]],
    *,
    popularity: int = 95,
) -> TargetWorkload:
    """Group pods by (CPU, per-GPU milli, count, type string) and keep the popular groups.

    Groups are taken by count descending (ties: larger CPU, GPU milli, count, type string first)
    while the cumulative count is below ``popularity``·N/100; CPU-only pods form groups with
    per-GPU 0, count 0 and an empty type string.
    """
    keys: Counter[tuple[int, int, int, str]] = Counter()
    for cpu, milli, count, spec in zip(cpu_milli, gpu_milli, num_gpu, gpu_spec, strict=True):
        cpu = int(cpu) if cpu > 0 else 100
        if count == 0:
            keys[(cpu, 0, 0, "")] += 1
        else:
            keys[(cpu, int(milli), int(count), "|".join(spec))] += 1
    total = sum(keys.values())
    if total == 0:
        raise ValueError("the target workload needs at least one pod")
    order = sorted(keys.items(), key=lambda kv: (kv[1], *kv[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in order:
        if covered * 100 >= popularity * total:
            break
        kept.append((key, n))
        covered += n
    counts = np.array([n for _, n in kept], dtype=np.float64)
    return TargetWorkload(
        np.array([k[0] for k, _ in kept], dtype=np.int64),
        np.array([k[1] for k, _ in kept], dtype=np.int64),
        np.array([k[2] for k, _ in kept], dtype=np.int64),
        tuple(tuple(k[3].split("|")) if k[3] else () for k, _ in kept),
        counts / counts.sum(),
    )


def fragment_counts(free_gpu: IntArray, target: TargetWorkload) -> tuple[IntArray, IntArray]:
    """Per node and class: GPUs with free ≥ g_m, and the summed free milli of the others."""
    g = target.gpu_milli[None, None, :]
    f = free_gpu[:, :, None]
    fits = f >= g
    fit_count: IntArray = fits.sum(axis=1).astype(np.int64)
    sub_sum: IntArray = np.where(fits, 0, f).sum(axis=1).astype(np.int64)
    return fit_count, sub_sum


def node_fragmentation(
    idle: IntArray,
    free_cpu: IntArray,
    fit_count: IntArray,
    sub_sum: IntArray,
    type_ok: BoolArray,
    target: TargetWorkload,
) -> FloatArray:
    """F_n = Σ_m p_m · frag_n(m) in milli-GPU (section 4), from the counts above.

    All inputs are per node (first axis); ``fit_count``, ``sub_sum`` and ``type_ok`` are
    (nodes, M). A class is "satisfied" (fragment = sub-threshold GPUs only) when it is a GPU
    class, its type is allowed, CPU suffices and enough GPUs fit; otherwise all idle GPU is
    fragment.
    """
    ok = (
        type_ok
        & (target.gpu_milli > 0)[None, :]
        & (free_cpu[:, None] >= target.cpu_milli[None, :])
        & (fit_count >= target.num_gpu[None, :])
    )
    frag = np.where(ok, sub_sum, idle[:, None]).astype(np.float64)
    out: FloatArray = frag @ target.prob
    return out


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


def _sigmoid_score(delta: FloatArray) -> IntArray:
    return _trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))


def _fgd_share_pairs(
    cand: Candidates, pod: PodRequest, ctx: ScoreContext, rows: IntArray, f: IntArray
) -> IntArray:
    """FGD score of putting the sharing pod on a GPU with free ``f`` of node ``rows``."""
    return _sigmoid_score(_fgd_share_drop(cand, pod, ctx, rows, f))


def _fgd_share_drop(
    cand: Candidates, pod: PodRequest, ctx: ScoreContext, rows: IntArray, f: IntArray
) -> FloatArray:
    """F_before − F_after (milli-GPU) of the sharing pod on a GPU with free ``f`` of ``rows``."""
    target, fit_count, sub_sum, type_ok = _fgd_parts(cand, ctx)
    idle = cand.idle_gpu
    before = node_fragmentation(
        idle[rows], cand.free_cpu[rows], fit_count[rows], sub_sum[rows], type_ok[rows], target
    )
    gm = target.gpu_milli[None, :]
    fc, fa = f[:, None], (f - pod.gpu_milli)[:, None]
    cnt = fit_count[rows] - (fc >= gm) + (fa >= gm)
    sub = sub_sum[rows] - np.where(fc < gm, fc, 0) + np.where(fa < gm, fa, 0)
    after = node_fragmentation(
        idle[rows] - pod.gpu_milli,
        cand.free_cpu[rows] - pod.score_cpu,
        cnt,
        sub,
        type_ok[rows],
        target,
    )
    drop: FloatArray = before - after
    return drop


def fgd_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """⌊100·σ((F_before − F_after)/1000)⌋; sharing pods: best over the GPUs that fit."""
    n = len(cand)
    if pod.sharing:
        # Only distinct (node, free) pairs matter: the score depends on f_j, not on j.
        rows_all, cols = np.nonzero(cand.free_gpu >= pod.gpu_milli)
        key = np.unique(rows_all * (GPU_MILLI + 1) + cand.free_gpu[rows_all, cols])
        rows, f = key // (GPU_MILLI + 1), key % (GPU_MILLI + 1)
        pair = _fgd_share_pairs(cand, pod, ctx, rows, f)
        out = np.zeros(n, dtype=np.int64)
        np.maximum.at(out, rows, pair)
        return out
    return _sigmoid_score(_fgd_whole_drop(cand, pod, ctx))


def _fgd_whole_drop(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> FloatArray:
    """F_before − F_after (milli-GPU) per node of a whole-GPU or CPU-only pod."""
    target, fit_count, sub_sum, type_ok = _fgd_parts(cand, ctx)
    idle = cand.idle_gpu
    before = node_fragmentation(idle, cand.free_cpu, fit_count, sub_sum, type_ok, target)
    k = pod.num_gpu
    after = node_fragmentation(
        idle - GPU_MILLI * k if k else idle,
        cand.free_cpu - pod.score_cpu,
        fit_count - k,  # k fully free GPUs leave; every class has g_m ≤ 1000
        sub_sum,
        type_ok,
        target,
    )
    drop: FloatArray = before - after
    return drop


def _rank_score(primary: FloatArray, secondary: FloatArray) -> IntArray:
    """Dense rank of (primary, secondary), both higher-better, scaled to 0-100.

    The best key gets 100, the worst 0; equal keys get equal scores (they fall to the seeded
    node order), distinct keys keep their order up to the 0-100 resolution below the top.
    """
    n = len(primary)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort((secondary, primary))
    p, q = primary[order], secondary[order]
    step = np.concatenate([[0], ((p[1:] != p[:-1]) | (q[1:] != q[:-1])).astype(np.int64)])
    dense = np.cumsum(step)
    top = int(dense[-1])
    if top == 0:
        out[:] = 100
        return out
    out[order] = (dense * 100) // top
    return out


def _default_share_pairs(
    cand: Candidates, pod: PodRequest, ctx: ScoreContext
) -> tuple[IntArray, IntArray, IntArray]:
    """Distinct (node, free milli) pairs that fit the sharing pod, and their FGD scores."""
    rows_all, cols = np.nonzero(cand.free_gpu >= pod.gpu_milli)
    key = np.unique(rows_all * (GPU_MILLI + 1) + cand.free_gpu[rows_all, cols])
    rows, f = key // (GPU_MILLI + 1), key % (GPU_MILLI + 1)
    return rows, f, _fgd_share_pairs(cand, pod, ctx, rows, f)


def default_score(cand: Candidates, pod: PodRequest, ctx: ScoreContext) -> IntArray:
    """fusesched's policy: FGD's integer score first, best-fit among its ties (non-sharing pods).

    Primary key: exactly FGD's ⌊100·σ(ΔF/1000)⌋ (for sharing pods the best over the fitting
    GPUs). Secondary key, whole-GPU pods: least CPU + GPU left on the node (BestFit's s, before
    rescaling); CPU-only pods: least idle GPU milli on the node, then BestFit's s (keeping the
    CPU of nodes with free GPU for GPU pods). Sharing pods keep FGD's ties, which then fall to
    the seeded node order. The pair is dense-ranked into 0-100 so the secondary key survives
    truncation.
    """
    n = len(cand)
    if pod.sharing:
        rows, _, pair = _default_share_pairs(cand, pod, ctx)
        best = np.zeros(n, dtype=np.int64)
        np.maximum.at(best, rows, pair)
        return _rank_score(best.astype(np.float64), np.zeros(n))
    primary = _sigmoid_score(_fgd_whole_drop(cand, pod, ctx)).astype(np.float64)
    left = (
        0.5 * (cand.free_cpu - pod.score_cpu) / MAX_CPU_MILLI
        + 0.5 * (cand.idle_gpu - pod.total_gpu) / MAX_GPU_MILLI
    )
    if pod.num_gpu == 0:
        # CPU-only pods: least idle GPU first (integer milli, so ×10 dominates left ≤ 1).
        return _rank_score(primary, -(cand.idle_gpu * 10.0) - left)
    return _rank_score(primary, -left)


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
    among fitting GPUs; FGD takes the first GPU reaching the best FGD score; ``default`` the
    tightest GPU (smallest free milli, then lowest index) among those reaching it; all others
    take the best-fit GPU (smallest sufficient free milli, lowest index on ties).
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
    if policy == "fgd":
        scores = _fgd_share_pairs(
            node, pod, ctx, np.zeros(len(fits), dtype=np.int64), free[fits].astype(np.int64)
        )
        return np.array([fits[int(np.argmax(scores))]], dtype=np.int64)
    if policy == "default":
        _, f, pair = _default_share_pairs(node, pod, ctx)
        best = f[np.lexsort((f, -pair))[0]]  # best FGD score, then the tightest GPU
        return np.array([fits[free[fits] == best][0]], dtype=np.int64)
    return np.array([fits[int(np.argmin(free[fits]))]], dtype=np.int64)
