"""``restart.always`` (RestartRequest): a job restarted after every exit of a task, 0 included,
as Kubernetes restarts a Deployment's pods. It sets ``retry_application_failures``; a request
that contradicts it (``mode: notify``, ``retry_application_failures: false``) is refused with
a reason; a request without it is unchanged, and says nothing of it (an older controller
refuses fields it does not know)."""

from __future__ import annotations

import json

import pytest

from fusesched.submit import JobRequest, SubmitError
from fusesched.submit.failure_policy import RestartRequest
from fusesched.submit.load import parse_submission

YAML = """name: web
type: service
restart: {RESTART}
groups:
  - resources: {cpu: 1}
    argv: [sleep, "100"]
"""


def _parse(restart: str) -> JobRequest:
    (parsed,) = parse_submission(YAML.replace("{RESTART}", restart), source="web.yaml")
    return parsed.request


def test_fusesched_yaml_sets_always_and_it_retries_failures_too() -> None:
    restart = _parse("{mode: restart-in-place, backoff_s: 1, always: true}").restart
    assert restart.always and restart.retry_application_failures
    assert (restart.mode, restart.backoff_s, restart.max_restarts) == ("restart-in-place", 1, 3)


def test_a_request_with_it_round_trips_through_json() -> None:
    request = _parse("{always: true, retry_application_failures: true}")
    again = JobRequest.from_json(request.to_json())
    assert again == request and again.restart.always


def test_without_it_nothing_changes_and_the_field_is_not_sent() -> None:
    for text in ("{}", "{retry_application_failures: true}"):
        request = _parse(text)
        assert not request.restart.always
        dumped = json.loads(request.to_json())["restart"]
        assert "always" not in dumped, dumped
    assert not _parse("{}").restart.retry_application_failures


@pytest.mark.parametrize(
    ("restart", "message"),
    [
        (
            "{mode: notify, always: true}",
            "web.yaml:3: restart: always restarts the job after every exit, and mode notify "
            "never restarts it",
        ),
        (
            "{always: true, retry_application_failures: false}",
            "web.yaml:3: restart: always restarts the job after every exit, failing ones "
            "included: retry_application_failures false contradicts it",
        ),
        ("{always: sometimes}", "restart.always"),
    ],
)
def test_contradictions_are_refused_with_a_reason(restart: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        _parse(restart)
    assert message in str(caught.value)


def test_the_model_refuses_them_too() -> None:
    with pytest.raises(ValueError, match="mode notify never restarts it"):
        RestartRequest(mode="notify", always=True)
    assert RestartRequest(always=True).retry_application_failures
