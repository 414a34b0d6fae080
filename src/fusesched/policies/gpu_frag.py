"""FGD's fragmentation measure (PROTOCOL.md section 4), exact and incremental.

The measure of a node against the target workload is F_n = Σ_m p_m · frag_n(m) milli-GPU with
p_m = w_m / W (w_m the pod count of class m, W their sum). Everything here works in *units* of
W·F_n = Σ_m w_m · frag_n(m), an exact ``int64``: a score's drop ΔF = (units before − units
after) / W is then one correctly rounded division, so equal fragmentations give ΔF = 0 exactly
and a node's score does not depend on which other nodes were scored alongside it (a float
matrix-vector product can round a row differently by its position in the block).

:class:`FragIndex` keeps, per node, the fitting-GPU count and sub-threshold sum per target class
and the node's units; per pod shape (score CPU, per-GPU milli, GPU count) it caches the drop and
FGD's integer score of every node. After a placement only the changed node is recomputed
(:meth:`FragIndex.update`); a cached shape refreshes only the nodes changed since it was last
read, so a decision costs a few vector operations over the nodes instead of a pass over every
node and target class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "GPU_MILLI",
    "MAX_GPUS",
    "NO_FIT",
    "FragIndex",
    "TargetWorkload",
    "frag_units",
    "fragment_counts",
    "node_fragmentation",
    "share_drop_units",
    "sigmoid_score",
    "target_workload",
    "whole_drop_units",
]

GPU_MILLI = 1000
MAX_GPUS = 8
#: Drop units of a node on which no GPU fits a sharing pod (below any real drop).
NO_FIT = -(2**62)


@dataclass(frozen=True, eq=False)
class TargetWorkload:
    """FGD's "typical pods" (section 4): M classes with their pod counts (weights)."""

    cpu_milli: IntArray  # (M,)
    gpu_milli: IntArray  # (M,) per-GPU; 0 = CPU-only class
    num_gpu: IntArray  # (M,)
    gpu_types: tuple[tuple[str, ...], ...]  # allowed models; () = any
    weight: IntArray  # (M,) pod count of each class, all > 0
    #: (M,) memory (MiB) of each class, or None: memory is not part of the measure (FGD's
    #: definition). When given, a GPU class whose memory the node lacks counts all idle GPU
    #: as fragment, like a class whose CPU it lacks.
    memory_mib: IntArray | None = None

    def __len__(self) -> int:
        return len(self.gpu_types)

    @property
    def total(self) -> int:
        """W = Σ w_m: fragmentation units per milli-GPU."""
        return int(self.weight.sum())

    @property
    def prob(self) -> FloatArray:
        """p_m = w_m / W."""
        out: FloatArray = self.weight / float(self.total)
        return out

    @cached_property
    def waste_table(self) -> FloatArray:
        """W(r), r = 0…1000: expected milli-GPU finally left idle on a GPU with ``r`` free.

        A one-GPU look-ahead on the target's GPU classes: the GPU is filled by successive pods
        drawn from the classes that still fit (by their weights; a whole-GPU class needs the
        full 1000), until none fits; W(r) = r when no class fits, else Σ q_m · W(r − g_m).
        """
        gpu = self.num_gpu > 0
        g = np.where(self.num_gpu[gpu] > 1, GPU_MILLI, self.gpu_milli[gpu])
        w = self.weight[gpu].astype(np.float64)
        out = np.zeros(GPU_MILLI + 1, dtype=np.float64)
        for r in range(GPU_MILLI + 1):
            ok = g <= r
            if ok.any():
                q = w[ok] / w[ok].sum()
                out[r] = float((q * out[r - g[ok]]).sum())
            else:
                out[r] = r
        return out

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
    memory_mib: Sequence[int] | None = None,
) -> TargetWorkload:
    """Group pods by (CPU, per-GPU milli, count, type string) and keep the popular groups.

    Groups are taken by count descending (ties: larger CPU, GPU milli, count, type string first)
    while the cumulative count is below ``popularity``·N/100; CPU-only pods form groups with
    per-GPU 0, count 0 and an empty type string. With ``memory_mib`` the GPU classes are also
    split by memory (CPU-only classes are not: their fragment is all idle GPU anyway) and the
    target carries it (:attr:`TargetWorkload.memory_mib`).
    """
    memory = [0] * len(cpu_milli) if memory_mib is None else memory_mib
    keys: Counter[tuple[int, int, int, str, int]] = Counter()
    for cpu, milli, count, spec, mem in zip(
        cpu_milli, gpu_milli, num_gpu, gpu_spec, memory, strict=True
    ):
        cpu = int(cpu) if cpu > 0 else 100
        if count == 0:
            keys[(cpu, 0, 0, "", 0)] += 1
        else:
            keys[(cpu, int(milli), int(count), "|".join(spec), int(mem))] += 1
    total = sum(keys.values())
    if total == 0:
        raise ValueError("the target workload needs at least one pod")
    order = sorted(keys.items(), key=lambda kv: (kv[1], *kv[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str, int], int]] = []
    covered = 0
    for key, n in order:
        if covered * 100 >= popularity * total:
            break
        kept.append((key, n))
        covered += n
    return TargetWorkload(
        np.array([k[0] for k, _ in kept], dtype=np.int64),
        np.array([k[1] for k, _ in kept], dtype=np.int64),
        np.array([k[2] for k, _ in kept], dtype=np.int64),
        tuple(tuple(k[3].split("|")) if k[3] else () for k, _ in kept),
        np.array([n for _, n in kept], dtype=np.int64),
        None if memory_mib is None else np.array([k[4] for k, _ in kept], dtype=np.int64),
    )


