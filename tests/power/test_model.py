"""The power model: linear between idle and peak, GPU part, loading from dicts and YAML."""

from __future__ import annotations

import numpy as np
import pytest

from fusesched.power.model import (
    CPU_NODE,
    DEFAULT_MODELS,
    GPU_NODE,
    PowerModel,
    kwh,
    load_power_models,
    per_month,
)


def test_linear_between_idle_and_peak() -> None:
    m = PowerModel(idle_w=100, peak_w=300, suspended_w=5)
    assert m.power(0.0) == 100
    assert m.power(0.5) == 200
    assert m.power(1.0) == 300
    assert m.power(2.0) == 300  # clipped
    assert m.node_idle_w == 100 and m.node_peak_w == 300


def test_gpu_part_adds_per_device() -> None:
    m = PowerModel(idle_w=500, peak_w=2500, gpus=8, gpu_idle_w=70, gpu_peak_w=700)
    assert m.node_idle_w == 500 + 8 * 70
    assert m.node_peak_w == 2500 + 8 * 700
    # half the GPUs busy, host at half: 1500 + 8 * (70 + 630 * 0.5)
    assert m.power(0.5, 0.5) == pytest.approx(1500 + 8 * 385)
    arr = m.power_array(np.array([0.0, 0.5]), np.array([0.0, 0.5]))
    assert arr.tolist() == pytest.approx([m.node_idle_w, 1500 + 8 * 385])


@pytest.mark.parametrize(
    "values",
    [
        {"idle_w": -1, "peak_w": 10},
        {"idle_w": 20, "peak_w": 10},
        {"idle_w": 10, "peak_w": 20, "suspended_w": 11},
        {"idle_w": 10, "peak_w": 20, "gpus": 1, "gpu_idle_w": 5, "gpu_peak_w": 1},
    ],
)
def test_invalid_models_are_refused(values: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PowerModel.from_dict(values)


def test_defaults_are_sane() -> None:
    cpu, gpu = DEFAULT_MODELS[CPU_NODE], DEFAULT_MODELS[GPU_NODE]
    for m in (cpu, gpu):
        assert m.suspended_w < m.node_idle_w < m.node_peak_w
        assert m.wake_s > 0
    assert gpu.gpus == 8 and gpu.node_peak_w <= 10_200  # within a DGX H100's maximum


def test_load_from_yaml_with_base() -> None:
    text = """
cpu-node: {idle_w: 90, peak_w: 400, suspended_w: 5, wake_s: 200}
fat-gpu: {base: gpu-node, gpus: 4}
"""
    models = load_power_models(text)
    assert models["cpu-node"] == PowerModel(90, 400, 5, 200)
    assert models["fat-gpu"].gpus == 4
    assert models["fat-gpu"].gpu_peak_w == DEFAULT_MODELS[GPU_NODE].gpu_peak_w


@pytest.mark.parametrize(
    "source",
    [
        "[1, 2]",
        {"x": {"idle_w": 1}},
        {"x": {"idle_w": 1, "peak_w": 2, "colour": "red"}},
        {"x": {"base": "nope"}},
        {"x": 3},
    ],
)
def test_load_errors_name_the_model(source: object) -> None:
    with pytest.raises(ValueError):
        load_power_models(source)  # type: ignore[arg-type]


def test_units() -> None:
    assert kwh(3_600_000.0) == 1.0
    assert per_month(10.0, 15 * 86400.0) == pytest.approx(20.0)
    assert per_month(10.0, 0.0) == 0.0
