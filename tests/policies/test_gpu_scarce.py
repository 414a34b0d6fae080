"""``default``'s scarce-pressure tier: GPUs that only few pod classes can use are kept for them.

A GPU pod class is scarce when the nodes that could ever host it hold at most
``SCARCE_SHARE`` % of the GPUs (a model-constrained class such as gpuspec33's T4-only pods, or
one too big for most nodes). ``default`` learns those classes' demand from the arrivals, and a
GPU pod takes the nodes of least pressure first, except that it may use a node whose stranded
GPUs it eases (those lack the CPU for the scarce pods anyway).
"""

from __future__ import annotations

import numpy as np
import pytest

from fusesched.policies import gpu_default
from fusesched.policies.gpu_default import (
    SCARCE_SHARE,
    default_keys,
    scarce_pressure,
    scarce_tier,
)
from fusesched.policies.gpu_inputs import PodRequest
from fusesched.policies.gpu_power import lexicographic_best
from fusesched.policies.gpu_scores import MAX_GPUS, target_workload
from fusesched.sim.protocols.fgd import run_fgd
from fusesched.sim.protocols.fgd_cluster import _Cluster
from sim.test_fgd_protocol import _nodes, _pods

NEED = 16_000  # milli-CPU per GPU of the mix below (8,000 per 500 milli-GPU)
MIX = target_workload([4000, 8000], [0, 500], [0, 1], [(), ()])


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_scarce_pressure_by_hand() -> None:
    assert SCARCE_SHARE == 25
    gpus = _ints([2, 8, 8, 8])  # 26 GPUs; node 0 holds 2 / 26 = 7.7 %, node 1 30.8 %
    eligible = np.array(
        [
            [True, False, False, False],  # T4-only whole-GPU class: scarce
            [True, False, False, False],  # T4-only sharing class: scarce
            [True, True, True, True],  # any model: not scarce
            [False, True, False, False],  # too big for all but node 1 (30.8 %): not scarce
        ]
    )
    demand = _ints([1000, 500, 2500, 500])  # 4,500 milli-GPU seen in all
    # ⌊100 · (1000 / 4500) / (2 / 26)⌋ = 288 and ⌊100 · (500 / 4500) / (2 / 26)⌋ = 144
    assert scarce_pressure(eligible, demand, gpus).tolist() == [432, 0, 0, 0]
    # nothing seen yet: no pressure
    assert scarce_pressure(eligible, _ints([0, 0, 0, 0]), gpus).tolist() == [0, 0, 0, 0]
    # exactly a quarter of the GPUs is still scarce: 100 · 1 / (2 / 8) = 400
    quarter = scarce_pressure(np.array([[True, False, False]]), _ints([700]), _ints([2, 2, 4]))
    assert quarter.tolist() == [400, 0, 0]


def test_scarce_tier_spares_nodes_the_pod_unstrands() -> None:
    pressure = _ints([300, 300, 0])
    cpu = _ints([20_000, 64_000, 64_000])  # X short of CPU (750 milli stranded), Y, Z ample
    idle = _ints([2000, 2000, 2000])
    # a CPU-light sharing pod eases X's stranding (−250): X counts as unpressured
    light = scarce_tier(PodRequest(4000, 500, 1), pressure, cpu, idle, NEED)
    assert light.tolist() == [0, 300, 0]
    # a CPU-heavy one strands more on X: X keeps its pressure
    heavy = scarce_tier(PodRequest(12_000, 250, 1), pressure, cpu, idle, NEED)
    assert heavy.tolist() == [300, 300, 0]
    # CPU-only pods take no GPU: no tier
    assert scarce_tier(PodRequest(4000, 0, 0), pressure, cpu, idle, NEED).tolist() == [0, 0, 0]


def _best(pod: PodRequest, fgd: list[int], tier: list[int] | None) -> list[bool]:
    cpu = _ints([64_000] * len(fgd))
    idle = _ints([2000] * len(fgd))
    free = np.zeros((len(fgd), MAX_GPUS), dtype=np.int64)
    free[:, :2] = 1000
    keys = default_keys(
        pod, _ints(fgd), cpu, idle, free, MIX, None if tier is None else _ints(tier)
    )
    return lexicographic_best(keys).tolist()