def fragment_counts(free_gpu: IntArray, target: TargetWorkload) -> tuple[IntArray, IntArray]:
    """Per node and class: GPUs with free ≥ g_m, and the summed free milli of the others."""
    g = target.gpu_milli[None, None, :]
    f = free_gpu[:, :, None]
    fits = f >= g
    fit_count: IntArray = fits.sum(axis=1).astype(np.int64)
    sub_sum: IntArray = np.where(fits, 0, f).sum(axis=1).astype(np.int64)
    return fit_count, sub_sum


def frag_units(
    idle: IntArray,
    free_cpu: IntArray,
    fit_count: IntArray,
    sub_sum: IntArray,
    type_ok: BoolArray,
    target: TargetWorkload,
    free_mem: IntArray | None = None,
) -> IntArray:
    """W·F_n = Σ_m w_m · frag_n(m) per node, exact (int64).

    All inputs are per node (first axis); ``fit_count``, ``sub_sum`` and ``type_ok`` are
    (nodes, M). A class is "satisfied" (fragment = sub-threshold GPUs only) when it is a GPU
    class, its type is allowed, CPU suffices and enough GPUs fit; otherwise all idle GPU is
    fragment. A target with :attr:`TargetWorkload.memory_mib` also needs the nodes'
    ``free_mem`` (MiB): a class whose memory does not fit is not satisfied either.
    """
    ok = (
        type_ok
        & (target.gpu_milli > 0)[None, :]
        & (free_cpu[:, None] >= target.cpu_milli[None, :])
        & (fit_count >= target.num_gpu[None, :])
    )
    if target.memory_mib is not None:
        if free_mem is None:
            raise ValueError("a target workload with memory needs the nodes' free memory")
        ok &= free_mem[:, None] >= target.memory_mib[None, :]
    frag = np.where(ok, sub_sum, idle[:, None])
    out: IntArray = (frag * target.weight[None, :]).sum(axis=1, dtype=np.int64)
    return out


def node_fragmentation(
    idle: IntArray,
    free_cpu: IntArray,
    fit_count: IntArray,
    sub_sum: IntArray,
    type_ok: BoolArray,
    target: TargetWorkload,
) -> FloatArray:
    """F_n = Σ_m p_m · frag_n(m) in milli-GPU (section 4); see :func:`frag_units`."""
    units = frag_units(idle, free_cpu, fit_count, sub_sum, type_ok, target)
    out: FloatArray = units / float(target.total)
    return out


def sigmoid_score(units: IntArray, total: int) -> IntArray:
    """FGD's integer score ⌊100·σ(ΔF/1000)⌋ of drops given in units (ΔF = units / W)."""
    # |ΔF| ≤ 8000 milli for real drops; the clip only keeps NO_FIT from overflowing exp
    delta = np.clip(units / float(total), -1e5, 1e5)
    out: IntArray = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0))).astype(np.int64)
    return out


