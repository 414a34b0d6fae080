"""``retry_exits: never`` in the submission model and the Kubeflow mapping
(submit/task_group.py, submit/kube_training.py): a replica type with ``restartPolicy: Never``
beside one that restarts gets it, so that its failing exit fails the job as the training
operator fails it; stored only when not ``all``, as before."""

from __future__ import annotations

import json

import pytest
from tests.submit.test_kube_training import MPI, PYTORCH

from fusesched.submit import JobRequest, SubmitError, parse_kube_yaml, parse_request
from fusesched.submit.task_group import RetryExits

ON_FAILURE = "restartPolicy: OnFailure"


def pytorch(worker: str, master: str) -> JobRequest:
    """PYTORCH (its Worker first, then its Master) with these restart policies."""
    text = PYTORCH.replace(ON_FAILURE, f"restartPolicy: {worker}", 1).replace(
        ON_FAILURE, f"restartPolicy: {master}", 1
    )
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    return parsed.request


@pytest.mark.parametrize(
    ("master", "expected"),
    [("ExitCode", RetryExits.SIGNALS), ("OnFailure", RetryExits.ALL), ("Always", RetryExits.ALL)],
)
def test_a_worker_that_never_restarts_beside_a_master_that_does(
    master: str, expected: RetryExits
) -> None:
    request = pytorch("Never", master)
    assert request.restart.retry_application_failures
    assert [(g.name, g.retry_exits) for g in request.groups] == [
        ("master", expected),
        ("worker", RetryExits.NEVER),
    ]
    stored = json.loads(request.to_json())
    assert stored["groups"][1]["retry_exits"] == "never"
    assert JobRequest.from_json(request.to_json()) == request


def test_never_everywhere_retries_nothing_and_stores_no_field() -> None:
    request = pytorch("Never", "Never")
    assert not request.restart.retry_application_failures
    assert {g.retry_exits for g in request.groups} == {RetryExits.ALL}
    assert all("retry_exits" not in g for g in json.loads(request.to_json())["groups"])


@pytest.mark.parametrize(
    ("launcher", "worker", "expected"),
    [
        ("Never", "OnFailure", RetryExits.NEVER),
        ("Never", "ExitCode", RetryExits.NEVER),
        ("ExitCode", "OnFailure", RetryExits.SIGNALS),
        ("OnFailure", "Never", RetryExits.ALL),
    ],
)
def test_an_mpijobs_group_follows_its_launcher(
    launcher: str, worker: str, expected: RetryExits
) -> None:
    """Its one group's exit is mpirun's, the Launcher's (the Workers run none of it)."""
    text = MPI.replace(
        "    Launcher:\n      replicas: 1\n",
        f"    Launcher:\n      replicas: 1\n      restartPolicy: {launcher}\n",
    ).replace(
        "    Worker:\n      replicas: 2\n",
        f"    Worker:\n      replicas: 2\n      restartPolicy: {worker}\n",
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.restart.retry_application_failures
    assert parsed.request.groups[0].retry_exits is expected


def test_never_retries_no_failing_exit() -> None:
    assert not [c for c in (1, 127, 128, 137, 255, -9, -15) if RetryExits.NEVER.retries(c)]


def test_never_without_retried_failures_is_refused() -> None:
    group = {"resources": {"cpu": 1}, "argv": ["x"], "retry_exits": "never"}
    with pytest.raises(SubmitError, match=r"retry_application_failures \(false\) restarts none"):
        parse_request({"groups": [group]})
    request = parse_request({"groups": [group], "restart": {"retry_application_failures": True}})
    assert json.loads(request.to_json())["groups"][0]["retry_exits"] == "never"


def test_an_unknown_value_is_refused() -> None:
    group = {"resources": {"cpu": 1}, "argv": ["x"], "retry_exits": "sometimes"}
    with pytest.raises(SubmitError, match="retry_exits"):
        parse_request({"groups": [group], "restart": {"retry_application_failures": True}})
