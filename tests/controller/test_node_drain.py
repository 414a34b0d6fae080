"""Operator drains (controller/drains.py, POST /v1/nodes/{name}/drain and /undrain): a drained
node finishes what it runs and gets nothing new; the drain outlives agent and controller
restarts and health recoveries; undraining gives the node back unless it is unhealthy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import (
    Heartbeat,
    NodeHealthWire,
    NodeInventory,
    TaskReport,
    TaskSampleWire,
    TaskState,
)
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState

GROUP = {"resources": {"cpu": "4"}, "argv": ["true"]}  # a whole node


def submit(client: TestClient) -> str:
    answer = client.post("/v1/jobs", json={"groups": [GROUP]})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def launched(ctl: Controller, running: tuple[str, ...] = ()) -> dict[str, str]:
    """Run a cycle; job id -> task id of what n0's agent (running ``running``) is told to
    launch."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=list(running)), wait_s=0)
    return {launch.job_id: launch.task_id for launch in reply.launch}


def node(client: TestClient) -> dict[str, Any]:
    (found,) = client.get("/v1/nodes").json()
    return dict(found)


def state(client: TestClient, job_id: str) -> str:
    return str(client.get(f"/v1/jobs/{job_id}").json()["state"])


def test_a_drained_node_finishes_its_job_and_takes_no_new_one(
    ctl: Controller, client: TestClient
) -> None:
    first = submit(client)
    task = launched(ctl)[first]
    answer = client.post("/v1/nodes/n0/drain", json={"reason": "  fan   replacement "})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"node": "n0", "state": "draining", "drain_reason": "fan replacement"}
    second = submit(client)
    assert launched(ctl, (task,)) == {}  # nothing new on a drained node
    assert state(client, first) == "Running" and state(client, second) == "Pending"
    assert node(client)["state"] == "draining"
    assert node(client)["drain_reason"] == "fan replacement"
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()
    assert state(client, first) == "Completed"
    assert node(client)["state"] == "drained"  # nothing runs there any more
    assert launched(ctl) == {}
    answer = client.post("/v1/nodes/n0/undrain")
    assert answer.json() == {"node": "n0", "state": "up", "drain_reason": None}
    assert second in launched(ctl)
    assert node(client)["drain_reason"] is None


def test_the_drain_outlives_agent_and_controller_restarts(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    assert client.post("/v1/nodes/n0/drain", json={"reason": "bad DIMM"}).status_code == 200
    ctl.register(NodeInventory.model_validate(ONE_NODE))  # its agent restarts
    assert ctl.nodes["n0"].state is NodeState.DRAINING
    clock.now += 3600  # the node goes silent, is declared down, then comes back
    ctl._check_nodes()
    assert ctl.nodes["n0"].state is NodeState.DOWN
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    assert ctl.nodes["n0"].state is NodeState.DRAINING
    ctl.persist.flush()
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # a new controller on the same store
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        assert node(client)["drain_reason"] == "bad DIMM"
        job = submit(client)
        assert launched(again) == {}
        assert client.post("/v1/nodes/n0/undrain").json()["state"] == "up"
        assert job in launched(again)
        assert again.persist.store.get_node("n0").drain_reason is None  # type: ignore[union-attr]
    finally:
        again.persist.close()


def unhealthy(ctl: Controller, healthy: bool) -> None:
    """A full beat reporting the node's health; the health check acts on it."""
    health = NodeHealthWire(healthy=healthy, reasons=[] if healthy else ["disk full"])
    samples: list[TaskSampleWire] = []
    ctl.heartbeat(Heartbeat(node="n0", running=[], samples=samples, health=health), wait_s=0)
    ctl.clock.now += 3600  # type: ignore[attr-defined]
    ctl._health_at = 0.0
    ctl._check_health()


def test_health_and_an_operator_drain_both_hold_the_node(ctl: Controller) -> None:
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    unhealthy(ctl, healthy=False)
    assert ctl.nodes["n0"].state is NodeState.DRAINING
    assert client.post("/v1/nodes/n0/drain", json={"reason": "check"}).status_code == 200
    unhealthy(ctl, healthy=True)  # healthy again, but the operator's drain stands
    assert ctl.nodes["n0"].state is NodeState.DRAINING
    unhealthy(ctl, healthy=False)
    answer = client.post("/v1/nodes/n0/undrain").json()
    assert answer == {"node": "n0", "state": "draining", "drain_reason": None}  # still sick
    unhealthy(ctl, healthy=True)
    assert ctl.nodes["n0"].state is NodeState.UP


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/nodes/nope/drain", {"reason": "x"}, 404, "no node 'nope'"),
        ("/v1/nodes/nope/undrain", None, 404, "no node 'nope'"),
        ("/v1/nodes/n0/drain", {}, 422, "reason"),
        ("/v1/nodes/n0/drain", {"reason": ""}, 422, "reason"),
        ("/v1/nodes/n0/drain", {"reason": "   "}, 400, "give a reason"),
        ("/v1/nodes/n0/drain", {"reason": "x" * 1001}, 422, "reason"),
        ("/v1/nodes/n0/drain", {"reason": "a\u0000b"}, 422, "NUL"),
        ("/v1/nodes/n0/drain", {"reason": "x", "why": "y"}, 422, "why"),
        ("/v1/nodes/slurm:c1/drain", {"reason": "x"}, 400, "drain it in that cluster"),
        ("/v1/nodes/slurm:c1/undrain", None, 400, "external pool 'slurm'"),
    ],
)
def test_bad_drains_are_refused_and_change_nothing(
    ctl: Controller,
    client: TestClient,
    path: str,
    body: dict[str, str] | None,
    status: int,
    message: str,
) -> None:
    ctl.remote_nodes["slurm:c1"] = ("slurm", "c1", NodeState.UP)
    answer = client.post(path, json=body)
    assert answer.status_code == status, answer.text
    assert message in answer.text
    assert ctl.nodes["n0"].state is NodeState.UP and ctl.nodes["n0"].drain is None
    assert ctl.persist.store.get_node("n0").drain_reason is None  # type: ignore[union-attr]


def test_undraining_a_node_that_is_not_drained_changes_nothing(client: TestClient) -> None:
    assert client.post("/v1/nodes/n0/undrain").json() == {
        "node": "n0",
        "state": "up",
        "drain_reason": None,
    }
