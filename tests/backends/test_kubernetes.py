"""The Kubernetes back end: the objects it builds (checked against the client's own models and
the Volcano schema) and its API calls (through the real client against a fake API server)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from fusesched.backends import kube_objects as ko
from fusesched.backends.base import (
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemotePlacement,
    RemoteState,
)
from fusesched.backends.kubernetes import KubernetesBackend
from fusesched.model.resources import Resources
from fusesched.submit.request import JobRequest

from .kube_fake_api import FakeKubeApi, running_fake

IMAGE = "docker.io/library/python:3.11"
PODS = "/api/v1/namespaces/ns1/pods"
JOBS = "/apis/batch/v1/namespaces/ns1/jobs"
MAPS = "/api/v1/namespaces/ns1/configmaps"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/ns1/jobs"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns1/podgroups"
TASK = Resources({"cpu": 500, "memory": 2 * 2**30, "nvidia.com/gpu": 1})


def remote_job(
    groups: list[dict[str, Any]] | None = None,
    placements: tuple[RemotePlacement, ...] | None = None,
    job_id: str = "Job_42",
    **fields: Any,
) -> RemoteJob:
    groups = groups or [{"argv": ["python", "train.py"], "image": IMAGE, "env": {"A": "1"}}]
    for group in groups:
        group.setdefault("resources", {"cpu": "500m", "memory": "2Gi", "gpu": 1})
    request = JobRequest.model_validate(
        {"groups": groups, "tenant": "Team A", "queue": "gpu", **fields}
    )
    if placements is None:
        placements = tuple(
            RemotePlacement(g.name, {"node-a": g.replicas}, TASK) for g in request.groups
        )
    return RemoteJob(job_id, request, placements, env={"FUSESCHED_JOB_ID": job_id})


def build(job: RemoteJob, **opts: Any) -> ko.Manifest:
    return ko.build(job, ko.Options(namespace="ns1", **opts), "abcde")


def wire(obj: object) -> dict[str, Any]:
    return ko.serialise(obj)


def round_trip(model: Any, obj: object) -> Any:
    """The object as the client's model reads it back from the wire; ``from_dict`` silently
    drops keys it does not know, so nothing may be lost on the way."""
    data = obj if isinstance(obj, dict) else wire(obj)
    back = model.from_dict(data)
    assert back is not None and wire(back) == data
    return back


# -- objects ------------------------------------------------------------------------------


def test_single_batch_job_round_trips_through_the_models() -> None:
    job = remote_job(type="batch", walltime_s=90.5)
    manifest = build(job)
    assert manifest.kind == ko.Kind.JOB and manifest.name.startswith("fs-job-42-")
    assert manifest.batch_job is not None
    back = round_trip(client.V1Job, manifest.batch_job)
    assert back is not None and back.spec is not None
    assert back.api_version == "batch/v1" and back.kind == "Job"
    assert back.spec.backoff_limit == 0 and back.spec.active_deadline_seconds == 91
    pod = back.spec.template.spec
    assert pod is not None and pod.scheduler_name == "volcano" and pod.restart_policy == "Never"
    container = pod.containers[0]
    assert container.image == IMAGE and container.command == ["python", "train.py"]
    assert container.resources is not None
    assert container.resources.requests == {
        "cpu": "500m",
        "memory": str(2 * 2**30),
        "nvidia.com/gpu": "1",
    }
    assert container.resources.limits == container.resources.requests
    env = {e.name: e.value for e in container.env or []}
    assert env == {"A": "1", "FUSESCHED_JOB_ID": "Job_42"}
    terms = pod.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    expr = terms.node_selector_terms[0].match_expressions[0]
    assert (expr.key, expr.operator, expr.values) == ("kubernetes.io/hostname", "In", ["node-a"])
    labels = back.spec.template.metadata.labels
    assert labels[ko.LABEL_JOB_ID] == "Job_42"
    assert labels[ko.LABEL_TENANT].startswith("Team-A-")  # sanitised, hash keeps it distinct
    assert labels[ko.LABEL_QUEUE] == "gpu" and labels[ko.LABEL_OBJECT] == manifest.name


def test_names_are_dns_labels_and_distinct() -> None:
    name = ko.object_name("Job_42", "abcde")
    assert len(name) <= 63 and name == name.lower() and name.endswith("-abcde")
    assert ko.object_name("job_42", "abcde") != name
    assert ko.dns_label("x" * 100, 32) == ko.dns_label("x" * 100, 32)
    assert len(ko.dns_label("x" * 100, 32)) <= 32
    assert ko.label_value("-a b-") != ko.label_value("a b")
    assert ko.label_value("ok.value_1") == "ok.value_1"


def test_service_is_a_pod_restarting_always() -> None:
    manifest = build(remote_job(type="service"))
    assert manifest.kind == ko.Kind.POD and len(manifest.pods) == 1
    back = round_trip(client.V1Pod, manifest.pods[0])
    assert back is not None and back.spec is not None
    assert back.spec.restart_policy == "Always" and back.metadata.name == manifest.name


def test_script_runs_from_a_config_map() -> None:
    script = "#!/bin/bash\necho 'hi'; rm -rf $NOTHING\n"
    manifest = build(remote_job([{"script": script, "image": IMAGE, "workdir": "/w"}], type="hpc"))
    (config_map,) = manifest.config_maps
    back_map = round_trip(client.V1ConfigMap, config_map)
    assert back_map is not None and back_map.data == {ko.SCRIPT_KEY: script}
    assert manifest.batch_job is not None
    pod = round_trip(client.V1Job, manifest.batch_job).spec.template.spec
    container = pod.containers[0]
    assert container.command == [f"{ko.SCRIPT_DIR}/{ko.SCRIPT_KEY}"]  # by its #! line
    assert script not in str(container.args) and container.working_dir == "/w"
    assert pod.volumes[0].config_map.name == back_map.metadata.name
    assert container.volume_mounts[0].mount_path == ko.SCRIPT_DIR
    plain = build(remote_job([{"script": "echo hi", "image": IMAGE}], type="hpc"))
    plain_job: Any = plain.batch_job
    command = plain_job.spec.template.spec.containers[0].command
    assert command == ["/bin/sh", f"{ko.SCRIPT_DIR}/{ko.SCRIPT_KEY}"]
    # sbatch job.sh ARGS…: the script's arguments follow it, word for word
    with_args = build(
        remote_job([{"script": script, "image": IMAGE}], type="hpc", script_args=["a b", ""])
    )
    args_job: Any = with_args.batch_job
    assert args_job.spec.template.spec.containers[0].command == [
        f"{ko.SCRIPT_DIR}/{ko.SCRIPT_KEY}",
        "a b",
        "",
    ]


def gang(**fields: Any) -> RemoteJob:
    groups: list[dict[str, Any]] = [
        {"name": "Master", "argv": ["torchrun"], "image": IMAGE},
        {"name": "worker", "replicas": 3, "argv": ["torchrun"], "image": IMAGE},
    ]
    placements = (
        RemotePlacement("Master", {"node-a": 1}, TASK),
        RemotePlacement("worker", {"node-a": 1, "node-b": 2}, TASK),
    )
    return remote_job(groups, placements, **{"type": "ai-train", **fields})


def test_gang_is_a_volcano_job() -> None:
    manifest = build(gang(min_member=3, walltime_s=60))
    assert manifest.kind == ko.Kind.VCJOB and manifest.custom is not None
    ko.check_custom(manifest.custom)
    spec = manifest.custom["spec"]
    assert manifest.custom["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert spec["minAvailable"] == 3 and spec["schedulerName"] == "volcano"
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [
        (ko.task_name("Master"), 1),
        ("worker", 3),
    ]
    worker = round_trip(client.V1PodTemplateSpec, spec["tasks"][1]["template"])
    assert worker is not None and worker.spec is not None
    assert worker.spec.active_deadline_seconds == 60
    expr = worker.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert expr.node_selector_terms[0].match_expressions[0].values == ["node-a", "node-b"]
    assert worker.metadata.labels[ko.LABEL_GROUP] == "worker"
    assert build(gang()).custom["spec"]["minAvailable"] == 4  # type: ignore[index]


def test_podgroup_mode_pins_each_pod() -> None:
    manifest = build(gang(), gang_mode="podgroup")
    assert manifest.kind == ko.Kind.PODGROUP and manifest.custom is not None
    ko.check_custom(manifest.custom)
    assert manifest.custom["spec"] == {"minMember": 4}
    pods = [round_trip(client.V1Pod, p) for p in manifest.pods]
    assert len(pods) == 4
    nodes = []
    for pod in pods:
        assert pod is not None and pod.metadata is not None and pod.spec is not None
        assert pod.metadata.annotations == {ko.GROUP_NAME_ANNOTATION: manifest.name}
        assert len(pod.metadata.name) <= 63
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        nodes += terms.node_selector_terms[0].match_expressions[0].values
    assert nodes == ["node-a", "node-a", "node-b", "node-b"]


def test_service_gang_restarts_in_place() -> None:
    manifest = build(gang(type="service"))
    assert manifest.custom is not None
    for task in manifest.custom["spec"]["tasks"]:
        assert task["template"]["spec"]["restartPolicy"] == "Always"
    pods = build(gang(type="service"), gang_mode="podgroup").pods
    assert {p.spec.restart_policy for p in pods if p.spec is not None} == {"Always"}


def test_schema_check_catches_bad_volcano_fields() -> None:
    manifest = build(gang())
    assert manifest.custom is not None
    broken = dict(manifest.custom, spec={**manifest.custom["spec"], "minAvailble": 1})
    with pytest.raises(BackendRejected, match="minAvailble is not a field"):
        ko.check_custom(broken)
    template = manifest.custom["spec"]["tasks"][0]["template"]
    misspelt = {**template, "spec": {**template["spec"], "shedulerName": "x"}}
    tasks = [dict(manifest.custom["spec"]["tasks"][0], replicas=0, template=misspelt)]
    with pytest.raises(BackendRejected, match=r"replicas is invalid.*template is invalid"):
        ko.check_custom(dict(manifest.custom, spec={**manifest.custom["spec"], "tasks": tasks}))


def test_no_image_is_a_clear_rejection() -> None:
    job = remote_job([{"argv": ["true"], "image": "/srv/rootfs.tar"}])
    with pytest.raises(BackendRejected, match=r"no container image.*default_image"):
        build(job)
    manifest = build(job, default_image="busybox:1.36")
    assert manifest.batch_job.spec.template.spec.containers[0].image == "busybox:1.36"  # type: ignore[union-attr]


def test_resources_without_a_kubernetes_name_are_refused() -> None:
    assert ko.quantities(Resources({"cpu": 2000, "nvidia.com/mig-1g.10gb": 2})) == {
        "cpu": "2",
        "nvidia.com/mig-1g.10gb": "2",
    }
    with pytest.raises(BackendRejected, match="gpu-milli"):
        ko.quantities(Resources({"fusesched.io/gpu-milli": 500}))


# -- the client flow against a fake API server --------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeKubeApi]:
    yield from running_fake()


def backend_for(host: str, **opts: Any) -> KubernetesBackend:
    conf = client.Configuration(host=host)
    conf.retries = 0
    return KubernetesBackend(client.ApiClient(conf), namespace="ns1", request_timeout_s=2, **opts)


def node(name: str, ready: str = "True", unschedulable: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": "z1"}},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": "7500m", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_nodes_capacity_labels_and_readiness(fake: FakeKubeApi) -> None:
    fake.put("/api/v1/nodes", node("a"))
    fake.put("/api/v1/nodes", node("b", ready="False"))
    fake.put("/api/v1/nodes", node("c", unschedulable=True))
    nodes = {n.name: n for n in backend_for(fake.host).nodes()}
    assert nodes["a"].capacity == Resources(
        {"cpu": 7500, "memory": 64 * 2**30, "nvidia.com/gpu": 8}
    )
    assert nodes["a"].labels["zone"] == "z1"
    assert [nodes[n].up for n in "abc"] == [True, False, False]


def pod_status(
    phase: str, code: int | None = None, reason: str | None = None, ended: str | None = None
) -> dict[str, Any]:
    """A pod's status; ``ended``: its container's termination reason (``OOMKilled``)."""
    state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    if code is not None:
        state = {
            "terminated": {
                "exitCode": code,
                "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": "2026-01-01T00:01:00Z",
                **({"reason": ended} if ended is not None else {}),
            }
        }
    return {
        "phase": phase,
        "reason": reason,
        "containerStatuses": [
            {
                "name": "task",
                "image": IMAGE,
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": state,
            }
        ],
    }


def add_pod(fake: FakeKubeApi, owner: dict[str, Any], name: str, status: dict[str, Any]) -> None:
    labels = owner["metadata"]["labels"]
    fake.put(
        PODS,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "task"}], "nodeName": "node-a"},
            "status": status,
        },
    )


def test_batch_job_flow(fake: FakeKubeApi) -> None:
    backend = backend_for(fake.host)
    job = remote_job([{"script": "echo hi", "image": IMAGE}], type="batch", walltime_s=30)
    external_id = backend.submit(job)
    kind, ns, name = external_id.split("/")
    assert (kind, ns) == ("job", "ns1") and fake.names(JOBS) == [name]
    stored = fake.get(JOBS, name)
    assert stored["spec"]["activeDeadlineSeconds"] == 30
    assert fake.names(MAPS) == [f"{name}-main-script"]
    assert backend.poll([external_id])[0].state == RemoteState.PENDING

    add_pod(fake, stored, f"{name}-x1", pod_status("Running"))
    (status,) = backend.poll([external_id])
    assert status.state == RemoteState.RUNNING and status.nodes == ("node-a",)
    assert status.start_time == 1767225600.0

    fake.put(PODS, dict(fake.get(PODS, f"{name}-x1"), status=pod_status("Succeeded", 0)))
    stored["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}],
        "completionTime": "2026-01-01T00:01:05Z",
    }
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code, status.end_time) == (
        RemoteState.SUCCEEDED,
        0,
        1767225665.0,
    )

    fake.put(PODS, dict(fake.get(PODS, f"{name}-x1"), status=pod_status("Failed", 3)))
    stored["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    }
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code, status.timed_out) == (RemoteState.FAILED, 3, False)
    assert "BackoffLimitExceeded" in status.reason and not status.out_of_memory
    # a container the OOM killer ended: the kubelet says OOMKilled (exit 137)
    fake.put(
        PODS,
        dict(fake.get(PODS, f"{name}-x1"), status=pod_status("Failed", 137, None, "OOMKilled")),
    )
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code, status.out_of_memory) == (RemoteState.FAILED, 137, True)

    stored["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified",
            }
        ]
    }
    (status,) = backend.poll([external_id])
    assert status.state == RemoteState.FAILED and status.timed_out

    fake.logs[f"{name}-x1"] = "hello\n"
    assert backend.logs(external_id, job) == {f"{name}-x1.stdout": b"hello\n"}

    backend.cancel(external_id)
    assert fake.names(JOBS) == [] and fake.names(MAPS) == []
    delete = next(r for r in fake.requests if r.method == "DELETE" and r.path.startswith(JOBS))
    assert delete.query["propagationPolicy"] == ["Background"]
    backend.cancel(external_id)  # already gone: fine
    assert backend.poll([external_id]) == []


def test_service_pod_flow(fake: FakeKubeApi) -> None:
    backend = backend_for(fake.host)
    external_id = backend.submit(remote_job(type="service"))
    name = external_id.split("/")[2]
    stored = fake.get(PODS, name)
    assert stored["spec"]["restartPolicy"] == "Always"
    stored["status"] = pod_status("Failed", 3, reason="DeadlineExceeded")
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code, status.timed_out) == (RemoteState.FAILED, 3, True)
    backend.cancel(external_id)
    assert fake.names(PODS) == []


def test_volcano_job_flow(fake: FakeKubeApi) -> None:
    backend = backend_for(fake.host)
    external_id = backend.submit(gang())
    name = external_id.split("/")[2]
    stored = fake.get(VCJOBS, name)
    assert stored["spec"]["tasks"][1]["replicas"] == 3
    stored["status"] = {"state": {"phase": "Running"}}
    assert backend.poll([external_id])[0].state == RemoteState.RUNNING
    add_pod(
        fake, stored["spec"]["tasks"][0]["template"], f"{name}-master-0", pod_status("Failed", 3)
    )
    stored["status"] = {"state": {"phase": "Aborted", "reason": "PodFailed"}}
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code) == (RemoteState.FAILED, 3)
    backend.cancel(external_id)
    assert fake.names(VCJOBS) == []


def test_podgroup_flow(fake: FakeKubeApi) -> None:
    backend = backend_for(fake.host, gang_mode="podgroup")
    external_id = backend.submit(gang())
    name = external_id.split("/")[2]
    assert external_id.startswith("podgroup/ns1/") and fake.names(PODGROUPS) == [name]
    assert len(fake.names(PODS)) == 4
    for pod_name in fake.names(PODS):
        fake.get(PODS, pod_name)["status"] = pod_status("Succeeded", 0)
    (status,) = backend.poll([external_id])
    assert (status.state, status.exit_code) == (RemoteState.SUCCEEDED, 0)
    backend.cancel(external_id)
    assert fake.names(PODGROUPS) == [] and fake.names(PODS) == []


def test_api_rejection_carries_the_server_message(fake: FakeKubeApi) -> None:
    fake.fail_next(422, 'Job.batch "x" is invalid: spec.template: Invalid value')
    with pytest.raises(BackendRejected, match=r"is invalid: spec.template"):
        backend_for(fake.host).submit(remote_job(type="batch"))


def test_half_made_gang_is_removed(fake: FakeKubeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = backend_for(fake.host, gang_mode="podgroup")
    original = fake.handle
    calls = {"pods": 0}

    def flaky(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path.startswith(PODS):
            calls["pods"] += 1
            if calls["pods"] == 3:
                fake.fail_next(403, 'pods "x" is forbidden: exceeded quota')
        return original(method, path, body)

    monkeypatch.setattr(fake, "handle", flaky)
    with pytest.raises(BackendRejected, match="exceeded quota"):
        backend.submit(gang())
    assert fake.names(PODS) == [] and fake.names(PODGROUPS) == []


def test_server_errors_and_closed_port_are_unavailable(fake: FakeKubeApi) -> None:
    fake.fail_next(500, "etcdserver: request timed out")
    with pytest.raises(BackendUnavailable, match="etcdserver"):
        backend_for(fake.host).nodes()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = backend_for(f"http://127.0.0.1:{port}")
    with pytest.raises(BackendUnavailable, match="cannot be reached"):
        closed.nodes()
    with pytest.raises(BackendUnavailable):
        closed.poll(["job/ns1/x"])


def test_a_server_that_never_answers_is_unavailable() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        backend = backend_for(f"http://127.0.0.1:{silent.getsockname()[1]}")
        backend.timeout = 0.3
        with pytest.raises(BackendUnavailable, match="cannot be reached"):
            backend.submit(remote_job(type="batch"))


def test_from_options_with_host_and_token() -> None:
    backend = KubernetesBackend.from_options(
        host="https://kube.example:6443", token="t0k", namespace="ns1", default_image="x:1"
    )
    conf = backend.core.api_client.configuration
    assert conf.host == "https://kube.example:6443"
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer t0k"
    assert backend.opts.namespace == "ns1" and backend.opts.default_image == "x:1"
    with pytest.raises(ValueError, match=r"unknown Kubernetes pool option.*namspace"):
        KubernetesBackend.from_options(host="http://x", namspace="ns1")
    with pytest.raises(ValueError, match="gang_mode"):
        KubernetesBackend(client.ApiClient(), gang_mode="kueue")


def test_from_options_with_a_kubeconfig(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    backend = KubernetesBackend.from_options(kubeconfig=str(kubeconfig), gang_mode="podgroup")
    assert backend.core.api_client.configuration.host == "http://127.0.0.1:1"
    assert backend.opts.gang_mode == "podgroup"
    with pytest.raises(ValueError, match="not both"):
        KubernetesBackend.from_options(kubeconfig=str(kubeconfig), host="http://x")
