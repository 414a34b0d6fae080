"""A task group's own label filters on the wire (``groups[i].placement``): parsed and stored,
checked at submission, resolved (GPU models), read from Kubeflow/Volcano replicas, shown by
``fusesched show``, and routed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fusesched.backends.federation_config import parse_federation
from fusesched.backends.routing import route
from fusesched.cli.live import component_lines
from fusesched.controller.hetjob_env import stored_components
from fusesched.model.job import LabelOp
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_POOL, NodeSpec
from fusesched.model.resources import Resources
from fusesched.submit import (
    SubmitError,
    check_feasible,
    parse_job_yaml,
    parse_kube_yaml,
    parse_request,
)
from fusesched.submit.gpu_model import resolve_gpu_model
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch


def request(**own: Any) -> dict[str, Any]:
    """A two-group job whose group 'b' has the placement ``own``."""
    return {
        "groups": [
            {"name": "a", "resources": {"cpu": 1}, "argv": ["true"]},
            {"name": "b", "resources": {"cpu": 1}, "argv": ["true"], "placement": own},
        ]
    }


def test_a_groups_placement_is_stored_and_reaches_the_core() -> None:
    req = parse_request(
        request(
            node_selector={"pool": "gpu"},
            anti_affinity=[{"key": "kubernetes.io/hostname", "op": "In", "values": ["n1"]}],
        )
    )
    stored = json.loads(req.to_json())
    assert "placement" not in stored["groups"][0]  # (left out when not given)
    assert stored["groups"][1]["placement"]["node_selector"] == {"pool": "gpu"}
    assert JobRequest.from_json(req.to_json()) == req
    a, b = req.to_job_spec("1", 0.0).task_groups
    assert a.placement is None and b.placement is not None
    assert b.placement.allows({"pool": "gpu", "kubernetes.io/hostname": "n2"})
    assert not b.placement.allows({"pool": "gpu", "kubernetes.io/hostname": "n1"})
    empty = parse_request(request()).to_job_spec("2", 0.0)
    assert empty.task_groups[1].placement is None  # (filters nothing: none)


def test_a_stored_job_without_group_placements_still_loads() -> None:
    old = parse_request(request())
    text = old.to_json().replace(
        ',"placement":{"node_selector":{},"required":[],"anti_affinity":[]}', ""
    )
    data = json.loads(text)
    data["groups"][1].pop("placement", None)
    assert JobRequest.from_json(json.dumps(data)).groups[1].placement is None


@pytest.mark.parametrize(
    ("own", "message"),
    [
        (
            {"preferred": []},
            "groups[1].placement: preferred is the whole job's (its placement), not a task "
            "group's: a group's placement holds node_selector, required and anti_affinity",
        ),
        ({"exclusive": True}, "groups[1].placement: exclusive is the whole job's"),
        ({"required": [{"key": "a", "op": "In"}]}, "label 'a': In needs at least one value"),
        ({"required": [{"key": "a", "op": "Near"}]}, "groups[1].placement.required[0].op"),
        ({"node_selector": ["pool"]}, "groups[1].placement.node_selector"),
        ({"hosts": "n1"}, "groups[1].placement.hosts: unknown field 'hosts'"),
        ({"nodes": 2}, "groups[1].placement: nodes is the whole job's"),
    ],
)
def test_bad_group_placements_are_refused_with_the_field(own: dict[str, Any], message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_request(request(**own))
    assert message in str(caught.value)


NODES = [
    NodeSpec("c1", Resources.parse({"cpu": 4}), {"pool": "cpu"}),
    NodeSpec(
        "g1",
        Resources.parse({"cpu": 4, "nvidia.com/gpu": 2}),
        {"pool": "gpu", LABEL_GPU_MODEL: "H100-80GB-HBM3"},
    ),
]


def test_submission_checks_each_groups_own_nodes() -> None:
    spec = parse_request(request(node_selector={"pool": "tpu"})).to_job_spec("1", 0.0)
    assert (
        check_feasible(spec, NODES) == "group 'b': no node has label pool=tpu (nodes have cpu, gpu)"
    )
    data = request(node_selector={"pool": "cpu"})
    data["groups"][1]["replicas"] = 5
    spec = parse_request(data).to_job_spec("2", 0.0)
    assert check_feasible(spec, NODES) == (
        "group 'b' needs 5 tasks at once but at most 4 fit on the 1 matching node"
    )
    assert (
        check_feasible(
            parse_request(request(node_selector={"pool": "gpu"})).to_job_spec("3", 0.0), NODES
        )
        is None
    )


def test_a_groups_gpu_type_is_resolved_against_the_nodes() -> None:
    req = parse_request(request(node_selector={LABEL_GPU_MODEL: "h100", "pool": "gpu"}))
    own = resolve_gpu_model(req, NODES).groups[1].placement
    assert own is not None and own.node_selector == {"pool": "gpu"}
    (term,) = own.required
    assert (term.key, term.op, term.values) == (LABEL_GPU_MODEL, LabelOp.IN, ["H100-80GB-HBM3"])


PYTORCH = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: split}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: fused-scheduler
          nodeSelector: {zone: a, fusesched.io/pool: cpu}
          containers:
            - {name: pytorch, command: [python, m.py], resources: {limits: {cpu: "1"}}}
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: fused-scheduler
          nodeSelector: {zone: a}
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                  - matchExpressions:
                      - {key: fusesched.io/gpu-model, operator: In, values: [H200, H100]}
          containers:
            - name: pytorch
              command: [python, w.py]
              resources: {limits: {cpu: "1", nvidia.com/gpu: 1}}
"""


