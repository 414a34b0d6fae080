"""Kubernetes-style Pod and Job YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.model.job import JobType, LabelOp, QoS
from fusesched.submit import SubmitError, load_kube_yaml, parse_kube_yaml

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: llm-train
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: gpu}
  annotations:
    fusesched.io/qos: gold
    fusesched.io/priority: "7"
spec:
  parallelism: 4
  completions: 4
  activeDeadlineSeconds: 7200
  backoffLimit: 0
  template:
    spec:
      schedulerName: fused-scheduler
      restartPolicy: Never
      nodeSelector:
        fusesched.io/gpu-model: H200
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: fusesched.io/pool, operator: In, values: [ai]}
                  - {key: maintenance, operator: DoesNotExist}
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 10
              preference:
                matchExpressions:
                  - {key: topology.fusesched.io/rack, operator: In, values: [r1]}
      containers:
        - name: trainer
          image: /images/pytorch.tar
          workingDir: /work
          command: [torchrun]
          args: [--nproc-per-node, "8", train.py]
          env: [{name: EPOCHS, value: "3"}]
          ports: [{containerPort: 29500}]
          resources:
            requests: {cpu: "16", memory: 64Gi}
            limits: {nvidia.com/gpu: 8, memory: 128Gi}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  schedulerName: fused-scheduler
  activeDeadlineSeconds: 60
  containers:
    - name: app
      command: [gunicorn, app:app]
      ports: [{containerPort: 8000}]
      resources: {limits: {cpu: 500m, memory: 1Gi}}
"""


def test_job_maps_every_supported_field() -> None:
    (parsed,) = parse_kube_yaml(JOB, "job.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    assert (req.name, req.tenant, req.queue, req.qos, req.priority) == (
        "llm-train",
        "team-a",
        "gpu",
        QoS.GOLD,
        7,
    )
    assert req.walltime_s == 7200
    (group,) = req.groups
    assert group.replicas == 4
    assert group.argv == ["torchrun", "--nproc-per-node", "8", "train.py"]
    assert group.resources == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    assert group.env == {"EPOCHS": "3"} and group.ports == [29500]
    assert group.image == "/images/pytorch.tar" and group.workdir == "/work"
    p = req.placement
    assert p.node_selector == {"fusesched.io/gpu-model": "H200"}
    assert [(r.key, r.op, r.values) for r in p.required] == [
        ("fusesched.io/pool", LabelOp.IN, ["ai"]),
        ("maintenance", LabelOp.DOES_NOT_EXIST, []),
    ]
    assert [(r.key, r.values, r.weight) for r in p.preferred] == [
        ("topology.fusesched.io/rack", ["r1"], 10)
    ]
    assert req.to_job_spec("1", 0).type is JobType.AI_TRAIN


def test_pod_limits_fill_requests() -> None:
    (parsed,) = parse_kube_yaml(POD)
    req = parsed.request
    assert req.groups[0].resources == {"cpu": "500m", "memory": "1Gi"}
    assert req.walltime_s == 60 and req.groups[0].replicas == 1
    assert req.identified().type is JobType.SERVICE


def test_containers_sum_and_init_containers_count_at_their_peak() -> None:
    text = POD.replace(
        "  containers:\n",
        "  initContainers:\n    - name: fetch\n      command: [fetch]\n"
        "      resources: {requests: {cpu: '4', memory: 256Mi}}\n  containers:\n",
    ) + (
        "    - name: sidecar\n      command: [tail, -f, /dev/null]\n"
        "      resources: {requests: {cpu: 250m, memory: 1Gi}}\n"
    )
    (parsed,) = parse_kube_yaml(text, "p.yaml")
    assert parsed.request.groups[0].resources == {"cpu": "4", "memory": "2Gi"}
    assert parsed.request.groups[0].argv == ["gunicorn", "app:app"]
    assert parsed.warnings == (
        "p.yaml:8: init container 'fetch' is not run: fusesched runs one program per task "
        "(its resources are counted)",
        "p.yaml:16: container 'sidecar' is not started: fusesched runs one program per task "
        "(its resources are counted)",
    )


