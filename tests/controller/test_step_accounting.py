"""Job steps in the accounts: each task of a step keeps its step's id in the store (a step's
mpirun's daemons too, named by ``POST /v1/jobs/{id}/remote``'s ``step``, refused for a step
that does not run), and ``GET /v1/jobs?detail=true`` shows every job with its tasks (their
steps, groups and usage), whether a batch script started it, its ``seq`` (the next page's
``before``) and how many times it was requeued."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from tests.controller.test_step_route import beat

from fusesched.api.wire import Heartbeat, TaskReport, TaskState
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch


def step(client: TestClient, job: str, count: int) -> list[str]:
    task = {"node": "n0", "argv": ["sleep", "60"]}
    body = {"slots": {"n0": count}, "tasks": [task] * count}
    answer = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert answer.status_code == 201, answer.text
    return list(answer.json()["task_ids"])


def end(ctl: Controller, codes: dict[str, int], running: list[str]) -> None:
    reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=c) for t, c in codes.items()]
    ctl.heartbeat(Heartbeat(node="n0", running=running, reports=reports), wait_s=0)


def listed(client: TestClient, query: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs?{query}")
    assert answer.status_code == 200, answer.text
    return {job["id"]: job for job in answer.json()}


def test_steps_tasks_keep_their_step_and_the_listing_shows_them(
    ctl: Controller, client: TestClient
) -> None:
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    first = step(client, job, 2)
    orted = client.post(f"/v1/jobs/{job}/remote", json={"node": "n0", "argv": ["orted"], "step": 0})
    assert orted.status_code == 201, orted.text
    stray = client.post(f"/v1/jobs/{job}/remote", json={"node": "n0", "argv": ["orted"]})
    assert stray.status_code == 201, stray.text  # (the batch script's mpirun's: no step)
    for bad, status, said in [
        (5, 400, f"job {job} has no step 5 running"),
        (-1, 422, "step"),
        ("x", 422, "step"),
    ]:
        answer = client.post(
            f"/v1/jobs/{job}/remote", json={"node": "n0", "argv": ["orted"], "step": bad}
        )
        assert answer.status_code == status and said in answer.text, answer.text
    launches = beat(ctl, [batch.task_id])
    assert "FUSESCHED_STEP_ID" not in launches[-1].env  # (the stray)
    assert launches[-2].env["FUSESCHED_STEP_ID"] == "0"
    assert "FUSESCHED_STEP_SLOTS" not in launches[-2].env  # (a daemon holds no slots)
    end(ctl, {first[0]: 0, first[1]: 3}, [batch.task_id, launches[-2].task_id])
    second = step(client, job, 1)  # (step 0's daemon still runs: it holds no slots)
    assert second[0] not in first
    ctl.persist.flush()

    shown = listed(client, "detail=true")[job]
    assert shown["batch"] is True and shown["restarts"] == 0
    assert isinstance(shown["seq"], int)
    tasks = {t["task_id"]: t for t in shown["tasks"]}
    assert [tasks[t]["step_id"] for t in first] == [0, 0]
    assert [tasks[t]["exit_code"] for t in first] == [0, 3]
    assert tasks[orted.json()["task_id"]]["step_id"] == 0
    assert tasks[stray.json()["task_id"]]["step_id"] is None
    assert tasks[second[0]]["step_id"] == 1
    assert tasks[batch.task_id]["step_id"] is None
    assert tasks[batch.task_id]["group"] == "main"
    assert {tasks[t]["group"] for t in first} == {"remote"}
    plain = listed(client, "")[job]  # (no detail: no tasks, restarts not asked for)
    assert plain["tasks"] == [] and plain["restarts"] is None and plain["batch"] is True
    assert client.get(f"/v1/jobs/{job}").json()["restarts"] == 0
    assert client.get("/v1/jobs?detail=maybe").status_code == 422


def test_restarts_count_the_requeues_and_pages_go_on_from_seq(
    ctl: Controller, client: TestClient
) -> None:
    request = parse_sbatch("#!/bin/sh\nsleep 60\n", args=["--requeue"]).request
    (job,) = ctl.submit([request])
    others = [ctl.submit([request.model_copy(update={"hold": True})])[0] for _ in range(4)]
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    answer = client.post(f"/v1/jobs/{job}/requeue", json={})
    assert answer.status_code == 200, answer.text
    ctl.run_cycle()
    end(ctl, {batch.task_id: -15}, [])
    ctl.run_cycle()
    ctl.persist.flush()
    shown = listed(client, f"detail=true&id={job}")[job]
    assert shown["restarts"] == 1 and shown["state"] == "Running"  # (its second run)
    assert [t["task_id"] for t in shown["tasks"]] == [batch.task_id, f"{job}-r1.main.0"]
    assert client.get(f"/v1/jobs/{job}").json()["restarts"] == 1
    assert listed(client, f"detail=true&id={others[0]}")[others[0]]["restarts"] == 0

    pages: list[str] = []
    before = ""
    while True:
        page = client.get(f"/v1/jobs?limit=2{before}").json()
        pages.extend(j["id"] for j in page)
        if len(page) < 2:
            break
        before = f"&before={page[-1]['seq']}"
    assert pages == [*reversed(others), job]