def whole_drop_units(
    idle: IntArray,
    free_cpu: IntArray,
    fit_count: IntArray,
    sub_sum: IntArray,
    type_ok: BoolArray,
    target: TargetWorkload,
    score_cpu: int,
    num_gpu: int,
    before: IntArray | None = None,
    free_mem: IntArray | None = None,
    memory: int = 0,
) -> IntArray:
    """W·(F_before − F_after) per node of a whole-GPU (``num_gpu`` ≥ 1) or CPU-only pod.

    ``before`` (the nodes' current units) is computed when not given. Taking k fully free GPUs
    lowers every class's fitting count by k (each class has g_m ≤ 1000) and leaves the
    sub-threshold sums alone. ``free_mem`` and the pod's ``memory`` (MiB) are read only by a
    target with memory.
    """
    if before is None:
        before = frag_units(idle, free_cpu, fit_count, sub_sum, type_ok, target, free_mem)
    after = frag_units(
        idle - GPU_MILLI * num_gpu,
        free_cpu - score_cpu,
        fit_count - num_gpu,
        sub_sum,
        type_ok,
        target,
        _less(free_mem, memory),
    )
    out: IntArray = before - after
    return out


def share_drop_units(
    idle: IntArray,
    free_cpu: IntArray,
    fit_count: IntArray,
    sub_sum: IntArray,
    type_ok: BoolArray,
    target: TargetWorkload,
    score_cpu: int,
    gpu_milli: int,
    f: IntArray,
    before: IntArray | None = None,
    free_mem: IntArray | None = None,
    memory: int = 0,
) -> IntArray:
    """W·(F_before − F_after) of a sharing pod put on a GPU with free milli ``f`` (≥ the pod).

    One row per (node, GPU) pair: the node arrays are already gathered to the pairs' rows.
    ``free_mem`` and ``memory`` as for :func:`whole_drop_units`.
    """
    if before is None:
        before = frag_units(idle, free_cpu, fit_count, sub_sum, type_ok, target, free_mem)
    gm = target.gpu_milli[None, :]
    fc, fa = f[:, None], (f - gpu_milli)[:, None]
    cnt = fit_count - (fc >= gm) + (fa >= gm)
    sub = sub_sum - np.where(fc < gm, fc, 0) + np.where(fa < gm, fa, 0)
    after = frag_units(
        idle - gpu_milli, free_cpu - score_cpu, cnt, sub, type_ok, target, _less(free_mem, memory)
    )
    out: IntArray = before - after
    return out


def _less(free_mem: IntArray | None, memory: int) -> IntArray | None:
    return None if free_mem is None else free_mem - memory


@dataclass
class _Shape:
    """Cached drops of one pod shape: valid for node i while ``seen[i] == version[i]``."""

    units: IntArray  # (n,) W·ΔF; sharing pods: the best GPU's, NO_FIT where none fits
    score: IntArray  # (n,) FGD's integer score of ``units``
    seen: IntArray  # (n,) node versions the entries were computed at