def test_default_container_annotation_picks_the_main_container() -> None:
    text = POD.replace(
        "metadata: {name: web}",
        "metadata:\n  name: web\n  annotations: {kubectl.kubernetes.io/default-container: b}",
    ).replace(
        "    - name: app\n",
        "    - name: a\n      command: [a]\n      resources: {requests: {cpu: 1}}\n    - name: b\n",
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.groups[0].argv == ["gunicorn", "app:app"]


def test_without_the_annotation_the_first_container_is_the_main_one() -> None:
    """Even when a later one has no name (a PyTorchJob's "pytorch" rule is not a Pod's)."""
    text = POD.replace(
        "    - name: app\n",
        "    - name: a\n      command: [a]\n      resources: {requests: {cpu: 1}}\n    -\n",
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.groups[0].argv == ["a"]


def test_more_completions_than_parallelism_become_an_array() -> None:
    text = JOB.replace("completions: 4", "completions: 10").replace(
        "parallelism: 4", "parallelism: 2"
    )
    (parsed,) = parse_kube_yaml(text, "j.yaml")
    req = parsed.request
    assert req.groups[0].replicas == 1
    assert req.array is not None
    assert (req.array.start, req.array.stop, req.array.max_parallel) == (0, 9, 2)
    assert parsed.warnings == (
        "j.yaml:12: completions (10) above parallelism (2): submitted as an array of 10 "
        "one-pod jobs, 2 at a time",
    )


@pytest.mark.parametrize(
    ("parallelism", "completions", "replicas"),
    [("", "", 1), ("parallelism: 3", "", 3), ("parallelism: 5", "completions: 2", 2)],
)
def test_job_replicas(parallelism: str, completions: str, replicas: int) -> None:
    text = JOB.replace("parallelism: 4", parallelism).replace("completions: 4", completions)
    assert parse_kube_yaml(text)[0].request.groups[0].replicas == replicas


def test_node_name_and_unsupported_fields_warn() -> None:
    text = POD.replace(
        "  containers:",
        "  nodeName: n7\n  tolerations: [{key: gpu}]\n"
        "  affinity:\n    podAntiAffinity: {}\n  containers:",
    ).replace("      ports:", "      volumeMounts: []\n      ports:")
    (parsed,) = parse_kube_yaml(text, "p.yaml")
    assert parsed.request.placement.node_selector == {"kubernetes.io/hostname": "n7"}
    assert parsed.warnings == (
        "p.yaml:8: spec.tolerations is not supported; ignored",
        "p.yaml:14: spec.containers[0].volumeMounts is not supported; ignored",
        "p.yaml:10: spec.affinity.podAntiAffinity is not supported; ignored",
    )


def test_several_documents_and_files(tmp_path: Path) -> None:
    path = tmp_path / "both.yaml"
    path.write_text(JOB + "---\n" + POD, encoding="utf-8")
    assert [p.request.name for p in load_kube_yaml(path)] == ["llm-train", "web"]
    with pytest.raises(SubmitError, match="cannot read the file"):
        load_kube_yaml(tmp_path / "missing.yaml")


BAD: list[tuple[str, str, str]] = [
    (
        "scheduler",
        JOB.replace("fused-scheduler", "default-scheduler"),
        "j.yaml:17: spec.template.spec.schedulerName: must be 'fused-scheduler' for fusesched "
        "to run this pod, not 'default-scheduler'",
    ),
    (
        "no scheduler",
        POD.replace("  schedulerName: fused-scheduler\n", ""),
        "j.yaml:4: spec: schedulerName: fused-scheduler is missing",
    ),
    ("kind", JOB.replace("kind: Job", "kind: StatefulSet"), "j.yaml:2: kind: 'StatefulSet' is"),
    (
        "kind of another version",
        JOB.replace("kind: Job", "kind: Deployment"),
        "j.yaml:1: apiVersion: a Deployment needs apiVersion 'apps/v1', not 'batch/v1'",
    ),
    (
        "job version",
        JOB.replace("apiVersion: batch/v1", "apiVersion: batch/v2"),
        "a Job needs apiVersion 'batch/v1' or 'batch.volcano.sh/v1alpha1', not 'batch/v2'",
    ),
    ("version", POD.replace("apiVersion: v1", "apiVersion: v2"), "a Pod needs apiVersion 'v1'"),
    ("top field", POD + "extra: 1\n", "j.yaml:12: extra: unknown field 'extra'"),
    ("not a mapping", "- a\n", "a Kubernetes object must be a mapping"),
    ("empty", "", "no Pod or Job in the file"),
    ("yaml", "kind: [\n", "malformed YAML"),
    (
        "pod field typo",
        JOB.replace("nodeSelector:", "nodeSelecter:"),
        "j.yaml:19: spec.template.spec.nodeSelecter: unknown field 'nodeSelecter'; did you mean "
        "'nodeSelector'?",
    ),
    (
        "container field typo",
        POD.replace("command:", "comand:"),
        "unknown field 'comand'; did you mean 'command'?",
    ),
    ("job field typo", JOB.replace("parallelism:", "paralelism:"), "did you mean 'parallelism'?"),
    (
        "several terms",
        JOB.replace(
            "              - matchExpressions:\n",
            "              - matchExpressions:\n                  - {key: a, operator: Exists}\n"
            "              - matchExpressions:\n",
            1,
        ),
        "j.yaml:24: spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnored"
        "DuringExecution.nodeSelectorTerms: 2 nodeSelectorTerms (any of them may match) are not "
        "supported; give one term",
    ),
    ("operator", JOB.replace("operator: In", "operator: Gt"), "operator 'Gt' is not supported"),
    (
        "matchFields",
        JOB.replace("- matchExpressions:", "- matchFields: []\n                matchExpressions:"),
        "matchFields is not supported",
    ),
    (
        "In without values",
        JOB.replace("operator: In, values: [ai]", "operator: In"),
        "j.yaml:26: spec.template.spec.affinity.nodeAffinity.requiredDuringScheduling"
        "IgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]: label "
        "'fusesched.io/pool': In needs at least one value",
    ),
    ("weight", JOB.replace("weight: 10", "weight: 0"), "weight must be a whole number from 1"),
    (
        "valueFrom",
        JOB.replace('value: "3"', "valueFrom: {secretKeyRef: {name: s, key: k}}"),
        "j.yaml:39: spec.template.spec.containers[0].env[0]: env 'EPOCHS': valueFrom is not "
        "supported; give a value",
    ),
    ("envFrom", POD.replace("      ports:", "      envFrom: []\n      ports:"), "envFrom is not"),
    ("env name", JOB.replace("name: EPOCHS, ", ""), "env entry needs a name"),
    (
        "unknown resource",
        JOB.replace("nvidia.com/gpu: 8", "nvidia.com/gpux: 8"),
        "j.yaml:43: spec.template.spec.containers[0].resources.limits.nvidia.com/gpux: unknown "
        "resource 'nvidia.com/gpux'; did you mean 'nvidia.com/gpu'?",
    ),
    ("bad quantity", POD.replace("cpu: 500m", "cpu: lots"), "cannot parse quantity 'lots'"),
    (
        "request above limit",
        JOB.replace("memory: 64Gi", "memory: 256Gi"),
        "the memory request is above its limit",
    ),
    (
        "no resources",
        POD.replace("      resources: {limits: {cpu: 500m, memory: 1Gi}}\n", ""),
        "no container requests any resource",
    ),
    (
        "image neither path nor reference",
        JOB.replace("image: /images/pytorch.tar", "image: nvcr.io/nvidia/pytorch::24"),
        "j.yaml:35: spec.template.spec.containers[0].image: image "
        "'nvcr.io/nvidia/pytorch::24': give the absolute path",
    ),
    (
        "no command",
        JOB.replace("          command: [torchrun]\n", ""),
        "j.yaml:37: spec.template.spec.containers[0].args: command is required",
    ),
    ("no containers", POD.split("  containers:")[0] + "  containers: []\n", "at least one"),
    ("port", POD.replace("containerPort: 8000", "port: 8000"), "a port needs containerPort"),
    ("parallelism", JOB.replace("parallelism: 4", "parallelism: 0"), "must be a whole number ≥ 1"),
    ("deadline", POD.replace("activeDeadlineSeconds: 60", "activeDeadlineSeconds: x"), "seconds"),
    ("no template", JOB.split("  template:")[0], "a Job needs spec.template"),
    (
        "annotation",
        JOB.replace("fusesched.io/qos: gold", "fusesched.io/qos: platinum"),
        "j.yaml:8: metadata.annotations.fusesched.io/qos: Input should be 'gold'",
    ),
    (
        "unknown annotation",
        JOB.replace("fusesched.io/qos", "fusesched.io/qoss"),
        "unknown annotation",
    ),
    ("priority", JOB.replace('"7"', "high"), "fusesched.io/priority must be a whole number"),
    (
        "default container",
        POD.replace(
            "metadata: {name: web}",
            "metadata: {annotations: {kubectl.kubernetes.io/default-container: x}}",
        ),
        "names 'x', which is not a container of the pod",
    ),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in BAD], ids=[c for c, *_ in BAD])
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(text, "j.yaml")
    assert message in str(caught.value)


def test_a_suspended_job_is_submitted_held() -> None:
    (parsed,) = parse_kube_yaml(JOB.replace("  backoffLimit: 0\n", "  suspend: true\n"))
    assert parsed.request.hold and not parsed.warnings
    (parsed,) = parse_kube_yaml(JOB.replace("  backoffLimit: 0\n", "  suspend: false\n"))
    assert not parsed.request.hold
    (parsed,) = parse_kube_yaml(JOB)
    assert not parsed.request.hold
    with pytest.raises(SubmitError, match=r"spec\.suspend: must be true or false"):
        parse_kube_yaml(JOB.replace("  backoffLimit: 0\n", "  suspend: yes please\n"))
