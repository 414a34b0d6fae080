"""What a first-time user met following docs/LIVE.md and docs/SUBMIT.md on a live cluster:
``show``/``cancel`` of the id ``submit`` printed for an array answered only "no job"; a refused
file of several jobs did not say which job was refused; messages said "only 1 node exist" and
"a agent credential"; the first start of ``fusesched controller`` printed where the admin token
went twice."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.auth import Authenticator
from fusesched.controller.server import ControllerServer
from fusesched.controller.service import Controller

NODE = {"name": "n0", "resources": {"cpu": "4", "memory": "4Gi"}, "cpu_ids": [0, 1, 2, 3]}
GROUP = {"resources": {"cpu": "1"}, "argv": ["true"]}


def run_all(ctl: Controller) -> None:
    """Start every queued job and have each exit 0."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    reports = [
        TaskReport(task_id=launch.task_id, state=TaskState.EXITED, exit_code=0)
        for launch in reply.launch
    ]
    ctl.heartbeat(Heartbeat(node="n0", reports=reports, running=[]), wait_s=0)
    ctl.run_cycle()


def files(*texts: str) -> dict[str, Any]:
    return {"files": [{"name": f"f{k}.yaml", "text": t} for k, t in enumerate(texts)]}


def test_an_arrays_own_id_names_its_members(client: TestClient, ctl: Controller) -> None:
    body = client.post(
        "/v1/submissions", json=files("resources: {cpu: 1}\ncommand: 'true'\narray: 0-4:2\n")
    )
    assert body.status_code == 201, body.text
    (array,) = body.json()["ids"]  # what `fusesched submit` prints
    for path in (f"/v1/jobs/{array}", f"/v1/jobs/{array}/logs"):
        answer = client.get(path)
        assert answer.status_code == 404
        assert f"{array} is an array" in answer.json()["detail"]
        assert f"{array}_0" in answer.json()["detail"]
    run_all(ctl)
    assert client.get(f"/v1/jobs/{array}_2").json()["state"] == "Completed"
    # once every member has ended, cancelling the array is cancelling a finished job
    answer = client.post(f"/v1/jobs/{array}/cancel")
    assert (answer.status_code, answer.json()) == (202, {"cancelled": []})
    # ids that are no array still get the plain answer
    for job in ("999", f"{int(array) + 1}", "0" + array):
        answer = client.get(f"/v1/jobs/{job}")
        assert (answer.status_code, answer.json()) == (404, {"detail": f"no job {job!r}"})
        assert client.post(f"/v1/jobs/{job}/cancel").status_code == 404


def test_a_refused_job_of_several_is_named(client: TestClient) -> None:
    good = "name: first\nresources: {cpu: 1}\ncommand: 'true'\n"
    bad = good.replace("first", "second") + "dependencies: [afterok:41]\n"
    answer = client.post("/v1/submissions", json=files(good, bad))
    assert answer.status_code == 400
    assert answer.json()["detail"] == "job 2 of 2 ('second'): dependency on unknown job '41'"
    assert client.get("/v1/jobs").json() == []  # all or none
    alone = client.post("/v1/submissions", json=files(bad))
    assert alone.json()["detail"] == "dependency on unknown job '41'"  # one job: as before


def test_one_node_is_singular(client: TestClient) -> None:
    answer = client.post(
        "/v1/jobs",
        json={"groups": [GROUP | {"replicas": 2}], "placement": {"max_tasks_per_node": 1}},
    )
    assert answer.status_code == 400
    assert answer.json()["detail"].endswith("they need 2 nodes, but only 1 node exists")
    groups = [GROUP | {"name": "a", "replicas": 3}, GROUP | {"name": "b", "replicas": 2}]
    answer = client.post("/v1/jobs", json={"groups": groups})
    assert answer.status_code == 400
    assert "but the 1 node has 4" in answer.json()["detail"]


def test_machine_credentials_are_named_with_the_right_article(ctl: Controller) -> None:
    auth = Authenticator(ctl.persist.store, enabled=True)
    client = TestClient(create_app(ctl, auth), raise_server_exceptions=False)
    agent = auth.issue_agent("n0")
    answer = client.get("/v1/jobs", headers={"Authorization": f"Bearer {agent}"})
    assert answer.status_code == 403
    assert answer.json()["detail"] == "an agent credential cannot use this endpoint"


def test_the_first_admin_token_is_announced_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The CLI prints where the token went; the log said it again at warning level."""
    with caplog.at_level(logging.INFO, logger="fusesched.controller"):
        server = ControllerServer(tmp_path, port=0, auth=True)
    try:
        assert server.admin_token_path is not None
        said = [r for r in caplog.records if "admin.token" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.INFO]
    finally:
        server.stop()
