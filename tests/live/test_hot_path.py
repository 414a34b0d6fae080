"""``POST /v1/submissions`` on the API's hot path (:mod:`fusesched.api.hot_path`): accepted
submissions are answered without FastAPI's routing; every refusal, another content type and
an invalid body get exactly the answers of the route itself."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fusesched.api import hot_path
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

GOOD = "name: hot\nresources: {cpu: 1, memory: 100Mi}\ncommand: [/bin/true]\n"


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The submissions the hot path itself answered (it hands them to the thread pool)."""
    calls: list[str] = []
    real = hot_path.run_in_threadpool

    async def counting(func: Any, *args: Any) -> Any:
        result = await real(func, *args)
        calls.append(func.__name__)
        return result

    monkeypatch.setattr(hot_path, "run_in_threadpool", counting)
    return calls


def post(cluster: LocalCluster, body: Any, **kwargs: Any) -> httpx.Response:
    if "content" not in kwargs:
        kwargs["json"] = body
    return httpx.post(f"{cluster.url}/v1/submissions", timeout=30, **kwargs)


def test_an_accepted_submission_is_answered_on_the_hot_path(
    cluster: LocalCluster, answered: list[str]
) -> None:
    response = post(cluster, {"files": [{"name": "job.yaml", "text": GOOD}], "user": "ana"})
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"ids", "warnings"} and len(body["ids"]) == 1
    assert answered == ["accept_files"]
    client = Client(cluster.url)
    shown = client.wait(body["ids"][0], timeout=30)
    assert (shown["state"], shown["user"]) == ("Completed", "ana")


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (  # the parser's refusal
            {"files": [{"name": "job.yaml", "text": "name: x\nresources: {gpux: 1}\n"}]},
            400,
            "unknown resource 'gpux'",
        ),
        ({"files": [{"name": "empty.yaml", "text": "\n"}]}, 400, ""),
        (  # the controller's refusal: no node has 64 CPUs
            {"files": [{"name": "big.yaml", "text": "name: b\nresources: {cpu: 64}\n"}]},
            400,
            "",
        ),
        ({"files": "not a list"}, 422, ""),  # FastAPI's own validation error
    ],
)
def test_refusals_are_the_routes_own(
    cluster: LocalCluster, answered: list[str], body: Any, status: int, detail: str
) -> None:
    response = post(cluster, body)
    assert response.status_code == status, response.text
    assert detail in str(response.json()["detail"])
    assert answered == []  # the app answered, not the hot path
    assert Client(cluster.url).jobs() == []  # nothing stored


def test_other_content_types_and_routes_go_to_the_app(
    cluster: LocalCluster, answered: list[str]
) -> None:
    job = {"name": "job.yaml", "text": GOOD.replace("hot", "typed")}
    text = json.dumps({"files": [job]}).encode()
    plain = post(cluster, None, content=text, headers={"content-type": "text/plain"})
    assert plain.status_code == 422  # FastAPI reads JSON bodies of JSON requests only
    charset = post(
        cluster, None, content=text, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert charset.status_code == 201, charset.text
    assert answered == ["accept_files"]
    assert httpx.get(f"{cluster.url}/v1/submissions", timeout=30).status_code == 405
