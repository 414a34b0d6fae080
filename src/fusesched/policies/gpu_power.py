"""PWR (CCGrid'25): the power model of GPU nodes and the power score, pure and vectorised.

Implements ``shared/anchors/pwr/PROTOCOL.md`` sections 2-4 on top of the FGD protocol:

* :data:`GPU_WATTS` (idle, TDP per GPU model; G2 = A10, G3 = A100) and :data:`CPU_PROFILES`
  (idle, max watts per socket and physical cores per socket). In the paper's runs every node uses
  the unlabelled profile (:data:`PAPER_CPU`, 15 W / 120 W / 16 cores).
* The node power function (section 2.3): a GPU draws its TDP as soon as any milli of it is
  allocated, its idle watts when completely free; a CPU socket draws its max as soon as one of
  its cores is (partly) requested, with 2 vCPUs (2,000 milli) per core and the artifact's rounding
  (sockets from the capacity, busy sockets from the busy cores).
* PWR's raw node score −ΔP of the hypothetical placement, its min-max normalisation to integers
  0-100 over the feasible nodes, and PWR's own GPU choice for sharing pods.

The placement policies that use these are registered by name in :data:`POWER_POLICIES`: ``pwr``
(PWR alone), ``pwr+fgd`` (the weighted sum α·PWR + (1000 − α)·FGD with α = 200, the first of
the paper's recommended weights), the other mixes of the artifact (``pwr+fgd-α``), ``fgd`` (α = 0,
FGD itself) and fusesched's own ``pwr-guard`` (section "pwr-guard" in ``docs/PWR.md``). The runner
is :mod:`fusesched.sim.protocols.pwr`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_frag import GPU_MILLI, MAX_GPUS, TargetWorkload

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "CPU_PROFILES",
    "GPU_WATTS",
    "MILLI_PER_CORE",
    "PAPER_CPU",
    "POWER_POLICIES",
    "CpuProfile",
    "NodePower",
    "PowerPolicy",
    "cpu_need_per_gpu",
    "cpu_power",
    "gpu_power",
    "guard_keys",
    "guard_window",
    "lexicographic_best",
    "normalise_scores",
    "pwr_gpu_choice",
    "stranded",
]

#: Watts per GPU (idle, TDP) by the GPU model label of the openb node list (table 2.1).
GPU_WATTS: Mapping[str, tuple[int, int]] = {
    "G2": (30, 150),  # treated as A10
    "A10": (30, 150),
    "T4": (10, 70),
    "G3": (50, 400),  # treated as A100
    "P100": (25, 250),
    "V100M32": (30, 300),
    "V100M16": (30, 300),
}

#: milli-CPU per physical core: 2 vCPUs = 1 core.
MILLI_PER_CORE = 2000


@dataclass(frozen=True)
class CpuProfile:
    """Watts per socket (idle, max) and physical cores per socket of a CPU model."""

    idle_w: int
    max_w: int
    cores_per_socket: int


#: The unlabelled fallback, equal to the E5-2682 v4 row: what every node uses in the paper.
PAPER_CPU = CpuProfile(15, 120, 16)

#: The artifact's CPU table (section 2.2); only ``""`` (no label) is used by the protocol.
CPU_PROFILES: Mapping[str, CpuProfile] = {
    "": PAPER_CPU,
    "Intel-Xeon-ES-2682-V4": PAPER_CPU,
    "Intel-Xeon-8163": CpuProfile(20, 165, 24),
    "Intel-Xeon-6326": CpuProfile(20, 185, 16),
    "Intel-Xeon-8369B": CpuProfile(20, 270, 32),
    "Intel-Xeon-8269CY": CpuProfile(20, 205, 26),
}


def _ceil_div(a: IntArray, b: IntArray | int) -> IntArray:
    out: IntArray = -(-a // b)
    return out


def cpu_power(
    capacity: IntArray, free: IntArray, idle_w: IntArray, max_w: IntArray, per_socket: IntArray
) -> IntArray:
    """CPU watts per node from the capacity and free milli-CPU (section 2.3).

    cores = ⌈C/2000⌉, idle cores = ⌊F/2000⌋, busy = cores − idle; sockets = ⌈cores/k⌉, busy
    sockets = ⌈busy/k⌉; P = max·busy sockets + idle·(sockets − busy sockets).
    """
    cores = _ceil_div(capacity, MILLI_PER_CORE)
    busy = cores - free // MILLI_PER_CORE
    sockets = _ceil_div(cores, per_socket)
    busy_sockets = _ceil_div(busy, per_socket)
    out: IntArray = max_w * busy_sockets + idle_w * (sockets - busy_sockets)
    return out


def gpu_power(
    free_gpu: IntArray, gpu_count: IntArray, idle_w: IntArray, max_w: IntArray
) -> IntArray:
    """GPU watts per node: TDP for every GPU with any milli allocated, idle for free ones.

    ``free_gpu`` is nodes × MAX_GPUS free milli, padded with 0 beyond ``gpu_count``.
    """
    exists = np.arange(free_gpu.shape[1])[None, :] < gpu_count[:, None]
    busy = (exists & (free_gpu < GPU_MILLI)).sum(axis=1)
    out: IntArray = max_w * busy + idle_w * (gpu_count - busy)
    return out


@dataclass(frozen=True, eq=False)
class NodePower:
    """The power constants of every node of a cluster (arrays, one entry per node)."""

    cpu_capacity: IntArray
    gpu_count: IntArray
    gpu_idle_w: IntArray
    gpu_max_w: IntArray
    cpu_idle_w: IntArray
    cpu_max_w: IntArray
    cores_per_socket: IntArray

    @classmethod
    def of(
        cls,
        cpu_milli: Sequence[int] | IntArray,
        gpus: Sequence[int] | IntArray,
        models: Sequence[str],
        cpu_models: Sequence[str] | None = None,
    ) -> NodePower:
        """Constants from the node list; ``cpu_models`` None = the paper's unlabelled profile.

        A GPU model missing from :data:`GPU_WATTS` is an error for a node with GPUs.
        """
        n = len(models)
        idle = np.zeros(n, dtype=np.int64)
        peak = np.zeros(n, dtype=np.int64)
        count = np.asarray(gpus, dtype=np.int64)
        for i, model in enumerate(models):
            if count[i] > 0:
                if model not in GPU_WATTS:
                    raise ValueError(f"no power figures for GPU model {model!r}")
                idle[i], peak[i] = GPU_WATTS[model]
        labels = list(cpu_models) if cpu_models is not None else [""] * n
        unknown = sorted({label for label in labels if label not in CPU_PROFILES})
        if unknown:
            raise ValueError(f"no power figures for CPU model(s) {', '.join(unknown)}")
        profiles = [CPU_PROFILES[label] for label in labels]
        return cls(
            np.asarray(cpu_milli, dtype=np.int64).copy(),
            count.copy(),
            idle,
            peak,
            np.array([p.idle_w for p in profiles], dtype=np.int64),
            np.array([p.max_w for p in profiles], dtype=np.int64),
            np.array([p.cores_per_socket for p in profiles], dtype=np.int64),
        )

    def __len__(self) -> int:
        return int(self.cpu_capacity.shape[0])

    def median_wake_w(self) -> int:
        """The median of TDP − idle over the cluster's GPUs (each GPU counted once)."""
        per_gpu = np.repeat(self.wake_w, self.gpu_count)
        return int(np.median(per_gpu)) if len(per_gpu) else 0

    @property
    def wake_w(self) -> IntArray:
        """TDP − idle of one GPU per node: what allocating a free GPU adds."""
        out: IntArray = self.gpu_max_w - self.gpu_idle_w
        return out

    def cpu(self, free_cpu: IntArray, rows: IntArray | slice = slice(None)) -> IntArray:
        """CPU watts of the nodes ``rows`` given their free milli-CPU (one entry per row)."""
        return cpu_power(
            self.cpu_capacity[rows],
            free_cpu,
            self.cpu_idle_w[rows],
            self.cpu_max_w[rows],
            self.cores_per_socket[rows],
        )

    def gpu(self, free_gpu: IntArray, rows: IntArray | slice = slice(None)) -> IntArray:
        """GPU watts of the nodes ``rows`` given their free milli-GPU matrix rows."""
        return gpu_power(
            free_gpu, self.gpu_count[rows], self.gpu_idle_w[rows], self.gpu_max_w[rows]
        )

    def delta(
        self,
        rows: IntArray,
        free_cpu: IntArray,
        free_gpu: IntArray,
        cpu_milli: int,
        gpu_milli: int,
        num_gpu: int,
    ) -> IntArray:
        """ΔP (watts) of placing the pod on each node ``rows`` (section 3, step 1).

        ``free_cpu`` and ``free_gpu`` are the rows' current free milli. ``cpu_milli`` is the
        scored CPU request (0 counts as 100). Sharing pods take the cheapest fitting GPU (an
        already busy one adds nothing, a free one its TDP − idle); whole-GPU pods wake
        ``num_gpu`` free GPUs; CPU-only pods change the CPU only.
        """
        d_cpu = self.cpu(free_cpu - cpu_milli, rows) - self.cpu(free_cpu, rows)
        if num_gpu == 0:
            return d_cpu
        wake = self.wake_w[rows]
        if num_gpu == 1 and gpu_milli < GPU_MILLI:
            exists = np.arange(MAX_GPUS)[None, :] < self.gpu_count[rows][:, None]
            on_busy = (exists & (free_gpu >= gpu_milli) & (free_gpu < GPU_MILLI)).any(axis=1)
            out: IntArray = d_cpu + np.where(on_busy, 0, wake)
            return out
        out = d_cpu + num_gpu * wake
        return out


