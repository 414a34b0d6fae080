"""``POST /v1/jobs/{id}/steps`` with the agent played by hand: a step gets its id and share of
the job's slots and its tasks at once, waits (409) while running steps hold them, is refused
(400) when the job could never hold it, ends when its tasks do, and a restarted controller
rebuilds the running steps from the tasks it adopts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.failures import set_node_state
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.model.node import NodeState
from fusesched.submit.sbatch import parse_sbatch


def step(client: TestClient, job: str, count: int, overlap: bool = False) -> Any:
    task = {"node": "n0", "argv": ["sleep", "60"]}
    body = {"slots": {"n0": count}, "tasks": [task] * count, "overlap": overlap}
    return client.post(f"/v1/jobs/{job}/steps", json=body)


def beat(ctl: Controller, running: list[str], ended: Sequence[str] = ()) -> list[TaskLaunch]:
    reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=0) for t in ended]
    return ctl.heartbeat(Heartbeat(node="n0", running=running, reports=reports), wait_s=0).launch


def test_steps_share_the_jobs_slots_and_survive_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    first = step(client, job, 2)
    assert first.status_code == 201, first.text
    assert first.json()["step_id"] == 0
    step0 = first.json()["task_ids"]
    launches = beat(ctl, [batch.task_id])
    assert [launch.task_id for launch in launches] == step0
    assert launches[0].env["SLURM_STEP_ID"] == "0"
    busy = step(client, job, 1)
    assert busy.status_code == 409, busy.text
    assert busy.json()["detail"] == (
        "Requested nodes are busy: n0 has 2 of 2 in use (by step(s) 0)"
    )
    assert step(client, job, 1, overlap=True).json()["step_id"] == 1  # shares: no wait
    assert step(client, job, 3).status_code == 400  # more than the job has
    assert "has 2 slot(s) on node n0" in step(client, job, 3, overlap=True).json()["detail"]
    assert step(client, "999", 1).status_code == 404
    launches += beat(ctl, [batch.task_id, *step0])
    running = [batch.task_id, *(launch.task_id for launch in launches)]
    ctl.persist.close()

    # a new controller adopts what the agent still runs: step 0 holds its slots still
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs"), clock=clock
    )
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        again.register(NodeInventory.model_validate({**ONE_NODE, "running": [batch, *launches]}))
        again.run_cycle()
        assert not again.jobs[job].adopting
        assert step(client, job, 1).status_code == 409
        left = [t for t in running if t not in step0]
        beat(again, left, ended=step0)  # step 0's tasks end: its slots are free
        after = step(client, job, 2)
        assert after.status_code == 201, after.text
        assert after.json()["step_id"] == 2  # on from the highest step still running
        assert not set(after.json()["task_ids"]) & set(running)  # no task id given twice
    finally:
        again.persist.close()


def test_no_step_starts_in_a_job_that_is_ending(ctl: Controller, client: TestClient) -> None:
    """Once the job's script has exited (or the job is being cancelled) a waiting ``srun``
    gets 404, not a task that would outlive the job (and whose launch, left in the node's
    outbox after the job is forgotten, would fail every heartbeat of its node)."""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    beat(ctl, [], ended=[batch.task_id])  # the script exits: the job ends at the next cycle
    ended = step(client, job, 1)
    assert ended.status_code == 404, ended.text
    orted = client.post(f"/v1/jobs/{job}/remote", json={"node": "n0", "argv": ["true"]})
    assert orted.status_code == 404, orted.text
    ctl.run_cycle()
    assert beat(ctl, []) == []  # the node's heartbeats go on

    (cancelled,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    ctl.cancel(cancelled)
    ctl.run_cycle()  # its tasks are being stopped
    assert step(client, cancelled, 1).status_code == 404


def test_no_step_task_is_sent_to_a_node_that_is_down(ctl: Controller, client: TestClient) -> None:
    """A node of the job that stopped heartbeating would never take the launch: the step
    would hold its slots, and its ``srun`` wait, until the job ends. It is refused (400)."""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    beat(ctl, [])
    set_node_state(ctl, "n0", NodeState.DOWN, "no heartbeat", ctl.clock())
    down = step(client, job, 1)
    assert down.status_code == 400, down.text
    assert "node 'n0' of job 1 is down" in down.json()["detail"]
    assert ctl.nodes["n0"].outbox == []
