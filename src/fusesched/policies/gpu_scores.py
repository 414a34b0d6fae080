"""Node scores of the FGD paper's six GPU-placement policies, and their GPU choice.

Exactly the definitions of ``shared/anchors/fgd/PROTOCOL.md`` section 3 (scores) and section 4
(fragmentation measure, target workload). Every function is pure and vectorised over the
candidate nodes: the caller passes a :class:`~fusesched.policies.gpu_inputs.Candidates`
snapshot of the feasible nodes and a :class:`~fusesched.policies.gpu_inputs.PodRequest`
(both in :mod:`fusesched.policies.gpu_inputs`), and gets one integer score (0-100, truncated
like Go's float→int) per node.

FGD's fragmentation measure and its incremental index live in
:mod:`fusesched.policies.gpu_frag` (exact integer units, so a score does not depend on which
other nodes are scored with it).

A seventh policy, ``default``, is fusesched's own recommendation (not from the paper):
:func:`default_score` dense-ranks the node keys of :mod:`fusesched.policies.gpu_default`
(least scarce pressure, then FGD's score within a window, then the fewest newly stranded
milli-GPU, …), and :func:`select_gpus` gives a sharing pod the GPU with FGD's best score and
then the least look-ahead waste.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_default import default_keys, scarce_tier, waste_delta
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
from fusesched.policies.gpu_inputs import (
    MAX_CPU_MILLI,
    MAX_GPU_MILLI,
    Candidates,
    PodRequest,
    ScoreContext,
    pod_tag,
)
from fusesched.policies.gpu_power import cpu_need_per_gpu

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "GPU_MILLI",
    "GPU_SCORERS",
    "MAX_GPUS",
    "TargetWorkload",
    "fgd_drop_units",
    "fragment_counts",
    "node_fragmentation",
    "select_gpus",
    "target_workload",
]


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
