"""``POST /v1/agents/leaving`` (controller/agents.py ``leaving``): a node whose agent says it
is stopping is handled at once as a node that fell silent — down with the reason "agent
stopped", its jobs requeued (excluding it) or failed by their restart policies, nothing new
placed there, launches not yet sent dropped — and it stays down, whatever beats were on their
way, until its agent registers again. Only the node's own credential or a cluster-admin may
say so; it is audited. The agents are played by hand, the clock is moved by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskReport, TaskState
from fusesched.controller.auth import Authenticator, Role
from fusesched.controller.service import Controller
from fusesched.store import TokenKind
from fusesched.store.schema import events

N0 = NodeInventory.model_validate(ONE_NODE)
N1 = NodeInventory.model_validate({**ONE_NODE, "name": "n1"})


def submit(client: TestClient, **extra: Any) -> str:
    """A job of a whole node (4 CPUs) that is requeued without delay."""
    group = {"resources": {"cpu": "4"}, "argv": ["sleep", "600"]}
    body = {"groups": [group], "restart": {"backoff_s": 0}, **extra}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def beat(ctl: Controller, node: str, running: tuple[str, ...] = ()) -> list[str]:
    """A full beat of ``node`` (running ``running``); it starts what the reply sends: their
    task ids."""
    reply = ctl.heartbeat(Heartbeat(node=node, running=list(running)), wait_s=0)
    started = [launch.task_id for launch in reply.launch]
    if started:
        reports = [TaskReport(task_id=t, state=TaskState.RUNNING, pid=100) for t in started]
        beat = Heartbeat(node=node, reports=reports, running=list(running) + started)
        ctl.heartbeat(beat, wait_s=0)
    return started


def running_on_n0(ctl: Controller, client: TestClient, **extra: Any) -> str:
    """A job that runs on n0 (the only node until then); n1 joins after: the job's id."""
    job_id = submit(client, **extra)
    ctl.run_cycle()
    assert len(beat(ctl, "n0")) == 1
    ctl.register(N1)
    return job_id


def nodes(client: TestClient) -> dict[str, str]:
    return {n["name"]: n["state"] for n in client.get("/v1/nodes").json()}


