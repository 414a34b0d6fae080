"""Four gaps of the hold, release, requeue and drain actions, closed: a cluster-admin's hold
only an administrator releases (and it outlives a restart); an array whose members have all
ended answers 409 like an ended job; a drain the store cannot record changes nothing; a node
the store knows can be drained before its agent is back after a controller restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_job_holds import launched

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskReport, TaskState
from fusesched.controller.auth import Authenticator
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.store import TokenKind

WHOLE = {"resources": {"cpu": "4"}, "argv": ["true"]}  # the whole node


class People:
    """The API of a controller with authentication on, and a token per person: ``alice`` (a
    user of tenant ``t``), ``tina`` (an admin of ``t``), ``root`` (a cluster-admin); ``tokens``
    issued before (they are in the store the controller uses)."""

    def __init__(self, ctl: Controller, tokens: dict[str, str] | None = None) -> None:
        auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
        self.client = TestClient(create_app(ctl, auth), raise_server_exceptions=False)
        self.tokens: dict[str, str] = dict(tokens or {})
        for who, tenant, role in (
            []
            if tokens
            else [
                ("alice", "t", "user"),
                ("tina", "t", "tenant-admin"),
                ("root", "t", "cluster-admin"),
            ]
        ):
            self.tokens[who], _ = auth.issue(TokenKind.USER, user=who, tenant=tenant, role=role)

    def post(self, who: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return self.client.post(path, json=body, headers=headers)

    def job(self, job_id: str) -> dict[str, Any]:
        answer = self.client.get(
            f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {self.tokens['root']}"}
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def submit(self, who: str = "alice", **extra: Any) -> dict[str, Any]:
        answer = self.post(who, "/v1/jobs", {"groups": [WHOLE], **extra})
        assert answer.status_code == 201, answer.text
        return dict(answer.json())


def exited(ctl: Controller, task: str, code: int = 0) -> None:
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()


def waiting_job(ctl: Controller, people: People) -> str:
    """Alice's job waiting behind another of hers that runs (the whole node)."""
    people.submit()
    launched(ctl)
    job = str(people.submit()["id"])
    ctl.run_cycle()  # the core queues it
    return job


# ------------------------------------------------------------------ administrator holds


def test_an_admins_hold_only_an_admin_releases(ctl: Controller) -> None:
    people = People(ctl)
    job = waiting_job(ctl, people)
    answer = people.post("root", f"/v1/jobs/{job}/hold", {"reason": "maintenance window"})
    assert answer.status_code == 200 and answer.json()["held"] == [job], answer.text
    assert people.job(job)["reason"] == "held by administrator: maintenance window"
    for who in ("alice", "tina"):  # the job's user, an admin of its tenant
        refused = people.post(who, f"/v1/jobs/{job}/release")
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"] == (
            f"job {job} is held by an administrator (maintenance window); ask an "
            "administrator to release it"
        )
        replaced = people.post(who, f"/v1/jobs/{job}/hold", {"reason": "mine now"})
        assert replaced.status_code == 403 and "held by an administrator" in replaced.text
    assert people.job(job)["reason"] == "held by administrator: maintenance window"
    assert ctl.jobs[job].hold == "maintenance window"
    released = people.post("root", f"/v1/jobs/{job}/release")
    assert released.status_code == 200 and released.json()["released"] == [job]
    assert people.job(job)["phase"] == "queued"


def test_a_users_own_hold_is_released_by_them_or_an_admin(ctl: Controller) -> None:
    people = People(ctl)
    job = waiting_job(ctl, people)
    for releaser in ("alice", "root"):
        assert people.post("alice", f"/v1/jobs/{job}/hold", {"reason": "mine"}).status_code == 200
        assert people.job(job)["reason"] == "held: mine"
        answer = people.post(releaser, f"/v1/jobs/{job}/release")
        assert answer.status_code == 200 and answer.json()["released"] == [job], answer.text
    # an admin's hold over a user's one makes it an administrator hold
    people.post("alice", f"/v1/jobs/{job}/hold", {"reason": "mine"})
    people.post("root", f"/v1/jobs/{job}/hold", {"reason": "audit"})
    assert people.post("alice", f"/v1/jobs/{job}/release").status_code == 403


def test_an_admins_hold_outlives_a_restart_and_a_user_cannot_forge_one(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    people = People(ctl)
    job = waiting_job(ctl, people)
    forged = str(people.submit()["id"])
    assert people.post("root", f"/v1/jobs/{job}/hold", {"reason": "legal"}).status_code == 200
    body = {"reason": "held by administrator: fake"}
    assert people.post("alice", f"/v1/jobs/{forged}/hold", body).status_code == 200
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)  # the tokens are in the same store
    try:
        people = People(again, people.tokens)
        refused = people.post("alice", f"/v1/jobs/{job}/release")
        assert refused.status_code == 403 and "ask an administrator" in refused.text
        assert people.job(job)["reason"] == "held by administrator: legal"
        assert people.post("alice", f"/v1/jobs/{forged}/release").status_code == 200
        assert people.post("root", f"/v1/jobs/{job}/release").status_code == 200
    finally:
        again.persist.close()


