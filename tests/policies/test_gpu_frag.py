"""The incremental FGD fragmentation index equals the from-scratch computation.

:class:`FragIndex` keeps per-node counts and per-pod-shape cached drops, refreshing one node per
placement; these properties replay random placements and compare every cached value with the
pure functions of :mod:`fusesched.policies.gpu_frag` (and FGD's scorer) computed from scratch.
The simulator's fast path is compared with its from-scratch path on whole runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.policies.gpu_frag import (
    GPU_MILLI,
    MAX_GPUS,
    NO_FIT,
    FragIndex,
    TargetWorkload,
    frag_units,
    fragment_counts,
    node_fragmentation,
    sigmoid_score,
    target_workload,
)
from fusesched.policies.gpu_inputs import Candidates, PodRequest, ScoreContext
from fusesched.policies.gpu_scores import GPU_SCORERS
from fusesched.sim.protocols.fgd import run_fgd
from fusesched.traces.openb import OpenbNodes, OpenbPods
from sim.test_fgd_protocol import _nodes, _pods, gpu_cases

SHAPES = [
    PodRequest(4000, 0, 0, 8_192),
    PodRequest(0, 0, 0),
    PodRequest(8000, 500, 1, 16_384),
    PodRequest(2000, 230, 1, 4_096),
    PodRequest(12000, 810, 1, 65_536),
    PodRequest(16000, 1000, 1, 32_768),
    PodRequest(32000, 1000, 2, 131_072),
    PodRequest(64000, 1000, 8, 98_304),
]


def _target(memory: bool = False) -> TargetWorkload:
    """FGD's kind of target; with ``memory`` the kind ``default`` learns (classes by memory)."""
    return target_workload(
        [4000, 8000, 8000, 2000, 16000, 32000, 12000],
        [0, 500, 500, 230, 1000, 1000, 810],
        [0, 1, 1, 1, 1, 2, 1],
        [(), (), (), ("T4",), (), (), ()],
        popularity=100,
        memory_mib=[0, 16_384, 65_536, 4_096, 32_768, 131_072, 65_536] if memory else None,
    )


def _cluster(gpus: list[int], cpu: list[int]) -> tuple[np.ndarray, np.ndarray]:
    free_gpu = np.where(
        np.arange(MAX_GPUS)[None, :] < np.array(gpus)[:, None], GPU_MILLI, 0
    ).astype(np.int64)
    return np.array(cpu, dtype=np.int64), free_gpu


def _scratch_scores(index: FragIndex, pod: PodRequest) -> np.ndarray:
    cand = Candidates(
        index.free_cpu.copy(),
        index.free_gpu.copy(),
        (index.free_gpu > 0).sum(axis=1),
        type_ok=index.type_ok,
        free_mem=None if index.free_mem is None else index.free_mem.copy(),
    )
    return GPU_SCORERS["fgd"](cand, pod, ScoreContext(target=index.target))


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6),
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, len(SHAPES) - 1), st.integers(0, 7)),
        max_size=40,
    ),
    reads=st.lists(st.integers(0, len(SHAPES) - 1), min_size=1, max_size=40),
    memory=st.booleans(),
)
def test_incremental_scores_equal_scratch_after_random_placements(
    gpus: list[int], steps: list[tuple[int, int, int]], reads: list[int], memory: bool
) -> None:
    target = _target(memory)
    models = ["T4" if i % 2 else "G2" for i in range(len(gpus))]
    free_cpu, free_gpu = _cluster(gpus, [96_000] * len(gpus))
    free_mem = np.full(len(gpus), 393_216, dtype=np.int64)
    index = FragIndex(free_cpu, free_gpu, target.type_ok(models), target, free_mem)
    for (node, shape, gpu), read in zip(steps, reads * len(steps), strict=False):
        node %= len(gpus)
        pod = SHAPES[shape]
        # read a shape (fills or refreshes its cache), then place something somewhere
        pod_r = SHAPES[read]
        units, score = index.drops(
            pod_r.score_cpu, pod_r.gpu_milli, pod_r.num_gpu, pod_r.memory_mib
        )
        expected = _scratch_scores(index, pod_r)
        fits = units != NO_FIT
        assert score[fits].tolist() == expected[fits].tolist()
        if free_cpu[node] < pod.cpu_milli or free_mem[node] < pod.memory_mib:
            continue
        if pod.sharing:
            col = gpu % MAX_GPUS
            if free_gpu[node, col] < pod.gpu_milli:
                continue
            free_gpu[node, col] -= pod.gpu_milli
        elif pod.num_gpu:
            full = np.flatnonzero(free_gpu[node] == GPU_MILLI)
            if len(full) < pod.num_gpu:
                continue
            free_gpu[node, full[: pod.num_gpu]] = 0
        free_cpu[node] -= pod.cpu_milli
        free_mem[node] -= pod.memory_mib
        index.update(node)
    # the per-node state equals a fresh computation
    fit, sub = fragment_counts(free_gpu, target)
    assert (index.fit_count == fit).all() and (index.sub_sum == sub).all()
    assert (index.idle == free_gpu.sum(axis=1)).all()
    mem = free_mem if memory else None
    units = frag_units(free_gpu.sum(axis=1), free_cpu, fit, sub, index.type_ok, target, mem)
    assert index.units.tolist() == units.tolist()
    assert index.total_units == int(units.sum())
    for pod in SHAPES:
        units, score = index.drops(pod.score_cpu, pod.gpu_milli, pod.num_gpu, pod.memory_mib)
        fits = units != NO_FIT
        assert score[fits].tolist() == _scratch_scores(index, pod)[fits].tolist()