def test_kubeflow_replica_types_keep_their_own_node_selection() -> None:
    (parsed,) = parse_kube_yaml(PYTORCH, "pt.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    assert req.placement.node_selector == {"zone": "a"}  # (what both give: the job's)
    master, worker = req.groups
    assert master.placement is not None and worker.placement is not None
    assert master.placement.node_selector == {"fusesched.io/pool": "cpu"}
    (term,) = worker.placement.required
    assert (term.key, term.values) == ("fusesched.io/gpu-model", ["H200", "H100"])
    m, w = req.to_job_spec("1", 0.0).task_groups
    assert m.placement is not None and w.placement is not None
    assert w.placement.allows({"fusesched.io/gpu-model": "H100"})


VOLCANO = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vc}
spec:
  schedulerName: fused-scheduler
  tasks:
    - name: ps
      replicas: 1
      template:
        spec:
          nodeName: c1
          containers: [{name: ps, command: [python, ps.py], resources: {requests: {cpu: "1"}}}]
    - name: worker
      replicas: 2
      template:
        spec:
          nodeSelector: {fusesched.io/pool: gpu}
          containers: [{name: w, command: [python, w.py], resources: {requests: {cpu: "1"}}}]
"""


def test_volcano_tasks_keep_their_own_node_selection() -> None:
    (parsed,) = parse_kube_yaml(VOLCANO, "vc.yaml")
    req = parsed.request
    assert req.placement.node_selector == {} and req.placement.required == []
    ps, worker = req.groups
    assert ps.placement is not None and ps.placement.node_selector == {
        "kubernetes.io/hostname": "c1"
    }
    assert worker.placement is not None and worker.placement.node_selector == {
        "fusesched.io/pool": "gpu"
    }


def test_show_lists_a_components_own_constraints() -> None:
    body = "#!/bin/bash\nsrun --het-group=1 hostname\n"
    args = ["-n1", "-C", "pool=cpu", ":", "-n1", "-w", "g1", "--gpus-per-task=h100:1"]
    req = parse_sbatch(body, args=args).request
    parts = stored_components(json.loads(req.to_json()))
    assert parts is not None
    assert [p.constraints for p in parts] == [
        "pool=cpu",
        f"{LABEL_GPU_MODEL}=h100, kubernetes.io/hostname In [g1]",
    ]
    shown = {"components": [p.model_dump() for p in parts]}
    assert component_lines(shown)[1:] == [
        "  component 0 (het0): 1 task × cpu 1; nodes: pool=cpu",
        f"  component 1 (het1): 1 task × cpu 1, nvidia.com/gpu 1; nodes: {LABEL_GPU_MODEL}=h100, "
        "kubernetes.io/hostname In [g1]",
    ]


def test_a_groups_pool_excludes_the_pools_it_rules_out() -> None:
    config = parse_federation(
        {
            "pools": [{"name": "k8s", "kind": "kubernetes", "options": {"default_image": "x:1"}}],
            "rules": [{"name": "all", "match": {}, "pools": ["local", "k8s"]}],
        }
    )
    req = parse_request(request(node_selector={LABEL_POOL: "k8s"}))
    result = route(config, req, {})
    assert result.pools == ("k8s",)
    said = f"pool local dropped: group b's placement excludes it (by the {LABEL_POOL} label)"
    assert said in result.explanation


def test_fusesched_yaml_groups_take_a_placement_and_the_top_level_one_is_the_jobs() -> None:
    text = """\
placement: {node_selector: {zone: a}}
groups:
  - {name: a, command: ["true"], resources: {cpu: 1}}
  - name: b
    command: ["true"]
    resources: {cpu: 1}
    placement: {node_selector: {pool: gpu}}
"""
    (req,) = parse_job_yaml(text)
    assert req.placement.node_selector == {"zone": "a"}
    assert req.groups[0].placement is None
    own = req.groups[1].placement
    assert own is not None and own.node_selector == {"pool": "gpu"}
    (one,) = parse_job_yaml(
        'command: ["true"]\nresources: {cpu: 1}\nplacement: {exclusive: true}\n'
    )
    assert one.placement.exclusive and one.groups[0].placement is None