def test_an_array_with_an_admin_held_member_is_not_released_by_its_user(
    ctl: Controller,
) -> None:
    people = People(ctl)
    people.submit()
    launched(ctl)
    members = people.submit(array={"start": 0, "stop": 1})["ids"]
    assert people.post("alice", f"/v1/jobs/{members[0]}/hold", {}).status_code == 200
    assert people.post("root", f"/v1/jobs/{members[1]}/hold", {}).status_code == 200
    parent = members[0].split("_")[0]
    refused = people.post("alice", f"/v1/jobs/{parent}/release")
    assert refused.status_code == 403 and f"job {members[1]} is held by an admin" in refused.text
    assert [people.job(m)["phase"] for m in members] == ["held", "held"]  # nothing released
    assert people.post("root", f"/v1/jobs/{parent}/release").json()["released"] == members


def test_an_admins_requeue_and_hold_is_an_administrator_hold(ctl: Controller) -> None:
    people = People(ctl)
    job = str(people.submit()["id"])
    task = launched(ctl)[job]
    body = {"reason": "node suspect", "hold": True}
    assert people.post("root", f"/v1/jobs/{job}/requeue", body).json()["requeued"] == [job]
    exited(ctl, task, -15)
    assert people.job(job)["reason"] == "held by administrator: node suspect"
    assert people.post("alice", f"/v1/jobs/{job}/release").status_code == 403
    assert launched(ctl) == {}
    assert people.post("root", f"/v1/jobs/{job}/release").json()["released"] == [job]


def test_without_authentication_holds_are_users_and_anyone_releases(
    ctl: Controller, client: TestClient
) -> None:
    client.post("/v1/jobs", json={"groups": [WHOLE]})
    launched(ctl)
    job = client.post("/v1/jobs", json={"groups": [WHOLE]}).json()["id"]
    assert client.post(f"/v1/jobs/{job}/hold", json={"reason": "x"}).status_code == 200
    assert client.get(f"/v1/jobs/{job}").json()["reason"] == "held: x"
    assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]


# ------------------------------------------------------------------ ended arrays


@pytest.mark.parametrize(("action", "body"), [("hold", {}), ("release", None)])
def test_an_ended_array_answers_409_not_404(
    ctl: Controller, client: TestClient, action: str, body: dict[str, Any] | None
) -> None:
    made = client.post("/v1/jobs", json={"groups": [WHOLE], "array": {"start": 0, "stop": 1}})
    parent, members = made.json()["id"], made.json()["ids"]
    for _ in members:  # one at a time: each takes the whole node
        (task,) = launched(ctl).values()
        exited(ctl, task)
    assert [client.get(f"/v1/jobs/{m}").json()["state"] for m in members] == ["Completed"] * 2
    answer = client.post(f"/v1/jobs/{parent}/{action}", json=body)
    assert answer.status_code == 409, answer.text
    assert answer.json()["detail"] == f"job {parent} has ended (every member of the array has)"
    unknown = client.post(f"/v1/jobs/{int(parent) + 10}/{action}", json=body)
    assert unknown.status_code == 404


