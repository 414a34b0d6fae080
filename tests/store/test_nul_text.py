"""NUL characters never reach the store: PostgreSQL refuses them in text and JSONB columns
(a 500 at insert, after earlier jobs of a batch were stored), so the API refuses them first,
on both databases alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

GROUP = '{"resources": {"cpu": "1"}, "argv": ["true"]}'
JSON = {"content-type": "application/json"}


@pytest.fixture
def ctl(url: str, tmp_path: Path) -> Iterator[Controller]:
    persist = Persistence(url)
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=Clock())
    controller.register(NodeInventory(name="n0", resources={"cpu": "4", "memory": "4Gi"}))
    yield controller
    persist.close()


def test_a_nul_character_is_refused_before_the_store(ctl: Controller) -> None:
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    batch = f'[{{"groups": [{GROUP}], "name": "ok"}}, {{"groups": [{GROUP}], "user": "x\\u0000"}}]'
    assert client.post("/v1/jobs/batch", content=batch, headers=JSON).status_code == 422
    node = '{"name": "n1", "labels": {"a": "b\\u0000"}, "resources": {"cpu": "1"}}'
    assert client.post("/v1/agents/register", content=node, headers=JSON).status_code == 422
    for query in ("/v1/jobs/1%00", "/v1/jobs?user=%00", "/v1/usage?tenant=%00"):
        assert client.get(query).status_code == 422, query
    ctl.persist.flush()
    assert ctl.persist.store.list_jobs() == []
    assert [n.name for n in ctl.persist.store.list_nodes()] == ["n0"]
    answer = client.post("/v1/jobs", content=f'{{"groups": [{GROUP}]}}', headers=JSON)
    assert answer.status_code == 201, answer.text


def test_nul_in_an_agents_reports_is_kept_as_a_replacement_character(ctl: Controller) -> None:
    """Heartbeat texts come from the node (a task's failure reason, the health check's
    output): a NUL there is replaced, not refused, so the agent is never locked out."""
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    answer = client.post("/v1/jobs", content=f'{{"groups": [{GROUP}]}}', headers=JSON)
    assert answer.status_code == 201, answer.text
    job = answer.json()["id"]
    ctl.run_cycle()
    beat = client.post("/v1/agents/heartbeat?wait_s=0", json={"node": "n0", "running": []})
    assert beat.status_code == 200, beat.text
    task = beat.json()["launch"][0]["task_id"]
    report = {"task_id": task, "state": "failed-to-start", "reason": "no such image: a\u0000b"}
    health = {"healthy": False, "reasons": ["check said \u0000"], "warnings": ["w\u0000"]}
    body = {"node": "n0", "reports": [report], "running": [], "health": health}
    beat = client.post("/v1/agents/heartbeat?wait_s=0", json=body)
    assert beat.status_code == 200, beat.text
    ctl.run_cycle()
    ctl.persist.flush()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Failed"
    assert "no such image: a\ufffdb" in str(shown), shown
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and stored.job.state.value == "Failed"
    assert stored.job.reason == "no such image: a\ufffdb"
