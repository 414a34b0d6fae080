"""A batch script sees all of its job's whole GPUs on its node, as Slurm's batch step (the
agents played by hand): its launch names them in ``FUSESCHED_STEP_BATCH_GPUS`` while its
``gpu_indices`` (and grant) stay its own task's; not for a job whose tasks each run (srun
style), a container's script, MIG instances or a job with no GPUs; a hetjob's script sees
component 0's; it holds after an in-place restart (also of an adopted job) and a requeue; the
job's own variables cannot set it, and its steps and helpers do not inherit it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.agent.task_env import cuda_visible_devices, task_environment
from fusesched.api.app import create_app
from fusesched.api.wire import (
    BATCH_GPUS_ENV,
    DeviceInfo,
    Heartbeat,
    NodeInventory,
    TaskLaunch,
    TaskReport,
    TaskState,
)
from fusesched.controller.failures import job_failed, relaunch_due
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.model.submit_env import carried_env
from fusesched.submit.failure_policy import RestartRequest
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/sh\nsleep 60\n"


def gpu_node(name: str = "g0", gpus: int = 4, migs: int = 0) -> NodeInventory:
    devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(gpus)]
    devices += [
        DeviceInfo(
            kind="nvidia.com/mig-1g.10gb", index=gpus, uuid=f"MIG-{name}-{i}", mig_profile="1g.10gb"
        )
        for i in range(migs)
    ]
    resources = {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": str(gpus)}
    if migs:
        resources["nvidia.com/mig-1g.10gb"] = str(migs)
    return NodeInventory(name=name, resources=resources, devices=devices)


def controller(path: Path, clock: Clock) -> Controller:
    persist = Persistence(f"sqlite:///{path / 'db.sqlite'}")
    return Controller(persist, LogStore(path / "logs"), clock=clock)


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    controller_ = controller(tmp_path, clock)
    controller_.register(gpu_node())
    yield controller_
    controller_.persist.close()


@pytest.fixture
def client(ctl: Controller) -> TestClient:
    return TestClient(create_app(ctl), raise_server_exceptions=False)


def sbatch(ctl: Controller, *args: str, **update: Any) -> str:
    request = parse_sbatch(SCRIPT, args=list(args)).request
    (job,) = ctl.submit([request.model_copy(update=update)])
    return job


def launched(ctl: Controller, running: tuple[str, ...] = (), node: str = "g0") -> list[TaskLaunch]:
    ctl.run_cycle()
    return ctl.heartbeat(Heartbeat(node=node, running=list(running)), wait_s=0).launch


def seen(launch: TaskLaunch, tmp_path: Path) -> tuple[str, str, str | None]:
    """What the agent makes of ``launch``: the task's ``CUDA_VISIBLE_DEVICES``,
    ``FUSESCHED_GPU_INDICES`` and mark (None: not left in its environment)."""
    env = task_environment(launch, str(tmp_path), None)
    assert env["CUDA_VISIBLE_DEVICES"] == cuda_visible_devices(launch)
    return env["CUDA_VISIBLE_DEVICES"], env["FUSESCHED_GPU_INDICES"], env.get(BATCH_GPUS_ENV)


def test_the_script_sees_all_the_jobs_gpus_on_its_node(ctl: Controller, tmp_path: Path) -> None:
    """``#SBATCH -n 4 --gpus-per-task=1``: the script (torchrun --nproc_per_node=4 in it)
    sees GPUs 0-3, as ``SLURM_JOB_GPUS`` says; its own task's stays GPU 0."""
    sbatch(ctl, "-n", "4", "--gpus-per-task=1")
    (launch,) = launched(ctl)
    assert launch.env[BATCH_GPUS_ENV] == "0,1,2,3" == launch.env["SLURM_JOB_GPUS"]
    assert launch.gpu_indices == [0] and not launch.gpu_uuids  # (the task's own: unchanged)
    assert seen(launch, tmp_path) == ("0,1,2,3", "0,1,2,3", None)
    live = next(iter(ctl.jobs.values()))
    (task,) = live.tasks.values()
    assert task.grant.gpu_indices == (0,)  # (metrics, persistence and adoption read it)


