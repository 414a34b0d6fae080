"""Fuzz the whole REST API with schemathesis against its own /openapi.json: no request, with a
valid cluster-admin token or with none, may make the controller answer 5xx.

The controller has authentication on and one agent whose tasks only pretend to run (the
fake runtime), so fuzzed job submissions start nothing on this machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fusesched.agent.client import AgentClient
from fusesched.agent.fake import FakeRuntime
from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer

#: Examples per operation; 17 operations, with and without a token: well under a minute.
EXAMPLES_WITH_TOKEN = 25
EXAMPLES_WITHOUT = 5


@dataclass
class Fuzzed:
    url: str
    admin: str  # a cluster-admin token
    node: str  # a second node, spoken for by the fuzzer ...
    node_token: str  # ... with its own credential


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    server = ControllerServer(
        tmp_path_factory.mktemp("fuzz"), port=0, auth=True, long_poll_s=0.1
    ).start()
    inventory = NodeInventory(
        name="fuzz-node", resources={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}
    )
    agent = AgentClient(
        server.url,
        inventory,
        FakeRuntime(time.time, default_duration_s=0.05),
        long_poll_s=0.2,
        token=server.authenticator.issue_agent("fuzz-node"),
    )
    agent.start()
    assert server.admin_token_path is not None
    try:
        admin = server.admin_token_path.read_text().strip()
        yield Fuzzed(
            server.url, admin, "fuzz-node-2", server.authenticator.issue_agent("fuzz-node-2")
        )
    finally:
        agent.stop()
        server.stop()


def fuzz(url: str, headers: dict[str, str], examples: int, node: str | None = None) -> list[str]:
    """Every operation, ``examples`` generated cases each; the 5xx answers found. With
    ``node``, only the agents' operations, speaking as that node."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if node is not None and not operation.path.startswith("/v1/agents/"):
            continue

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(), data=st.data())
        def check(case: schemathesis.Case, data: st.DataObject) -> None:
            if case.query is not None and "wait" in case.query:
                case.query["wait"] = 0  # no long polls
            if node is not None and isinstance(case.body, dict):
                case.body["name" if "register" in case.path else "node"] = node
            response = case.call(base_url=url, headers=headers, timeout=30)
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} {case.query} {case.body!r:.300}"
                    f" -> {response.status_code} {response.text[:300]}"
                )

        check()
    return failures


def test_no_request_makes_the_api_fail(fuzzed: Fuzzed) -> None:
    url = fuzzed.url
    started = time.monotonic()
    failures = fuzz(url, {"authorization": f"Bearer {fuzzed.admin}"}, EXAMPLES_WITH_TOKEN)
    failures += fuzz(url, {}, EXAMPLES_WITHOUT)
    assert failures == []
    assert time.monotonic() - started < 120


def test_no_agent_message_makes_the_api_fail(fuzzed: Fuzzed) -> None:
    headers = {"authorization": f"Bearer {fuzzed.node_token}"}
    assert fuzz(fuzzed.url, headers, 40, node=fuzzed.node) == []


def test_the_openapi_document_declares_bearer_auth(fuzzed: Fuzzed) -> None:
    document = httpx.get(f"{fuzzed.url}/openapi.json").json()
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert document["paths"]["/v1/jobs"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in document["paths"]["/healthz"]["get"]


def mostly(valid: st.SearchStrategy[Any], noise: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` four times in five, else ``noise``: most requests pass validation."""
    return st.one_of(valid, valid, valid, valid, noise)


QUANTITIES = mostly(
    st.sampled_from(["1", "250m", "2", "64Mi", "1Gi", 1, 2]),
    st.one_of(
        st.sampled_from(["0", "-1", "1e3", "abc", "1.5", "9" * 30, "", "1000", "300Gi"]),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
)
NAMES = mostly(
    st.sampled_from(["cpu", "memory", "gpu", "nvidia.com/gpu"]),
    st.sampled_from(["nvidia.com/mig-1g.10gb", "fpga", "x", "", "CPU"]),
)
GROUP = st.fixed_dictionaries(
    {
        "resources": st.dictionaries(NAMES, QUANTITIES, min_size=1, max_size=3),
        "argv": mostly(st.just(["true"]), st.lists(st.text(max_size=12), max_size=3)),
        "replicas": mostly(st.integers(1, 4), st.integers(-2, 100)),
    },
    optional={
        "name": mostly(st.sampled_from(["main", "worker"]), st.text(max_size=10)),
        "env": st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2),
        "launcher": st.sampled_from(["torchrun", "mpi", "deepspeed", "plain", "bogus"]),
        "ports": st.lists(st.integers(-1, 70000), max_size=2),
        "image": mostly(st.just("/nonexistent/image.tar"), st.text(max_size=10)),
    },
)
REQUEST = st.fixed_dictionaries(
    {"groups": st.lists(GROUP, min_size=1, max_size=2)},
    optional={
        "name": st.text(max_size=20),
        "type": st.sampled_from(["ai-train", "ai-infer", "hpc", "batch", "service", "x"]),
        "user": st.text(max_size=8),
        "tenant": mostly(st.sampled_from(["physics", "default"]), st.text(max_size=8)),
        "queue": mostly(st.just("default"), st.text(max_size=8)),
        "priority": mostly(st.integers(-10, 10), st.integers(-(2**70), 2**70)),
        "walltime_s": mostly(st.floats(1, 10**6), st.floats(allow_nan=False, allow_infinity=False)),
        "min_member": st.integers(-1, 50),
        "qos": st.sampled_from(["gold", "silver", "bronze", "x"]),
        "dependencies": st.lists(
            st.fixed_dictionaries(
                {
                    "job_id": mostly(st.sampled_from(["1", "2", "3_1"]), st.text(max_size=6)),
                    "type": st.sampled_from(["afterok", "afterany", "x"]),
                }
            ),
            max_size=2,
        ),
        "array": st.fixed_dictionaries(
            {"start": st.integers(-3, 5), "stop": st.integers(-3, 40)},
            optional={"step": st.integers(-1, 5)},
        ),
        "placement": st.fixed_dictionaries(
            {},
            optional={
                "node_selector": st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
                "max_tasks_per_node": st.integers(-1, 5),
                "exclusive": st.booleans(),
            },
        ),
    },
)


def test_fuzzed_submissions_never_fail_the_api(fuzzed: Fuzzed) -> None:
    """Near-valid job requests (the schema's own generator rarely passes validation)."""
    failures: list[str] = []
    headers = {"authorization": f"Bearer {fuzzed.admin}"}
    with httpx.Client(base_url=fuzzed.url, headers=headers, timeout=30) as http:

        @settings(
            max_examples=80,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=REQUEST)
        def check(request: dict[str, object]) -> None:
            response = http.post("/v1/jobs", json=request)
            if response.status_code >= 500:
                failures.append(f"{request!r:.400} -> {response.status_code} {response.text}")
            elif response.status_code == 201:
                job_id = response.json()["id"]
                for answer in (
                    http.get(f"/v1/jobs/{job_id}"),
                    http.get(f"/v1/jobs/{job_id}/logs"),
                    http.post(f"/v1/jobs/{job_id}/cancel"),
                ):
                    if answer.status_code >= 500:
                        failures.append(f"{answer.request.url} -> {answer.status_code}")

        check()
    assert failures == []
