"""``POST /v1/submissions`` on the API's hot path (:mod:`fusesched.api.hot_path`): valid
bodies are answered without FastAPI's routing, refusals in the app's own words and status and
without a second attempt; another content type and an invalid body go to the route itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.api import hot_path
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

GOOD = "name: hot\nresources: {cpu: 1, memory: 100Mi}\ncommand: [/bin/true]\n"


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The submissions the hot path itself took on (it hands them to the thread pool)."""
    calls: list[str] = []
    real = hot_path.run_in_threadpool

    async def counting(func: Any, *args: Any) -> Any:
        calls.append(func.__name__)
        return await real(func, *args)

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
    assert response.headers["content-type"] == "application/json"
    assert detail in str(response.json()["detail"])
    # a refusal is answered by the hot path, once; an invalid body by FastAPI itself
    assert answered == (["accept_files"] if status == 400 else [])
    assert Client(cluster.url).jobs() == []  # nothing stored


def test_a_refused_submission_is_tried_once(cluster: LocalCluster, answered: list[str]) -> None:
    files = [{"name": "a.yaml", "text": GOOD}]
    first = post(cluster, {"files": files}).json()["ids"][0]
    # an array of 100 jobs no node can hold: refused once, and it takes no job numbers
    text = "name: b\narray: 0-99\nresources: {cpu: 64}\ncommand: [/bin/true]\n"
    big = {"files": [{"name": "big.yaml", "text": text}]}
    refused = post(cluster, big)
    assert refused.status_code == 400, refused.text
    after = post(cluster, {"files": files}).json()["ids"][0]
    assert int(after) == int(first) + 1
    assert answered == ["accept_files"] * 3


def test_no_node_yet_is_a_503(tmp_path: Path, answered: list[str]) -> None:
    with local_cluster(tmp_path / "data", lambda configs: []) as empty:
        response = post(empty, {"files": [{"name": "a.yaml", "text": GOOD}]})
    assert response.status_code == 503
    assert "no node has registered yet" in response.json()["detail"]
    assert answered == ["accept_files"]


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
