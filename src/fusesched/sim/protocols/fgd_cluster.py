"""The simulated cluster of an openb GPU-placement run (:mod:`fusesched.sim.protocols.fgd`, and
:mod:`fusesched.sim.protocols.pwr` by extension): per-node state, and filter → score → pick →
bind of one pod at a time.

Speed: per node the simulator keeps the free CPU / memory / per-GPU milli, the largest free GPU
and the number of fully free GPUs; FGD and ``default`` read a
:class:`~fusesched.policies.gpu_frag.FragIndex` (per node and target class the fitting-GPU count
and sub-threshold sum, and per pod shape the cached integer score of every node). A placement
refreshes one node; a decision is a filter, a cache refresh of the nodes changed since that pod
shape was last seen, and an argmax, all vector operations over the nodes. ``default`` keeps a
second index against the target it learns from the arrivals (its classes also by memory) and
the scarce classes' pressure per node (learned at the same arrivals), keeps a GPU pod to the
nodes of least pressure (:func:`~fusesched.policies.gpu_default.scarce_tier`) and applies
:func:`~fusesched.policies.gpu_default.default_keys` (stranding first) to those within
``FGD_WINDOW`` points of their best score; the fragmentation metric always uses the protocol's
fixed target.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from fusesched.policies.gpu_default import FGD_WINDOW, default_keys, scarce_pressure, scarce_tier
from fusesched.policies.gpu_frag import (
    GPU_MILLI,
    MAX_GPUS,
    FragIndex,
    TargetWorkload,
    target_workload,
)
from fusesched.policies.gpu_inputs import TAG_COLUMNS, Candidates, PodRequest, ScoreContext, pod_tag
from fusesched.policies.gpu_power import cpu_need_per_gpu, lexicographic_best
from fusesched.policies.gpu_scores import GPU_SCORERS, select_gpus
from fusesched.traces.openb import OpenbNodes

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


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
