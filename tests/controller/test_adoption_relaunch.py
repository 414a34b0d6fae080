"""A gang adopted after a controller restart that then restarts in place
(controller/adoption.py, controller/in_place.py): every task of its run is launched again,
on the nodes of its allocation, not only those still running at the adoption; a task that
had exited before the restart, or during it (its agent no longer runs it, so no launch of it
came back), gets its launch rebuilt as its first start built it. The agent is played by
hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_restart_always import exits, launched, relaunch, state
from tests.controller.test_running_limit import beat

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.remote_tasks import launch_remote
from fusesched.controller.service import Controller

RESTART = {"mode": "restart-in-place", "backoff_s": 0, "retry_application_failures": True}
#: Kubeflow's shape: a master and its workers, one gang (1 CPU each of n0's 4).
GROUPS = [
    {"name": "master", "resources": {"cpu": "1"}, "argv": ["train", "m"]},
    {"name": "worker", "resources": {"cpu": "1"}, "argv": ["train", "w"], "replicas": 2},
]


def started(
    tmp_path: Path, clock: Clock, groups: list[dict[str, Any]]
) -> tuple[Controller, list[TaskLaunch]]:
    """A gang of ``groups`` started on n0 (close the controller's store to stop it)."""
    ctl = one_node_controller(tmp_path, clock)
    body = {"groups": groups, "restart": RESTART}
    answer = TestClient(create_app(ctl)).post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return ctl, launched(ctl, [])


def restarted(tmp_path: Path, clock: Clock, running: list[TaskLaunch]) -> Controller:
    """A new controller on the same store; n0 comes back running ``running``."""
    store = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(store, LogStore(tmp_path / "logs"), clock=clock)
    ctl.register(NodeInventory.model_validate({**ONE_NODE, "running": running}))
    ctl.run_cycle()  # (adopted)
    return ctl


def same_run(again: list[TaskLaunch], first: list[TaskLaunch], job: str) -> None:
    """``again`` is ``first`` launched as run 1: the same tasks, commands and variables (but
    their ids and restart count), each with its own CPUs."""
    assert [t.task_id for t in again] == [f"{job}-r1{t.task_id[len(job) :]}" for t in first]
    for new, old in zip(again, first, strict=True):
        assert new.argv == old.argv and new.files == old.files
        moved = {"FUSESCHED_TASK_ID": new.task_id, "FUSESCHED_RESTART_COUNT": "1"}
        assert new.env == old.env | moved
        assert len(new.cpu_ids) == len(old.cpu_ids)
    cpus = [c for t in again for c in t.cpu_ids]
    assert len(cpus) == len(set(cpus))


def test_tasks_exited_before_the_restart_are_launched_again(tmp_path: Path, clock: Clock) -> None:
    ctl, first = started(tmp_path, clock, GROUPS)
    job = first[0].job_id
    ids = [t.task_id for t in first]
    exits(ctl, ids[1], 1, [ids[0], ids[2]])  # a worker fails; the others are stopped…
    ctl.persist.close()  # …by a controller that stops before they exit
    ctl = restarted(tmp_path, clock, [first[0], first[2]])
    try:
        beat(ctl, [ids[0], ids[2]])
        exits(ctl, ids[0], -15, [ids[2]])
        exits(ctl, ids[2], -15, [])
        same_run(relaunch(ctl, clock, []), first, job)
        ctl.run_cycle()
        assert state(TestClient(create_app(ctl)), job) == "Running"
    finally:
        ctl.persist.close()


def test_a_task_exited_during_the_restart_is_launched_again(tmp_path: Path, clock: Clock) -> None:
    ctl, first = started(tmp_path, clock, GROUPS)
    ctl.persist.close()
    job = first[0].job_id
    ids = [t.task_id for t in first]
    ctl = restarted(tmp_path, clock, [first[0], first[2]])  # (the master ended meanwhile)
    try:
        ended = TaskReport(task_id=ids[1], state=TaskState.EXITED, exit_code=1)
        stopped = beat(ctl, [ids[0], ids[1], ids[2]], reports=[ended]).kill
        assert sorted(k.task_id for k in stopped) == [ids[0], ids[2]]
        exits(ctl, ids[0], -15, [ids[2]])
        exits(ctl, ids[2], -15, [])
        same_run(relaunch(ctl, clock, []), first, job)
    finally:
        ctl.persist.close()


def test_a_gang_of_one_group_is_launched_again_whole(tmp_path: Path, clock: Clock) -> None:
    trainer = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 2}
    ctl, first = started(tmp_path, clock, [trainer])
    job = first[0].job_id
    exits(ctl, first[0].task_id, 1, [first[1].task_id])
    ctl.persist.close()
    ctl = restarted(tmp_path, clock, [first[1]])
    try:
        beat(ctl, [first[1].task_id])
        exits(ctl, first[1].task_id, -15, [])
        same_run(relaunch(ctl, clock, []), first, job)
    finally:
        ctl.persist.close()


