"""Malformed Kubernetes documents of every kind fusesched reads: each value of a valid
document replaced by a value of another type (or removed) must give a SubmitError naming the
field, or a job — never another exception."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import yaml
from tests.submit.test_kube import JOB, POD
from tests.submit.test_kube_training import MPI, PYTORCH
from tests.submit.test_kube_workloads import DEPLOYMENT, VOLCANO

from fusesched.submit import SubmitError, parse_kube_yaml
from fusesched.submit.problems import Loc

SAMPLES = {
    "pod": POD,
    "job": JOB,
    "pytorchjob": PYTORCH,
    "pytorchjob-torchrun": PYTORCH.replace(
        "  runPolicy:\n", "  nprocPerNode: '2'\n  runPolicy:\n"
    ).replace("restartPolicy: OnFailure", "restartPolicy: Always"),
    "pytorchjob-elastic": PYTORCH.replace(
        "  runPolicy:\n",
        "  elasticPolicy: {nProcPerNode: 2, minReplicas: 2, maxReplicas: 2, maxRestarts: 1}\n"
        "  runPolicy:\n",
    ),
    "mpijob": MPI,
    "volcano": VOLCANO,
    "volcano-minimums": VOLCANO.replace("  minAvailable: 2\n", "  minAvailable: 1\n")
    .replace("    - replicas: 2\n", "    - replicas: 2\n      minAvailable: 1\n")
    .replace(
        "      replicas: 1\n",
        "      replicas: 1\n      minAvailable: 1\n"
        "      policies: [{event: TaskCompleted, action: CompleteJob}]\n",
    ),
    "deployment": DEPLOYMENT,
}
#: Stand-ins of the wrong type or range for any value; ``...`` removes the key.
STAND_INS: list[object] = [None, -1, 2**63, "x", [1], {"a": 1}, True, ...]


def _paths(value: object, loc: Loc = ()) -> Iterator[Loc]:
    if loc:
        yield loc
    if isinstance(value, dict | list):
        for key, inner in value.items() if isinstance(value, dict) else enumerate(value):
            yield from _paths(inner, (*loc, key))


def _replaced(doc: object, loc: Loc, stand_in: object) -> object:
    out = copy.deepcopy(doc)
    where = out
    for key in loc[:-1]:
        where = where[key]  # type: ignore[index]
    if stand_in is ...:
        del where[loc[-1]]  # type: ignore[attr-defined]
    else:
        where[loc[-1]] = stand_in  # type: ignore[index]
    return out


@pytest.mark.parametrize("kind", SAMPLES)
def test_every_malformed_value_is_a_submit_error(kind: str) -> None:
    doc = yaml.safe_load(SAMPLES[kind])
    crashed = []
    for loc in _paths(doc):
        for stand_in in STAND_INS:
            text = yaml.safe_dump(_replaced(doc, loc, stand_in))
            try:
                parse_kube_yaml(text, "bad.yaml")
            except SubmitError:
                pass
            except Exception as exc:  # (what this test looks for)
                crashed.append(f"{loc} = {stand_in!r}: {type(exc).__name__}: {exc}")
    assert crashed == []


WRONG_TYPES: list[tuple[str, Loc, object, str]] = [
    ("volcano", ("spec", "tasks"), 3, "spec.tasks: must be a list, not a number"),
    (
        "pytorchjob",
        ("spec", "pytorchReplicaSpecs", "Master", "template"),
        5,
        "spec.pytorchReplicaSpecs.Master.template: must be a mapping, not a number",
    ),
    (
        "deployment",
        ("spec", "template", "spec", "containers", 0, "ports"),
        {"containerPort": 8080},
        "spec.template.spec.containers[0].ports: must be a list, not a mapping",
    ),
    (
        "volcano",
        ("spec", "tasks", 0),
        "ps",
        "spec.tasks[0]: a task must be a mapping, not a string",
    ),
    (
        "mpijob",
        ("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0, "name"),
        ["worker"],
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name: must be a string",
    ),
    ("job", ("metadata", "name"), [], "metadata.name: must be a string"),
    ("pod", ("metadata", "generateName"), 0, "metadata.generateName: must be a string"),
    (
        "job",
        (
            "spec",
            "template",
            "spec",
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
            0,
            "matchExpressions",
            0,
            "operator",
        ),
        ["In"],
        "operator ['In'] is not supported (In, NotIn, Exists, DoesNotExist)",
    ),
]


@pytest.mark.parametrize(("kind", "loc", "value", "message"), WRONG_TYPES)
def test_wrong_types_name_the_field(kind: str, loc: Loc, value: object, message: str) -> None:
    text = yaml.safe_dump(_replaced(yaml.safe_load(SAMPLES[kind]), loc, value))
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(text, "bad.yaml")
    assert message in str(caught.value)
