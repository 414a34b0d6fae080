"""What a GPU-placement score reads: the pod's request (:class:`PodRequest`), the snapshot of
its feasible nodes (:class:`Candidates`) and what some policies need besides
(:class:`ScoreContext`), with the "max node spec" constants of the score plugins and
Clustering's pod tags.

GPU matrices are ``nodes × MAX_GPUS`` of free milli-GPU; GPUs a node does not have are padded
with 0, which no formula can tell from a fully allocated GPU (and needs not to). The scores
themselves are in :mod:`fusesched.policies.gpu_scores`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import GPU_MILLI, MAX_GPUS, TargetWorkload

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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
