"""Node keys of ``default``, fusesched's own GPU-placement policy (not from the FGD paper).

``default`` starts from FGD's integer score ⌊100·σ(ΔF/1000)⌋, computed against a target
workload *learned online* from the pods that have arrived so far
(:mod:`fusesched.sim.protocols.fgd_cluster` refreshes it at 1, 2, 4, … arrivals; never from the pod
list) whose GPU classes also carry their memory, so that a node left without the memory of a
typical GPU pod counts its idle GPUs as fragment (FGD's measure looks at CPU only; needs
:attr:`~fusesched.policies.gpu_inputs.PodRequest.memory_mib` and
:attr:`~fusesched.policies.gpu_inputs.Candidates.free_mem`). A GPU pod first takes the nodes
of least *scarce pressure* (:func:`scarce_pressure`, :func:`scarce_tier`): GPUs that a scarce
pod class seen so far (one that only nodes with at most :data:`SCARCE_SHARE` % of the GPUs
could host: a GPU-model constraint, or a size too big for most nodes) will want are left to
it, unless the pod eases the node's stranding. :func:`default_keys` then decides among those
nodes within :data:`FGD_WINDOW` (1) point of their best FGD score: first the fewest newly
*stranded* milli-GPU (:func:`strand_delta`: idle GPU that the node's free CPU can no longer
serve at the learned mix's CPU per GPU), then FGD's score, then whole-GPU pods least CPU + GPU
left (BestFit's s), CPU-only pods least idle GPU then s, sharing pods the least look-ahead
waste (:func:`waste_delta`: how much the pod raises the milli-GPU its GPU is expected to leave
idle once filled by later pods of the learned mix, in 20-milli steps), and the remaining ties
to the seeded node order, which consolidates. Sharing pods take, on the chosen node, the GPU
with FGD's best score and then the least look-ahead waste. What was tried and measured is in
``docs/FGD.md``.

The score itself (:func:`fusesched.policies.gpu_scores.default_score`, which dense-ranks
these keys) and the GPU choice (:func:`fusesched.policies.gpu_scores.select_gpus`) are with
the paper's policies.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import GPU_MILLI, TargetWorkload
from fusesched.policies.gpu_inputs import MAX_CPU_MILLI, MAX_GPU_MILLI, PodRequest
from fusesched.policies.gpu_power import cpu_need_per_gpu

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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
