"""A heterogeneous job (sbatch hetjob) in the controller, the agent played by hand: one launch,
the batch script on component 0's first task with Slurm's ``_HET_GROUP_<n>`` variables and a
hostfile per component; its steps (``POST /v1/jobs/{id}/steps`` with ``het``) counted against
the component they run on; ``GET /v1/jobs/{id}`` lists the components; other pools than local
agents are not routed to."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from fusesched.api.wire import Heartbeat, TaskLaunch
from fusesched.backends.federation_config import parse_federation
from fusesched.backends.routing import route
from fusesched.cli.live import component_lines, jobs_table
from fusesched.controller.hetjob_env import components, het_slurm_env
from fusesched.controller.job_steps import (
    StepsBusy,
    StepShare,
    check_fits,
    component_share,
    share_env,
    share_of,
)
from fusesched.controller.launchenv import SlurmJob, TaskSlot
from fusesched.controller.service import Controller
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/sh\nsrun --het-group=1 hostname\n"
HET = ["-n1", "-c2", "--mem=1G", ":", "-n2", "-c1", "--mem-per-cpu=256M"]


def started(ctl: Controller, *args: str) -> tuple[str, TaskLaunch]:
    (job,) = ctl.submit([parse_sbatch(SCRIPT, source="het.sh", args=list(args)).request])
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    return job, launch


def step(client: TestClient, job: str, het: dict[int, int] | None, count: int) -> Any:
    body: dict[str, Any] = {
        "slots": {"n0": count},
        "tasks": [{"node": "n0", "argv": ["sleep", "60"]}] * count,
    }
    if het is not None:
        body["het"] = [{"group": g, "slots": {"n0": n}} for g, n in het.items()]
    return client.post(f"/v1/jobs/{job}/steps", json=body)


def test_the_script_alone_starts_with_each_components_variables_and_hostfile(
    ctl: Controller,
) -> None:
    job, launch = started(ctl, *HET)
    assert launch.task_id == f"{job}.het0.0" and launch.cpu_ids and len(launch.cpu_ids) == 2
    env = launch.env
    assert env["SLURM_HET_SIZE"] == "2"
    # the unsuffixed allocation is component 0's, as in Slurm's batch script
    assert (env["SLURM_NTASKS"], env["SLURM_CPUS_PER_TASK"], env["SLURM_PROCID"]) == ("1", "2", "0")
    assert env["SLURM_NTASKS_HET_GROUP_0"] == "1" and env["SLURM_NTASKS_HET_GROUP_1"] == "2"
    assert env["SLURM_JOB_NODELIST_HET_GROUP_1"] == "n0"
    assert env["SLURM_TASKS_PER_NODE_HET_GROUP_1"] == "2"
    assert env["SLURM_NNODES_HET_GROUP_1"] == "1"
    assert env["SLURM_CPUS_PER_TASK_HET_GROUP_1"] == "1"
    assert env["SLURM_JOB_ID_HET_GROUP_1"] == job  # (one job id for every component)
    assert env["SLURM_PACK_SIZE"] == "2"  # (Slurm's older name, which it still sets)
    assert env["SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0"] == "2"  # (1 task × 2 CPUs on n0)
    assert env["SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1"] == "2"  # (2 tasks × 1 CPU on n0)
    # each task's memory and GPUs (srun --het-group's per-node variables: agent/step_het.py)
    assert env["FUSESCHED_MEM_PER_TASK_HET_GROUP_0"] == str(1 << 30)
    assert env["FUSESCHED_MEM_PER_TASK_HET_GROUP_1"] == str(256 << 20)
    assert env["FUSESCHED_GPUS_PER_TASK_HET_GROUP_0"] == "0"  # (said: a controller that knows)
    for name in ("SLURM_JOB_NAME", "SLURM_JOB_QOS", "SLURM_JOB_PARTITION"):
        assert env[f"{name}_HET_GROUP_0"] == env[f"{name}_HET_GROUP_1"] == env[name]
    assert launch.files == {
        "fusesched.hostfile": "n0 slots=3\n",  # (mpirun in the script spans the whole job)
        "fusesched.het0.hostfile": "n0 slots=1\n",
        "fusesched.het1.hostfile": "n0 slots=2\n",
    }


def test_steps_count_the_slots_of_their_own_component(ctl: Controller, client: TestClient) -> None:
    job, batch = started(ctl, *HET)
    first = step(client, job, {1: 2}, 2)
    assert first.status_code == 201, first.text
    launches = ctl.heartbeat(Heartbeat(node="n0", running=[batch.task_id]), wait_s=0).launch
    assert launches[0].env["FUSESCHED_STEP_HET_SLOTS"] == "1:n0:2"
    busy = step(client, job, {1: 1}, 1)
    assert busy.status_code == 409, busy.text
    assert busy.json()["detail"] == (
        "Requested nodes are busy: component 1 of the job: n0 has 2 of 2 in use (by step(s) 0)"
    )
    assert step(client, job, None, 1).status_code == 201  # component 0's slot is free
    assert step(client, job, {0: 1}, 1).status_code == 409  # (now it is held)
    never = step(client, job, {1: 3}, 3)
    assert never.status_code == 400
    assert "component 1 of the job has 2 slot(s) on node n0" in never.json()["detail"]
    missing = step(client, job, {2: 1}, 1)
    assert missing.status_code == 400
    assert missing.json()["detail"] == (
        f"--het-group=2: job {job} has no component 2 (its components: 0-1)"
    )
    both = {"slots": {"n0": 2}, "tasks": [{"node": "n0", "argv": ["true"]}]}
    both["het"] = [{"group": 0, "slots": {"n0": 1}}]
    said = client.post(f"/v1/jobs/{job}/steps", json=both)
    assert said.status_code == 422 and "sum of the components' slots" in said.text


def test_a_job_that_is_not_heterogeneous_has_component_0_only(
    ctl: Controller, client: TestClient
) -> None:
    job, _ = started(ctl, "-n", "2")
    assert step(client, job, {0: 1}, 1).status_code == 201
    refused = step(client, job, {1: 1}, 1)
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        f"--het-group=1: job {job} is not a heterogeneous job (its one component is 0)"
    )


def test_a_components_cpus_per_node_round_a_fraction_up() -> None:
    def slot(group: str, rank: int, node: str) -> TaskSlot:
        return TaskSlot(f"1.{group}.{rank}", group, rank, rank, node, 0, 0, 1)

    slots = [slot("het0", 0, "a"), *(slot("het1", r, n) for r, n in enumerate("bbba", 1))]
    per_task = {"het0": Resources({CPU: 2000}), "het1": Resources({CPU: 500, GPU: 1})}
    parts = components(["het0", "het1"], slots, per_task)
    job = SlurmJob("1", "het", "ann", "default", "ann", "silver", 2, 0)
    env = het_slurm_env(job, parts)
    assert env["FUSESCHED_GPUS_PER_TASK_HET_GROUP_1"] == "1"
    assert env["FUSESCHED_MEM_PER_TASK_HET_GROUP_1"] == "0"
    assert env["SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0"] == "2"
    assert env["SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1"] == "2,1"  # (1.5 on b, 0.5 on a)
    assert "SLURM_CPUS_PER_TASK_HET_GROUP_1" not in env  # (half a CPU: no whole count)
    assert env["SLURM_TASKS_PER_NODE_HET_GROUP_1"] == "3,1"


def test_shares_read_back_per_component() -> None:
    share = StepShare(3, (("a", 3),), het=((0, (("a", 1),)), (1, (("a", 2),))))
    assert share_of(share_env(share)) == share
    assert component_share(share, 1).slots == (("a", 2),)
    assert component_share(share, 2).slots == ()
    plain = StepShare(4, (("a", 1),))
    assert component_share(plain, 0) == plain and component_share(plain, 1).slots == ()
    assert share_of({**share_env(plain), "FUSESCHED_STEP_HET_SLOTS": "x:a:1"}) is None
    held = [component_share(share, 0)]
    check_fits({"a": 2}, {"a": 1}, False, held, "component 0 of the job")  # 1 of 2 held
    with pytest.raises(StepsBusy, match="busy: component 0 of the job: a has 1 of 2 in use"):
        check_fits({"a": 2}, {"a": 2}, False, held, "component 0 of the job")


def test_show_and_jobs_say_it_is_heterogeneous(ctl: Controller, client: TestClient) -> None:
    job, _ = started(ctl, *HET)
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["components"] == [
        {"name": "het0", "tasks": 1, "resources": {"cpu": "2", "memory": "1Gi"}},
        {"name": "het1", "tasks": 2, "resources": {"cpu": "1", "memory": "256Mi"}},
    ]
    assert component_lines(shown) == [
        "heterogeneous job: 2 components (srun --het-group=N runs on one)",
        "  component 0 (het0): 1 task × cpu 2, memory 1Gi",
        "  component 1 (het1): 2 tasks × cpu 1, memory 256Mi",
    ]
    odd = {"name": "het0", "tasks": 3, "resources": {"cpu": "1", "memory": "17476266"}}
    assert component_lines({"components": [odd]})[1] == (  # (--mem=50M over 3 tasks)
        "  component 0 (het0): 3 tasks × cpu 1, memory 16.7Mi"
    )
    listed = client.get("/v1/jobs").json()
    rows = listed if isinstance(listed, list) else listed["jobs"]
    (row,) = [r for r in rows if r["id"] == job]
    cells = list(jobs_table([row]).columns[3].cells)
    assert cells == [f"{row['type']}+het2"]
    (other,) = ctl.submit([parse_sbatch(SCRIPT, args=["-n", "1"]).request])
    assert client.get(f"/v1/jobs/{other}").json()["components"] is None


def test_heterogeneous_jobs_are_routed_to_local_pools_only() -> None:
    config = parse_federation(
        {
            "pools": [{"name": "slurm", "kind": "slurm"}],
            "rules": [{"name": "hpc", "match": {"types": ["hpc"]}, "pools": ["slurm", "local"]}],
        },
        "fed.yaml",
    )
    request = parse_sbatch(SCRIPT, args=HET).request
    result = route(config, request, {})
    assert result.pools == ("local",)
    assert (
        "pool slurm dropped: heterogeneous jobs (hetjob) run only in local pools"
        in result.explanation
    )
