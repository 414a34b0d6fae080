"""What a Slurm job's tasks are told of how it was submitted, as the controller sends it
(the agents played by hand): ``SLURM_SUBMIT_HOST`` (the submission file's ``submit_host``),
``SLURM_JOB_RESERVATION``, the variables of its Slurm options (``SLURM_NTASKS_PER_NODE``,
``SLURM_MEM_PER_CPU`` instead of ``SLURM_MEM_PER_NODE``, ``SLURM_GPUS_PER_TASK``,
``SLURM_JOB_DEPENDENCY``, ``SLURM_EXPORT_ENV``…) and ``SLURM_JOB_GPUS`` (the GPUs the job holds
on the task's node); none of them for a job submitted without them, and a job step's tasks
inherit the script's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import DeviceInfo, Heartbeat, NodeInventory, TaskLaunch
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

SCRIPT = "#!/bin/sh\nsleep 60\n"
T0 = 1_800_000_000.0
TOLD = {
    "SLURM_SUBMIT_HOST",
    "SLURM_JOB_RESERVATION",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_GPU",
    "SLURM_CPUS_PER_GPU",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_JOB_DEPENDENCY",
    "SLURM_EXPORT_ENV",
    "SLURM_JOB_GPUS",
}


def gpu_node(name: str) -> NodeInventory:
    devices = [DeviceInfo(index=i, uuid=f"GPU-{name}-{i}", model="H200") for i in range(4)]
    resources = {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "4"}
    return NodeInventory(name=name, resources=resources, devices=devices)


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Controller:
    clock.now = T0
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=clock)
    for name in ("g0", "g1"):
        controller.register(gpu_node(name))
    return controller


@pytest.fixture
def client(ctl: Controller) -> TestClient:
    return TestClient(create_app(ctl), raise_server_exceptions=False)


def sbatch(client: TestClient, *args: str, **item: Any) -> str:
    """``fusesched sbatch ARGS job.sh`` as the quick path sends it."""
    item = {"name": "job.sh", "text": SCRIPT, "args": list(args), **item}
    body = {"files": [item], "user": "ann"}
    answer = client.post("/v1/submissions", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["ids"][0])


def launched(ctl: Controller, node: str, running: tuple[str, ...] = ()) -> list[TaskLaunch]:
    ctl.run_cycle()
    return ctl.heartbeat(Heartbeat(node=node, running=list(running)), wait_s=0).launch


def test_a_batch_script_is_told_how_it_was_submitted(ctl: Controller, client: TestClient) -> None:
    body = {"name": "p", "nodes": ["g0"], "start": T0, "end": T0 + 3600, "users": ["ann"]}
    assert client.post("/v1/reservations", json=body).status_code == 201
    args = ["-n", "2", "--ntasks-per-node=2", "--gpus-per-task=1", "--mem-per-cpu=1500K"]
    args += ["-d", "singleton", "--export=NONE,GREETING=hi", "--reservation=p", "-t", "10"]
    job = sbatch(client, *args, submit_host="login-1.example.org")
    assert ctl.jobs[job].request.submit_host == "login-1.example.org"
    (launch,) = launched(ctl, "g0")
    told = {name: launch.env[name] for name in TOLD if name in launch.env}
    assert told == {
        "SLURM_SUBMIT_HOST": "login-1.example.org",
        "SLURM_JOB_RESERVATION": "p",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_MEM_PER_CPU": "2",  # (1500K: MiB, rounded up as Slurm's)
        "SLURM_GPUS_PER_TASK": "1",
        "SLURM_JOB_DEPENDENCY": "singleton",
        "SLURM_EXPORT_ENV": "NONE,GREETING=hi",  # (srun in the script reads it)
        "SLURM_JOB_GPUS": "0,1",  # (both tasks': the job's on the script's node)
    }
    # given --mem-per-cpu, Slurm tells SLURM_MEM_PER_CPU, not SLURM_MEM_PER_NODE
    assert "SLURM_MEM_PER_NODE" not in launch.env and launch.env["SLURM_CPUS_ON_NODE"] == "2"
    assert launch.gpu_indices == [0]  # (CUDA_VISIBLE_DEVICES: the script's own task's)


def test_nothing_is_told_that_was_not_given(ctl: Controller, client: TestClient) -> None:
    """A client older than ``submit_host`` (or the REST API's caller) says no host: no
    ``SLURM_SUBMIT_HOST``; no option given, no reservation, no GPU: none of the others;
    ``--export=ALL`` is srun's default: no ``SLURM_EXPORT_ENV``; ``--mem`` still tells
    ``SLURM_MEM_PER_NODE``."""
    sbatch(client, "--export=ALL", "--mem=1G")
    (launch,) = launched(ctl, "g0")
    assert not TOLD & set(launch.env), launch.env
    assert launch.env["SLURM_MEM_PER_NODE"] == "1024"


def test_the_host_is_checked_and_kept_for_slurm_jobs_only(
    ctl: Controller, client: TestClient
) -> None:
    yaml = 'name: y\ncommand: ["true"]\nresources: {cpu: 1}\n'
    files = [
        {"name": "job.sh", "text": SCRIPT, "submit_host": "h1"},
        {"name": "y.yaml", "text": yaml, "submit_host": "h1"},
    ]
    ids = client.post("/v1/submissions", json={"files": files}).json()["ids"]
    assert [ctl.jobs[job].request.submit_host for job in ids] == ["h1", None]
    for bad in ("-x", "a b", "h\n", "x" * 256, ""):
        files = [{"name": "job.sh", "text": SCRIPT, "submit_host": bad}]
        refused = client.post("/v1/submissions", json={"files": files})
        assert refused.status_code == 422 and "submit_host" in refused.text, bad
    job = {"slurm_env": True, "submit_host": "a b", "groups": [{"argv": ["true"]}]}
    refused = client.post("/v1/jobs", json=job)
    assert refused.status_code in (400, 422) and "submit_host" in refused.text


def test_each_task_of_a_run_is_told_its_nodes_gpus(ctl: Controller, client: TestClient) -> None:
    """``fusesched run -N 2 --gpus-per-node=2``'s job (every task runs the command): each
    task is told the GPUs the job holds on its own node, and the options, as srun's tasks."""
    task = {"replicas": 2, "resources": {"cpu": "1", "nvidia.com/gpu": "2"}, "argv": ["true"]}
    job = {
        "slurm_env": True,
        "submit_host": "login-2",
        "slurm_options": {"gpus_per_node": "2", "ntasks_per_node": 1},
        "placement": {"max_tasks_per_node": 1},
        "groups": [task],
    }
    assert client.post("/v1/jobs", json=job).status_code == 201
    ctl.run_cycle()
    envs = [launch.env for node in ("g0", "g1") for launch in launched(ctl, node)]
    assert [e["SLURM_JOB_GPUS"] for e in envs] == ["0,1", "0,1"]
    assert {(e["SLURM_SUBMIT_HOST"], e["SLURM_GPUS_PER_NODE"]) for e in envs} == {("login-2", "2")}
    assert {e["SLURMD_NODENAME"] for e in envs} == {"g0", "g1"}


def test_a_steps_tasks_keep_the_scripts_and_no_mem_per_node(
    ctl: Controller, client: TestClient
) -> None:
    """A step's task of a job given ``--mem-per-cpu`` is told its node's CPUs but no
    ``SLURM_MEM_PER_NODE`` (Slurm's job has none), and inherits what the script is told."""
    job = sbatch(client, "-N", "2", "--ntasks-per-node=1", "--mem-per-cpu=64M", submit_host="h")
    (batch,) = launched(ctl, "g0")
    assert (batch.env["SLURM_MEM_PER_CPU"], batch.env["SLURM_SUBMIT_HOST"]) == ("64", "h")
    task = {"node": "g1", "argv": ["true"]}
    made = client.post(f"/v1/jobs/{job}/steps", json={"slots": {"g1": 1}, "tasks": [task]})
    assert made.status_code == 201, made.text
    (step,) = launched(ctl, "g1")
    assert step.env["SLURM_CPUS_ON_NODE"] == "1" and "SLURM_MEM_PER_NODE" not in step.env
    assert (step.env["SLURM_MEM_PER_CPU"], step.env["SLURM_SUBMIT_HOST"]) == ("64", "h")
    assert step.env["SLURM_NTASKS_PER_NODE"] == "1"