def normalise_scores(raw: IntArray) -> IntArray:
    """kube-scheduler's NormalizeScore as PWR does it: ⌊(raw − min)·100/(max − min)⌋.

    All equal → 100 everywhere (section 3, step 2).
    """
    if len(raw) == 0:
        return raw.copy()
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.full(len(raw), 100, dtype=np.int64)
    out: IntArray = (raw - lo) * 100 // (hi - lo)
    return out


def pwr_gpu_choice(free: IntArray, gpu_count: int, gpu_milli: int) -> int:
    """PWR's GPU for a sharing pod on one node: the first busy GPU that fits, else the first free.

    (The lowest-index GPU with the smallest ΔP; ``free`` is the node's free milli row.)
    """
    cols = np.arange(len(free)) < gpu_count
    fits = cols & (free >= gpu_milli)
    busy = np.flatnonzero(fits & (free < GPU_MILLI))
    if len(busy):
        return int(busy[0])
    any_fit = np.flatnonzero(fits)
    if len(any_fit) == 0:
        raise ValueError("no GPU of the node fits the pod")
    return int(any_fit[0])


def cpu_need_per_gpu(target: TargetWorkload) -> int:
    """Milli-CPU per whole GPU that the target workload's GPU pods ask for (demand-weighted).

    Σ w_m·cpu_m / Σ w_m·k_m·g_m/1000 over the GPU classes: how much CPU a GPU needs beside it
    to be usable by a typical GPU pod.
    """
    gpu = target.num_gpu > 0
    demand = int((target.weight[gpu] * target.num_gpu[gpu] * target.gpu_milli[gpu]).sum())
    if demand == 0:
        return 0
    return int((target.weight[gpu] * target.cpu_milli[gpu]).sum()) * GPU_MILLI // demand


