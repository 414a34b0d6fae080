"""Bad input to the REST API gets a 4xx with a reason, never a 500, and stores nothing:
numbers JSON cannot write, integers too large for the store, arrays and quantities too large
for the controller, times outside the calendar, NUL characters (which PostgreSQL cannot keep)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fusesched.controller.service import Controller

GROUP = '{"resources": {"cpu": "1"}, "argv": ["true"]}'


def post(client: TestClient, path: str, body: str) -> tuple[int, str]:
    answer = client.post(path, content=body, headers={"content-type": "application/json"})
    return answer.status_code, answer.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/jobs", f'{{"groups": [{GROUP}], "walltime_s": NaN}}'),
        ("/v1/jobs", f'{{"groups": [{GROUP}], "walltime_s": 1e400}}'),
        ("/v1/jobs/batch", f'[{{"groups": [{GROUP}], "checkpoint_interval_s": -Infinity}}]'),
        ("/v1/portal/whatif", '{"scale": Infinity}'),
    ],
)
def test_a_non_finite_number_is_a_422_not_a_500(client: TestClient, path: str, body: str) -> None:
    status, text = post(client, path, body)
    assert status == 422, text
    assert "finite" in text


def test_a_priority_beyond_the_store_is_refused_and_the_batch_stores_nothing(
    client: TestClient, ctl: Controller
) -> None:
    status, text = post(client, "/v1/jobs", f'{{"groups": [{GROUP}], "priority": {10**26}}}')
    assert status == 422, text
    batch = f'[{{"groups": [{GROUP}]}}, {{"groups": [{GROUP}], "priority": {-(2**40)}}}]'
    status, text = post(client, "/v1/jobs/batch", batch)
    assert status == 422, text
    assert not ctl.jobs
    assert client.get("/v1/jobs").json() == []
    status, _ = post(client, "/v1/jobs", f'{{"groups": [{GROUP}], "priority": {2**31 - 1}}}')
    assert status == 201


def test_an_array_over_a_million_jobs_is_refused_at_once(
    client: TestClient, ctl: Controller
) -> None:
    status, text = post(
        client, "/v1/jobs", f'{{"groups": [{GROUP}], "array": {{"start": 0, "stop": {10**6}}}}}'
    )
    assert status == 422, text
    assert "at most 1,000,000 indices" in text
    assert not ctl.jobs


def test_a_node_too_large_for_the_core_cannot_register(client: TestClient, ctl: Controller) -> None:
    body = '{"name": "huge", "resources": {"cpu": "99999999999999999999999"}}'
    status, text = post(client, "/v1/agents/register", body)
    assert status == 422, text
    assert "too large" in text
    ctl.run_cycle()  # the scheduler still runs
    assert "huge" not in ctl.nodes


@pytest.mark.parametrize(
    "query",
    [
        "/v1/jobs?before=99999999999999999999",
        "/v1/usage?start=99999999999999999999999999",
        "/v1/usage?start=-99999999999999999999d",
    ],
)
def test_numbers_beyond_the_store_or_the_calendar_are_a_422(client: TestClient, query: str) -> None:
    answer = client.get(query)
    assert answer.status_code == 422, answer.text


NUL = "\\u0000"  # as JSON writes it


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (f'{{"groups": [{GROUP}], "name": "a{NUL}b"}}', ["body", "name"]),
        (f'{{"groups": [{GROUP}], "user": "u{NUL}"}}', ["body", "user"]),
        (f'{{"groups": [{GROUP}], "tenant": "{NUL}"}}', ["body", "tenant"]),
        (f'{{"groups": [{GROUP}], "queue": "q{NUL}"}}', ["body", "queue"]),
        (f'{{"groups": [{GROUP}], "labels": {{"team": "a{NUL}"}}}}', ["body", "labels"]),
        (f'{{"groups": [{GROUP}], "output": "/tmp/{NUL}"}}', ["body", "output"]),
        (
            f'{{"groups": [{GROUP}], "placement": {{"node_selector": {{"k{NUL}": "v"}}}}}}',
            ["body", "placement", "node_selector"],
        ),
        (
            f'{{"groups": [{{"resources": {{"cpu": "1"}}, "argv": ["echo", "{NUL}"]}}]}}',
            ["body", "groups", 0, "argv"],
        ),
        (
            f'{{"groups": [{{"resources": {{"cpu": "1"}}, "argv": ["true"], '
            f'"env": {{"A": "x{NUL}y"}}}}]}}',
            ["body", "groups", 0, "env"],
        ),
        (
            f'{{"groups": [{{"resources": {{"cpu": "1"}}, "script": "echo {NUL}"}}]}}',
            ["body", "groups", 0, "script"],
        ),
    ],
)
def test_a_nul_character_in_a_submission_is_a_422_naming_the_field(
    client: TestClient, ctl: Controller, body: str, loc: list[str | int]
) -> None:
    answer = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == loc
    assert "NUL character" in error["msg"]
    assert not ctl.jobs


def test_a_nul_character_anywhere_in_a_batch_stores_none_of_it(
    client: TestClient, ctl: Controller
) -> None:
    batch = f'[{{"groups": [{GROUP}]}}, {{"groups": [{GROUP}], "user": "x{NUL}"}}]'
    status, text = post(client, "/v1/jobs/batch", batch)
    assert status == 422, text
    assert '"loc":["body",1,"user"]' in text
    assert not ctl.jobs
    assert client.get("/v1/jobs").json() == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/agents/register", f'{{"name": "n1", "labels": {{"a": "b{NUL}"}}, ', "labels"),
        ("/v1/agents/register", f'{{"name": "n1", "address": "h{NUL}", ', "address"),
        (
            "/v1/agents/register",
            f'{{"name": "n1", "devices": [{{"index": 0, "model": "H{NUL}"}}], ',
            "model",
        ),
    ],
)
def test_a_nul_character_in_a_node_registration_is_a_422(
    client: TestClient, ctl: Controller, path: str, body: str, field: str
) -> None:
    status, text = post(client, path, body + '"resources": {"cpu": "1"}}')
    assert status == 422, text
    assert f'"{field}"],"msg":"Value error, a NUL character' in text
    assert sorted(ctl.nodes) == ["n0"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/submissions", f'{{"files": [{{"text": "#!/bin/sh\\ntrue", "args": ["-J{NUL}"]}}]}}'),
        ("/v1/tokens", f'{{"user": "u{NUL}"}}'),
        ("/v1/agents/join", f'{{"node": "n{NUL}"}}'),
        ("/v1/route", f'{{"groups": [{GROUP}], "queue": "q{NUL}"}}'),
    ],
)
def test_a_nul_character_in_other_request_bodies_is_a_422(
    client: TestClient, path: str, body: str
) -> None:
    status, text = post(client, path, body)
    assert status == 422, text
    assert "NUL character" in text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"#!/bin/sh\\n#SBATCH -J a{NUL}\\ntrue", "the batch script contains NUL bytes"),
        (f"name: a{NUL}\\ncommand: [true]\\nresources: {{cpu: 1}}", "unacceptable character"),
        (
            'name: \\"a\\\\0\\"\\ncommand: [true]\\nresources: {cpu: 1}',
            "name: a NUL character (\\\\u0000) is not allowed",
        ),
    ],
)
def test_a_nul_character_in_a_submitted_file_is_a_400_from_its_parser(
    client: TestClient, ctl: Controller, text: str, reason: str
) -> None:
    status, answer = post(client, "/v1/submissions", f'{{"files": [{{"text": "{text}"}}]}}')
    assert status == 400, answer
    assert reason in answer
    assert not ctl.jobs


@pytest.mark.parametrize(
    ("method", "url", "where"),
    [
        ("GET", "/v1/jobs/1%00", "the URL path"),
        ("POST", "/v1/jobs/1%00/cancel", "the URL path"),
        ("GET", "/v1/jobs?user=a%00b", "the query parameter 'user'"),
        ("GET", "/v1/usage?tenant=%00", "the query parameter 'tenant'"),
    ],
)
def test_a_nul_character_in_a_url_is_a_422(
    client: TestClient, method: str, url: str, where: str
) -> None:
    answer = client.request(method, url)
    assert answer.status_code == 422, answer.text
    assert answer.json() == {"detail": f"a NUL character (\\u0000) is not allowed in {where}"}


@pytest.mark.parametrize("job_id", ["²", "١٢", "1²"])
def test_a_job_id_of_unicode_digits_is_a_404_not_a_500(client: TestClient, job_id: str) -> None:
    """``str.isdigit`` takes "²" (``int`` does not): ids of such digits are no job of ours."""
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert client.post(f"/v1/jobs/{job_id}/hold", json={}).status_code == 404
    assert client.post(f"/v1/jobs/{job_id}/release", json={}).status_code == 404


def test_an_array_limit_of_unicode_digits_is_refused_with_the_reason(client: TestClient) -> None:
    for text in ("#!/bin/sh\n#SBATCH --array=1-3%²\ntrue\n", "command: 'true'\narray: 1-3%²\n"):
        answer = client.post("/v1/submissions", json={"files": [{"text": text}]})
        assert answer.status_code == 400, answer.text
        assert "the %N limit must be a positive whole number" in answer.text
        assert "invalid literal" not in answer.text


def test_a_group_name_outside_ascii_is_refused(client: TestClient, ctl: Controller) -> None:
    """``\\w`` took "aé": its tasks' logs could never be written (every beat carrying their
    output failed)."""
    body = '{"groups": [{"name": "aé", "resources": {"cpu": "1"}, "argv": ["true"]}]}'
    status, text = post(client, "/v1/jobs", body)
    assert status == 422, text
    assert not ctl.jobs
