"""JobRequest: validation messages, JSON round trip, conversion to JobSpec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fusesched.model.job import (
    ArraySpec,
    Dependency,
    DependencyKind,
    JobType,
    LabelOp,
    LabelRequirement,
    PreferredTerm,
    QoS,
)
from fusesched.model.resources import Resources
from fusesched.submit import JobRequest, Launcher, SubmitError, parse_request

FULL: dict[str, Any] = {
    "name": "train",
    "type": "ai-train",
    "user": "ada",
    "tenant": "ml",
    "queue": "gpu",
    "priority": 5,
    "qos": "gold",
    "walltime_s": 3600,
    "min_member": 2,
    "dependencies": [{"kind": "afterok", "job_id": "41"}, {"kind": "afterany", "job_id": "7"}],
    "array": {"start": 0, "stop": 8, "step": 2, "max_parallel": 2},
    "placement": {
        "node_selector": {"fusesched.io/gpu-model": "H200"},
        "required": [{"key": "fusesched.io/pool", "op": "In", "values": ["ai"]}],
        "anti_affinity": [{"key": "maintenance", "op": "Exists"}],
        "preferred": [{"key": "rack", "op": "In", "values": ["r1"], "weight": 20}],
        "max_tasks_per_node": 1,
        "topology": {"key": "topology.fusesched.io/nvlink-domain", "mode": "required"},
    },
    "output": "out-%j.log",
    "error": "err-%j.log",
    "groups": [
        {
            "name": "worker",
            "replicas": 2,
            "resources": {"cpu": "500m", "mem": "2Gi", "gpu": 1},
            "argv": ["torchrun", "train.py"],
            "env": {"EPOCHS": "3"},
            "workdir": "/scratch",
            "image": "/images/torch.tar",
            "ports": [29500],
            "launcher": "torchrun",
        },
        {"name": "sidecar", "resources": {"cpu": 1}, "script": "#!/bin/sh\nsleep 1\n"},
    ],
}


def minimal(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]}
    data.update(fields)
    return data


def group(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"resources": {"cpu": 1}, "argv": ["true"]}
    data.update(fields)
    return minimal(groups=[data])


def test_full_request_round_trips_through_json() -> None:
    req = parse_request(FULL)
    again = JobRequest.from_json(req.to_json())
    assert again == req
    assert JobRequest.from_json(req.model_dump_json()) == req


def test_minimal_request_has_defaults() -> None:
    req = parse_request(minimal())
    assert (req.tenant, req.queue, req.qos, req.type, req.walltime_s) == (
        "default",
        "default",
        None,  # the controller's default tier (a tenancy file's default_qos, else silver)
        None,
        None,
    )
    assert req.to_job_spec("1", 0.0).qos is QoS.SILVER  # read without a controller
    assert req.groups[0].name == "main" and req.groups[0].replicas == 1
    stored = json.loads(req.to_json())
    assert stored["tenant"] == "default" and stored["groups"][0]["resources"] == {"cpu": "1"}
    assert req.model_dump_json(exclude_defaults=True) == (
        '{"groups":[{"resources":{"cpu":"1"},"argv":["true"]}]}'
    )


def test_resources_are_normalised_to_canonical_names_and_quantities() -> None:
    req = parse_request(group(resources={"CPU": 2.5, "mem": "1.5Gi", "gpus": "2", "fpga": 0}))
    assert req.groups[0].resources == {"cpu": "2500m", "memory": "1536Mi", "nvidia.com/gpu": "2"}


def test_to_job_spec_maps_every_scheduling_field() -> None:
    spec = parse_request(FULL).to_job_spec("j1", 12.5)
    assert spec.id == "j1" and spec.submit_time == 12.5
    assert spec.type is JobType.AI_TRAIN and spec.name == "train" and spec.user == "ada"
    assert (spec.tenant, spec.queue, spec.priority, spec.qos) == ("ml", "gpu", 5, QoS.GOLD)
    assert spec.walltime_s == 3600 and spec.min_member == 2
    worker, sidecar = spec.task_groups
    assert worker.replicas == 2
    assert worker.resources == Resources({"cpu": 500, "memory": 2 << 30, "nvidia.com/gpu": 1})
    assert sidecar.resources == Resources({"cpu": 1000})
    assert spec.dependencies == (
        Dependency(DependencyKind.AFTER_OK, "41"),
        Dependency(DependencyKind.AFTER_ANY, "7"),
    )
    assert spec.array == ArraySpec(0, 8, 2, 2)
    assert spec.array_index is None  # not expanded
    p = spec.placement
    assert dict(p.node_selector) == {"fusesched.io/gpu-model": "H200"}
    assert p.required == (LabelRequirement("fusesched.io/pool", LabelOp.IN, ("ai",)),)
    assert p.anti_affinity == (LabelRequirement("maintenance", LabelOp.EXISTS),)
    assert p.preferred == (PreferredTerm(LabelRequirement("rack", LabelOp.IN, ("r1",)), 20),)
    assert p.max_tasks_per_node == 1
    assert len(spec.expand_array()) == 5


def test_to_job_spec_identifies_the_type_when_not_given() -> None:
    req = parse_request(group(argv=["mpirun", "-n", "4", "./a.out"]))
    assert req.type is None
    assert req.to_job_spec("j", 0).type is JobType.HPC


def test_to_job_spec_rejects_an_empty_id_as_submit_error() -> None:
    with pytest.raises(SubmitError, match="a job needs an id"):
        parse_request(minimal()).to_job_spec("", 0)


def test_identified_fills_type_and_launchers_and_keeps_explicit_ones() -> None:
    req = parse_request(
        {
            "groups": [
                {"name": "a", "resources": {"gpu": 1}, "argv": ["torchrun", "x.py"]},
                {"name": "b", "resources": {"cpu": 1}, "argv": ["x"], "launcher": "mpi"},
            ]
        }
    )
    done = req.identified()
    assert done.type is JobType.AI_TRAIN
    assert [g.launcher for g in done.groups] == [Launcher.TORCHRUN, Launcher.MPI]
    assert req.groups[0].launcher is None  # the original is unchanged


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top field", minimal(nmae="x"), "nmae: unknown field 'nmae'; did you mean 'name'?"),
    (
        "unknown group field",
        group(replica=2),
        "groups[0].replica: unknown field 'replica'; did you mean 'replicas'?",
    ),
    (
        "unknown resource",
        group(resources={"gpux": 1}),
        "groups[0].resources: unknown resource 'gpux'; did you mean 'gpu' (nvidia.com/gpu)?",
    ),
    (
        "unknown nvidia resource",
        group(resources={"nvidia.com/gpus2": 1}),
        "unknown resource 'nvidia.com/gpus2'",
    ),
    ("bad quantity", group(resources={"memory": "lots"}), "cannot parse quantity 'lots'"),
    ("fractional gpu", group(resources={"gpu": 0.5}), "use fusesched.io/gpu-milli"),
    ("bool quantity", group(resources={"cpu": True}), "must be a number or a string"),
    ("list quantity", group(resources={"cpu": [1]}), "must be a number or a string"),
    ("twice", group(resources={"gpu": 1, "nvidia.com/gpu": 1}), "given twice"),
    ("nothing requested", group(resources={"cpu": 0}), "a task must request some resource"),
    ("no resources", {"groups": [{"argv": ["x"]}]}, "groups[0].resources: required field"),
    ("no groups", {"name": "x"}, "groups: required field is missing"),
    ("empty groups", {"groups": []}, "groups: List should have at least 1 item"),
    ("argv and script", group(script="echo"), "give argv or script, not both"),
    (
        "neither argv nor script",
        minimal(groups=[{"resources": {"cpu": 1}}]),
        "give argv (a command) or script",
    ),
    ("blank script", minimal(groups=[{"resources": {"cpu": 1}, "script": "  "}]), "or script"),
    ("empty program", group(argv=[""]), "argv[0]) must not be empty"),
    ("image neither path nor reference", group(image="Ubuntu::22"), "registry reference"),
    ("env name", group(env={"1X": "a"}), "invalid environment variable name '1X'"),
    ("port range", group(ports=[70000]), "groups[0].ports[0]: Input should be less than"),
    ("port twice", group(ports=[80, 80]), "ports must be unique"),
    ("zero replicas", group(replicas=0), "groups[0].replicas: Input should be greater"),
    ("bad group name", group(name="a b"), "groups[0].name: String should match pattern"),
    (
        "duplicate group names",
        minimal(groups=[{"name": "a", "resources": {"cpu": 1}, "argv": ["x"]}] * 2),
        "task group names must be unique; repeated: a",
    ),
    ("min_member", minimal(min_member=3), "min_member (3) exceeds the number of tasks (1)"),
    ("bad type", minimal(type="ai"), "type: Input should be 'ai-train'"),
    ("bad qos", minimal(qos="platinum"), "qos: Input should be 'gold', 'silver' or 'bronze'"),
    ("walltime zero", minimal(walltime_s=0), "walltime_s: Input should be greater than 0"),
    ("walltime inf", minimal(walltime_s=float("inf")), "walltime_s: Input should be a finite"),
    (
        "dependency kind",
        minimal(dependencies=[{"kind": "expand", "job_id": "1"}]),
        "dependencies[0].kind: Input should be 'after', 'afterok', 'afternotok', 'afterany', "
        "'aftercorr'",
    ),
    (
        "dependency id",
        minimal(dependencies=[{"kind": "afterok", "job_id": ""}]),
        "dependencies[0]: afterok needs job_id, the id of the job it waits for",
    ),
    ("array order", minimal(array={"start": 5, "stop": 1}), "array stop (1) is below start (5)"),
    ("array step", minimal(array={"start": 0, "stop": 1, "step": 0}), "array.step"),
    (
        "In without values",
        minimal(placement={"required": [{"key": "k", "op": "In"}]}),
        "placement.required[0]: label 'k': In needs at least one value",
    ),
    (
        "Exists with values",
        minimal(placement={"anti_affinity": [{"key": "k", "op": "Exists", "values": ["v"]}]}),
        "label 'k': Exists takes no values",
    ),
    (
        "bad op",
        minimal(placement={"required": [{"key": "k", "op": "Gt", "values": ["1"]}]}),
        "placement.required[0].op: Input should be 'In'",
    ),
    (
        "weight zero",
        minimal(placement={"preferred": [{"key": "k", "op": "Exists", "weight": 0}]}),
        "a preferred term needs a non-zero weight",
    ),
    (
        "topology mode",
        minimal(placement={"topology": {"key": "rack", "mode": "maybe"}}),
        "placement.topology.mode: Input should be 'required' or 'preferred'",
    ),
    ("max tasks", minimal(placement={"max_tasks_per_node": 0}), "max_tasks_per_node"),
    ("launcher", group(launcher="horovod"), "groups[0].launcher: Input should be 'none'"),
    ("name lines", minimal(name="a\nb"), "the job name must be one line"),
    ("NUL in user", minimal(user="a\0"), "user: a NUL character (\\u0000) is not allowed"),
    (
        "NUL in an env value",
        group(env={"A": "x\0"}),
        "groups[0].env: a NUL character (\\u0000) is not allowed (in ['A'])",
    ),
    (
        "NUL in a label key",
        minimal(labels={"a\0": "b"}),
        "labels: a NUL character (\\u0000) is not allowed (in the key 'a\\x00')",
    ),
    ("NUL in argv", group(argv=["x", "\0"]), "groups[0].argv: a NUL character"),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in BAD], ids=[c for c, *_ in BAD])
def test_bad_requests_are_rejected_with_a_specific_message(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_request(data, source="job.json")
    assert message in str(caught.value)
    assert str(caught.value).startswith("job.json: ")


def test_several_problems_are_all_reported_unknown_fields_first() -> None:
    with pytest.raises(SubmitError) as caught:
        parse_request({"groups": [{"argv": ["x"]}], "prio": 1})
    text = str(caught.value)
    assert text.startswith("prio: unknown field 'prio'")
    assert "also groups[0].resources: required field is missing" in text
    assert caught.value.field == "prio"


def test_error_lines_come_from_locate() -> None:
    lines: dict[tuple[str | int, ...], int] = {("groups", 0, "replicas"): 7}
    with pytest.raises(SubmitError) as caught:
        parse_request(group(replicas=-1), source="f.yaml", locate=lines.get)
    assert str(caught.value).startswith("f.yaml:7: groups[0].replicas: ")
    assert (caught.value.source, caught.value.line) == ("f.yaml", 7)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "malformed JSON: Expecting property name"),
        ("[1]", "a job request must be a JSON object"),
        ('{"groups": 3}', "groups: Input should be a valid list"),
    ],
)
def test_from_json_errors(text: str, message: str) -> None:
    with pytest.raises(SubmitError, match=message):
        JobRequest.from_json(text, source="api")


def test_requests_are_frozen() -> None:
    req = parse_request(minimal())
    with pytest.raises(ValueError, match="frozen"):
        req.name = "x"  # type: ignore[misc]


def test_mig_hugepages_and_vendor_resources_are_known() -> None:
    req = parse_request(
        group(
            resources={
                "nvidia.com/mig-1g.10gb": 1,
                "hugepages-2Mi": "1Gi",
                "amd.com/gpu": 1,
                "gpu-milli": 500,
            }
        )
    )
    assert set(req.groups[0].resources) == {
        "nvidia.com/mig-1g.10gb",
        "hugepages-2Mi",
        "amd.com/gpu",
        "fusesched.io/gpu-milli",
    }
