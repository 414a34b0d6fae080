"""Advance reservations in the controller (controller/reservations.py): what the API answers
is what the core enforces — a 201 is a reservation the core holds, a refusal stores nothing;
times past year 9999, external pools' nodes, relabelled nodes and empty names are clear 4xx,
never a 500; reasons are the core's (UTC); a restart ends what ended meanwhile."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller.service import Controller
from fusesched.model.events import ReservationSet
from fusesched.model.reservation import Reservation, when

from .conftest import one_node_controller

JOB: dict[str, Any] = {
    "walltime_s": 1000,
    "groups": [{"resources": {"cpu": "4"}, "argv": ["true"]}],
}
T0 = 1_800_000_000.0  # (wall-clock times: reasons show dates)


def launched(ctl: Controller) -> list[str]:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    return [launch.job_id for launch in reply.launch]


def listed(client: TestClient) -> list[str]:
    return [r["name"] for r in client.get("/v1/reservations").json()["reservations"]]


def reserve(client: TestClient, name: str, start: float, end: float, **extra: Any) -> Any:
    body = {"name": name, "nodes": ["n0"], "start": start, "end": end, **extra}
    return client.post("/v1/reservations", json=body)


def test_recreating_it_at_its_end_before_any_cycle_is_enforced(
    ctl: Controller, client: TestClient, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    clock.now = T0
    assert reserve(client, "m", T0, T0 + 100).status_code == 201
    ctl.run_cycle()
    clock.now = T0 + 100  # m has ended; no cycle has run since
    assert reserve(client, "m", T0 + 100, T0 + 5000).status_code == 201
    assert ctl.core.bookings is not None and ctl.core.bookings.by_name["m"].end == T0 + 5000
    with caplog.at_level(logging.ERROR):
        ctl.run_cycle()
    assert not caplog.records
    client.post("/v1/jobs", json=JOB)
    clock.now = T0 + 200
    assert launched(ctl) == []  # n0 is in the maintenance window
    assert listed(client) == ["m"]


def test_one_the_core_refuses_is_a_409_and_nothing_is_stored(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    ctl.core.handle(ReservationSet(Reservation("other", ("n0",), T0, T0 + 100)), T0)
    answer = reserve(client, "m", T0 + 50, T0 + 500)
    assert answer.status_code == 409, answer.text
    assert "overlaps reservation 'other'" in answer.json()["detail"]
    assert listed(client) == []


def test_a_running_job_with_a_huge_time_limit_is_a_warning_not_a_500(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    job = client.post("/v1/jobs", json={**JOB, "walltime_s": 1e300}).json()["id"]
    assert launched(ctl) == [job]
    answer = reserve(client, "m", T0 + 1000, T0 + 2000)
    assert answer.status_code == 201, answer.text
    assert answer.json()["warnings"] == [
        f"job {job} runs on n0 past year 9999 (its time limit), into the reservation"
    ]
    assert listed(client) == ["m"]
    assert ctl.core.bookings is not None and "m" in ctl.core.bookings.by_name


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"start": 3e11, "end": 3e11 + 100}, 422, "less than or equal to 253402300799"),
        ({"start": 1e17, "end": 1e17 + 100}, 422, "less than or equal to 253402300799"),
        ({"start": 1e300, "end": 1e299}, 422, "less than or equal"),
        ({"start": 100, "end": 200}, 400, "has passed"),
        ({"users": [""]}, 422, "at least 1 character"),
        ({"tenants": [""]}, 422, "at least 1 character"),
        ({"nodes": [""]}, 422, "at least 1 character"),
        ({"nodes": ["n0", "n0"]}, 400, "a node is listed twice"),
    ],
)
def test_bad_bodies_are_clear_refusals(
    client: TestClient, clock: Clock, body: dict[str, Any], status: int, says: str
) -> None:
    clock.now = T0
    answer = client.post(
        "/v1/reservations",
        json={"name": "x", "nodes": ["n0"], "start": T0, "end": T0 + 10, **body},
    )
    assert answer.status_code == status, answer.text
    assert says in answer.text


def test_external_pools_and_relabelled_nodes_are_refused(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    pooled = NodeInventory(
        name="k8s:w1",
        address="",
        resources={"cpu": "4"},
        labels={"kubernetes.io/hostname": "w1", "fusesched.io/pool": "k8s"},
    )
    ctl.persist.node_registered(pooled, T0)  # (as an external pool's worker does)
    answer = client.post(
        "/v1/reservations",
        json={"name": "m", "nodes": ["k8s:w1"], "start": T0, "end": T0 + 10},
    )
    assert answer.status_code == 400
    assert "an external pool's node(s) cannot be reserved" in answer.json()["detail"]
    relabelled = NodeInventory(
        name="n1", resources={"cpu": "4"}, labels={"kubernetes.io/hostname": "x"}
    )
    ctl.register(relabelled)
    answer = client.post(
        "/v1/reservations", json={"name": "m", "nodes": ["n1"], "start": T0, "end": T0 + 10}
    )
    assert answer.status_code == 400
    assert "labelled kubernetes.io/hostname=x" in answer.json()["detail"]
    assert listed(client) == []


def test_reasons_are_the_cores_and_end_when_the_job_starts(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    reserve(client, "p", T0 + 1000, T0 + 2000, users=["alice"])
    job = client.post("/v1/jobs", json={**JOB, "user": "alice", "reservation": "p"}).json()["id"]
    said = f"reservation p starts at {when(T0 + 1000)}"
    assert client.get(f"/v1/jobs/{job}").json()["reason"] == said
    assert said.endswith(" UTC")
    ctl.run_cycle()
    assert ctl.core.jobs[job].steps[-1][3] == f"submitted; {said}"
    clock.now = T0 + 1000
    assert launched(ctl) == [job]
    shown = client.get(f"/v1/jobs/{job}").json()
    assert (shown["state"], shown["reason"]) == ("Running", "")


def test_a_restart_after_its_end_rejects_its_jobs_as_ended(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    clock.now = T0
    assert reserve(client, "p", T0 + 1000, T0 + 2000, users=["alice"]).status_code == 201
    job = client.post("/v1/jobs", json={**JOB, "user": "alice", "reservation": "p"}).json()["id"]
    ctl.run_cycle()
    ctl.persist.close()
    clock.now = T0 + 3000  # it ended while the controller was down
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    assert launched(ctl) == []
    shown = client.get(f"/v1/jobs/{job}").json()
    assert (shown["state"], shown["reason"]) == (
        "Cancelled",
        "reservation p ended before the job started",
    )
    assert listed(client) == [] and ctl.core.bookings is None
    ctl.persist.close()