def job(client: TestClient, job_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def stored(ctl: Controller, kind: str) -> list[dict[str, Any]]:
    """The stored events of ``kind`` (node and data), oldest first."""
    with ctl.persist.store._read() as conn:  # (the store reads events by job only)
        query = select(events).where(events.c.kind == kind).order_by(events.c.id)
        rows = conn.execute(query).mappings().all()
    return [{"node": r["node"], **r["data"]} for r in rows]


def test_a_leaving_node_is_down_at_once_and_its_job_runs_elsewhere(
    ctl: Controller, client: TestClient
) -> None:
    job_id = running_on_n0(ctl, client)
    answer = client.post("/v1/agents/leaving", json={"node": "n0"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"node": "n0", "state": "down"}
    assert nodes(client) == {"n0": "down", "n1": "up"}
    changes = [e for e in stored(ctl, "NodeStateChanged") if e["node"] == "n0"]
    assert changes[-1] == {"node": "n0", "state": "down", "why": "agent stopped"}
    # requeued by its restart policy as for a lost node (no waiting for the node timeout)
    ctl.run_cycle()
    shown = job(client, job_id)
    assert "node n0's agent stopped" in shown["reason"], shown
    assert beat(ctl, "n0") == []  # nothing new for the node that left
    ctl.run_cycle()
    assert len(beat(ctl, "n1")) == 1
    assert job(client, job_id)["state"] == "Running"
    assert nodes(client)["n0"] == "down"


def test_a_no_requeue_job_fails_saying_so(ctl: Controller, client: TestClient) -> None:
    job_id = running_on_n0(ctl, client, requeue=False)
    assert client.post("/v1/agents/leaving", json={"node": "n0"}).status_code == 200
    ctl.run_cycle()
    shown = job(client, job_id)
    assert shown["state"] == "Failed", shown
    assert shown["reason"] == "NodeDown: node n0's agent stopped; not requeued (--no-requeue)"


def test_late_beats_do_not_bring_the_node_back_registering_does(
    ctl: Controller, client: TestClient
) -> None:
    running_on_n0(ctl, client)
    assert client.post("/v1/agents/leaving", json={"node": "n0"}).status_code == 200
    # beats the agent sent before it left, arriving after: a full one with no task left
    # (one that lists the lost task would fence it, as for any lost node) and a quick one
    beat(ctl, "n0")
    ctl.heartbeat(Heartbeat(node="n0"), wait_s=0)
    assert nodes(client)["n0"] == "down"
    ctl.register(N0)  # the agent starts again
    assert nodes(client)["n0"] == "up"
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)  # (writes what register held)
    back = [e for e in stored(ctl, "NodeStateChanged") if e["node"] == "n0"][-1]
    assert back == {"node": "n0", "state": "up", "why": "back"}
    assert nodes(client)["n0"] == "up"


def test_a_launch_not_yet_sent_is_dropped_and_its_job_requeued(
    ctl: Controller, client: TestClient
) -> None:
    job_id = submit(client)
    ctl.run_cycle()  # placed on n0; its agent has not fetched the launch yet
    ctl.register(N1)
    assert client.post("/v1/agents/leaving", json={"node": "n0"}).status_code == 200
    assert ctl.nodes["n0"].outbox == []
    ctl.run_cycle()
    assert len(beat(ctl, "n1")) == 1
    assert job(client, job_id)["state"] == "Running"
    ctl.register(N0)  # back: the dropped launch does not come with its first beat
    assert beat(ctl, "n0") == []


def test_a_silent_node_drops_its_unsent_launch_too(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job_id = submit(client)
    ctl.run_cycle()  # placed on n0, which falls silent before it fetches the launch
    ctl.register(N1)
    clock.now += 31  # past the node timeout (30 s); n1 keeps beating
    ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
    ctl._check_nodes()
    assert ctl.nodes["n0"].outbox == []
    ctl.run_cycle()
    assert len(beat(ctl, "n1")) == 1
    assert job(client, job_id)["state"] == "Running"


def test_an_unknown_node_is_404_and_a_second_leaving_changes_nothing(
    ctl: Controller, client: TestClient
) -> None:
    answer = client.post("/v1/agents/leaving", json={"node": "nope"})
    assert answer.status_code == 404
    assert answer.json()["detail"] == "node 'nope' is not registered"
    assert client.post("/v1/agents/leaving", json={}).status_code == 422
    for _ in range(2):
        answer = client.post("/v1/agents/leaving", json={"node": "n0"})
        assert answer.json() == {"node": "n0", "state": "down"}
    assert [e["state"] for e in stored(ctl, "NodeStateChanged") if e["node"] == "n0"] == ["down"]


def test_only_the_node_itself_or_a_cluster_admin_says_it_leaves(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    ctl.register(N1)
    auth = Authenticator(ctl.persist.store, enabled=True)
    http = TestClient(create_app(ctl, auth))

    def leaving(node: str, token: str | None) -> int:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        answer = http.post("/v1/agents/leaving", json={"node": node}, headers=headers)
        return int(answer.status_code)

    def person(role: Role) -> str:
        return auth.issue(TokenKind.USER, user="pat", tenant="lab", role=role.value)[0]

    n0 = auth.issue_agent("n0")
    assert leaving("n0", None) == 401
    assert leaving("n1", n0) == 403  # another node's credential
    assert leaving("n0", person(Role.USER)) == 403
    assert leaving("n0", person(Role.TENANT_ADMIN)) == 403
    assert ctl.nodes["n0"].state.value == ctl.nodes["n1"].state.value == "up"
    assert leaving("n0", n0) == 200
    assert leaving("n1", person(Role.CLUSTER_ADMIN)) == 200
    audit = [(e["node"], e["action"], e["role"]) for e in stored(ctl, "Audit")]
    assert audit == [("n0", "node-leaving", "agent"), ("n1", "node-leaving", "cluster-admin")]
    ctl.persist.close()


def test_a_node_whose_agent_left_does_not_answer_until_it_registers(
    ctl: Controller, client: TestClient
) -> None:
    """sinfo marks it ``down*`` at once (no agent answers there), not only once the node
    timeout has passed since its last beat."""

    def view() -> dict[str, Any]:
        (found,) = [n for n in client.get("/v1/nodes").json() if n["name"] == "n0"]
        return dict(found)

    running_on_n0(ctl, client)
    assert client.post("/v1/agents/leaving", json={"node": "n0"}).status_code == 200
    beat(ctl, "n0")  # (a beat sent before it left, arriving after)
    left = view()
    assert (left["state"], left["reason"], left["responding"]) == ("down", "agent stopped", False)
    ctl.register(N0)
    assert view()["responding"] is True
