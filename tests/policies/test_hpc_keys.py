"""The HPC queue-order keys of PROTOCOL.md section 6."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.policies.hpc_keys import HPC_KEYS

LOG2_1 = math.log2(1 + 1e-15)  # ≈ 1.6e-15, the guard inside UNICEP's logarithm


def test_registry() -> None:
    assert set(HPC_KEYS) == {
        "fcfs",
        "sjf",
        "f1",
        "wfp3",
        "unicep",
        "wfp3-textbook",
        "unicep-textbook",
    }
    assert all(name == key.name for name, key in HPC_KEYS.items())
    assert {k.name for k in HPC_KEYS.values() if k.dynamic} == {"wfp3-textbook", "unicep-textbook"}


@pytest.mark.parametrize(
    ("name", "job", "expected"),
    [
        # job = (submit s, estimate r, procs n, now)
        ("fcfs", (100, 3600, 4, 999), (100.0,)),
        ("sjf", (100, 3600, 4, 999), (3600.0, 100.0)),
        ("f1", (100, 1000, 4, 999), (3.0 * 4 + 870.0 * 2.0,)),
        ("f1", (0, -1, 4, 999), (-1.0 * 4 - 870.0,)),  # r, s ≤ 0 → 0.1
        ("wfp3", (99, 100, 2, 999), (2.0,)),  # n·((s + 1)/r)³
        ("wfp3", (0, -1, 1, 999), (-1.0,)),  # a negative estimate goes first
        ("wfp3", (199, 100, 3, 5), (24.0,)),  # ignores now
        ("unicep", (99, 100, 2, 999), (-(-100.0 + 1e-15) / (math.log2(2 + 1e-15) * 100),)),
        ("unicep", (99, 100, 1, 999), (100.0 / (LOG2_1 * 100),)),
        ("wfp3-textbook", (100, 100, 2, 300), (-16.0,)),  # -(w/r)³·n, w = now - s
        ("unicep-textbook", (100, 50, 2, 300), (-(200.0 + 1e-15) / (1.0 * 50),)),
    ],
)
def test_key_values(name: str, job: tuple[int, int, int, int], expected: tuple[float, ...]) -> None:
    got = HPC_KEYS[name].scalar(*job)
    assert got == pytest.approx(expected, rel=1e-15)
    submit, estimate, procs, now = job
    vectors = HPC_KEYS[name].vector([submit], [estimate], [procs], now)
    assert tuple(float(v[0]) for v in vectors) == got


def test_unicep_orders_single_processor_jobs_by_ratio_not_submit() -> None:
    key = HPC_KEYS["unicep"]
    early_long = key.scalar(1000, 100, 1, 0)  # (s + 1)/r ≈ 10
    late_short = key.scalar(2000, 1000, 1, 0)  # ≈ 2: first, although submitted later
    multi = key.scalar(1_000_000, 1, 2, 0)  # any n ≥ 2 job comes before n = 1 jobs
    assert multi < late_short < early_long
    assert key.scalar(5000, -1, 1, 0) < multi  # r < 0: hugely negative, first of all


def test_sjf_is_lexicographic_and_lexsort_ready() -> None:
    submit, estimate, procs = np.array([5, 1, 3]), np.array([60, 60, 10]), np.array([1, 1, 1])
    r, s = HPC_KEYS["sjf"].vector(submit, estimate, procs, 0)
    assert np.lexsort((s, r)).tolist() == [2, 1, 0]


def test_degenerate_inputs_follow_numpy_semantics() -> None:
    assert HPC_KEYS["wfp3"].scalar(10, 0, 2, 0) == (math.inf,)
    assert math.isnan(HPC_KEYS["wfp3"].scalar(10, 0, 0, 0)[0])
    assert HPC_KEYS["unicep"].scalar(10, 0, 2, 0) == (math.inf,)
    assert math.isnan(HPC_KEYS["unicep"].scalar(10, 5, -1, 0)[0])  # log2 of a negative number


def _same_bits(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return np.float64(a).tobytes() == np.float64(b).tobytes()


times = st.one_of(
    st.integers(-10, 10),
    st.integers(0, 2**40),
    st.floats(-1e12, 1e12, allow_nan=False),
)
jobs = st.lists(
    st.tuples(times, times, st.one_of(st.integers(-2, 4), st.integers(0, 100_000))),
    min_size=1,
    max_size=20,
)


@pytest.mark.parametrize("name", sorted(HPC_KEYS))
@settings(max_examples=60)
@given(jobs=jobs, now=times)
def test_scalar_and_vector_are_bit_identical(
    name: str, jobs: list[tuple[float, float, int]], now: float
) -> None:
    key = HPC_KEYS[name]
    submit, estimate, procs = zip(*jobs, strict=True)
    vectors = key.vector(np.array(submit), np.array(estimate), np.array(procs), now)
    for i, job in enumerate(jobs):
        scalar = key.scalar(*job, now)
        assert len(scalar) == len(vectors)
        assert all(_same_bits(s, float(v[i])) for s, v in zip(scalar, vectors, strict=True))