class FragIndex:
    """Per-node FGD fragmentation state, updated one node at a time, with per-shape caches.

    The index *shares* (does not copy) ``free_cpu``, ``free_gpu`` and ``free_mem`` with its
    owner: the owner mutates a node's row, then calls :meth:`update` for that node.
    ``free_mem`` is needed (and read) only for a target with memory.
    """

    def __init__(
        self,
        free_cpu: IntArray,
        free_gpu: IntArray,
        type_ok: BoolArray,
        target: TargetWorkload,
        free_mem: IntArray | None = None,
    ) -> None:
        self.target = target
        self.free_cpu = free_cpu
        self.free_gpu = free_gpu
        self.free_mem = free_mem if target.memory_mib is not None else None
        self.type_ok = type_ok
        self.idle: IntArray = free_gpu.sum(axis=1).astype(np.int64)
        self.fit_count, self.sub_sum = fragment_counts(free_gpu, target)
        self.units = frag_units(
            self.idle, free_cpu, self.fit_count, self.sub_sum, type_ok, target, self.free_mem
        )
        self.total_units = int(self.units.sum())
        self.version = np.zeros(len(free_cpu), dtype=np.int64)
        self._shapes: dict[tuple[int, int, int, int], _Shape] = {}

    def __len__(self) -> int:
        return int(self.free_cpu.shape[0])

    @property
    def frag(self) -> FloatArray:
        """F_n per node (milli-GPU)."""
        out: FloatArray = self.units / float(self.target.total)
        return out

    @property
    def total_frag(self) -> float:
        """Σ_n F_n (milli-GPU)."""
        return self.total_units / self.target.total

    def update(self, node: int) -> None:
        """Recompute node ``node`` after its free CPU or GPU changed."""
        s = slice(node, node + 1)
        self.idle[node] = int(self.free_gpu[node].sum())
        fit, sub = fragment_counts(self.free_gpu[s], self.target)
        self.fit_count[node], self.sub_sum[node] = fit[0], sub[0]
        mem = None if self.free_mem is None else self.free_mem[s]
        ok = self.type_ok[s]
        units = int(frag_units(self.idle[s], self.free_cpu[s], fit, sub, ok, self.target, mem)[0])
        self.total_units += units - int(self.units[node])
        self.units[node] = units
        self.version[node] += 1

    def drops(
        self, score_cpu: int, gpu_milli: int, num_gpu: int, memory: int = 0
    ) -> tuple[IntArray, IntArray]:
        """(W·ΔF, FGD score) of every node for a pod of this shape; read-only views.

        Whole-GPU and CPU-only pods: the node's drop (meaningless where the pod does not fit).
        Sharing pods (``num_gpu`` 1, ``gpu_milli`` < 1000): the best drop over the GPUs that
        fit, :data:`NO_FIT` (score −1) where none does. ``memory`` (MiB) is part of the shape
        only for a target with memory.
        """
        if self.free_mem is None:
            memory = 0
        key = (score_cpu, gpu_milli, num_gpu, memory)
        shape = self._shapes.get(key)
        if shape is None:
            rows = np.arange(len(self), dtype=np.int64)
            units = self._compute(rows, score_cpu, gpu_milli, num_gpu, memory)
            shape = _Shape(units, self._score(units), self.version.copy())
            self._shapes[key] = shape
        else:
            stale = np.flatnonzero(shape.seen != self.version)
            if len(stale):
                units = self._compute(stale, score_cpu, gpu_milli, num_gpu, memory)
                shape.units[stale] = units
                shape.score[stale] = self._score(units)
                shape.seen[stale] = self.version[stale]
        return shape.units, shape.score

    def _score(self, units: IntArray) -> IntArray:
        out = sigmoid_score(units, self.target.total)
        out[units == NO_FIT] = -1
        return out

    def _compute(
        self, rows: IntArray, score_cpu: int, gpu_milli: int, num_gpu: int, memory: int
    ) -> IntArray:
        t = self.target
        idle, cpu = self.idle[rows], self.free_cpu[rows]
        fit, sub, ok = self.fit_count[rows], self.sub_sum[rows], self.type_ok[rows]
        mem = None if self.free_mem is None else self.free_mem[rows]
        before = self.units[rows]
        if not (num_gpu == 1 and gpu_milli < GPU_MILLI):
            return whole_drop_units(
                idle, cpu, fit, sub, ok, t, score_cpu, num_gpu, before, mem, memory
            )
        free = self.free_gpu[rows]
        r, c = np.nonzero(free >= gpu_milli)
        out = np.full(len(rows), NO_FIT, dtype=np.int64)
        if len(r):
            # the drop depends on a GPU's free milli, not on which GPU: distinct pairs only
            key = np.unique(r * (GPU_MILLI + 1) + free[r, c])
            r, f = key // (GPU_MILLI + 1), key % (GPU_MILLI + 1)
            pair = share_drop_units(
                idle[r], cpu[r], fit[r], sub[r], ok[r], t, score_cpu, gpu_milli, f, before[r],
                None if mem is None else mem[r], memory,
            )  # fmt: skip
            np.maximum.at(out, r, pair)
        return out