def test_the_scripts_node_only_and_only_its_job_s(tmp_path: Path, clock: Clock) -> None:
    """Over two nodes the script sees the job's GPUs on its own node, none of another job's
    on it."""
    ctl = controller(tmp_path, clock)
    try:
        ctl.register(gpu_node("g0"))
        ctl.register(gpu_node("g1"))
        other = sbatch(ctl, "-n", "1", "--gpus-per-task=1", "-w", "g0")
        (first,) = launched(ctl)
        assert first.job_id == other and first.env[BATCH_GPUS_ENV] == "0"
        sbatch(ctl, "-N", "2", "--ntasks-per-node=3", "--gpus-per-task=1")
        (script,) = launched(ctl, (first.task_id,))
        assert script.env["SLURM_JOB_GPUS"] == "1,2,3"  # (g0: GPU 0 is the other job's)
        assert script.env[BATCH_GPUS_ENV] == "1,2,3" and script.gpu_indices == [1]
        assert seen(script, tmp_path)[0] == "1,2,3"
    finally:
        ctl.persist.close()


def test_tasks_that_each_run_see_their_own(
    ctl: Controller, client: TestClient, tmp_path: Path
) -> None:
    """A job whose every task runs its command (``fusesched run``, srun style) is no batch
    script: each task sees its own GPUs."""
    task = {"replicas": 2, "resources": {"cpu": "1", "nvidia.com/gpu": "2"}, "argv": ["true"]}
    job = {"slurm_env": True, "groups": [task]}
    assert client.post("/v1/jobs", json=job).status_code == 201
    launches = launched(ctl)
    assert [t.gpu_indices for t in launches] == [[0, 1], [2, 3]]
    assert not any(BATCH_GPUS_ENV in t.env for t in launches)
    assert [seen(t, tmp_path)[:2] for t in launches] == [("0,1", "0,1"), ("2,3", "2,3")]


def test_no_gpus_and_containers_are_as_before(ctl: Controller, tmp_path: Path) -> None:
    sbatch(ctl, "-n", "2")
    (plain,) = launched(ctl)
    assert BATCH_GPUS_ENV not in plain.env and seen(plain, tmp_path) == ("", "", None)
    group = {"replicas": 2, "resources": {"cpu": "1", "nvidia.com/gpu": "1"}, "script": SCRIPT}
    request = JobRequest.model_validate({"groups": [{**group, "image": "/images/torch"}]})
    ctl.submit([request])
    (boxed,) = launched(ctl, (plain.task_id,))
    assert boxed.image == "/images/torch" and boxed.gpu_indices == [0]
    assert BATCH_GPUS_ENV not in boxed.env and seen(boxed, tmp_path)[0] == "0"


