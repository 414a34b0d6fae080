"""``POST /v1/jobs/{id}/steps`` with CPUs and memory, the agents played by hand: each task
of a step gets CPU ids of its own among its job's (the launch's ``cpu_ids``), the script's
first, then the node's free ones; a step the running ones leave too few CPUs or too little
memory for waits (409), one the job has too few for is refused (400); another job never
gets a running step's ids, which go back to the node's pool as its tasks end, and a
restarted controller knows what the adopted steps hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_step_gpus_route import controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch
from fusesched.controller import requeues
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch

MIB = 2**20
SLEEP = "#!/bin/sh\nsleep 60\n"


def node(running: list[TaskLaunch] | None = None) -> NodeInventory:
    resources = {"cpu": "8", "memory": "8Gi"}
    return NodeInventory(
        name="n0", resources=resources, cpu_ids=list(range(8)), running=running or []
    )


def step(client: TestClient, job: str, tasks: int = 1, **extra: Any) -> Any:
    task = {"node": "n0", "argv": ["sleep", "60"]}
    body = {"slots": {"n0": tasks}, "tasks": [task] * tasks, **extra}
    return client.post(f"/v1/jobs/{job}/steps", json=body)


def launched(ctl: Controller, running: list[str], ended: list[str] = ()) -> list[TaskLaunch]:
    reports = [{"task_id": t, "state": "exited", "exit_code": 0} for t in ended]
    beat = Heartbeat.model_validate({"node": "n0", "running": running, "reports": reports})
    return ctl.heartbeat(beat, wait_s=0).launch


def test_steps_get_their_own_cpus_and_memory(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    ctl.register(node())
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    args = ["-n", "2", "-c", "2", "--mem-per-cpu=256M"]  # 4 CPUs, 1024M on n0
    (job,) = ctl.submit([parse_sbatch(SLEEP, args=args).request])
    ctl.run_cycle()
    (batch,) = launched(ctl, [])
    assert batch.cpu_ids == [0, 1]
    first = step(client, job, cpus_per_task=3, memory={"n0": 512 * MIB})
    assert first.status_code == 201, first.text
    (a,) = launched(ctl, [batch.task_id])
    assert a.cpu_ids == [0, 1, 2] and a.memory_bytes == 512 * MIB
    assert a.env["SLURM_CPUS_ON_NODE"] == "3" and a.env["SLURM_MEM_PER_NODE"] == "512"
    busy = step(client, job)  # the job's 2 CPUs per task: a slot is free, but 1 CPU only
    assert busy.status_code == 409
    assert busy.json()["detail"] == (
        "Requested nodes are busy: n0 has 3 of 4 CPUs in use (by step(s) 0)"
    )
    full = step(client, job, cpus_per_task=1, memory={"n0": 768 * MIB})
    assert full.status_code == 409 and "n0 has 512M of 1024M memory in use" in full.text
    never = step(client, job, cpus_per_task=5)
    assert never.status_code == 400 and "the job has 4 there" in never.json()["detail"]
    assert step(client, job, memory={"n1": MIB}).status_code == 422
    second = step(client, job, cpus_per_task=1, memory={"n0": 512 * MIB})
    assert second.status_code == 201, second.text
    running = [batch.task_id, a.task_id]
    (b,) = launched(ctl, running)
    assert b.cpu_ids == [3] and b.memory_bytes == 512 * MIB
    running.append(b.task_id)
    # another job on the node is pinned beside them, not on a step's CPU ids
    ctl.submit([parse_sbatch(SLEEP, args=["-c", "2"]).request])
    ctl.run_cycle()
    (theirs,) = launched(ctl, running)
    assert theirs.cpu_ids == [4, 5]
    running.append(theirs.task_id)
    # step 0 ends: CPU 2 goes back (0 and 1 are the script's), and is given out again
    running.remove(a.task_id)
    assert launched(ctl, running, [a.task_id]) == []
    third = step(client, job, cpus_per_task=3)
    assert third.status_code == 201, third.text
    (c,) = launched(ctl, running)
    assert c.cpu_ids == [0, 1, 2]
    running.append(c.task_id)
    pair = step(client, job, 2, overlap=True, cpus_per_task=1, memory={"n0": 256 * MIB})
    assert pair.status_code == 201, pair.text
    split = launched(ctl, running)
    assert [t.cpu_ids for t in split] == [[0], [1]]
    assert [t.memory_bytes for t in split] == [128 * MIB] * 2
    ctl.persist.close()

    # a restarted controller adopts them: the steps' ids stay taken for new jobs
    again = controller(tmp_path, clock)
    try:
        again.register(node([batch, b, theirs, c, *split]))
        again.run_cycle()
        (late,) = again.submit([parse_sbatch(SLEEP, args=["-c", "2"]).request])
        again.run_cycle()
        running += [t.task_id for t in split]
        given = [t for t in launched(again, running) if t.job_id == late]
        assert [t.cpu_ids for t in given] == [[6, 7]]
    finally:
        again.persist.close()


def started(tmp_path: Path, clock: Clock, *args: str) -> tuple[Controller, TestClient, str, str]:
    """A controller with node n0 (8 CPUs), a batch job of ``args`` started there: (the
    controller, its API, the job, its batch script's task)."""
    ctl = controller(tmp_path, clock)
    ctl.register(node())
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    (job,) = ctl.submit([parse_sbatch(SLEEP, args=list(args)).request])
    ctl.run_cycle()
    (batch,) = launched(ctl, [])
    return ctl, client, job, batch.task_id


def test_an_overlapping_steps_cpus_are_the_jobs_for_its_other_steps(
    tmp_path: Path, clock: Clock
) -> None:
    """An --overlap step holds CPUs 0-3 of a 4-CPU job: a plain step then takes those, not
    4-6, which the scheduler books to another job (pinned to them, not left unpinned)."""
    ctl, client, job, batch = started(tmp_path, clock, "-n", "4")
    try:
        assert step(client, job, 4, overlap=True).status_code == 201
        shared = launched(ctl, [batch])
        running = [batch, *(t.task_id for t in shared)]
        assert step(client, job, 4).status_code == 201
        plain = launched(ctl, running)
        assert [t.cpu_ids for t in plain] == [[0], [1], [2], [3]]
        running += [t.task_id for t in plain]
        (other,) = ctl.submit([parse_sbatch(SLEEP, args=["-c", "4"]).request])
        ctl.run_cycle()
        assert [t.cpu_ids for t in launched(ctl, running) if t.job_id == other] == [[4, 5, 6, 7]]
    finally:
        ctl.persist.close()


def test_a_requeued_jobs_steps_give_their_cpus_back(tmp_path: Path, clock: Clock) -> None:
    """Its script exits first; its step's tasks are still being killed as the job is queued
    again: their ids go back once they are gone, not lost to the node for good."""
    ctl, client, job, batch = started(tmp_path, clock, "-n", "4")
    try:
        assert step(client, job, 4).status_code == 201
        tasks = [t.task_id for t in launched(ctl, [batch])]
        assert requeues.requeue(ctl, job, "test", hold=True) == [job]
        ctl.run_cycle()
        launched(ctl, tasks, [batch])
        ctl.run_cycle()
        assert ctl.nodes["n0"].pool.cpu_free == list(range(4, 8))  # (theirs until they end)
        launched(ctl, [])
        assert ctl.nodes["n0"].pool.cpu_free == list(range(8))
    finally:
        ctl.persist.close()


def test_a_step_of_tasks_with_a_fraction_of_a_cpu_runs_unpinned(
    tmp_path: Path, clock: Clock
) -> None:
    """Two tasks of 500m: the job has 1 CPU on n0; a plain srun of two tasks runs (each
    task's whole CPU would be 2), unpinned, as before steps had CPUs of their own."""
    ctl = controller(tmp_path, clock)
    ctl.register(node())
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    request = parse_sbatch(SLEEP, args=["-n", "2"]).request
    group = request.groups[0]
    half = group.model_copy(update={"resources": {**group.resources, "cpu": "500m"}})
    (job,) = ctl.submit([request.model_copy(update={"groups": [half]})])
    ctl.run_cycle()
    try:
        (batch,) = launched(ctl, [])
        made = step(client, job, 2)
        assert made.status_code == 201, made.text
        assert [t.cpu_ids for t in launched(ctl, [batch.task_id])] == [[], []]
        asks_two = step(client, job, 1, overlap=True, cpus_per_task=2)  # (-c 2: 1 there)
        assert asks_two.status_code == 400, asks_two.text
    finally:
        ctl.persist.close()


def test_a_heterogeneous_steps_tasks_get_their_components_cpus(
    tmp_path: Path, clock: Clock
) -> None:
    """Components of 2 and 1 CPUs per task on one node: a step on both gives its tasks 2
    and 1 of their own, and all 3 go back as they end (none held by no task)."""
    ctl, client, job, batch = started(tmp_path, clock, "-n1", "-c2", ":", "-n1", "-c1")
    try:
        task = {"node": "n0", "argv": ["sleep", "60"]}
        het = [{"group": 0, "slots": {"n0": 1}}, {"group": 1, "slots": {"n0": 1}}]
        body = {"slots": {"n0": 2}, "tasks": [task, task], "het": het}
        made = client.post(f"/v1/jobs/{job}/steps", json=body)
        assert made.status_code == 201, made.text
        tasks = launched(ctl, [batch])
        assert [t.cpu_ids for t in tasks] == [[0, 1], [2]]
        launched(ctl, [batch], [t.task_id for t in tasks])
        assert ctl.nodes["n0"].pool.cpu_free == [2, 3, 4, 5, 6, 7]  # (0-1: the script's)
    finally:
        ctl.persist.close()


def test_a_job_requeued_after_a_restart_gives_its_steps_cpus_back(
    tmp_path: Path, clock: Clock
) -> None:
    """A restarted controller claims a step's task's ids from its agent (n1); the script's
    node (n0) never comes back: the job is queued again, and n1's ids are free again."""
    ctl = controller(tmp_path, clock)
    for name in ("n0", "n1"):
        ctl.register(node().model_copy(update={"name": name}))
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    (job,) = ctl.submit([parse_sbatch(SLEEP, args=["-N2", "--ntasks-per-node=2"]).request])
    ctl.run_cycle()
    batch = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    task = {"node": "n1", "argv": ["sleep", "60"]}
    made = client.post(f"/v1/jobs/{job}/steps", json={"slots": {"n1": 2}, "tasks": [task] * 2})
    assert made.status_code == 201, made.text
    tasks = ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0).launch
    assert [t.cpu_ids for t in tasks] == [[0], [1]] and len(batch) == 1
    ctl.persist.close()

    again = controller(tmp_path, clock)
    try:
        again.register(node(tasks).model_copy(update={"name": "n1"}))
        assert again.nodes["n1"].pool.cpu_free == list(range(2, 8))
        clock.now += again.config.node_timeout_s + 1
        again._check_nodes()
        assert not again.jobs[job].tasks
        assert again.nodes["n1"].pool.cpu_free == list(range(8))
    finally:
        again.persist.close()
