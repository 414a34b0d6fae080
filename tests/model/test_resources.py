"""Kubernetes-style quantities and the Resources bag."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.model.resources import (
    CPU,
    GPU,
    GPU_MILLI,
    MEMORY,
    QuantityError,
    Resources,
    canonical_name,
    format_quantity,
    parse_quantity,
)

Gi = 2**30

# (resource name as written, quantity as written, base-unit amount)
VALID = [
    ("cpu", "8", 8000),
    ("cpu", 8, 8000),
    ("cpu", "500m", 500),
    ("cpu", "1.5", 1500),
    ("cpu", 1.5, 1500),
    ("cpu", "1e3", 1_000_000),
    ("cpu", "1E3", 1_000_000),
    ("cpu", "2k", 2_000_000),
    ("cpu", "+2", 2000),
    ("cpu", " 2 ", 2000),
    ("cpu", "1e-3", 1),
    ("cpu", "0", 0),
    ("memory", "64Gi", 64 * Gi),
    ("memory", "1Ki", 1024),
    ("memory", "0.5Ki", 512),
    ("memory", "1M", 10**6),
    ("memory", "1G", 10**9),
    ("memory", "2Ti", 2 * 2**40),
    ("memory", 4096, 4096),
    ("mem", "1Gi", Gi),
    ("Mem", "1Gi", Gi),
    ("nvidia.com/gpu", "4", 4),
    ("gpu", 2, 2),
    ("gpus", "1", 1),
    ("gpu-milli", 500, 500),
    ("nvidia.com/mig-1g.10gb", "3", 3),
    ("fpga", 2, 2),
    ("rdma", "1k", 1000),
    ("cpus", "2", 2000),
]


@pytest.mark.parametrize(("name", "value", "expected"), VALID)
def test_parse_quantity(name: str, value: str | int | float, expected: int) -> None:
    assert parse_quantity(name, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("gpu", "0.5", "gpu-milli"),  # fractional GPUs must be asked for as gpu-milli shares
        ("nvidia.com/gpu", 0.5, "gpu-milli"),
        ("cpu", "-1", "cannot parse"),
        ("cpu", -1, "negative"),
        ("cpu", -0.5, "negative"),
        ("memory", "-1Gi", "cannot parse"),
        ("cpu", "abc", "cannot parse"),
        ("cpu", "", "cannot parse"),
        ("cpu", ".", "cannot parse"),
        ("cpu", "1x", "cannot parse"),
        ("cpu", "1 Gi B", "cannot parse"),
        ("memory", "1gi", "cannot parse"),
        ("cpu", True, "number or a string"),
        ("cpu", False, "number or a string"),
        ("cpu", None, "number or a string"),
        ("cpu", [1], "number or a string"),
        ("cpu", "0.5m", "milli-cores"),
        ("cpu", 0.0005, "milli-cores"),
        ("memory", "1.5", "bytes"),
        ("fpga", "1.5", "units"),
        ("fpga", "500m", "units"),
        ("cpu", "99999999999999999999999", "too large"),  # more than a core's array holds
        ("memory", "1e400", "too large"),
        ("memory", "1e999999999", "too large"),  # beyond Decimal's exponent, not a crash
        ("nvidia.com/gpu", 10**30, "too large"),
    ],
)
def test_parse_quantity_rejects(name: str, value: object, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_quantity(name, value)  # type: ignore[arg-type]


def test_fractional_gpu_error_names_the_share_resource() -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity("gpu", "0.5")
    assert GPU_MILLI in str(info.value)
    assert GPU in str(info.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_quantity_errors(value: float) -> None:
    # QuantityError is the one documented failure: callers (API validation) catch it and
    # nothing else, so a NaN/inf quantity must not escape as decimal/overflow errors.
    with pytest.raises(QuantityError):
        parse_quantity("cpu", value)


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("cpu", CPU),
        ("cpus", CPU),
        ("mem", MEMORY),
        ("MEM", MEMORY),
        ("memory", MEMORY),
        ("gpu", GPU),
        ("GPU", GPU),
        ("gpus", GPU),
        ("nvidia.com/gpus", GPU),
        ("nvidia.com/gpu", GPU),
        ("gpu-milli", GPU_MILLI),
        (" gpu ", GPU),
        ("fpga", "fpga"),
        ("amd.com/gpu", "amd.com/gpu"),
        ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("ephemeral-storage", "ephemeral-storage"),
    ],
)
def test_canonical_names(written: str, canonical: str) -> None:
    assert canonical_name(written) == canonical


@pytest.mark.parametrize(
    "name", ["", " ", "Bad Name", "a/b/c", "-cpu", "cpu-", "/gpu", "Nvidia.com/gpu", "gpu!", "é"]
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(QuantityError, match="invalid resource name"):
        canonical_name(name)
    with pytest.raises(QuantityError):
        parse_quantity(name, 1)


# ----------------------------------------------------------------------------- Resources


def r(**amounts: int) -> Resources:
    """Base-unit Resources; ``mem`` and ``gpu`` stand for memory and nvidia.com/gpu."""
    names = {"mem": MEMORY, "gpu": GPU}
    return Resources({names.get(k, k): v for k, v in amounts.items()})


def test_parse_mapping_with_aliases() -> None:
    res = Resources.parse({"cpu": "500m", "mem": "2Gi", "gpu": 1, "fpga": 0})
    assert dict(res) == {CPU: 500, MEMORY: 2 * Gi, GPU: 1}
    assert "fpga" not in res  # zero entries are dropped
    assert len(res) == 3
    assert res.get("fpga") == 0
    assert res[CPU] == 500


def test_parse_empty() -> None:
    assert Resources.parse(None) == Resources()
    assert Resources.parse({}) == Resources()
    assert not Resources.parse({})


def test_parse_rejects_the_same_resource_twice_via_an_alias() -> None:
    with pytest.raises(QuantityError, match="twice"):
        Resources.parse({"gpu": 1, "nvidia.com/gpu": 2})
    with pytest.raises(QuantityError, match="twice"):
        Resources.parse({"mem": "1Gi", "memory": "1Gi"})


def test_parse_propagates_quantity_errors() -> None:
    with pytest.raises(QuantityError, match="gpu-milli"):
        Resources.parse({"cpu": 1, "gpu": "0.5"})
    with pytest.raises(QuantityError, match="invalid resource name"):
        Resources.parse({"bad name": 1})


@pytest.mark.parametrize("amount", [1.5, True, "1", -1, None])
def test_internal_amounts_must_be_non_negative_ints(amount: object) -> None:
    with pytest.raises(QuantityError):
        Resources({CPU: amount})  # type: ignore[dict-item]


def test_arithmetic() -> None:
    a = r(cpu=2000, mem=Gi)
    b = r(cpu=500, gpu=1)
    assert a + b == r(cpu=2500, mem=Gi, gpu=1)
    assert (a + b) - b == a
    assert a - r(cpu=2000) == r(mem=Gi)
    assert "cpu" not in a - r(cpu=2000)  # zero results disappear
    assert a.scaled(3) == r(cpu=6000, mem=3 * Gi)
    assert a.scaled(0) == Resources()
    assert a + {} == a
    assert a + {CPU: 1} == r(cpu=2001, mem=Gi)  # any int mapping may be added


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (r(cpu=1000), r(cpu=1001)),
        (r(cpu=1000), r(gpu=1)),  # taking something that is not there at all
        (Resources(), r(mem=1)),
    ],
)
def test_subtraction_never_goes_negative(left: Resources, right: Resources) -> None:
    with pytest.raises(QuantityError):
        left - right


@pytest.mark.parametrize(
    ("request_", "capacity", "fits"),
    [
        (r(cpu=1000), r(cpu=1000), True),
        (r(cpu=1001), r(cpu=1000), False),
        (r(cpu=1000, gpu=1), r(cpu=8000, mem=Gi), False),  # capacity lacks the gpu
        (r(cpu=1000), r(cpu=8000, gpu=4), True),
        (Resources(), Resources(), True),
        (Resources(), r(cpu=1), True),
        (r(cpu=1000, mem=Gi), r(cpu=1000, mem=Gi - 1), False),
        (r(cpu=1), {CPU: 5}, True),  # any int mapping works as capacity
    ],
)
def test_fits_in(request_: Resources, capacity: Resources, fits: bool) -> None:
    assert request_.fits_in(capacity) is fits


def test_equality_and_hash_ignore_order_and_zeros() -> None:
    a = Resources({MEMORY: 5, CPU: 1, GPU: 0})
    b = Resources([(CPU, 1), (MEMORY, 5)])
    assert a == b
    assert hash(a) == hash(b)
    assert list(a) == sorted(a)
    assert len({a, b}) == 1
    assert a != r(cpu=1)


def test_repeated_pairs_are_summed() -> None:
    assert Resources([(CPU, 1), (CPU, 2)]) == r(cpu=3)


@pytest.mark.parametrize(
    ("name", "amount", "written"),
    [
        (CPU, 2000, "2"),
        (CPU, 500, "500m"),
        (CPU, 1500, "1500m"),
        (CPU, 0, "0"),
        (MEMORY, 64 * Gi, "64Gi"),
        (MEMORY, 1024, "1Ki"),
        (MEMORY, 1536, "1536"),
        (MEMORY, 3 * 2**20, "3Mi"),
        (MEMORY, 1000, "1000"),
        (GPU, 4, "4"),
        ("fpga", 1, "1"),
    ],
)
def test_format_quantity(name: str, amount: int, written: str) -> None:
    assert format_quantity(name, amount) == written
    assert parse_quantity(name, written) == amount


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([CPU, MEMORY, "ephemeral-storage", GPU, GPU_MILLI, "fpga"]),
    st.integers(min_value=0, max_value=2**62),
)
def test_format_parse_round_trip(name: str, amount: int) -> None:
    assert parse_quantity(name, format_quantity(name, amount)) == amount


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([CPU, MEMORY, GPU, GPU_MILLI, "fpga", "nvidia.com/mig-1g.10gb"]),
        st.integers(min_value=0, max_value=2**50),
    )
)
def test_to_spec_parse_round_trip(amounts: dict[str, int]) -> None:
    res = Resources(amounts)
    assert Resources.parse(res.to_spec()) == res


def test_repr_is_human_readable() -> None:
    assert repr(r(cpu=500, mem=2 * Gi)) == "Resources(cpu=500m, memory=2Gi)"