def test_the_gang_holds_its_ended_tasks_resources_once_adopted(
    tmp_path: Path, clock: Clock
) -> None:
    """Booked in the core with the tasks still running (a gang of several groups has no
    hostfile of its own to tell its slots): nothing else takes the CPUs the restart in place
    launches them on again."""
    ctl, first = started(tmp_path, clock, GROUPS)  # (3 of n0's 4 CPUs)
    ids = [t.task_id for t in first]
    exits(ctl, ids[1], 1, [ids[0], ids[2]])
    ctl.persist.close()
    ctl = restarted(tmp_path, clock, [first[0], first[2]])
    try:
        client = TestClient(create_app(ctl))
        two = {"resources": {"cpu": "2"}, "argv": ["other"]}
        other = client.post("/v1/jobs", json={"groups": [two]}).json()
        ctl.run_cycle()
        assert state(client, other["id"]) == "Pending"
    finally:
        ctl.persist.close()


def test_a_batch_script_ended_during_the_restart_is_requeued(tmp_path: Path, clock: Clock) -> None:
    """Its allocation's task slots were in its launch's hostfile only: it runs again from the
    queue, not in place."""
    script = {"script": "#!/bin/sh\nsleep 100\n", "resources": {"cpu": "1"}}
    ctl, (first,) = started(tmp_path, clock, [script])
    ctl.persist.close()
    ctl = restarted(tmp_path, clock, [])
    try:
        ended = TaskReport(task_id=first.task_id, state=TaskState.EXITED, exit_code=1)
        beat(ctl, [first.task_id], reports=[ended])
        assert relaunch(ctl, clock, []) == []
        ctl.run_cycle()
        (again,) = beat(ctl, []).launch
        assert again.task_id == f"{first.job_id}-r1.main.0" and again.script == first.script
        said = [
            r.event.data.get("reason", "") for r in ctl.persist.store.events_for_job(first.job_id)
        ]
        assert any("its script's launch was lost with a controller restart" in r for r in said)
    finally:
        ctl.persist.close()


def test_a_helper_started_after_the_adoption_takes_the_jobs_variables(
    tmp_path: Path, clock: Clock
) -> None:
    """From a task whose launch its agent gave back, not from one that had ended (whose
    launch the store does not keep)."""
    trainer = {"resources": {"cpu": "2"}, "argv": ["train"], "replicas": 2}
    ctl, first = started(tmp_path, clock, [trainer])
    exits(ctl, first[0].task_id, 0, [first[1].task_id])  # (done: the other runs on)
    ctl.persist.close()
    ctl = restarted(tmp_path, clock, [first[1]])
    try:
        with ctl.lock:
            helper = launch_remote(ctl, ctl.jobs[first[0].job_id], "n0", ["orted"], {})
        (launch,) = beat(ctl, [first[1].task_id]).launch
        assert launch.task_id == helper
        assert launch.env["FUSESCHED_JOB_ID"] == first[0].job_id
    finally:
        ctl.persist.close()