def test_mig_instances_keep_their_own(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    try:
        ctl.register(gpu_node("g0", gpus=0, migs=3))
        ctl.register(gpu_node("g1", gpus=2, migs=4))
        group = {"replicas": 2, "resources": {"nvidia.com/mig-1g.10gb": "1"}, "script": SCRIPT}
        ctl.submit([JobRequest.model_validate({"slurm_env": True, "groups": [group]})])
        (launch,) = launched(ctl)
        assert len(launch.gpu_uuids) == 1 and BATCH_GPUS_ENV not in launch.env
        assert seen(launch, tmp_path)[0] == launch.gpu_uuids[0]
        # a task of a whole GPU and a MIG instance: its own, as before
        mixed = {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}
        ctl.submit([JobRequest.model_validate({"groups": [group | {"resources": mixed}]})])
        (both,) = launched(ctl, (launch.task_id,), node="g1")
        assert both.gpu_indices and both.gpu_uuids and BATCH_GPUS_ENV not in both.env
        assert seen(both, tmp_path)[0] == both.gpu_uuids[0]
    finally:
        ctl.persist.close()


def test_a_hetjobs_script_sees_component_0s(ctl: Controller, tmp_path: Path) -> None:
    sbatch(ctl, "-n1", "--gpus-per-task=2", ":", "-n2", "--gpus-per-task=1")
    (launch,) = launched(ctl)
    assert launch.task_id.endswith(".het0.0") and len(launch.gpu_indices) == 2
    assert launch.env[BATCH_GPUS_ENV] == ",".join(map(str, launch.gpu_indices))
    assert seen(launch, tmp_path)[0] == ",".join(map(str, launch.gpu_indices))


def test_a_hetjob_with_two_gpu_tasks_in_component_0(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    try:
        ctl.register(gpu_node("g0", gpus=8))
        sbatch(ctl, "-n2", "--gpus-per-task=1", ":", "-n2", "--gpus-per-task=2")
        (launch,) = launched(ctl)
        assert len(launch.gpu_indices) == 1
        shown = launch.env[BATCH_GPUS_ENV].split(",")
        assert len(shown) == 2 and str(launch.gpu_indices[0]) in shown  # (not component 1's)
    finally:
        ctl.persist.close()


def test_the_jobs_own_variables_cannot_set_it(ctl: Controller, tmp_path: Path) -> None:
    forged = {BATCH_GPUS_ENV: "0,1,2,3"}
    assert carried_env(forged | {"A": "1"}) == {"A": "1"}  # (not carried from the shell)
    sbatch(ctl, "-n", "1", "--gpus-per-task=1", f"--export=NONE,{BATCH_GPUS_ENV}=3")
    (launch,) = launched(ctl)
    assert launch.env[BATCH_GPUS_ENV] == "0"
    group = {"resources": {"cpu": "1", "nvidia.com/gpu": "1"}, "argv": ["true"], "env": forged}
    ctl.submit([JobRequest.model_validate({"groups": [group], "submit_env": forged})])
    (each,) = launched(ctl, (launch.task_id,))
    assert each.gpu_indices == [1] and BATCH_GPUS_ENV not in each.env
    assert seen(each, tmp_path)[0] == "1"


def test_steps_and_helpers_do_not_inherit_it(ctl: Controller, client: TestClient) -> None:
    job = sbatch(ctl, "-n", "4", "--gpus-per-task=1")
    (batch,) = launched(ctl)
    assert batch.env[BATCH_GPUS_ENV] == "0,1,2,3"
    running = [batch.task_id]
    sent = {"FORWARDED": "1", BATCH_GPUS_ENV: "0,1,2,3"}  # (a forged srun)
    bodies = [
        {"gpus": {"g0": 1}, "tasks": [{"node": "g0", "argv": ["true"], "env": sent}]},
        {"gpus": {"g0": 0}, "tasks": [{"node": "g0", "argv": ["true"]}]},  # --gres=none
        {"tasks": [{"node": "g0", "argv": ["true"]}]},  # asks for none: sees the job's
    ]
    for body in bodies:
        made = client.post(f"/v1/jobs/{job}/steps", json={"slots": {"g0": 1}, **body})
        assert made.status_code == 201, made.text
        running += made.json()["task_ids"]
    helper = client.post(f"/v1/jobs/{job}/remote", json={"node": "g0", "argv": ["orted"]})
    assert helper.status_code == 201, helper.text
    steps = ctl.heartbeat(Heartbeat(node="g0", running=running), wait_s=0).launch
    assert [t.gpu_indices for t in steps] == [[0], [], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert steps[0].env["FORWARDED"] == "1"
    assert not any(BATCH_GPUS_ENV in t.env for t in steps)


def _ran(ctl: Controller, launch: TaskLaunch) -> None:
    report = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=7)
    ctl.heartbeat(Heartbeat(node="g0", running=[launch.task_id], reports=[report]), wait_s=0)


def _restarted_in_place(ctl: Controller, job: str, old: TaskLaunch, now: float) -> TaskLaunch:
    with ctl.lock:
        job_failed(ctl, ctl.jobs[job], Failure(FailureKind.HANG, "g0", "hung"), now)
    ended = TaskReport(task_id=old.task_id, state=TaskState.EXITED, exit_code=-15)
    ctl.heartbeat(Heartbeat(node="g0", running=[], reports=[ended]), wait_s=0)
    with ctl.lock:
        relaunch_due(ctl, now)
    (relaunch,) = ctl.heartbeat(Heartbeat(node="g0", running=[]), wait_s=0).launch
    return relaunch


def test_it_holds_after_an_in_place_restart_also_of_an_adopted_job(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = controller(tmp_path, clock)
    ctl.register(gpu_node())
    restart = RestartRequest(mode="restart-in-place", backoff_s=0)
    job = sbatch(ctl, "-n", "3", "--gpus-per-task=1", restart=restart)
    first = launched(ctl)[0]
    _ran(ctl, first)
    second = _restarted_in_place(ctl, job, first, clock.now)
    assert second.task_id == f"{job}-r1.main.0"
    assert (second.env[BATCH_GPUS_ENV], second.gpu_indices) == ("0,1,2", [0])
    _ran(ctl, second)
    ctl.persist.close()
    # a new controller adopts it from its agent, then restarts it in place again
    again = controller(tmp_path, clock)
    try:
        again.register(gpu_node().model_copy(update={"running": [second]}))
        again.run_cycle()
        assert not again.jobs[job].adopting
        third = _restarted_in_place(again, job, second, clock.now)
        assert third.task_id == f"{job}-r2.main.0"
        assert (third.env[BATCH_GPUS_ENV], third.gpu_indices) == ("0,1,2", [0])
    finally:
        again.persist.close()


def test_it_holds_after_a_requeue(ctl: Controller, client: TestClient) -> None:
    job = sbatch(ctl, "-n", "2", "--gpus-per-task=2")
    (first,) = launched(ctl)
    assert first.env[BATCH_GPUS_ENV] == "0,1,2,3" and first.gpu_indices == [0, 1]
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).status_code == 200
    ended = TaskReport(task_id=first.task_id, state=TaskState.EXITED, exit_code=-15)
    ctl.heartbeat(Heartbeat(node="g0", running=[], reports=[ended]), wait_s=0)
    (again,) = launched(ctl)
    assert again.task_id != first.task_id and again.job_id == job
    assert again.env[BATCH_GPUS_ENV] == "0,1,2,3" and again.gpu_indices == [0, 1]


def _beat(ctl: Controller, running: list[str], *reports: TaskReport) -> None:
    ctl.heartbeat(Heartbeat(node="g0", running=running, reports=list(reports)), wait_s=0)


def test_a_restarted_controller_books_the_gpus_the_script_sees(
    tmp_path: Path, clock: Clock
) -> None:
    """A batch job's unlaunched slots are booked again, after a restart, on the GPUs its
    script sees (its launch says them), not on any free ones: else the next job is given a
    GPU the script is using. (Found in review: adoption read only the steps' marks.)"""
    from fusesched.controller.step_gpus import job_gpus

    first = controller(tmp_path, clock)
    first.register(gpu_node())
    other = sbatch(first, "-n", "1", "--gpus-per-task=1")  # takes GPU 0
    (other_launch,) = launched(first)
    _beat(
        first,
        [other_launch.task_id],
        TaskReport(task_id=other_launch.task_id, state=TaskState.RUNNING, pid=7),
    )
    job = sbatch(first, "-n", "3", "--gpus-per-task=1")
    (script,) = launched(first, (other_launch.task_id,))
    assert script.job_id == job
    _beat(
        first,
        [other_launch.task_id, script.task_id],
        TaskReport(task_id=script.task_id, state=TaskState.RUNNING, pid=8),
    )
    assert (script.env[BATCH_GPUS_ENV], script.gpu_indices) == ("1,2,3", [1])
    clock.now += 30
    done = TaskReport(task_id=other_launch.task_id, state=TaskState.EXITED, exit_code=0)
    _beat(first, [script.task_id], done)  # GPU 0 is free again
    first.run_cycle()
    assert first.core.jobs[other].phase.value == "completed"
    first.persist.close()
    again = controller(tmp_path, clock)
    try:
        again.register(gpu_node().model_copy(update={"running": [script]}))
        again.run_cycle()
        with again.lock:
            assert job_gpus(again, again.jobs[job]) == {"g0": (1, 2, 3)}
        sbatch(again, "-n", "1", "--gpus-per-task=1")
        assert [t.gpu_indices for t in launched(again, (script.task_id,))] == [[0]]
    finally:
        again.persist.close()
