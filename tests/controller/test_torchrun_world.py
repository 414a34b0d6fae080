"""The torchrun world of a job (submit/launch_mode.py, controller/torchrun_env.py): only the
tasks of its torchrun groups — a PyTorchJob's Master and Worker, a Volcano job's task whose
command runs ``torchrun`` — get ``PET_*``, counted and ranked among themselves, with the
address of the world's own first task; the job's other groups (a parameter server, a
``--standalone`` group) are no part of it, or a bare ``torchrun`` would wait for them."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient
from tests.controller.test_running_limit import beat

from fusesched.controller.launchenv import TaskSlot, task_env, task_slots
from fusesched.controller.service import Controller
from fusesched.controller.torchrun_env import TorchrunWorld
from fusesched.model.events import GroupPlacement, StartJob
from fusesched.submit import parse_kube_yaml
from fusesched.submit.launch_mode import torchrun_groups, torchrun_tasks
from fusesched.submit.request import JobRequest

ADDRESSES = {"n0": "10.0.0.1", "n1": "10.0.0.2", "n2": "10.0.0.3"}


def placed(*groups: tuple[str, list[str]]) -> StartJob:
    """A decision: each group's tasks one to a node, in order."""
    return StartJob(
        "9",
        tuple(
            GroupPlacement(
                name,
                {},
                np.arange(len(nodes)),
                np.ones(len(nodes), dtype=int),
                np.array(nodes, dtype=object),
            )
            for name, nodes in groups
        ),
    )


def base_env(slots: list[TaskSlot], slot: TaskSlot) -> dict[str, str]:
    return task_env(
        job_id="9",
        job_name="t",
        slot=slot,
        slots=slots,
        addresses=ADDRESSES,
        seq=9,
        controller_url="http://c",
        array_index=None,
        batch=False,
    )


def test_a_whole_torchrun_gang_is_one_world() -> None:
    """Every task of a one-group gang: its rank as the node rank, the tasks as the node
    count, the job's MASTER_ADDR/PORT; an integer PET_NPROC_PER_NODE makes WORLD_SIZE count
    processes (the operator's rule); what the group sets itself is kept."""
    slots = task_slots(placed(("worker", ["n0", "n1", "n2"])))
    world = TorchrunWorld.of(slots, ("worker",), ADDRESSES)
    assert world is not None
    base = base_env(slots, slots[2])
    assert world.env(base, {"PET_NPROC_PER_NODE": "auto"}, slots[2]) == {
        "PET_NNODES": "3",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": base["MASTER_ADDR"],
        "PET_MASTER_PORT": base["MASTER_PORT"],
    }
    added = world.env(base, {"PET_NPROC_PER_NODE": "4", "PET_MASTER_PORT": "1234"}, slots[2])
    assert added["WORLD_SIZE"] == "12" and "PET_MASTER_PORT" not in added


def test_other_groups_are_not_counted_in_the_world() -> None:
    """A parameter server placed first: the world is the trainers' two tasks, ranked 0 and 1,
    its master the first trainer's node (not the job's MASTER_ADDR, the server's)."""
    slots = task_slots(placed(("ps", ["n0"]), ("trainer", ["n1", "n2"])))
    world = TorchrunWorld.of(slots, ("trainer",), ADDRESSES)
    assert world is not None
    assert world.node_ranks == {"9.trainer.0": 0, "9.trainer.1": 1}
    base = base_env(slots, slots[2])
    added = world.env(base, {"PET_NPROC_PER_NODE": "2"}, slots[2])
    assert added == {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.0.0.2",
        "PET_MASTER_PORT": base["MASTER_PORT"],
        "WORLD_SIZE": "4",  # the trainers' processes, not the job's 3 tasks × 2
    }
    assert base["MASTER_ADDR"] == "10.0.0.1"  # (the job's own first task: the server)
    assert TorchrunWorld.of(slots, (), ADDRESSES) is None


VOLCANO = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mixed}
spec:
  schedulerName: fused-scheduler
  tasks:
    - name: ps
      template:
        spec:
          containers: [{name: c, command: [python, ps.py], resources: {requests: {cpu: 1}}}]
    - name: trainer
      replicas: 2
      template:
        spec:
          containers: [{name: c, command: [torchrun, t.py], resources: {requests: {cpu: 1}}}]
    - name: solo
      template:
        spec:
          containers:
            - {name: c, command: [torchrun, --standalone, s.py], resources: {requests: {cpu: 1}}}
"""


def test_the_torchrun_groups_of_a_volcano_job() -> None:
    (parsed,) = parse_kube_yaml(VOLCANO)
    request = parsed.request.identified()
    assert torchrun_groups(request) == ("trainer",)
    assert torchrun_tasks(request) == 2


def test_a_batch_script_has_no_world() -> None:
    request = JobRequest.model_validate(
        {"groups": [{"resources": {"cpu": 1}, "replicas": 2, "script": "torchrun t.py\n"}]}
    )
    assert torchrun_groups(request.identified()) == ()


def test_only_the_torchrun_groups_tasks_get_pet(ctl: Controller, client: TestClient) -> None:
    """On the controller: a server group, then two trainers running a bare torchrun."""
    groups = [
        {"name": "ps", "resources": {"cpu": "1"}, "argv": ["python", "ps.py"]},
        {"name": "trainer", "resources": {"cpu": "1"}, "replicas": 2, "argv": ["torchrun", "t"]},
    ]
    answer = client.post("/v1/jobs", json={"groups": groups})
    assert answer.status_code == 201, answer.text
    ctl.run_cycle()
    envs = {t.task_id.split(".", 1)[1]: dict(t.env) for t in beat(ctl, []).launch}
    pet = {task: {k: v for k, v in e.items() if k.startswith("PET_")} for task, e in envs.items()}
    assert pet["ps.0"] == {}
    assert [
        (pet[t]["PET_NNODES"], pet[t]["PET_NODE_RANK"]) for t in ("trainer.0", "trainer.1")
    ] == [
        ("2", "0"),
        ("2", "1"),
    ]
