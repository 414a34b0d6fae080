"""A Kubernetes job whose pod failed because its node did (evicted by the kubelet, its node
lost or shut down, deleted by the node's taint or the pod garbage collector) is reported
``node_failed``, as Slurm's NODE_FAIL is: the controller answers it with the job's restart
policy (tests/controller/test_remote_node_fail.py). It was an ordinary failure. A pod the
scheduler preempted, or one failing on its own, is not. Against the fake API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fusesched.backends.base import RemoteState

from .kube_fake_api import FakeKubeApi, running_fake
from .test_kubernetes import IMAGE, JOBS, PODS, add_pod, backend_for, pod_status, remote_job


@pytest.fixture
def fake() -> Iterator[FakeKubeApi]:
    yield from running_fake()


def disrupted(reason: str) -> dict[str, Any]:
    """A failed pod's status whose ``DisruptionTarget`` condition gives ``reason``."""
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    return {**pod_status("Failed", 137), "conditions": [condition]}


@pytest.mark.parametrize(
    ("status", "lost"),
    [
        (pod_status("Failed", None, "Evicted"), True),
        (pod_status("Failed", None, "NodeLost"), True),
        (disrupted("DeletionByTaintManager"), True),
        (disrupted("DeletionByPodGC"), True),
        (disrupted("TerminationByKubelet"), True),
        (disrupted("PreemptionByScheduler"), False),
        (pod_status("Failed", 3), False),
    ],
)
def test_a_job_whose_pod_its_node_ended_is_a_node_failure(
    fake: FakeKubeApi, status: dict[str, Any], lost: bool
) -> None:
    backend = backend_for(fake.host)
    external_id = backend.submit(remote_job([{"script": "echo hi", "image": IMAGE}], type="batch"))
    name = external_id.split("/")[2]
    stored = fake.get(JOBS, name)
    add_pod(fake, stored, f"{name}-x1", status)
    stored["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    }
    (polled,) = backend.poll([external_id])
    assert (polled.state, polled.node_failed) == (RemoteState.FAILED, lost), polled


def test_a_running_pod_on_a_node_that_stopped_reporting_is_no_verdict(fake: FakeKubeApi) -> None:
    """Phase ``Unknown`` (its node silent): still running, not failed, until Kubernetes says."""
    backend = backend_for(fake.host)
    external_id = backend.submit(remote_job(type="service"))
    name = external_id.split("/")[2]
    fake.get(PODS, name)["status"] = pod_status("Unknown", None, "NodeLost")
    (polled,) = backend.poll([external_id])
    assert (polled.state, polled.node_failed) == (RemoteState.RUNNING, False), polled


def test_a_service_pod_evicted_is_a_node_failure(fake: FakeKubeApi) -> None:
    backend = backend_for(fake.host)
    external_id = backend.submit(remote_job(type="service"))
    name = external_id.split("/")[2]
    evicted = pod_status("Failed", None, "Evicted")
    fake.get(PODS, name)["status"] = evicted
    (polled,) = backend.poll([external_id])
    assert (polled.state, polled.node_failed) == (RemoteState.FAILED, True), polled
    assert polled.reason.startswith("Evicted"), polled
