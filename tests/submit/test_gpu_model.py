"""GPU model names as users write them (``--gres=gpu:h100:4``) resolved against the NVML names
agents label nodes with (``H100-80GB-HBM3``)."""

from __future__ import annotations

import pytest

from fusesched.model.job import LabelOp
from fusesched.model.node import LABEL_GPU_MODEL, NodeSpec
from fusesched.model.resources import Resources
from fusesched.submit import parse_sbatch
from fusesched.submit.gpu_model import matching_models, resolve_gpu_model
from fusesched.submit.request import JobRequest

MODELS = ["H100-80GB-HBM3", "H100-PCIe", "A100-SXM4-80GB", "H200", "GH200-480GB"]


@pytest.mark.parametrize(
    ("written", "found"),
    [
        ("H200", ["H200"]),  # exact: kept
        ("h200", ["H200"]),
        ("h100", ["H100-80GB-HBM3", "H100-PCIe"]),
        ("H100-pcie", ["H100-PCIe"]),
        ("a100", ["A100-SXM4-80GB"]),
        ("gh200", ["GH200-480GB"]),  # not H200: first words are compared whole
        ("v100", []),
        ("h1", []),
    ],
)
def test_matching_models(written: str, found: list[str]) -> None:
    assert matching_models(written, MODELS) == found


def nodes(*models: str) -> list[NodeSpec]:
    res = Resources.parse({"cpu": 8, "nvidia.com/gpu": 8})
    return [NodeSpec(f"g{k}", res, {LABEL_GPU_MODEL: m}) for k, m in enumerate(models)]


def test_a_slurm_gres_type_resolves_to_the_node_models() -> None:
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH --gres=gpu:h100:4\n./train\n", source="t.sh")
    request = resolve_gpu_model(parsed.request, nodes("H100-80GB-HBM3", "H100-PCIe", "H200"))
    placement = request.placement
    assert LABEL_GPU_MODEL not in placement.node_selector
    (term,) = placement.required
    assert (term.key, term.op, term.values) == (
        LABEL_GPU_MODEL,
        LabelOp.IN,
        ["H100-80GB-HBM3", "H100-PCIe"],
    )
    spec = request.to_job_spec("1", 0.0)
    assert spec.placement.required[0].values == ("H100-80GB-HBM3", "H100-PCIe")


def request(model: str | None) -> JobRequest:
    selector = {} if model is None else {LABEL_GPU_MODEL: model}
    group = {"argv": ["x"], "resources": {"cpu": "1", "nvidia.com/gpu": "1"}}
    return JobRequest.model_validate({"groups": [group], "placement": {"node_selector": selector}})


def test_exact_absent_and_unnamed_models_are_left_as_written() -> None:
    exact = request("H200")
    assert resolve_gpu_model(exact, nodes("H200", "H100-PCIe")) is exact
    absent = request("v100")
    assert resolve_gpu_model(absent, nodes("H200")) is absent  # feasibility refuses it
    plain = request(None)
    assert resolve_gpu_model(plain, nodes("H200")) is plain
