"""The FGD GPU-placement protocol: scores, GPU choice, accounting, determinism, real trace.

Expected scores are hand-computed from ``shared/anchors/fgd/PROTOCOL.md`` section 3 for three
candidate nodes:

* A: 64,000 free milli-CPU, 8 GPUs all free (L = 8,000), no GPU pods;
* B: 32,000 free milli-CPU, 4 GPUs free [500, 1000, 1000, 200] (L = 2,700), tags {share};
* C: 80,000 free milli-CPU, 2 GPUs free [0, 300] (L = 300), tags {share, 1-gpu}.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.policies.gpu_inputs import TAG_COLUMNS, Candidates, PodRequest, ScoreContext
from fusesched.policies.gpu_scores import (
    GPU_SCORERS,
    MAX_GPUS,
    TargetWorkload,
    fragment_counts,
    node_fragmentation,
    select_gpus,
    target_workload,
)
from fusesched.sim.protocols.fgd import (
    FgdRun,
    arrival_sequence,
    run_fgd,
    run_fgd_seeds,
)
from fusesched.traces.openb import OpenbNodes, OpenbPods

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces" / "alibaba-gpu-v2023"


def _pad(free: list[int]) -> list[int]:
    return free + [0] * (MAX_GPUS - len(free))


def _candidates() -> Candidates:
    tags = np.zeros((3, TAG_COLUMNS), dtype=np.bool_)
    tags[1, 0] = True
    tags[2, 0] = tags[2, 1] = True
    return Candidates(
        free_cpu=np.array([64_000, 32_000, 80_000], dtype=np.int64),
        free_gpu=np.array(
            [_pad([1000] * 8), _pad([500, 1000, 1000, 200]), _pad([0, 300])], dtype=np.int64
        ),
        gpu_count=np.array([8, 4, 2], dtype=np.int64),
        tags=tags,
    )


def _target() -> TargetWorkload:
    # two CPU-only pods (4,000 milli) and two sharing pods (8,000 milli, 500 milli-GPU)
    return target_workload([4000, 4000, 8000, 8000], [0, 0, 500, 500], [0, 0, 1, 1], [()] * 4)


SHARE_200 = PodRequest(16_000, 200, 1)
SHARE_300 = PodRequest(16_000, 300, 1)
TWO_GPUS = PodRequest(16_000, 1000, 2)
CPU_30 = PodRequest(30_000, 0, 0)


@pytest.mark.parametrize(
    ("policy", "pod", "expected"),
    [
        # dot = (c_n/128000)(c/128000) + (L/8000)(R/8000); ⌊100(1 − dot/2)⌋
        ("dot-product", SHARE_200, [95, 98, 96]),
        # base ⌊25(8000 − L)/8000⌋ = 0, 16, 24; +25 no tags, +75 only tag, +50 among several
        ("clustering", SHARE_200, [25, 91, 74]),
        ("clustering", TWO_GPUS, [25, 16, 24]),
        ("clustering", CPU_30, [0, 0, 0]),
        # idle 8-GPU node 25; best-fit GPU 200 → 98; 300 → 97; whole 2-GPU pod on used node 48
        ("packing", SHARE_200, [25, 98, 97]),
        ("packing", SHARE_300, [25, 95, 97]),  # best-fit GPU 500 → 100 − 5
        ("packing", TWO_GPUS, [25, 48, 48]),
        ("packing", CPU_30, [0, 0, 0]),
        # raw 32, 78, 74 → min-max rescaled: 0, 100, ⌊42·100/46⌋ = 91
        ("best-fit", SHARE_200, [0, 100, 91]),
        # F before: A 4000, B 1450, C 300; the best GPU per node: Δ 150, 150, 300
        ("fgd", SHARE_300, [53, 53, 57]),
        # A: Δ 100 → 52; B GPU 3 (200 → 0): Δ 200 → ⌊100σ(0.2)⌋ = 54; C: F 300 → 100 → 54
        ("fgd", SHARE_200, [52, 54, 54]),
        ("fgd", TWO_GPUS, [73, 73, None]),  # C has no two free GPUs: not a candidate
        # B drops below the 8,000 milli-CPU of the sharing class: Δ −1250 → 22
        ("fgd", CPU_30, [50, 22, 50]),
    ],
)
def test_scores_match_hand_computed_values(
    policy: str, pod: PodRequest, expected: list[int | None]
) -> None:
    ctx = ScoreContext(rng=np.random.default_rng(0), target=_target())
    scores = GPU_SCORERS[policy](_candidates(), pod, ctx)
    assert scores.dtype == np.int64
    got = [s if e is not None else None for s, e in zip(scores.tolist(), expected, strict=True)]
    assert got == expected


def test_fgd_score_is_truncated_logistic_of_the_drop() -> None:
    # C with a 200 milli pod: F (no class fits, so all idle GPU) 300 → 100, Δ = 200
    node_c = _candidates().row(2)
    fit, sub = fragment_counts(node_c.free_gpu, _target())
    before = node_fragmentation(
        node_c.idle_gpu, node_c.free_cpu, fit, sub, np.ones((1, 2), dtype=np.bool_), _target()
    )
    assert before.tolist() == [300.0]
    score = GPU_SCORERS["fgd"](node_c, SHARE_200, ScoreContext(target=_target()))
    assert score.tolist() == [math.trunc(100 / (1 + math.exp(-0.2)))] == [54]


def test_random_gives_one_node_100() -> None:
    scores = GPU_SCORERS["random"](
        _candidates(), SHARE_200, ScoreContext(rng=np.random.default_rng(3))
    )
    assert sorted(scores.tolist()) == [0, 0, 100]


@pytest.mark.parametrize(
    ("policy", "pod", "expected"),
    [
        ("best-fit", SHARE_300, [0]),  # smallest sufficient free milli (500)
        ("packing", SHARE_200, [3]),
        ("dot-product", SHARE_300, [0]),
        ("clustering", SHARE_300, [0]),
        ("fgd", SHARE_300, [1]),  # first GPU reaching the best FGD score (Δ 150 on 1000s)
        ("fgd", SHARE_200, [3]),
        ("best-fit", TWO_GPUS, [1, 2]),  # whole GPUs: lowest-indexed fully free
        ("fgd", TWO_GPUS, [1, 2]),
        ("best-fit", CPU_30, []),
    ],
)
def test_gpu_choice_on_node_b(policy: str, pod: PodRequest, expected: list[int]) -> None:
    ctx = ScoreContext(rng=np.random.default_rng(0), target=_target())
    assert select_gpus(policy, _candidates().row(1), pod, ctx).tolist() == expected


def test_random_gpu_choice_draws_among_fitting_gpus() -> None:
    rng = np.random.default_rng(7)
    seen = {
        int(select_gpus("random", _candidates().row(1), SHARE_300, ScoreContext(rng=rng))[0])
        for _ in range(60)
    }
    assert seen == {0, 1, 2}


def test_target_workload_groups_and_cutoff() -> None:
    target = _target()
    assert target.cpu_milli.tolist() == [8000, 4000]  # tie on count: larger CPU first
    assert target.gpu_milli.tolist() == [500, 0]
    assert target.prob.tolist() == [0.5, 0.5]
    # 19 of 20 pods = 95 %: the cumulative count reaches 95·N/100, the rare class is left out
    skewed = target_workload([1000] * 19 + [2000], [0] * 20, [0] * 20, [()] * 20)
    assert skewed.cpu_milli.tolist() == [1000]
    typed = target_workload([1000, 1000], [1000, 1000], [1, 1], [("T4", "A10"), ("T4", "A10")])
    assert typed.gpu_types == (("T4", "A10"),)
    assert typed.type_ok(["T4", "G2", "A10"]).tolist() == [[True], [False], [True]]


def test_fragmentation_of_node_b() -> None:
    cand = _candidates()
    fit, sub = fragment_counts(cand.free_gpu, _target())
    frag = node_fragmentation(
        cand.idle_gpu, cand.free_cpu, fit, sub, np.ones((3, 2), dtype=np.bool_), _target()
    )
    # A: ½·8000 + ½·0; B: ½·2700 + ½·200; C: ½·300 + ½·300 (no GPU fits 500)
    assert frag.tolist() == [4000.0, 1450.0, 300.0]
    wrong_type = node_fragmentation(
        cand.idle_gpu, cand.free_cpu, fit, sub, np.zeros((3, 2), dtype=np.bool_), _target()
    )
    assert wrong_type.tolist() == [8000.0, 2700.0, 300.0]


# --- the protocol loop on hand-made clusters ---------------------------------------------


def _nodes(cpu: list[int], mem: list[int], gpus: list[int], model: list[str]) -> OpenbNodes:
    return OpenbNodes(
        Path("nodes.csv"),
        tuple(f"node-{i:03d}" for i in range(len(cpu))),
        np.array(cpu, dtype=np.int64),
        np.array(mem, dtype=np.int64),
        np.array(gpus, dtype=np.int64),
        tuple(model),
    )


def _pods(
    rows: list[tuple[int, int, int, int]], spec: list[tuple[str, ...]] | None = None
) -> OpenbPods:
    n = len(rows)
    col = list(zip(*rows, strict=True))
    return OpenbPods(
        Path("pods.csv"),
        tuple(f"pod-{i:04d}" for i in range(n)),
        np.array(col[0], dtype=np.int64),
        np.array(col[1], dtype=np.int64),
        np.array(col[2], dtype=np.int64),
        np.array(col[3], dtype=np.int64),
        tuple(spec) if spec is not None else ((),) * n,
        ("LS",) * n,
        ("Running",) * n,
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
    )


def _check_accounting(run: FgdRun, nodes: OpenbNodes, pods: OpenbPods) -> None:
    cpu = np.zeros(len(nodes), dtype=np.int64)
    mem = np.zeros(len(nodes), dtype=np.int64)
    gpu = np.zeros((len(nodes), MAX_GPUS), dtype=np.int64)
    allocated = 0
    for step, p in enumerate(run.sequence.tolist()):
        node = int(run.node[step])
        if node < 0:
            assert not run.gpus[step].any()
            continue
        cpu[node] += pods.cpu_milli[p]
        mem[node] += pods.memory_mib[p]
        assert int(run.gpus[step].sum()) == pods.num_gpu[p]
        gpu[node] += run.gpus[step] * pods.gpu_milli[p]
        allocated += int(pods.gpu_request[p])
        if pods.gpu_spec[p]:
            assert nodes.model[node] in pods.gpu_spec[p]
    assert (cpu <= nodes.cpu_milli).all()
    assert (mem <= nodes.memory_mib).all()
    assert (gpu <= 1000).all()
    exists = np.arange(MAX_GPUS)[None, :] < nodes.gpus[:, None]
    assert (gpu[~exists] == 0).all()
    assert allocated == (int(run.allocated_milli[-1]) if len(run.sequence) else 0)


def test_small_run_tunes_to_130_percent_and_fills_the_cluster() -> None:
    nodes = _nodes([32_000, 32_000], [65_536, 65_536], [2, 4], ["T4", "V100M16"])
    pods = _pods(
        [(4000, 1024, 1, 500), (8000, 2048, 1, 1000), (2000, 1024, 0, 0), (4000, 4096, 2, 1000)],
        [(), ("T4",), (), ()],
    )
    run = run_fgd(nodes, pods, "best-fit", 42)
    capacity = 6000
    assert 1.3 * capacity - 1000 <= run.arrived_milli[-1] <= 1.3 * capacity + 7000
    assert run.sequence[:4].tolist() != [] and sorted(run.sequence[:4].tolist()) == [0, 1, 2, 3]
    assert run.failed > 0
    assert run.allocated_milli[-1] <= capacity
    assert run.alloc_curve.shape == (131,)
    assert not np.isnan(run.gpu_alloc_pct_at_130)
    _check_accounting(run, nodes, pods)


def test_tuning_drops_pods_when_above_the_ratio() -> None:
    pods = _pods([(1000, 1, 1, 1000)] * 10)
    sequence = arrival_sequence(pods, 5000, np.random.default_rng(1))
    assert len(sequence) == 6  # 10 GPUs requested, at most 6.5 allowed
    assert len(set(sequence.tolist())) == 6


def test_only_cpu_pods_are_rejected() -> None:
    nodes = _nodes([32_000], [65_536], [2], ["T4"])
    with pytest.raises(ValueError, match="GPU request"):
        run_fgd(nodes, _pods([(1000, 1, 0, 0)]), "fgd", 42)
    with pytest.raises(ValueError, match="unknown policy"):
        run_fgd(nodes, _pods([(1000, 1, 1, 500)]), "tetris", 42)


@pytest.mark.parametrize("policy", sorted(GPU_SCORERS))
def test_same_seed_same_placements(policy: str) -> None:
    nodes = _nodes([64_000] * 4, [262_144] * 4, [8, 4, 2, 1], ["G2", "T4", "T4", "P100"])
    pods = _pods(
        [
            (4000 + 1000 * (i % 5), 2048, [0, 1, 1, 2, 1][i % 5], [0, 300, 1000, 1000, 700][i % 5])
            for i in range(40)
        ]
    )
    a, b = run_fgd(nodes, pods, policy, 42), run_fgd(nodes, pods, policy, 42)
    assert a.sequence.tolist() == b.sequence.tolist()
    assert a.node.tolist() == b.node.tolist()
    assert (a.gpus == b.gpus).all()
    c = run_fgd(nodes, pods, policy, 43)
    assert a.sequence.tolist() != c.sequence.tolist()
    result = run_fgd_seeds(nodes, pods, policy, [42, 43])
    assert result.gpu_alloc_pct_at_130 == pytest.approx(
        (a.gpu_alloc_pct_at_130 + c.gpu_alloc_pct_at_130) / 2
    )


def gpu_cases(max_nodes: int, max_pods: int) -> st.SearchStrategy[tuple[OpenbNodes, OpenbPods]]:
    """Random small openb clusters and pod lists (at least one GPU pod), for the properties."""
    node_rows = st.lists(
        st.tuples(
            st.integers(1000, 128_000),
            st.integers(1000, 400_000),
            st.sampled_from([1, 2, 4, 8]),
            st.sampled_from(["T4", "G2"]),
        ),
        min_size=1,
        max_size=max_nodes,
    )
    pod_rows = st.lists(
        st.tuples(
            st.integers(0, 40_000),
            st.integers(0, 100_000),
            st.sampled_from([0, 1, 1, 1, 2, 4, 8]),
            st.integers(1, 1000),
        ).map(lambda r: (r[0], r[1], r[2], 0 if r[2] == 0 else (r[3] if r[2] == 1 else 1000))),
        min_size=1,
        max_size=max_pods,
    ).filter(lambda rows: any(r[2] for r in rows))
    specs = st.lists(
        st.sampled_from([(), ("T4",), ("G2",), ("T4", "G2")]), min_size=max_pods, max_size=max_pods
    )

    def build(
        nodes: list[tuple[int, int, int, str]],
        pods: list[tuple[int, int, int, int]],
        spec: list[tuple[str, ...]],
    ) -> tuple[OpenbNodes, OpenbPods]:
        cpu, mem, gpus, model = (list(c) for c in zip(*nodes, strict=True))
        spec = [s if r[2] else () for s, r in zip(spec, pods, strict=False)]
        return _nodes(cpu, mem, gpus, model), _pods(pods, spec)

    return st.builds(build, node_rows, pod_rows, specs)


def check_run(run: FgdRun, nodes: OpenbNodes, pods: OpenbPods) -> None:
    """Nothing over-committed; allocation never shrinks; fragmentation never negative."""
    _check_accounting(run, nodes, pods)
    assert (np.diff(run.allocated_milli) >= 0).all()
    assert (run.frag_milli >= -1e-6).all()


@settings(max_examples=100, deadline=None)
@given(
    case=gpu_cases(max_nodes=4, max_pods=12),
    policy=st.sampled_from(sorted(GPU_SCORERS)),
    seed=st.integers(0, 2**16),
)
def test_accounting_never_overcommits(
    case: tuple[OpenbNodes, OpenbPods], policy: str, seed: int
) -> None:
    nodes, pods = case
    check_run(run_fgd(nodes, pods, policy, seed), nodes, pods)


needs_trace = pytest.mark.skipif(
    not (TRACES / "openb_pod_list_default.csv").exists(),
    reason="../shared (the Alibaba GPU trace v2023) is absent",
)


@needs_trace
def test_best_fit_and_fgd_on_the_default_trace_near_published() -> None:
    from fusesched.traces.openb import load_openb_nodes, load_openb_pods

    nodes = load_openb_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_openb_pods(TRACES / "openb_pod_list_default.csv")
    assert len(nodes) == 1213 and nodes.total_gpus == 6212
    best_fit = run_fgd_seeds(nodes, pods, "best-fit", [42, 43])
    # published mean 93.08 ± 0.13 over seeds 42-51; two of our seeds: allow 0.8 point
    assert best_fit.gpu_alloc_pct_at_130 == pytest.approx(93.08, abs=0.8)
    assert best_fit.runs[0].arrived_pct == pytest.approx(130, abs=0.15)
    fgd = run_fgd(nodes, pods, "fgd", 42)
    assert fgd.gpu_alloc_pct_at_130 == pytest.approx(95.39, abs=0.8)  # published 95.39 ± 0.08
    assert fgd.frag_curve[0] == pytest.approx(13.94, abs=0.2)  # empty-cluster fragmentation
