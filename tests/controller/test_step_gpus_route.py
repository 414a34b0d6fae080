"""``POST /v1/jobs/{id}/steps`` with GPUs, the agents played by hand: each step asking for
GPUs gets its own of the job's (the launch's GPU indices, ``SLURM_STEP_GPUS``), a step the
running ones leave too few for waits (409), one the job has too few for is refused (400), a
step asking for none sees all of the job's and holds none, and a restarted controller knows
what the adopted steps hold; mpirun's daemons see their step's. A plain step's task on
another node gets that node's share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.agent.step_plan import read_hostfile
from fusesched.api.app import create_app
from fusesched.api.wire import DeviceInfo, Heartbeat, NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch


def gpu_node(name: str, gpus: int, cpu: str = "8") -> NodeInventory:
    devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(gpus)]
    resources = {"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": str(gpus)}
    return NodeInventory(name=name, resources=resources, devices=devices)


def controller(path: Path, clock: Clock) -> Controller:
    return Controller(
        Persistence(f"sqlite:///{path / 'db.sqlite'}"), LogStore(path / "logs"), clock=clock
    )


def step(client: TestClient, job: str, tasks: int = 1, **extra: Any) -> Any:
    task = {"node": "g0", "argv": ["sleep", "60"]}
    body = {"slots": {"g0": tasks}, "tasks": [task] * tasks, **extra}
    return client.post(f"/v1/jobs/{job}/steps", json=body)


def launched(ctl: Controller, node: str, running: list[str]) -> list[TaskLaunch]:
    return ctl.heartbeat(Heartbeat(node=node, running=running), wait_s=0).launch


def test_steps_get_their_own_gpus_and_wait_for_them(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    ctl.register(gpu_node("g0", 4))
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    script = parse_sbatch("#!/bin/sh\nsleep 60\n", args=["--gres=gpu:4", "-n", "4"])
    (job,) = ctl.submit([script.request])
    ctl.run_cycle()
    (batch,) = launched(ctl, "g0", [])
    ids = []
    for _ in range(4):
        made = step(client, job, gpus={"g0": 1}, name="train.py")
        assert made.status_code == 201, made.text
        ids += made.json()["task_ids"]
    launches = launched(ctl, "g0", [batch.task_id])
    assert [t.gpu_indices for t in launches] == [[0], [1], [2], [3]]
    assert [t.env["SLURM_STEP_GPUS"] for t in launches] == ["0", "1", "2", "3"]
    assert {t.env["SLURM_GPUS_ON_NODE"] for t in launches} == {"1"}
    assert {t.env["FUSESCHED_STEP_NAME"] for t in launches} == {"train.py"}
    assert step(client, job, gpus={"g0": 1}).status_code == 409  # (no slot left either)
    too_many = step(client, job, gpus={"g0": 5}, overlap=True)
    assert too_many.status_code == 400 and "the job has 4 there" in too_many.json()["detail"]
    shared = step(client, job, gpus={"g0": 2}, overlap=True)  # takes the first two anyway
    plain = step(client, job, overlap=True)  # asks for none: sees all, holds none
    hidden = step(client, job, overlap=True, gpus={"g0": 0})  # --gres=none
    assert all(answer.status_code == 201 for answer in (shared, plain, hidden))
    running = [batch.task_id, *ids]
    more = launched(ctl, "g0", running)
    assert [t.gpu_indices for t in more] == [[0, 1], [0, 1, 2, 3], []]
    assert more[1].env["SLURM_STEP_GPUS"] == "0,1,2,3" and more[2].env["SLURM_GPUS_ON_NODE"] == "0"
    running += [t.task_id for t in more]
    # mpirun's daemons: a step's sees its step's GPUs there, the script's own all the job's
    for helper in ({"step": 1}, {}):
        body = {"node": "g0", "argv": ["orted"], **helper}
        answer = client.post(f"/v1/jobs/{job}/remote", json=body)
        assert answer.status_code == 201, answer.text
        running.append(answer.json()["task_id"])
    daemons = launched(ctl, "g0", running)
    assert [t.gpu_indices for t in daemons] == [[1], [0, 1, 2, 3]]
    more += daemons
    ctl.persist.close()

    # a restarted controller adopts them: steps 0-3 still hold GPUs 0-3
    again = controller(tmp_path, clock)
    try:
        client = TestClient(create_app(again), raise_server_exceptions=False)
        inventory = gpu_node("g0", 4).model_copy(update={"running": [batch, *launches, *more]})
        again.register(inventory)
        again.run_cycle()
        ended = [t.task_id for t in launches[2:]]  # steps 2 and 3 end: GPUs 2 and 3 free
        left = [t for t in running if t not in ended]
        reports = [{"task_id": t, "state": "exited", "exit_code": 0} for t in ended]
        beat = {"node": "g0", "running": left, "reports": reports}
        again.heartbeat(Heartbeat.model_validate(beat), wait_s=0)
        busy = step(client, job, gpus={"g0": 3})  # two slots are free, but not three GPUs
        assert busy.status_code == 409, busy.text
        assert busy.json()["detail"] == (
            "Requested nodes are busy: g0 has 2 of 4 GPUs in use (by step(s) 0, 1)"
        )
        pair = step(client, job, 2, gpus={"g0": 2}, gpus_per_task=1)
        assert pair.status_code == 201, pair.text
        split = launched(again, "g0", left)
        assert [t.gpu_indices for t in split] == [[2], [3]]
        assert {t.env["SLURM_STEP_GPUS"] for t in split} == {"2,3"}
    finally:
        again.persist.close()


def test_a_steps_task_on_another_node_gets_that_nodes_share(tmp_path: Path, clock: Clock) -> None:
    ctl = controller(tmp_path, clock)
    ctl.register(gpu_node("g0", 2, cpu="4"))
    ctl.register(gpu_node("g1", 2, cpu="4"))
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    # (--mem: 200M a task; given --mem-per-cpu, Slurm tells no SLURM_MEM_PER_NODE)
    args = ["-N", "2", "-n", "3", "-c", "2", "--mem=400M", "--gpus-per-task=1"]
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=args).request])
    ctl.run_cycle()
    batch = [t for node in ("g0", "g1") for t in launched(ctl, node, [])]
    assert len(batch) == 1
    first = batch[0].env["SLURMD_NODENAME"]
    other = "g1" if first == "g0" else "g0"
    tasks = [{"node": node, "argv": ["true"]} for node in (first, other)]
    made = client.post(
        f"/v1/jobs/{job}/steps", json={"slots": {first: 1, other: 1}, "tasks": tasks}
    )
    assert made.status_code == 201, made.text
    (there,) = launched(ctl, other, [])
    slots = dict(read_hostfile(batch[0].files["fusesched.hostfile"]))
    assert sorted(slots.values()) == [1, 2]  # (the script's node's share is not the other's)
    assert batch[0].env["SLURM_CPUS_ON_NODE"] == str(2 * slots[first])
    assert there.env["SLURM_CPUS_ON_NODE"] == str(2 * slots[other])
    assert there.env["SLURM_MEM_PER_NODE"] == str(200 * slots[other])
    assert there.env["SLURM_GPUS_ON_NODE"] == str(slots[other])
    assert len(there.gpu_indices) == slots[other]  # the job's GPUs there, all of them


def test_a_restart_books_the_job_the_gpus_its_steps_use(tmp_path: Path, clock: Clock) -> None:
    """A batch job's node where only its steps run: a restarted controller books it there
    the GPUs it had (GPUs 2 and 3, job Y's 0 and 1 having been freed since), not the lowest
    free ones, which would hand the steps' GPUs to the next job."""
    ctl = controller(tmp_path, clock)
    for node in ("g0", "g1"):
        ctl.register(gpu_node(node, 4))
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    sleep = "#!/bin/sh\nsleep 60\n"
    for node in ("g0", "g1"):  # GPUs 0 and 1 of each node taken first
        ctl.submit([parse_sbatch(sleep, args=["--gres=gpu:2", "-w", node]).request])
    ctl.run_cycle()
    first = {node: launched(ctl, node, [])[0] for node in ("g0", "g1")}
    args = ["-N", "2", "--gres=gpu:2", "-w", "g0,g1"]
    (job,) = ctl.submit([parse_sbatch(sleep, args=args).request])
    ctl.run_cycle()
    mine = {node: launched(ctl, node, [first[node].task_id]) for node in ("g0", "g1")}
    here = "g0" if mine["g0"] else "g1"
    there = "g1" if here == "g0" else "g0"
    assert [t.gpu_indices for t in mine[here]] == [[2, 3]]
    ended = {"task_id": first[there].task_id, "state": "exited", "exit_code": 0}
    ctl.heartbeat(Heartbeat.model_validate({"node": there, "reports": [ended]}), wait_s=0)
    ctl.run_cycle()
    body = {"slots": {there: 1}, "tasks": [{"node": there, "argv": ["sleep", "60"]}]}
    assert client.post(f"/v1/jobs/{job}/steps", json=body).status_code == 201
    (task,) = launched(ctl, there, [])
    assert task.gpu_indices == [2, 3]
    ctl.persist.close()

    again = controller(tmp_path, clock)
    try:
        running = {here: [first[here], *mine[here]], there: [task]}
        for node in ("g0", "g1"):
            again.register(gpu_node(node, 4).model_copy(update={"running": running[node]}))
        again.run_cycle()
        args = ["--gres=gpu:2", "-w", there]
        (late,) = again.submit([parse_sbatch(sleep, args=args).request])
        again.run_cycle()
        given = [t for t in launched(again, there, [task.task_id]) if t.job_id == late]
        assert [t.gpu_indices for t in given] == [[0, 1]]
    finally:
        again.persist.close()
