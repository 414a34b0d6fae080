"""A job step's task that outlives its job (it ignores SIGTERM: an interactive bash under
``srun --pty``, ``trap '' TERM``) is killed once the grace is over, after the controller has
forgotten the job's run: its exit, reported then, is still written (the task does not stay
running for ever), and so is its loss when its agent no longer lists it, restarts, or its
node falls silent (controller/late_exits.py). The agent is played by hand."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from tests.controller.conftest import ONE_NODE
from tests.controller.test_step_accounting import end, step
from tests.controller.test_step_route import beat

from fusesched.api.wire import Heartbeat, NodeInventory, TaskReport, TaskState
from fusesched.controller.failures import node_lost
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch


def _stored(client: TestClient, job: str) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/v1/jobs/{job}")
    assert answer.status_code == 200, answer.text
    return {t["task_id"]: t for t in answer.json()["tasks"]}


def _cancelled_with_a_step_left(ctl: Controller, client: TestClient) -> tuple[str, str, str]:
    """A job cancelled whose batch script has exited and whose one step task has not (it
    ignores SIGTERM): the job has ended. (job id, script's task id, step's task id)."""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    (task,) = step(client, job, 1)
    beat(ctl, [batch.task_id])  # (the step's launch)
    started = TaskReport(task_id=task, state=TaskState.RUNNING, pid=42)
    ctl.heartbeat(Heartbeat(node="n0", running=[batch.task_id, task], reports=[started]), wait_s=0)
    ctl.cancel(job)
    ctl.run_cycle()
    assert {k.task_id for k in ctl.nodes["n0"].kills} == {batch.task_id, task}
    end(ctl, {batch.task_id: -15}, [task])  # the script exits at once, the step does not
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Cancelled"
    assert task not in ctl.tasks
    return job, batch.task_id, task


def test_a_step_task_killed_after_its_job_ended_has_its_exit_written(
    ctl: Controller, client: TestClient
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    assert client.get(f"/v1/tasks/{task}").json()["state"] == "running"
    end(ctl, {task: -9}, [])  # SIGKILLed after the grace
    ctl.persist.flush()
    shown = client.get(f"/v1/tasks/{task}").json()
    assert (shown["state"], shown["exit_code"]) == ("exited", -9)
    stored = _stored(client, job)[task]
    assert (stored["state"], stored["exit_code"]) == ("Failed", -9)
    assert stored["end_time"] is not None
    assert not ctl.outliving
    end(ctl, {task: 0}, [])  # (said twice: the first stands)
    assert client.get(f"/v1/tasks/{task}").json()["exit_code"] == -9


def test_a_step_task_its_agent_lists_no_more_is_lost(ctl: Controller, client: TestClient) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    end(ctl, {}, [task])  # (still listed: still running)
    assert client.get(f"/v1/tasks/{task}").json()["state"] == "running"
    end(ctl, {}, [])
    ctl.persist.flush()
    shown = client.get(f"/v1/tasks/{task}").json()
    assert (shown["state"], shown["exit_code"]) == ("exited", -1)
    assert _stored(client, job)[task]["state"] == "Failed"
    assert not ctl.outliving


def test_a_step_task_is_lost_with_its_node_or_agent(ctl: Controller, client: TestClient) -> None:
    _, _, task = _cancelled_with_a_step_left(ctl, client)
    node_lost(ctl, "n0", ctl.clock())
    shown = client.get(f"/v1/tasks/{task}").json()
    assert shown["state"] == "exited" and shown["reason"] == "node lost"
    assert ctl.finished[task].lost  # (fenced if its node shows it again)
    assert not ctl.outliving


def test_an_agent_restarting_loses_the_tasks_that_outlived_their_job(
    ctl: Controller, client: TestClient
) -> None:
    _, _, task = _cancelled_with_a_step_left(ctl, client)
    ctl.register(NodeInventory.model_validate(ONE_NODE))
    assert client.get(f"/v1/tasks/{task}").json()["reason"] == "agent restarted"


def test_a_batch_script_ignoring_sigterm_keeps_its_job_until_it_is_killed(
    ctl: Controller, client: TestClient
) -> None:
    """(The job's own task: its job ends with it, so its exit is written as usual.)"""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\ntrap '' TERM\nsleep 60\n").request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    ctl.cancel(job)
    ctl.run_cycle()
    end(ctl, {}, [batch.task_id])  # (SIGTERM ignored)
    ctl.run_cycle()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Running"
    end(ctl, {batch.task_id: -9}, [])
    ctl.run_cycle()
    ctl.persist.flush()
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Cancelled"
    stored = _stored(client, job)[batch.task_id]
    assert (stored["state"], stored["exit_code"]) == ("Failed", -9)
