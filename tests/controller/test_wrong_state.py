"""Requests that make no sense in the current state get a 4xx with a reason, never a 500, and
change nothing stored: cancelling finished or unknown jobs, a node registering again with
another size, a dependency on a job that does not exist, a helper launched on an external
pool's node."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.service import Controller

NODE = {"name": "n0", "resources": {"cpu": "4", "memory": "4Gi"}, "cpu_ids": [0, 1, 2, 3]}
GROUP = {"resources": {"cpu": "1"}, "argv": ["true"]}


def submit(client: TestClient, **fields: Any) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={"groups": [GROUP], **fields})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def run_to_end(ctl: Controller, codes: dict[str, int]) -> None:
    """Start the queued jobs and have each job in ``codes`` exit with its code."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    tasks = {launch.job_id: launch.task_id for launch in reply.launch}
    reports = [
        TaskReport(task_id=tasks[job], state=TaskState.EXITED, exit_code=code)
        for job, code in codes.items()
    ]
    running = [task for job, task in tasks.items() if job not in codes]
    ctl.heartbeat(Heartbeat(node="n0", reports=reports, running=running), wait_s=0)
    ctl.run_cycle()


def test_cancelling_finished_unknown_or_misnamed_jobs_changes_nothing(
    client: TestClient, ctl: Controller
) -> None:
    ok, bad = submit(client)["id"], submit(client)["id"]
    array = submit(client, array={"start": 0, "stop": 1})
    run_to_end(ctl, {ok: 0, bad: 3})
    before = {j: client.get(f"/v1/jobs/{j}").json() for j in (ok, bad)}
    assert [before[ok]["state"], before[bad]["state"]] == ["Completed", "Failed"]
    for job in (ok, bad, ok):
        answer = client.post(f"/v1/jobs/{job}/cancel")
        assert (answer.status_code, answer.json()) == (202, {"cancelled": []})
    for job in ("999", "abc", f"{array['id']}_7", f"{array['id']}_", "_1", "x" * 5000):
        answer = client.post(f"/v1/jobs/{job}/cancel")
        assert answer.status_code == 404 and "no job" in answer.text, answer.text
    assert {j: client.get(f"/v1/jobs/{j}").json() for j in (ok, bad)} == before
    assert client.post(f"/v1/jobs/{array['id']}/cancel").json() == {"cancelled": array["ids"]}
    assert client.post(f"/v1/jobs/{array['ids'][0]}/cancel").status_code == 202  # twice
    ctl.run_cycle()
    running = [f"{j}.main.0" for j in array["ids"]]
    kills = ctl.heartbeat(Heartbeat(node="n0", running=running), wait_s=0).kill
    assert sorted({k.task_id for k in kills}) == running  # a second kill: the agent's no-op


def test_a_node_registering_again_with_another_size_is_refused_and_kept(
    client: TestClient, ctl: Controller
) -> None:
    before = client.get("/v1/nodes").json()
    for change in (
        {"resources": {"cpu": "1", "memory": "1Gi"}},
        {"cpu_ids": [0, 1]},
        {"labels": {"zone": "b"}},
    ):
        answer = client.post("/v1/agents/register", json=NODE | change)
        assert answer.status_code == 409, answer.text
        assert "until the controller restarts" in answer.text
    assert client.get("/v1/nodes").json() == before
    assert ctl.nodes["n0"].inventory.resources == NODE["resources"]
    stored = ctl.persist.store.get_node("n0")
    assert stored is not None and stored.capacity == NODE["resources"]
    # the same node with a new address, or as it was, registers again
    again = client.post("/v1/agents/register", json=NODE | {"address": "10.0.0.7"})
    assert again.status_code == 201, again.text
    assert client.get("/v1/nodes").json()[0]["address"] == "10.0.0.7"


def test_a_dependency_on_an_array_job_waits_on_its_members(client: TestClient) -> None:
    """Once refused (members had to be named one by one); now the whole array, as Slurm.
    A member of an array that does not exist is still refused, and nothing is stored."""
    array = submit(client, array={"start": 0, "stop": 1})
    whole = {"kind": "afterok", "job_id": array["id"]}
    assert client.post("/v1/jobs", json={"groups": [GROUP], "dependencies": [whole]}).is_success
    member = {"kind": "afterok", "job_id": array["ids"][0]}
    assert client.post("/v1/jobs", json={"groups": [GROUP], "dependencies": [member]}).is_success
    missing = {"kind": "afterok", "job_id": "77_0"}
    answer = client.post("/v1/jobs", json={"groups": [GROUP], "dependencies": [missing]})
    assert answer.status_code == 400
    assert answer.json() == {"detail": "dependency on unknown job '77_0'"}
    assert len(client.get("/v1/jobs").json()) == 4


def test_a_helper_on_an_external_pools_node_is_refused_and_adds_no_task(
    client: TestClient, ctl: Controller
) -> None:
    job = submit(client)["id"]
    ctl.run_cycle()
    ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    live = ctl.jobs[job]
    live.nodes, live.pool = ("slurm:n1",), "slurm"  # as a job an external pool runs
    tasks = dict(live.tasks)
    answer = client.post(f"/v1/jobs/{job}/remote", json={"node": "slurm:n1", "argv": ["orted"]})
    assert answer.status_code == 400, answer.text
    assert "not run by an agent" in answer.text
    assert live.tasks == tasks and live.remote_count == 0
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and [t.task_id for t in stored.tasks] == list(tasks)


def test_priority_without_tenancy_says_how_to_have_one(ctl: Controller, client: TestClient) -> None:
    job = submit(client)["id"]
    ctl.run_cycle()
    answer = client.get(f"/v1/jobs/{job}/priority")
    assert answer.status_code == 409
    assert "start the controller with --tenancy FILE" in answer.json()["detail"]
