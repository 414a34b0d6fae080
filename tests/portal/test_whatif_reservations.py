"""The portal's what-if replays the controller's advance reservations (a real server on
loopback): a job submitted into one runs inside it, another keeps off its nodes, in both
runs of the comparison."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.store import TokenKind


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    server = ControllerServer(tmp_path, port=0, auth=True, auto_schedule=False)
    try:
        issue = server.authenticator.issue
        tokens = {
            "admin": issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")[0],
            "alice": issue(TokenKind.USER, user="alice", tenant="physics", role="user")[0],
            "bob": issue(TokenKind.USER, user="bob", tenant="biology", role="user")[0],
        }
        server.controller.register(
            NodeInventory(name="node-c", resources={"cpu": "8", "memory": "16Gi"})
        )
        server.start()  # serves; no scheduling loop (jobs wait where they are)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield http, {who: f"Bearer {token}" for who, token in tokens.items()}
    finally:
        server.stop()


def job(walltime: float, **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "8", "memory": "64Mi"}, "argv": ["sleep", "60"]}
    return {"walltime_s": walltime, "groups": [group], **extra}


def test_the_whatif_replays_the_reservations(site: tuple[httpx.Client, dict[str, str]]) -> None:
    http, auth = site
    now = time.time()
    body = {"name": "r", "nodes": ["node-c"], "start": now + 1000, "end": now + 2000}
    made = http.post(
        "/v1/reservations",
        json={**body, "users": ["alice"]},
        headers={"authorization": auth["admin"]},
    )
    assert made.status_code == 201, made.text
    for who, request in (("alice", job(120, reservation="r")), ("bob", job(5000))):
        answer = http.post("/v1/jobs", json=request, headers={"authorization": auth[who]})
        assert answer.status_code == 201, answer.text
    started = http.post(
        "/v1/portal/whatif", json={"scale": 2}, headers={"authorization": auth["admin"]}
    )
    assert started.status_code == 202, started.text
    run = started.json()
    assert "1 advance reservation(s) replayed" in run["notes"]
    deadline = time.monotonic() + 30
    while run["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
        run = http.get(f"/v1/portal/whatif/{run['id']}", headers={"authorization": auth["admin"]})
        run = run.json()
    assert run["state"] == "done", run["error"]
    base, alt = run["baseline_metrics"], run["alternative_metrics"]
    # alice's job waits for the window (about 1,000 s); bob's, which would run into it, for
    # its end (about 2,000 s): about 1,500 s on average
    assert (base["jobs"], base["rejected"]) == (2, 0)
    assert 1400 < base["avg_wait_s"] < 1600, base
    # on twice the nodes (node-c and a copy) bob's job starts at once on the copy; alice's
    # still waits for the window on node-c
    assert (alt["jobs"], alt["rejected"]) == (2, 0)
    assert 400 < alt["avg_wait_s"] < 600, alt
