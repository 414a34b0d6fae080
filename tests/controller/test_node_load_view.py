"""A node's free memory and load averages, as its agent's full beats say them: kept per node,
shown by ``GET /v1/nodes`` (sinfo's ``%e %O``) and ``/metrics``; an older agent's beats, which
say nothing of them, are taken and leave them unknown (None)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from fusesched.controller.service import Controller

LOAD = {"free_memory_bytes": 3 << 30, "load1": 0.52, "load5": 1.25}


def beat(client: TestClient, **fields: Any) -> None:
    answer = client.post("/v1/agents/heartbeat?wait=0", json={"node": "n0", **fields})
    assert answer.status_code == 200, answer.text


def figures(client: TestClient) -> tuple[Any, Any, Any]:
    answer = client.get("/v1/nodes")
    assert answer.status_code == 200, answer.text
    (node,) = answer.json()
    return node["free_memory_bytes"], node["load1"], node["load5"]


def test_a_full_beat_sets_the_figures_and_a_quick_report_keeps_them(
    ctl: Controller, client: TestClient
) -> None:
    assert figures(client) == (None, None, None)  # (not said yet)
    beat(client, running=[], load=LOAD)
    assert figures(client) == (3 << 30, 0.52, 1.25)
    beat(client)  # a quick report says nothing of them: they stay
    assert figures(client) == (3 << 30, 0.52, 1.25)
    beat(client, running=[], load={**LOAD, "load5": 2.5})
    assert figures(client)[2] == 2.5


def test_an_older_agents_beat_is_taken_and_leaves_them_unknown(
    ctl: Controller, client: TestClient
) -> None:
    beat(client, running=[], load=LOAD)
    beat(client, running=[])  # an older agent (say, after a downgrade): no figures
    assert figures(client) == (None, None, None)


def test_bad_figures_are_refused(ctl: Controller, client: TestClient) -> None:
    huge = {"free_memory_bytes": 10**400}  # (a float cannot hold it: sinfo and /metrics failed)
    for bad in ({"free_memory_bytes": -1}, {"load1": -0.5}, {"load5": "high"}, huge):
        answer = client.post(
            "/v1/agents/heartbeat?wait=0", json={"node": "n0", "running": [], "load": bad}
        )
        assert answer.status_code == 422, (bad, answer.text)


def test_metrics_show_them(ctl: Controller, client: TestClient) -> None:
    text = client.get("/metrics").text
    assert "fusesched_node_load1{" not in text  # (nothing said: no series)
    beat(client, running=[], load=LOAD)
    text = client.get("/metrics").text
    assert 'fusesched_node_free_memory_bytes{node="n0",pool="local"} 3.221225472e+09' in text
    assert 'fusesched_node_load1{node="n0",pool="local"} 0.52' in text
    assert 'fusesched_node_load5{node="n0",pool="local"} 1.25' in text
