"""The examples in docs/SUBMIT.md parse as the text around them says."""

from __future__ import annotations

import re
from pathlib import Path

from fusesched.model.job import JobType
from fusesched.submit import parse_submission

DOC = Path(__file__).resolve().parents[2] / "docs" / "SUBMIT.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_yaml_examples() -> None:
    own, kube, *_ = blocks("yaml")
    hello, pretrain = (p.request for p in parse_submission(own))
    assert hello.walltime_s == 300 and hello.identified().type is JobType.BATCH
    assert [g.replicas for g in pretrain.groups] == [4, 1]
    assert pretrain.identified().type is JobType.AI_TRAIN
    (job,) = parse_submission(kube)
    assert job.warnings == () and job.request.groups[0].replicas == 4


def test_batch_script_example() -> None:
    (script,) = blocks("bash")
    (parsed,) = parse_submission(script)
    req = parsed.request
    assert parsed.warnings == ()
    assert req.groups[0].replicas == 8 and req.placement.max_tasks_per_node == 4
    assert req.groups[0].resources == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    assert req.identified().type is JobType.AI_TRAIN


def test_kubeflow_volcano_and_deployment_examples() -> None:
    _, _, pytorch, mpi, volcano, deployment = blocks("yaml")
    parsed = [parse_submission(text)[0] for text in (pytorch, mpi, volcano, deployment)]
    assert all(p.warnings == () for p in parsed)
    pt, mp, vc, dep = (p.request.identified() for p in parsed)
    assert [(g.name, g.replicas) for g in pt.groups] == [("master", 1), ("worker", 3)]
    assert pt.type is JobType.AI_TRAIN and pt.queue == "gpu"
    assert (mp.groups[0].replicas, mp.groups[0].resources) == (4, {"cpu": "1", "memory": "2Gi"})
    assert mp.type is JobType.HPC
    assert [(g.name, g.replicas) for g in vc.groups] == [("ps", 1), ("worker", 2)]
    assert vc.min_member == 3
    assert dep.type is JobType.SERVICE and dep.groups[0].replicas == 2