def test_units_are_exact_and_match_the_float_measure() -> None:
    target = target_workload([4000, 8000, 8000], [0, 500, 500], [0, 1, 1], [()] * 3)
    assert target.weight.tolist() == [2, 1] and target.total == 3
    free_cpu, free_gpu = _cluster([4, 2], [32_000, 6_000])
    free_gpu[0, :4] = [500, 1000, 1000, 200]
    fit, sub = fragment_counts(free_gpu, target)
    idle = free_gpu.sum(axis=1)
    ok = np.ones((2, 2), dtype=np.bool_)
    units = frag_units(idle, free_cpu, fit, sub, ok, target)
    # node 0: 2/3·200 + 1/3·2700 → units 2·200 + 1·2700; node 1 lacks the CPU: all idle
    assert units.tolist() == [3100, 3 * 2000]
    assert node_fragmentation(idle, free_cpu, fit, sub, ok, target).tolist() == [
        3100 / 3,
        2000.0,
    ]
    assert sigmoid_score(np.array([0, NO_FIT + 1]), 3).tolist() == [50, 0]


def test_memory_enters_the_measure_only_when_the_target_has_it() -> None:
    cpu, gpu, count, spec = [4000, 8000, 8000, 8000], [0, 500, 500, 500], [0, 1, 1, 1], [()] * 4
    plain = target_workload(cpu, gpu, count, spec)
    assert plain.memory_mib is None and plain.weight.tolist() == [3, 1]
    # GPU classes are split by memory, the CPU-only class is not
    target = target_workload(cpu, gpu, count, spec, memory_mib=[1, 4096, 4096, 65_536])
    assert target.weight.tolist() == [2, 1, 1]
    assert target.memory_mib is not None
    assert target.memory_mib.tolist() == [4096, 65_536, 0]
    free_cpu, free_gpu = _cluster([4, 2], [32_000, 32_000])
    free_gpu[0, :4] = [500, 1000, 1000, 200]
    free_mem = np.array([8192, 131_072], dtype=np.int64)
    fit, sub = fragment_counts(free_gpu, target)
    idle = free_gpu.sum(axis=1)
    ok = np.ones((2, 3), dtype=np.bool_)
    # node 0: the 4 GiB class leaves 200 (×2), the 64 GiB class lacks memory: all 2700 idle
    # (×1), CPU-only 2700 (×1); node 1 has the memory for both: only CPU-only's 2000
    assert frag_units(idle, free_cpu, fit, sub, ok, target, free_mem).tolist() == [5800, 2000]
    with pytest.raises(ValueError, match="free memory"):
        frag_units(idle, free_cpu, fit, sub, ok, target)


def _run_pair(nodes: OpenbNodes, pods: OpenbPods, policy: str, seed: int) -> None:
    fast = run_fgd(nodes, pods, policy, seed)
    slow = run_fgd(nodes, pods, policy, seed, incremental=False)
    assert fast.node.tolist() == slow.node.tolist()
    assert (fast.gpus == slow.gpus).all()
    assert fast.frag_milli.tolist() == slow.frag_milli.tolist()


@settings(max_examples=60, deadline=None)
@given(
    case=gpu_cases(max_nodes=6, max_pods=24),
    policy=st.sampled_from(["fgd", "default"]),
    seed=st.integers(0, 2**16),
)
def test_fast_path_places_like_scratch_scoring(
    case: tuple[OpenbNodes, OpenbPods], policy: str, seed: int
) -> None:
    nodes, pods = case
    _run_pair(nodes, pods, policy, seed)


def test_fast_path_on_a_larger_cluster() -> None:
    rng = np.random.default_rng(5)
    n = 40
    nodes = _nodes(
        rng.choice([16_000, 64_000, 96_000], n).tolist(),
        [400_000] * n,
        rng.choice([1, 2, 4, 8], n).tolist(),
        rng.choice(["T4", "G2", "V100"], n).tolist(),
    )
    rows = []
    for _ in range(150):
        kind = int(rng.integers(4))
        cpu = int(rng.choice([0, 2000, 4000, 8000, 12000]))
        if kind == 0:
            rows.append((cpu, 1024, 0, 0))
        elif kind == 1:
            rows.append((cpu, 1024, 1, int(rng.choice([110, 230, 320, 470, 500, 810]))))
        else:
            rows.append((cpu, 1024, int(rng.choice([1, 2, 4, 8])), 1000))
    specs = [(("T4",) if i % 7 == 0 and r[2] else ()) for i, r in enumerate(rows)]
    pods = _pods(rows, specs)
    for policy in ("fgd", "default"):
        _run_pair(nodes, pods, policy, 42)