@pytest.mark.parametrize("body", [{}, {"hold": True}])
def test_an_ended_array_is_requeued_whole(
    ctl: Controller, client: TestClient, body: dict[str, Any]
) -> None:
    """As Slurm requeues a finished batch job: every ended member waits again (held with
    ``hold``); an unknown id is still 404."""
    made = client.post("/v1/jobs", json={"groups": [WHOLE], "array": {"start": 0, "stop": 1}})
    parent, members = made.json()["id"], made.json()["ids"]
    for _ in members:  # one at a time: each takes the whole node
        (task,) = launched(ctl).values()
        exited(ctl, task)
    answer = client.post(f"/v1/jobs/{parent}/requeue", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["requeued"] == members
    assert all(client.get(f"/v1/jobs/{m}").json()["state"] == "Pending" for m in members)
    unknown = client.post(f"/v1/jobs/{int(parent) + 10}/requeue", json=body)
    assert unknown.status_code == 404


def test_an_ended_array_of_another_tenant_stays_hidden(ctl: Controller) -> None:
    people = People(ctl)
    made = people.submit("root", tenant="other")
    (task,) = launched(ctl).values()
    exited(ctl, task)
    assert people.post("alice", f"/v1/jobs/{made['id']}/release").status_code == 404
    array = people.submit("root", tenant="other", array={"start": 0, "stop": 0})
    (task,) = launched(ctl).values()
    exited(ctl, task)
    assert people.post("alice", f"/v1/jobs/{array['id']}/release").status_code == 404
    assert people.post("root", f"/v1/jobs/{array['id']}/release").status_code == 409


# ------------------------------------------------------------------ drains and the store


def failing(*_: Any) -> None:
    raise OperationalError("UPDATE nodes", {}, Exception("database is locked"))


def test_a_drain_the_store_refuses_changes_nothing(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctl.persist.store, "set_node_drain", failing)
    answer = client.post("/v1/nodes/n0/drain", json={"reason": "fan"})
    assert answer.status_code == 503, answer.text
    assert answer.json()["detail"] == (
        "the store is unavailable: the drain of node 'n0' was not recorded and nothing "
        "changed; try again"
    )
    assert ctl.nodes["n0"].drain is None and ctl.nodes["n0"].state is NodeState.UP
    monkeypatch.undo()
    assert ctl.persist.store.get_node("n0").drain_reason is None  # type: ignore[union-attr]
    job = client.post("/v1/jobs", json={"groups": [WHOLE]}).json()["id"]
    assert job in launched(ctl)  # the node still takes work


def test_an_undrain_the_store_refuses_changes_nothing(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.post("/v1/nodes/n0/drain", json={"reason": "fan"}).status_code == 200
    monkeypatch.setattr(ctl.persist.store, "set_node_drain", failing)
    answer = client.post("/v1/nodes/n0/undrain")
    assert answer.status_code == 503 and "undrain of node 'n0' was not recorded" in answer.text
    assert ctl.nodes["n0"].drain == "fan" and ctl.nodes["n0"].state is NodeState.DRAINING
    monkeypatch.undo()
    assert ctl.persist.store.get_node("n0").drain_reason == "fan"  # type: ignore[union-attr]


# ------------------------------------------------------------------ nodes not back yet


def restarted(path: Path, clock: Clock) -> Controller:
    """A new controller on the store in ``path``, before any agent registers again."""
    persist = Persistence(f"sqlite:///{path / 'db.sqlite'}")
    return Controller(persist, LogStore(path / "logs"), clock=clock)


def test_a_node_not_back_after_a_restart_can_be_drained(tmp_path: Path, clock: Clock) -> None:
    one_node_controller(tmp_path, clock).persist.close()
    ctl = restarted(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        assert "n0" in ctl.expected_nodes and "n0" not in ctl.nodes
        answer = client.post("/v1/nodes/n0/drain", json={"reason": "  new  PSU "})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"node": "n0", "state": "down", "drain_reason": "new PSU"}
        assert ctl.persist.store.get_node("n0").drain_reason == "new PSU"  # type: ignore[union-attr]
        ctl.register(NodeInventory.model_validate(ONE_NODE))  # its agent comes back
        assert ctl.nodes["n0"].state is NodeState.DRAINING
        ctl.run_cycle()  # the core takes the node
        (shown,) = client.get("/v1/nodes").json()
        assert (shown["state"], shown["drain_reason"]) == ("drained", "new PSU")
        job = client.post("/v1/jobs", json={"groups": [WHOLE]}).json()["id"]
        assert launched(ctl) == {}
        assert client.post("/v1/nodes/n0/undrain").json()["state"] == "up"
        assert job in launched(ctl)
    finally:
        ctl.persist.close()


def test_a_node_not_back_after_a_restart_can_be_undrained(tmp_path: Path, clock: Clock) -> None:
    first = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(first), raise_server_exceptions=False)
    assert client.post("/v1/nodes/n0/drain", json={"reason": "BIOS"}).status_code == 200
    first.persist.close()
    ctl = restarted(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        answer = client.post("/v1/nodes/n0/undrain")
        assert answer.json() == {"node": "n0", "state": "down", "drain_reason": None}
        assert ctl.persist.store.get_node("n0").drain_reason is None  # type: ignore[union-attr]
        ctl.register(NodeInventory.model_validate(ONE_NODE))
        assert ctl.nodes["n0"].state is NodeState.UP
    finally:
        ctl.persist.close()


@pytest.mark.parametrize("action", ["drain", "undrain"])
@pytest.mark.parametrize("name", ["nope", "slurm:c9"])
def test_a_name_the_store_does_not_know_stays_404(
    tmp_path: Path, clock: Clock, action: str, name: str
) -> None:
    one_node_controller(tmp_path, clock).persist.close()
    ctl = restarted(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        body = {"reason": "x"} if action == "drain" else None
        answer = client.post(f"/v1/nodes/{name}/{action}", json=body)
        assert answer.status_code == 404 and f"no node {name!r}" in answer.text
    finally:
        ctl.persist.close()