def stranded(free_cpu: IntArray, full_gpus: IntArray, need: int) -> IntArray:
    """Fully free GPUs that the node's free CPU cannot serve at ``need`` milli-CPU each."""
    if need <= 0:
        return np.zeros_like(full_gpus)
    out: IntArray = np.maximum(0, full_gpus - np.maximum(free_cpu, 0) // need)
    return out


def guard_keys(
    pod_gpus: int,
    cheap: BoolArray,
    strand_delta: IntArray,
    delta_w: IntArray,
    delta_cpu_w: IntArray,
    idle_gpu: IntArray,
) -> list[IntArray]:
    """``pwr-guard``'s lexicographic keys (each higher-better) among FGD's near-best nodes.

    Per candidate node: ``cheap`` whether the pod wakes no GPU dearer than the cluster's median
    (:meth:`NodePower.median_wake_w`), ``strand_delta`` the change in :func:`stranded` GPUs,
    ``delta_w`` the pod's ΔP, ``delta_cpu_w`` its CPU part, ``idle_gpu`` the node's free
    milli-GPU. GPU pods: a cheap GPU class, then the fewest newly stranded GPUs, then the least
    ΔP. CPU-only pods: the fewest newly stranded GPUs, then the least ΔP (an already busy
    socket), then the least idle GPU.
    """
    if pod_gpus == 0:
        return [-strand_delta, -delta_cpu_w, -idle_gpu]
    return [cheap.astype(np.int64), -strand_delta, -delta_w]


def guard_window(window: int, wide: int, used: int, capacity: int) -> int:
    """FGD points ``pwr-guard`` may give up for power with ``used`` of ``capacity`` milli-GPU
    allocated.

    ``window`` + ⌊``wide`` · (1 − 2·used / capacity)⌋ while less than half the GPUs are
    allocated, ``window`` from then on (integer arithmetic, exact at every boundary): while the
    cluster is mostly empty a fragment costs little (the pods that would need it are far off),
    so power may outweigh more of FGD's score; near saturation only FGD's resolution.
    """
    if wide <= 0 or capacity <= 0 or 2 * used >= capacity:
        return window
    return window + wide * (capacity - 2 * used) // capacity


def lexicographic_best(keys: Sequence[IntArray]) -> BoolArray:
    """Mask of the entries whose key tuple is the largest (keys compared in order)."""
    best = np.ones(len(keys[0]), dtype=np.bool_)
    for key in keys:
        top = key[best].max()
        best &= key == top
    return best


@dataclass(frozen=True)
class PowerPolicy:
    """How a policy of the PWR protocol picks a node and a GPU (section 4).

    ``alpha`` is PWR's weight (FGD gets 1000 − α); ``gpu_rule`` "fgd" or "pwr" picks a sharing
    pod's GPU. ``guard`` makes it fusesched's ``pwr-guard`` (α unused): only nodes whose FGD
    score is within :func:`guard_window` (``window``, ``wide``) points of the best are
    admissible, and :func:`guard_keys` picks among them. ``learn`` scores fragmentation against
    the job mix learned from the arrivals, as the FGD protocol's ``default`` does (instead of
    FGD's fixed target), breaks the ties of :func:`guard_keys` with ``default``'s keys and
    places a sharing pod on ``default``'s GPU.
    """

    alpha: int
    gpu_rule: str
    guard: bool = False
    window: int = 1
    wide: int = 0
    learn: bool = False
    description: str = ""


#: How many FGD points beyond its window ``pwr-guard`` gives up on an empty cluster: as many as
#: PWR+FGD 200/800 can (PWR's 0-100 score weighs 200, one FGD point 800: 25 points).
GUARD_WIDE = 25


def _policies() -> dict[str, PowerPolicy]:
    out = {
        "fgd": PowerPolicy(0, "fgd", description="FGD alone (α = 0), power measured"),
        "pwr": PowerPolicy(1000, "pwr", description="PWR alone, its own GPU choice"),
        "pwr+fgd": PowerPolicy(200, "fgd", description="200·PWR + 800·FGD, FGD's GPU choice"),
    }
    for alpha in (500, 300, 100, 50, 25):
        out[f"pwr+fgd-{alpha}"] = PowerPolicy(
            alpha, "fgd", description=f"{alpha}·PWR + {1000 - alpha}·FGD, FGD's GPU choice"
        )
    out["pwr-guard"] = PowerPolicy(
        0,
        "fgd",
        guard=True,
        wide=GUARD_WIDE,
        learn=True,
        description="fusesched: learned-mix FGD within 1 point (up to 26 on an empty cluster), "
        "then cheap GPU, no stranding, least ΔP",
    )
    out["pwr-guard-v1"] = PowerPolicy(
        0,
        "fgd",
        guard=True,
        description="pwr-guard's first version: FGD within 1 point, then cheap GPU, "
        "no stranding, least ΔP",
    )
    return out


#: The placement policies of the PWR protocol runner, by name.
POWER_POLICIES: Mapping[str, PowerPolicy] = _policies()
