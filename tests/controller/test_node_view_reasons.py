"""``GET /v1/nodes``' reasons (what ``fusesched sinfo -R`` shows): when and by whom a node was
drained, why a node is not up and since when, and whether its heartbeats arrive."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.controller.auth import Authenticator
from fusesched.controller.service import Controller
from fusesched.portal.views import NodeReasons
from fusesched.store import TokenKind
from fusesched.store.records import EventRow


def node(client: TestClient, headers: dict[str, str] | None = None) -> dict[str, Any]:
    answer = client.get("/v1/nodes", headers=headers or {})
    assert answer.status_code == 200, answer.text
    (found,) = answer.json()
    return dict(found)


def test_a_drain_says_who_set_it_and_when(ctl: Controller, clock: Clock) -> None:
    auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
    token, _ = auth.issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")
    client = TestClient(create_app(ctl, auth), raise_server_exceptions=False)
    headers = {"Authorization": f"Bearer {token}"}
    fresh = node(client, headers)
    assert (fresh["reason"], fresh["drained_at"], fresh["drained_by"]) == (None, None, None)
    assert fresh["responding"] is True
    drained_at = clock.now
    answer = client.post("/v1/nodes/n0/drain", json={"reason": "fan"}, headers=headers)
    assert answer.status_code == 200, answer.text
    clock.now += 5
    seen = node(client, headers)
    assert (seen["drain_reason"], seen["drained_by"], seen["drained_at"]) == (
        "fan",
        "root",
        drained_at,
    )
    assert (seen["reason"], seen["since"]) == ("drained: fan", drained_at)
    answer = client.post("/v1/nodes/n0/undrain", headers=headers)
    assert answer.status_code == 200, answer.text
    back = node(client, headers)
    assert (back["state"], back["drained_at"], back["drained_by"], back["reason"]) == (
        "up",
        None,
        None,
        None,
    )


def test_without_authentication_a_drain_has_a_time_but_no_user(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    answer = client.post("/v1/nodes/n0/drain", json={"reason": "disk"})
    assert answer.status_code == 200, answer.text
    seen = node(client)
    assert (seen["drained_at"], seen["drained_by"]) == (clock.now, None)


def test_a_silent_node_is_not_responding_then_down_with_its_reason(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now += ctl.config.node_timeout_s + 1
    late = node(client)
    assert (late["state"], late["responding"]) == ("up", False)
    ctl._check_nodes()
    ctl.persist.flush()
    down = node(client)
    assert (down["state"], down["responding"], down["reason"]) == ("down", False, "no heartbeat")
    assert down["since"] == clock.now


def test_a_refresh_goes_on_from_the_newest_event_not_the_newest_node_event(
    ctl: Controller,
) -> None:
    """Each ``GET /v1/nodes`` refreshes the reasons: after a stretch of job events only, the
    next refresh must start after them, not read them all again (with node changes rare and
    jobs many, that was every event since the last node change, on every request)."""
    store = ctl.persist.store
    reasons = NodeReasons()
    store.add_events([EventRow(1.0, "NodeStateChanged", node="n0", data={"state": "down"})])
    store.add_events(EventRow(2.0, "JobStarted", job_id="j1") for _ in range(50))
    reasons.refresh(store)
    newest = store.events_for_job("j1")[-1].id
    assert reasons.last_id == newest
    store.add_events([EventRow(3.0, "NodeStateChanged", node="n0", data={"state": "up"})])
    assert reasons.refresh(store)["n0"][0] == "up"  # (what comes after is still read)
