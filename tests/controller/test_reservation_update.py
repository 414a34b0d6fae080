"""Changing a reservation through the API (``PATCH /v1/reservations/{name}``,
controller/reservations.py): the core takes the change first and it is stored only then (a
refusal changes nothing, in the store or the core); the checks are a creation's, with clear
4xx; the reservation's waiting jobs follow the change; a restart keeps it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller.service import Controller
from fusesched.model.reservation import when

from .conftest import one_node_controller

T0 = 1_800_000_000.0
JOB: dict[str, Any] = {
    "walltime_s": 100,
    "user": "alice",
    "reservation": "p",
    "groups": [{"resources": {"cpu": "4"}, "argv": ["true"]}],
}


def launched(ctl: Controller) -> list[str]:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    return [launch.job_id for launch in reply.launch]


def held(client: TestClient) -> dict[str, Any]:
    [found] = client.get("/v1/reservations").json()["reservations"]
    return dict(found)


def make(client: TestClient, **extra: Any) -> None:
    body = {"name": "p", "nodes": ["n0"], "start": T0 + 1000, "end": T0 + 2000, **extra}
    assert client.post("/v1/reservations", json=body).status_code == 201


def test_a_later_start_is_what_the_job_waits_for(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    make(client, users=["alice"])
    job = client.post("/v1/jobs", json=JOB).json()["id"]
    answer = client.patch("/v1/reservations/p", json={"start": T0 + 3000, "duration_s": 600})
    assert answer.status_code == 200, answer.text
    changed = answer.json()["reservation"]
    assert (changed["start"], changed["end"]) == (T0 + 3000, T0 + 3600)
    assert changed["created_at"] == T0 and answer.json()["warnings"] == []
    assert held(client)["start"] == T0 + 3000
    bookings = ctl.core.bookings
    assert bookings is not None and bookings.by_name["p"].end == T0 + 3600
    said = f"reservation p starts at {when(T0 + 3000)}"
    ctl.run_cycle()  # (the new reason is written with the cycle's flush)
    assert client.get(f"/v1/jobs/{job}").json()["reason"] == said
    clock.now = T0 + 1000
    assert launched(ctl) == []
    clock.now = T0 + 3000
    assert launched(ctl) == [job]


def test_an_end_alone_and_people_alone_are_kept_apart(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    make(client, users=["alice"], tenants=["physics"])
    assert client.patch("/v1/reservations/p", json={"end": T0 + 5000}).status_code == 200
    assert held(client)["start"] == T0 + 1000 and held(client)["end"] == T0 + 5000
    assert client.patch("/v1/reservations/p", json={"users": []}).status_code == 200
    assert (held(client)["users"], held(client)["tenants"]) == ([], ["physics"])
    job = client.post("/v1/jobs", json=JOB)
    assert job.status_code == 400 and "may not use reservation p" in job.text
    assert client.patch("/v1/reservations/p", json={"tenants": []}).status_code == 200
    assert held(client)["maintenance"] is True


def test_a_waiting_job_whose_user_is_dropped_is_rejected_with_the_reason(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    make(client, users=["alice", "bob"])
    job = client.post("/v1/jobs", json=JOB).json()["id"]
    ctl.run_cycle()
    assert client.patch("/v1/reservations/p", json={"users": ["bob"]}).status_code == 200
    ctl.run_cycle()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Cancelled"
    assert shown["reason"] == (
        "reservation p changed: user 'alice' (tenant 'default') may not use reservation p"
    )


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({}, 400, "nothing to change"),
        ({"end": T0 + 3000, "duration_s": 10}, 400, "an end or a duration, not both"),
        ({"end": T0 + 500}, 400, "must come after the start"),
        ({"start": T0 - 500, "end": T0 - 100}, 400, "its new end"),
        ({"nodes": ["n9"]}, 400, "unknown node(s): n9"),
        ({"nodes": ["n0", "n0"]}, 400, "a node is listed twice"),
        ({"nodes": []}, 422, "at least 1 item"),
        ({"users": [""]}, 422, "at least 1 character"),
        ({"start": 3e11}, 422, "less than or equal to 253402300799"),
        ({"duration_s": 0}, 422, "greater than 0"),
        ({"duration_s": 2.52e11}, 400, "before the end of year 9999"),
        ({"name": "q"}, 422, "Extra inputs are not permitted"),
    ],
)
def test_bad_changes_are_clear_refusals_and_change_nothing(
    ctl: Controller, client: TestClient, clock: Clock, body: dict[str, Any], status: int, says: str
) -> None:
    clock.now = T0
    make(client)
    answer = client.patch("/v1/reservations/p", json=body)
    assert answer.status_code == status, answer.text
    assert says in answer.text
    assert (held(client)["start"], held(client)["end"]) == (T0 + 1000, T0 + 2000)
    bookings = ctl.core.bookings
    assert bookings is not None and bookings.by_name["p"].end == T0 + 2000


def test_unknown_ones_are_404_and_overlaps_409(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = T0
    ctl.register(NodeInventory(name="n1", resources={"cpu": "4"}))
    answer = client.patch("/v1/reservations/nope", json={"end": T0 + 10})
    assert answer.status_code == 404 and "no reservation 'nope'" in answer.text
    make(client)
    other = {"name": "q", "nodes": ["n1"], "start": T0 + 1500, "end": T0 + 2500}
    assert client.post("/v1/reservations", json=other).status_code == 201
    answer = client.patch("/v1/reservations/p", json={"nodes": ["n0", "n1"]})
    assert answer.status_code == 409, answer.text
    assert "n1 already reserved by q" in answer.json()["detail"]
    assert held_nodes(client) == {"p": ["n0"], "q": ["n1"]}
    assert client.patch("/v1/reservations/p", json={"nodes": ["n1"], "end": T0 + 1500}).is_success
    assert held_nodes(client) == {"p": ["n1"], "q": ["n1"]}  # back to back: fine
    clock.now = T0 + 1500  # p has ended
    assert client.patch("/v1/reservations/p", json={"end": T0 + 9000}).status_code == 404


def held_nodes(client: TestClient) -> dict[str, list[str]]:
    return {r["name"]: r["nodes"] for r in client.get("/v1/reservations").json()["reservations"]}


def test_a_change_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    clock.now = T0
    make(client)
    assert client.patch("/v1/reservations/p", json={"start": T0 + 10}).status_code == 200
    ctl.persist.close()
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    assert held(client)["start"] == T0 + 10
    assert ctl.core.bookings is not None and ctl.core.bookings.by_name["p"].start == T0 + 10
    ctl.persist.close()


# ============================================================================ found in review


def _store_trigger(ctl: Controller, action: str) -> None:
    """A real store that will not take the change: an SQLite trigger on the table."""
    with ctl.persist.store._write() as conn:
        conn.exec_driver_sql(
            f"CREATE TRIGGER refuse BEFORE UPDATE ON reservations BEGIN SELECT RAISE({action}); END"
        )


def test_a_change_the_store_fails_to_write_leaves_the_core_as_stored(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """The core had the new window while the store kept the old one (a restart brought
    the old one back): the core now goes back to what is stored."""
    clock.now = T0
    make(client, users=["alice"])
    _store_trigger(ctl, "ABORT, 'disk full'")
    answer = client.patch("/v1/reservations/p", json={"start": T0 + 10, "end": T0 + 5000})
    assert answer.status_code == 500
    assert (held(client)["start"], held(client)["end"]) == (T0 + 1000, T0 + 2000)
    bookings = ctl.core.bookings
    assert bookings is not None
    assert (bookings.by_name["p"].start, bookings.by_name["p"].end) == (T0 + 1000, T0 + 2000)


def test_jobs_rejected_by_a_change_that_could_not_be_stored_are_rejected_here_too(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """The row vanished (another controller deleted it): the core forgets the reservation
    and rejects its waiting jobs, and the controller applies those rejections (they were
    dropped: the job stayed waiting here while the core had cancelled it)."""
    clock.now = T0
    make(client, users=["alice"])
    job = client.post("/v1/jobs", json=JOB).json()["id"]
    ctl.run_cycle()
    _store_trigger(ctl, "IGNORE")  # (the UPDATE touches no row)
    answer = client.patch("/v1/reservations/p", json={"end": T0 + 5000})
    assert answer.status_code == 404
    assert ctl.core.bookings is None
    assert job not in ctl.jobs  # (settled as a cycle settles a rejection)
    ctl.run_cycle()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Cancelled"
    assert shown["reason"] == "reservation p could not be stored"


def test_a_reservation_the_store_fails_to_create_is_not_enforced(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    """The core took the new reservation, then the store failed to write the row (here an
    operational error, as a full disk or a lost database gives): the core forgets it again,
    so nothing is enforced that a restart would not bring back."""
    clock.now = T0
    with ctl.persist.store._write() as conn:  # (the trigger fails as the INSERT runs)
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON reservations "
            "BEGIN SELECT no_such_function(); END"
        )
    answer = client.post(
        "/v1/reservations",
        json={"name": "p", "nodes": ["n0"], "start": T0 + 1000, "end": T0 + 2000},
    )
    assert answer.status_code == 500
    assert ctl.core.bookings is None or "p" not in ctl.core.bookings.by_name
    assert client.get("/v1/reservations").json() == {"reservations": []}