def test_least_pressure_comes_before_fgd_score() -> None:
    pod = PodRequest(8000, 1000, 1)
    # without the tier FGD's best (70) wins; with it the unpressured node although 20 points
    # lower, and the FGD window is taken among the unpressured nodes (59 is within 1 of 60)
    assert _best(pod, [70, 50], None) == [True, False]
    assert _best(pod, [70, 50], [288, 0]) == [False, True]
    assert _best(pod, [70, 60, 59, 58], [288, 0, 0, 0]) == [False, True, False, False]


def _scarce_cluster() -> _Cluster:
    """One T4 node (2 GPUs, 64 cores, first in the tie order), three G2 nodes (8 GPUs, 80)."""
    nodes = _nodes([64_000] + [80_000] * 3, [262_144] * 4, [2, 8, 8, 8], ["T4", "G2", "G2", "G2"])
    return _Cluster(
        nodes,
        target_workload([4000], [1000], [1], [()]),  # FGD's target; ``default`` learns its own
        "default",
        np.arange(4, dtype=np.int64),
        np.random.default_rng(0),
    )


#: (spec, milli-CPU) of 1-GPU pods: a light T4-only pod, 16 CPU-heavy pods for any model,
#: another T4-only pod. The T4 node holds 2 / 26 GPUs (7.7 %): the T4-only class is scarce.
ARRIVALS = [(("T4",), 4000)] + [((), 12_000)] * 16 + [(("T4",), 4000)]


def _placements(monkeypatch: pytest.MonkeyPatch, share: int) -> tuple[list[str], _Cluster]:
    monkeypatch.setattr(gpu_default, "SCARCE_SHARE", share)
    sim = _scarce_cluster()
    where = []
    for spec, cpu in ARRIVALS:
        node, _ = sim.place(PodRequest(cpu, 1000, 1, 1024), 1024, spec)
        where.append("-" if node < 0 else sim.models[node])
    return where, sim


def test_unconstrained_pods_keep_off_the_scarce_model(monkeypatch: pytest.MonkeyPatch) -> None:
    kept, sim = _placements(monkeypatch, SCARCE_SHARE)
    # learned at 16 arrivals: 1,000 of 16,000 milli-GPU asked for T4 only, on 2 / 26 GPUs:
    # ⌊100 · (1 / 16) / (2 / 26)⌋ = 81 on the T4 node
    assert sim.pressure.tolist() == [81, 0, 0, 0]
    # the unconstrained pods all go to G2, and the second T4-only pod finds the T4 GPU
    assert kept == ["T4"] + ["G2"] * 16 + ["T4"]
    # without the tier (no class counts as scarce) an unconstrained pod takes the T4 node's
    # second GPU (G2's CPU is tighter: the stranding key sends it there, FGD's score is within
    # the window) and the T4-only pod fails
    plain, sim = _placements(monkeypatch, 0)
    assert not sim.pressure.any()
    assert plain.count("T4") == 2
    assert plain[-1] == "-"


def test_fast_path_places_like_scratch_with_scarce_classes() -> None:
    rng = np.random.default_rng(3)
    nodes = _nodes(
        [96_000] * 8 + [64_000] * 2,
        [400_000] * 10,
        [8] * 8 + [2] * 2,
        ["G2"] * 8 + ["T4"] * 2,
    )
    rows, specs = [], []
    for i in range(120):
        milli = int(rng.choice([230, 470, 810, 1000]))
        rows.append((int(rng.choice([2000, 8000, 16000])), 1024, 1, milli))
        specs.append(("T4",) if i % 4 == 0 else ())
    pods = _pods(rows, specs)
    fast = run_fgd(nodes, pods, "default", 7)
    slow = run_fgd(nodes, pods, "default", 7, incremental=False)
    assert fast.node.tolist() == slow.node.tolist()
    assert (fast.gpus == slow.gpus).all()
