"""``default``'s stranding key and its FGD score window, on hand-computed cases.

The learned mix below has one GPU class, 8,000 milli-CPU per 500 milli-GPU, so its CPU per GPU
is 16,000 milli: a node's free CPU serves free_cpu · 1000 / 16,000 milli-GPU, and the rest of
its idle GPU is *stranded*.
"""

from __future__ import annotations

import numpy as np

from fusesched.policies.gpu_default import (
    FGD_WINDOW,
    default_keys,
    strand_delta,
    stranded_units,
)
from fusesched.policies.gpu_inputs import PodRequest
from fusesched.policies.gpu_power import cpu_need_per_gpu, lexicographic_best
from fusesched.policies.gpu_scores import MAX_GPUS, target_workload

NEED = 16_000
MIX = target_workload([4000, 8000], [0, 500], [0, 1], [(), ()])


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_cpu_per_gpu_of_the_mix() -> None:
    # only the GPU class counts: 8,000 milli-CPU per 0.5 GPU
    assert cpu_need_per_gpu(MIX) == NEED


def test_stranded_units() -> None:
    # 8 idle GPUs, 64,000 CPU serves 4 → 4,000 milli stranded; 300 idle, 80,000 CPU → none;
    # 2,700 idle, 32,000 CPU serves 2,000 → 700; negative free CPU counts as none
    units = stranded_units(
        _ints([64_000, 80_000, 32_000, -1_000]), _ints([8000, 300, 2700, 500]), NEED
    )
    assert (units // NEED).tolist() == [4000, 0, 700, 500]
    assert units.tolist() == [64_000_000, 0, 11_200_000, 8_000_000]


def test_strand_delta_signs() -> None:
    cpu = _ints([20_000, 64_000])  # X short of CPU (750 milli stranded), Y ample
    idle = _ints([2000, 2000])
    # CPU-light sharing pod (4,000 / 500): X 1,500 idle, 16,000 CPU serves 1,000 → 500
    # stranded, 250 fewer; Y stays at 0
    assert strand_delta(PodRequest(4000, 500, 1), cpu, idle, NEED).tolist() == [-250, 0]
    # CPU-heavy one (12,000 / 250): X 1,750 idle, 8,000 CPU serves 500 → 1,250, 500 more
    assert strand_delta(PodRequest(12_000, 250, 1), cpu, idle, NEED).tolist() == [500, 0]
    # a CPU-only pod of 16,000 milli strands one more GPU on X, none on Y (48,000 serves 3)
    assert strand_delta(PodRequest(16_000, 0, 0), cpu, idle, NEED).tolist() == [1000, 0]
    # no GPU class in the mix: nothing is stranded
    assert strand_delta(PodRequest(16_000, 0, 0), cpu, idle, 0).tolist() == [0, 0]


def _best(pod: PodRequest, fgd: list[int], cpu: list[int], idle: list[int]) -> list[bool]:
    free = np.zeros((len(cpu), MAX_GPUS), dtype=np.int64)
    for i, milli in enumerate(idle):
        free[i, : milli // 1000] = 1000
    keys = default_keys(pod, _ints(fgd), _ints(cpu), _ints(idle), free, MIX)
    return lexicographic_best(keys).tolist()


def test_window_then_stranding_then_fgd() -> None:
    assert FGD_WINDOW == 1
    pod = PodRequest(24_000, 1000, 1)
    # N0 (FGD 60): 2 GPUs, 32,000 CPU → after 1 GPU, 8,000 CPU: 500 stranded (+500);
    # N1 (59): 64,000 CPU, none stranded; N2 (58): likewise, but 2 points below the best
    assert _best(pod, [60, 59, 58], [32_000, 64_000, 96_000], [2000, 2000, 2000]) == [
        False,
        True,
        False,
    ]
    # neither strands: FGD's score decides inside the window
    assert _best(pod, [60, 59], [64_000, 96_000], [2000, 2000]) == [True, False]
    # equal on both: the least CPU + GPU left (BestFit's s) decides, then the node order
    assert _best(pod, [60, 60], [64_000, 96_000], [2000, 2000]) == [True, False]
    assert _best(pod, [60, 60], [64_000, 64_000], [2000, 2000]) == [True, True]
