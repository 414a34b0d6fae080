"""fusesched's own GPU placement policy ``default``: FGD's score, then its own keys on ties.

The hand-made cluster is the one of ``test_fgd_protocol.py`` (nodes A, B, C; target: half
CPU-only 4,000 milli-CPU pods, half 500 milli-GPU / 8,000 milli-CPU sharing pods), whose FGD
scores are hand-computed there. ``default`` dense-ranks (within 1 FGD point of the best,
−newly stranded milli-GPU, FGD score, −left) into 0-100 (CPU-only pods: (…, FGD score, −idle
GPU, −left); sharing pods: (…, FGD score, −look-ahead waste)): the best key gets 100, the worst
0, equal keys equal scores. With that target the waste table is W(r) = r below 500 and
W(r − 500) above, and the CPU per GPU is 8,000 / 0.5 = 16,000 milli: A (64,000 milli-CPU,
8,000 idle) strands 4,000 milli-GPU, B (32,000, 2,700) 700, C (80,000, 300) none.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.policies.gpu_default import waste_delta
from fusesched.policies.gpu_inputs import Candidates, PodRequest, ScoreContext
from fusesched.policies.gpu_scores import (
    GPU_SCORERS,
    MAX_GPUS,
    select_gpus,
    target_workload,
)
from fusesched.sim.protocols.fgd import run_fgd
from fusesched.sim.protocols.fgd_cluster import _Cluster
from fusesched.traces.openb import OpenbNodes, OpenbPods

from .test_fgd_protocol import _candidates, _nodes, _target, check_run, gpu_cases

SHARE_200 = PodRequest(16_000, 200, 1)
SHARE_300 = PodRequest(16_000, 300, 1)
TWO_GPUS = PodRequest(16_000, 1000, 2)
CPU_30 = PodRequest(30_000, 0, 0)
CPU_1 = PodRequest(1_000, 0, 0)
SHARE_100 = PodRequest(1_000, 100, 1)


def _two_node() -> Candidates:
    """A and B only (C has no two fully free GPUs)."""
    cand = _candidates()
    return Candidates(cand.free_cpu[:2], cand.free_gpu[:2], cand.gpu_count[:2])


def _cpu_pair() -> Candidates:
    """X: one free GPU, 10,000 milli-CPU; Y: its one GPU fully used, 100,000 milli-CPU."""
    free = np.zeros((2, MAX_GPUS), dtype=np.int64)
    free[0, 0] = 1000
    return Candidates(
        np.array([10_000, 100_000], dtype=np.int64), free, np.array([1, 1], dtype=np.int64)
    )


def _spare() -> Candidates:
    """One node, GPUs free [1000, 600], 64,000 milli-CPU."""
    free = np.zeros((1, MAX_GPUS), dtype=np.int64)
    free[0, :2] = [1000, 600]
    return Candidates(np.array([64_000], dtype=np.int64), free, np.array([2], dtype=np.int64))


@pytest.mark.parametrize(
    ("cand", "pod", "expected"),
    [
        # FGD [53, 53, 57]: C alone is best (the waste key only breaks FGD's ties)
        (_candidates, SHARE_300, [0, 0, 100]),
        # FGD [52, 54, 54]: B and C are within the window (A is 2 points below); the pod
        # (16,000 milli-CPU, 200 milli-GPU) strands 800 more milli-GPU on B (2,500 idle,
        # 16,000 CPU serves 1,000) and none on C, so C; B ranks above A (outside the window)
        (_candidates, SHARE_200, [0, 50, 100]),
        # FGD [50, 22, 50]; CPU-only pods: least idle GPU first (A 8000, C 300 → C first),
        # then left = ½(c − 30000)/128000 + ½·L/8000; B is the tightest fit but its FGD score
        # is lower, and the FGD score comes first
        (_candidates, CPU_30, [50, 0, 100]),
        # FGD [50, 50] (ΔF = 0 on both); left X 0.098 < Y 0.387, but Y has no idle GPU → Y
        (_cpu_pair, CPU_1, [0, 100]),
        # FGD [73, 73]; stranded A 4,000 → 3,000 (6 GPUs, 48,000 CPU serves 3), B 700 → 0:
        # A relieves more (1,000 vs 700 milli), so A although B is the tighter fit (left)
        (_two_node, TWO_GPUS, [100, 0]),
        # a single candidate always scores 100
        (_spare, SHARE_100, [100]),
    ],
)
def test_default_scores_on_hand_made_cluster(
    cand: object, pod: PodRequest, expected: list[int]
) -> None:
    assert callable(cand)
    ctx = ScoreContext(target=_target())
    scores = GPU_SCORERS["default"](cand(), pod, ctx)
    assert scores.dtype == np.int64
    assert scores.tolist() == expected


def test_default_keeps_fgd_argmax() -> None:
    ctx = ScoreContext(target=_target())
    for pod in (SHARE_200, SHARE_300, CPU_30):
        fgd = GPU_SCORERS["fgd"](_candidates(), pod, ctx)
        ours = GPU_SCORERS["default"](_candidates(), pod, ctx)
        assert set(np.flatnonzero(ours == 100)) <= set(np.flatnonzero(fgd == fgd.max()))


@pytest.mark.parametrize(
    ("node", "pod", "fgd", "default"),
    [
        # B [500, 1000, 1000, 200]: both policies agree on the best FGD score
        (lambda: _candidates().row(1), SHARE_300, [1], [1]),
        (lambda: _candidates().row(1), SHARE_200, [3], [3]),
        # [1000, 600], 100 milli: both GPUs stay ≥ 500 (same score); FGD takes the first,
        # default the least look-ahead waste (600 → 500: −100; 1000 → 900: +400)
        (_spare, SHARE_100, [0], [1]),
        (lambda: _candidates().row(1), TWO_GPUS, [1, 2], [1, 2]),
        (lambda: _candidates().row(1), CPU_30, [], []),
    ],
)
def test_default_gpu_choice(
    node: object, pod: PodRequest, fgd: list[int], default: list[int]
) -> None:
    assert callable(node)
    ctx = ScoreContext(target=_target())
    assert select_gpus("fgd", node(), pod, ctx).tolist() == fgd
    assert select_gpus("default", node(), pod, ctx).tolist() == default


@settings(max_examples=80, deadline=None)
@given(case=gpu_cases(max_nodes=5, max_pods=16), seed=st.integers(0, 2**16))
def test_default_never_overcommits(case: tuple[OpenbNodes, OpenbPods], seed: int) -> None:
    nodes, pods = case
    check_run(run_fgd(nodes, pods, "default", seed), nodes, pods)


def test_waste_table_on_the_hand_made_target() -> None:
    # GPU classes: only the 500 milli sharing class; W(r) = r below 500, W(r − 500) above
    table = _target().waste_table
    assert table[[0, 300, 499, 500, 600, 900, 999, 1000]].tolist() == [
        0,
        300,
        499,
        0,
        100,
        400,
        499,
        0,
    ]


def test_waste_delta_prefers_the_gpu_whose_remainder_stays_useful() -> None:
    free = np.array([_pad8([1000, 600, 300])], dtype=np.int64)
    delta = waste_delta(free, 100, _target().waste_table)[0]
    # 1000 → 900: +400; 600 → 500: −100; 300 → 200: −100; absent GPUs: +inf
    assert delta[:3].tolist() == [400.0, -100.0, -100.0]
    assert np.isinf(delta[3:]).all()


def _pad8(free: list[int]) -> list[int]:
    return free + [0] * (MAX_GPUS - len(free))


def test_default_keeps_memory_for_the_learned_mix() -> None:
    """With memory in the learned target, a whole-GPU pod leaves the node whose remaining
    memory still fits the mix's GPU pods; without it (FGD's measure) the nodes tie."""
    free = np.zeros((2, MAX_GPUS), dtype=np.int64)
    free[:, :2] = 1000
    cand = Candidates(
        np.array([32_000, 32_000], dtype=np.int64),
        free,
        np.array([2, 2], dtype=np.int64),
        free_mem=np.array([102_400, 204_800], dtype=np.int64),
    )
    pod = PodRequest(4000, 1000, 1, 65_536)
    mix = ([4000], [1000], [1], [()])
    plain = ScoreContext(target=target_workload(*mix))
    aware = ScoreContext(target=target_workload(*mix, memory_mib=[65_536]))
    # X keeps 36 GiB < 64 GiB after the pod: its other GPU becomes fragment (ΔF −1000)
    assert GPU_SCORERS["fgd"](cand, pod, aware).tolist() == [26, 50]
    assert GPU_SCORERS["default"](cand, pod, aware).tolist() == [0, 100]
    assert GPU_SCORERS["default"](cand, pod, plain).tolist() == [100, 100]
    with pytest.raises(ValueError, match="free_mem"):
        GPU_SCORERS["default"](Candidates(cand.free_cpu, free, cand.gpu_count), pod, aware)


def test_default_learns_the_job_mix_only_from_arrivals() -> None:
    """``default`` ignores the pod-list target that FGD is given: only arrivals count."""
    nodes = _nodes([64_000] * 6, [262_144] * 6, [8, 4, 2, 2, 1, 8], ["G2", "T4"] * 3)
    rows = [
        (2000 + 1000 * (i % 4), 1024, [0, 1, 1, 2][i % 4], [0, 350, 700, 1000][i % 4])
        for i in range(40)
    ]
    other = target_workload([8000], [1000], [8], [()])
    runs = []
    for target in (other, None):
        sim = _Cluster(
            nodes,
            target if target is not None else target_workload([4000], [500], [1], [()]),
            "default",
            np.arange(len(nodes), dtype=np.int64),
            np.random.default_rng(0),
        )
        runs.append([sim.place(PodRequest(r[0], r[3], r[2]), r[1], ())[0] for r in rows])
        # refreshed at 1, 2, 4, …, 32 arrivals: the last target counts the first 32 pods
        assert sim.frag.target.total == 32
        assert sim.frag.target.weight.tolist() == [8, 8, 8, 8]
        assert sim.frag.target.memory_mib is not None  # memory passed to ``place`` is learned
        assert sim.frag.target.memory_mib.tolist() == [1024, 1024, 1024, 0]
    assert runs[0] == runs[1]
