"""Expected start times in the live controller (controller/forecasts.py, GET /v1/starts)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.controller import forecasts
from fusesched.controller.power import PowerConfig, PowerManager, _Node
from fusesched.controller.service import Controller
from fusesched.power.saving import PowerState


def job(cpu: int, limit_s: int, **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": str(cpu)}, "argv": ["sleep", "1000"]}
    return {"groups": [group], "walltime_s": limit_s, **extra}


def submit(client: TestClient, body: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_waiting_jobs_get_their_start_in_order(ctl: Controller, client: TestClient) -> None:
    first = submit(client, job(4, 100, user="ann"))
    ctl.run_cycle()  # first runs from 1000 (the clock) to its limit, 1100
    second = submit(client, job(4, 60, user="bob", queue="default"))
    third = submit(client, job(2, 30, user="ann"))  # (not yet handed to the core: no cycle)
    held = submit(client, job(1, 10, user="ann", hold=True))
    answer = client.get("/v1/starts").json()
    assert answer["at"] == 1000.0 and answer["complete"]
    got = [(j["id"], j["expected_start"], j["nodes"], j["phase"]) for j in answer["jobs"]]
    assert got == [
        (second, 1100.0, ["n0"], "queued"),
        (third, 1160.0, ["n0"], "queued"),
    ]
    assert held not in {j["id"] for j in answer["jobs"]}
    assert first not in {j["id"] for j in answer["jobs"]}  # running
    only_bob = client.get("/v1/starts", params={"user": "bob"}).json()["jobs"]
    assert [j["id"] for j in only_bob] == [second]
    assert client.get("/v1/starts", params={"queue": "nope"}).json()["jobs"] == []


def test_a_projection_is_reused_until_the_scheduler_moves_on(
    ctl: Controller, client: TestClient, clock: Clock, monkeypatch: Any
) -> None:
    submit(client, job(4, 100))
    ctl.run_cycle()
    submit(client, job(4, 60))
    made = []
    project = forecasts._project
    monkeypatch.setattr(forecasts, "_project", lambda c: made.append(1) or project(c))
    client.get("/v1/starts")
    clock.now += 5
    assert client.get("/v1/starts").json()["at"] == 1000.0  # no cycle since: the same
    assert len(made) == 1
    ctl.run_cycle()
    monkeypatch.setattr(forecasts, "MAX_AGE_S", 0.0)
    assert client.get("/v1/starts").json()["at"] == 1005.0
    assert len(made) == 2


def test_jobs_that_started_or_ended_since_are_left_out(ctl: Controller, client: TestClient) -> None:
    first = submit(client, job(4, 100))
    ctl.run_cycle()
    second = submit(client, job(4, 60))
    ctl.run_cycle()
    assert [j["id"] for j in client.get("/v1/starts").json()["jobs"]] == [second]
    assert client.post(f"/v1/jobs/{second}/cancel", json={}).status_code == 202
    assert client.post(f"/v1/jobs/{first}/cancel", json={}).status_code == 202
    ctl.run_cycle()
    assert client.get("/v1/starts").json()["jobs"] == []  # (the cached projection, filtered)


def test_sleeping_nodes_count_once_they_would_be_awake(ctl: Controller, clock: Clock) -> None:
    ctl.power = PowerManager(PowerConfig(("true",), ("true",), wake_latency_s=120.0))
    ctl.power.nodes["n0"] = _Node(PowerState.SUSPENDED, 900.0)
    assert forecasts._waking(ctl, clock.now) == {"n0": 120.0}
    ctl.power.nodes["n0"] = _Node(PowerState.RESUMING, 950.0)
    assert forecasts._waking(ctl, clock.now) == {"n0": 70.0}
    ctl.nodes["n0"].drain = "maintenance"  # a drained node is not woken for work
    assert forecasts._waking(ctl, clock.now) == {}


def test_the_portal_shows_a_waiting_jobs_expected_start(
    ctl: Controller, client: TestClient
) -> None:
    first = submit(client, job(4, 100))
    ctl.run_cycle()
    second = submit(client, job(4, 60))
    held = submit(client, job(4, 60, hold=True))
    ctl.run_cycle()
    waiting = client.get(f"/v1/portal/jobs/{second}").json()
    assert (waiting["expected_start"], waiting["expected_nodes"]) == (1100.0, ["n0"])
    for other in (first, held):  # running; held
        detail = client.get(f"/v1/portal/jobs/{other}").json()
        assert (detail["expected_start"], detail["expected_nodes"]) == (None, [])


def test_a_job_is_tried_without_being_submitted(ctl: Controller, client: TestClient) -> None:
    first = submit(client, job(4, 100))
    ctl.run_cycle()
    queued_before = set(ctl.jobs)
    answer = client.post("/v1/starts/test", json=[job(2, 30, name="try"), job(64, 10)])
    assert answer.status_code == 400, answer.text  # as a submission: no node has 64 CPUs
    assert "64" in answer.json()["detail"] or "cpu" in answer.json()["detail"]
    answer = client.post("/v1/starts/test", json=[job(2, 30, name="try")])
    assert answer.status_code == 200, answer.text
    (tried,) = answer.json()["jobs"]
    assert tried["name"] == "try" and tried["refused"] is None
    assert tried["members"] == [{"array_index": None, "expected_start": 1100.0, "nodes": ["n0"]}]
    array = {**job(4, 30), "array": {"start": 0, "stop": 1}}
    (members,) = [j["members"] for j in client.post("/v1/starts/test", json=[array]).json()["jobs"]]
    assert [(m["array_index"], m["expected_start"]) for m in members] == [(0, 1100.0), (1, 1130.0)]
    assert set(ctl.jobs) == queued_before and first in ctl.jobs  # nothing was submitted
    ctl.run_cycle()
    assert len(ctl.core.jobs) == 1
    assert client.post("/v1/starts/test", json=[]).status_code == 400


def test_while_a_projection_is_computed_others_get_the_last_one(
    ctl: Controller, client: TestClient, clock: Clock, monkeypatch: Any
) -> None:
    submit(client, job(4, 100))
    ctl.run_cycle()
    submit(client, job(4, 60))
    first = client.get("/v1/starts").json()
    ctl.run_cycle()
    clock.now += 5
    monkeypatch.setattr(forecasts, "MAX_AGE_S", 0.0)  # stale: a new one is due
    assert ctl.forecasts._lock.acquire()  # as if another request were computing it
    try:
        assert client.get("/v1/starts").json() == first  # answered at once, not blocked
    finally:
        ctl.forecasts._lock.release()
    assert client.get("/v1/starts").json()["at"] == 1005.0


def test_a_job_submitted_held_is_tried_as_held(ctl: Controller, client: TestClient) -> None:
    answer = client.post("/v1/starts/test", json=[job(1, 30, hold=True), job(1, 30)])
    held, free = answer.json()["jobs"]
    assert (held["held"], held["members"]) == (True, [])
    assert (free["held"], free["members"][0]["expected_start"]) == (False, 1000.0)


def test_too_many_trials_at_once_are_turned_away(
    ctl: Controller, client: TestClient, monkeypatch: Any
) -> None:
    monkeypatch.setattr(forecasts, "TRIAL_WAIT_S", 0.05)
    taken = [ctl.forecasts.trials.acquire(blocking=False) for _ in range(forecasts.MAX_TRIALS)]
    assert all(taken)  # as many trials as are let through run now
    answer = client.post("/v1/starts/test", json=[job(2, 30)])
    assert answer.status_code == 429, answer.text
    assert "try again" in answer.json()["detail"] and answer.headers["Retry-After"]
    ctl.forecasts.trials.release()  # one ends: the next is computed
    assert client.post("/v1/starts/test", json=[job(2, 30)]).status_code == 200
    assert ctl.forecasts.trials.acquire(blocking=False)  # and gave its turn back
