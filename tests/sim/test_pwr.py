"""The PWR protocol: power model, PWR score, registry, resampling and a tiny end-to-end run.

Expected values are hand-computed from ``shared/anchors/pwr/PROTOCOL.md`` sections 2-4 (every
node with the paper's 15 W / 120 W / 16-core CPU profile, 2 vCPUs per core).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusesched.policies.gpu_inputs import PodRequest
from fusesched.policies.gpu_power import (
    GPU_WATTS,
    PAPER_CPU,
    POWER_POLICIES,
    NodePower,
    cpu_need_per_gpu,
    cpu_power,
    gpu_power,
    guard_keys,
    guard_window,
    lexicographic_best,
    normalise_scores,
    pwr_gpu_choice,
    stranded,
)
from fusesched.policies.gpu_scores import target_workload
from fusesched.sim.protocols import pwr as pwr_module
from fusesched.sim.protocols.fgd import run_fgd
from fusesched.sim.protocols.pwr import GRID, PwrResult, resample, run_pwr, savings_pct
from fusesched.traces.openb import OpenbNodes, OpenbPods, load_openb_nodes

from ._shared import SHARED, needs_shared


def _i(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _pad(free: list[int]) -> list[int]:
    return free + [0] * (8 - len(free))


def _nodes(cpu: list[int], gpus: list[int], model: list[str]) -> OpenbNodes:
    return OpenbNodes(
        Path("nodes.csv"),
        tuple(f"node-{i:03d}" for i in range(len(cpu))),
        _i(cpu),
        _i([262_144] * len(cpu)),
        _i(gpus),
        tuple(model),
    )


def _pods(rows: list[tuple[int, int, int]]) -> OpenbPods:
    n = len(rows)
    cpu, num, milli = (list(c) for c in zip(*rows, strict=True))
    return OpenbPods(
        Path("pods.csv"),
        tuple(f"pod-{i:04d}" for i in range(n)),
        _i(cpu),
        _i([1024] * n),
        _i(num),
        _i(milli),
        ((),) * n,
        ("LS",) * n,
        ("Running",) * n,
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
    )


# --- power model -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "free", "watts"),
    [
        (96_000, 96_000, 3 * 15),  # G2 node: 48 cores → 3 sockets, all idle
        (96_000, 93_000, 120 + 2 * 15),  # 3 vCPU requested: 2 busy cores → 1 busy socket
        (104_000, 71_000, 2 * 120 + 2 * 15),  # 52 cores → 4 sockets; 17 busy cores → 2 busy
        (8_000, 8_000, 15),  # 4 cores: 1 socket
        (82_000, 81_999, 120 + 2 * 15),  # 41 cores → 3 sockets; ⌊81999/2000⌋ = 40 idle
        (82_000, 82_000, 3 * 15),
        (128_000, 0, 4 * 120),  # fully requested
    ],
)
def test_cpu_power_follows_the_code_rounding(capacity: int, free: int, watts: int) -> None:
    p = PAPER_CPU
    got = cpu_power(_i([capacity]), _i([free]), _i([p.idle_w]), _i([p.max_w]), _i([16]))
    assert got.tolist() == [watts]


def test_gpu_power_is_tdp_for_any_allocated_share() -> None:
    free = _i([_pad([1000] * 8), _pad([950] + [1000] * 7), _pad([0, 1000])])
    count, idle, peak = _i([8, 8, 2]), _i([30, 30, 10]), _i([150, 150, 70])
    # idle G2 8·30; one G2 GPU with 50 milli used: 150 + 7·30; T4 [busy, free]: 70 + 10
    assert gpu_power(free, count, idle, peak).tolist() == [240, 360, 80]


def test_node_power_of_an_idle_and_a_partly_used_node() -> None:
    watts = NodePower.of([96_000, 104_000], [8, 2], ["G2", "T4"])
    free_gpu = _i([_pad([1000] * 8), _pad([700, 1000])])
    idle = watts.cpu(_i([96_000, 104_000])) + watts.gpu(_i([_pad([1000] * 8), _pad([1000] * 2)]))
    assert idle.tolist() == [45 + 240, 60 + 20]
    used = watts.cpu(_i([96_000, 90_000])) + watts.gpu(free_gpu)
    # T4 node with a 14-vCPU, 300-milli pod: 7 busy cores → 1 busy socket; GPU 0 at TDP
    assert used.tolist() == [285, (120 + 3 * 15) + (70 + 10)]
    assert watts.median_wake_w() == 120  # GPUs: 8 × 120 W, 2 × 60 W


def test_unknown_models_are_rejected() -> None:
    with pytest.raises(ValueError, match="GPU model"):
        NodePower.of([8000], [1], ["H100"])
    with pytest.raises(ValueError, match="CPU model"):
        NodePower.of([8000], [1], ["T4"], cpu_models=["EPYC"])
    assert GPU_WATTS["G3"] == (50, 400) and GPU_WATTS["G2"] == GPU_WATTS["A10"]


@needs_shared
def test_openb_cluster_reference_watts() -> None:
    nodes = load_openb_nodes(SHARED / "traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv")
    watts = NodePower.of(nodes.cpu_milli, nodes.gpus, nodes.model)
    free = np.where(np.arange(8)[None, :] < nodes.gpus[:, None], 1000, 0).astype(np.int64)
    cpu, gpu = int(watts.cpu(nodes.cpu_milli).sum()), int(watts.gpu(free).sum())
    assert (cpu, gpu, cpu + gpu) == (55_665, 174_435, 230_100)  # section 2.3
    busy = int(watts.cpu(nodes.cpu_milli * 0).sum() + watts.gpu(free * 0).sum())
    assert busy == 1_474_110  # section 9, item 2


# --- PWR score on a tiny hand-made cluster -----------------------------------------------
#
# A: T4, 104 vCPU, 2 GPUs, empty.   B: G2, 96 vCPU, 8 GPUs, empty.
# C: G3, 128 vCPU, 8 GPUs, 3 vCPU and 500 milli of GPU 0 already requested (one busy socket).

CLUSTER = NodePower.of([104_000, 96_000, 128_000], [2, 8, 8], ["T4", "G2", "G3"])
FREE_CPU = _i([104_000, 96_000, 125_000])
FREE_GPU = _i([_pad([1000, 1000]), _pad([1000] * 8), _pad([500] + [1000] * 7)])
ROWS = _i([0, 1, 2])


def _delta(cpu: int, milli: int, count: int) -> list[int]:
    return CLUSTER.delta(ROWS, FREE_CPU, FREE_GPU, cpu, milli, count).tolist()


def test_delta_power_per_pod_kind() -> None:
    # sharing 200 milli, 2 vCPU: A wakes a T4 (60) and a socket (105); B a G2 (120) + 105;
    # C fits on its busy GPU 0 inside its busy socket: 0
    assert _delta(2000, 200, 1) == [165, 225, 0]
    # 600 milli does not fit C's busy GPU: C wakes a G3 (350)
    assert _delta(2000, 600, 1) == [165, 225, 350]
    # two whole GPUs, 8 vCPU: A 2·60 + 105; B 2·120 + 105; C 2·350 (4 busy cores, same socket)
    assert _delta(8000, 1000, 2) == [225, 345, 700]
    # CPU-only 40 vCPU (20 cores): A and B 2 sockets (210); C 23 busy cores → 2 busy (105)
    assert _delta(40_000, 0, 0) == [210, 210, 105]


def test_pwr_normalisation_orders_the_nodes() -> None:
    assert normalise_scores(-_i(_delta(2000, 200, 1))).tolist() == [26, 0, 100]  # 60·100/225
    # whole GPU: T4 cheapest (100); B ⌊(700 − 345)·100/(700 − 225)⌋ = 74; C 0
    assert normalise_scores(-_i(_delta(8000, 1000, 2))).tolist() == [100, 74, 0]
    assert normalise_scores(_i([-5, -5])).tolist() == [100, 100]  # all equal → 100
    assert normalise_scores(_i([-3, 0, -1])).tolist() == [0, 100, 66]  # integer division


def test_pwr_gpu_choice_prefers_the_first_busy_gpu() -> None:
    assert pwr_gpu_choice(_i(_pad([1000, 300, 800, 1000])), 4, 250) == 1
    assert pwr_gpu_choice(_i(_pad([1000, 300, 800, 1000])), 4, 900) == 0
    assert pwr_gpu_choice(_i(_pad([100, 1000])), 2, 200) == 1
    with pytest.raises(ValueError, match="fits"):
        pwr_gpu_choice(_i(_pad([100, 100])), 2, 200)


def test_guard_keys_and_stranding() -> None:
    target = target_workload([8000, 4000], [1000, 500], [1, 1], [(), ()])
    # demand-weighted CPU per whole GPU: (8000 + 4000) / 1.5 GPUs = 8000
    assert cpu_need_per_gpu(target) == 8000
    # 3 free GPUs with 20 vCPU left: only 2 can get 8 vCPU each
    assert stranded(_i([20_000, 64_000, -1]), _i([3, 3, 0]), 8000).tolist() == [1, 0, 0]
    keys = guard_keys(
        1, np.array([True, True, False]), _i([1, 0, 0]), _i([120, 225, 0]), _i([0, 105, 0]),
        _i([8000, 8000, 500]),
    )  # fmt: skip
    # the expensive node is out first, then the node that strands a GPU
    assert lexicographic_best(keys).tolist() == [False, True, False]
    # CPU-only: no new strand, then a busy socket (ΔP 0), then the least idle GPU
    cpu_only = guard_keys(0, np.ones(4, bool), _i([0, 0, 0, 1]), _i([0, 105, 0, 0]),
                          _i([0, 105, 0, 0]), _i([8000, 0, 500, 0]))  # fmt: skip
    assert lexicographic_best(cpu_only).tolist() == [False, False, True, False]


def test_guard_window_is_wide_only_on_a_mostly_empty_cluster() -> None:
    # 1 point, plus up to 25 that shrink linearly to 0 at half the GPUs allocated
    used = (0, 100, 250, 280, 490, 500, 900, 1000)
    expected = [26, 21, 13, 12, 1, 1, 1, 1]  # 280: 25 · 0.44 = 11 exactly, no float rounding
    assert [guard_window(1, 25, u, 1000) for u in used] == expected
    assert guard_window(1, 0, 0, 1000) == 1 and guard_window(0, 10, 200, 1000) == 6
    assert guard_window(1, 25, 0, 0) == 1  # no GPU at all: the base window


# --- registry ----------------------------------------------------------------------------


def test_policies_registered_by_name() -> None:
    assert {"fgd", "pwr", "pwr+fgd", "pwr+fgd-100", "pwr+fgd-50", "pwr-guard"} <= set(
        POWER_POLICIES
    )
    assert (POWER_POLICIES["pwr"].alpha, POWER_POLICIES["pwr"].gpu_rule) == (1000, "pwr")
    assert (POWER_POLICIES["pwr+fgd"].alpha, POWER_POLICIES["pwr+fgd"].gpu_rule) == (200, "fgd")
    assert POWER_POLICIES["pwr+fgd-50"].alpha == 50
    assert POWER_POLICIES["fgd"].alpha == 0 and not POWER_POLICIES["fgd"].guard
    guard, first = POWER_POLICIES["pwr-guard"], POWER_POLICIES["pwr-guard-v1"]
    assert guard.guard and guard.learn and guard.wide == 25 and guard.window == 1
    assert first.guard and not first.learn and first.wide == 0


# --- curves ------------------------------------------------------------------------------


def test_resample_is_positional_with_first_duplicates_kept() -> None:
    x = np.array([0.0, 0.002, 0.002, 0.007, 0.012])
    v = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    grid = np.array([0.0, 0.005, 0.01, 0.015])
    assert resample(x, v, grid).tolist() == [1.0, 3.0, 4.5, 5.0]
    # two grid points in one gap get 1/3 and 2/3 of the way, whatever their x
    two = resample(np.array([0.001, 0.012]), np.array([0.0, 3.0]), grid)
    assert two.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len(GRID) == 201 and GRID[-1] == 1.0
    assert savings_pct(np.array([200.0]), np.array([150.0])).tolist() == [25.0]


# --- tiny end-to-end run -----------------------------------------------------------------


def _tiny() -> tuple[OpenbNodes, OpenbPods]:
    nodes = _nodes(
        [104_000, 96_000, 128_000, 16_000, 96_000],
        [2, 8, 8, 2, 8],
        ["T4", "G2", "G3", "P100", "V100M32"],
    )
    shapes = [(2000, 1, 200), (8000, 1, 1000), (4000, 0, 0), (12_000, 2, 1000), (3000, 1, 500)]
    return nodes, _pods([shapes[i % 5] for i in range(36)])


@pytest.mark.parametrize("policy", ["fgd", "pwr", "pwr+fgd", "pwr-guard", "pwr-guard-v1"])
def test_tiny_run_is_deterministic_and_accounts_power(policy: str) -> None:
    nodes, pods = _tiny()
    a, b = run_pwr(nodes, pods, policy, 42), run_pwr(nodes, pods, policy, 42)
    assert a.base.node.tolist() == b.base.node.tolist()
    assert (a.base.gpus == b.base.gpus).all()
    assert a.power_w.tolist() == b.power_w.tolist()
    # recompute the datacenter power of the final state from the placements
    cpu = nodes.cpu_milli.copy()
    free = np.where(np.arange(8)[None, :] < nodes.gpus[:, None], 1000, 0).astype(np.int64)
    for step, p in enumerate(a.base.sequence.tolist()):
        node = int(a.base.node[step])
        if node >= 0:
            cpu[node] -= pods.cpu_milli[p]
            free[node] -= a.base.gpus[step] * pods.gpu_milli[p]
    watts = NodePower.of(nodes.cpu_milli, nodes.gpus, nodes.model)
    assert int(a.power_w[-1]) == int(watts.cpu(cpu).sum() + watts.gpu(free).sum())
    assert a.power_w[-1] == a.power_cpu_w[-1] + a.power_gpu_w[-1]
    result = PwrResult(policy, (a,))
    assert result.power.shape == (201,) and np.isfinite(result.grar).all()


@pytest.mark.parametrize("policy", ["pwr-guard", "pwr-guard-v1"])
def test_guard_picks_within_its_window_and_v2_uses_the_wide_one(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decisions: list[tuple[int, int, int, int]] = []  # best score, chosen score, used, capacity

    class Probe(pwr_module._PowerCluster):
        def _choose(self, cands: np.ndarray, pod: PodRequest) -> int:
            node = super()._choose(cands, pod)
            args = (pod.score_cpu, pod.gpu_milli, pod.num_gpu)
            _, score = (
                self.frag.drops(*args, pod.memory_mib) if self.online else self.frag.drops(*args)
            )
            used = self.capacity - int(self.free_gpu.sum())
            decisions.append((int(score[cands].max()), int(score[node]), used, self.capacity))
            assert (self.frag is not self.metric) == (policy == "pwr-guard")  # learned mix
            return node

    monkeypatch.setattr(pwr_module, "_PowerCluster", Probe)
    nodes, pods = _tiny()
    for seed in (42, 43, 44):
        run_pwr(nodes, pods, policy, seed)
    spec = POWER_POLICIES[policy]
    assert decisions
    for best, chosen, used, capacity in decisions:
        assert chosen >= best - guard_window(spec.window, spec.wide, used, capacity)
    beyond = [d for d in decisions if d[1] < d[0] - spec.window]
    if policy == "pwr-guard":  # the wide window is used, and only while under half allocated
        assert beyond and all(2 * used < capacity for _, _, used, capacity in beyond)
    else:
        assert not beyond


def test_fgd_in_the_pwr_runner_places_like_the_fgd_runner() -> None:
    nodes, pods = _tiny()
    power_run, fgd_run = run_pwr(nodes, pods, "fgd", 42), run_fgd(nodes, pods, "fgd", 42)
    assert power_run.base.node.tolist() == fgd_run.node.tolist()
    assert (power_run.base.gpus == fgd_run.gpus).all()


def test_pwr_alone_prefers_cheap_gpus_and_until_stops_early() -> None:
    nodes, pods = _tiny()
    run = run_pwr(nodes, pods, "pwr", 42)
    first_gpu_pod = next(s for s, p in enumerate(run.base.sequence) if pods.num_gpu[p] > 0)
    assert nodes.model[int(run.base.node[first_gpu_pod])] == "T4"  # the cheapest GPU to wake
    short = run_pwr(nodes, pods, "pwr", 42, until=0.5)
    capacity = nodes.total_gpus * 1000
    assert short.base.arrived_milli[-1] >= 0.5 * capacity > short.base.arrived_milli[-2]
    assert short.power_w.tolist() == run.power_w[: len(short.power_w)].tolist()
    with pytest.raises(ValueError, match="unknown policy"):
        run_pwr(nodes, pods, "tetris", 42)


def test_fgd_protocol_cli_accepts_the_power_policies() -> None:
    from fusesched.cli.simulate import UsageError, parse_policies

    assert parse_policies("fgd,pwr+fgd,pwr-guard", "fgd") == ["fgd", "pwr+fgd", "pwr-guard"]
    with pytest.raises(UsageError):
        parse_policies("pwr+fgd", "rlscheduler")
