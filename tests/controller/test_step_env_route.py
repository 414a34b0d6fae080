"""A launch's own variables (``env`` of ``POST /v1/jobs/{id}/steps`` and ``/remote``): checked
(422 with a reason), merged over the job's environment without overriding what belongs to
the job, the node or the task, sent to the agent in the launch, and never shown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_step_route import beat

from fusesched.api.step_schemas import (
    LAUNCH_ENV_MAX_BYTES,
    LAUNCH_ENV_MAX_VAR_BYTES,
    LAUNCH_ENV_MAX_VARS,
)
from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch

SECRET = "hunter2"


def running_job(ctl: Controller) -> str:
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    beat(ctl, [])
    return job


def post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    """``body`` as JSON with every non-ASCII character escaped (so a lone surrogate can be
    sent, as any client may)."""
    headers = {"content-type": "application/json"}
    return client.post(path, content=json.dumps(body), headers=headers)


def step(client: TestClient, job: str, env: dict[str, str]) -> Any:
    task = {"node": "n0", "argv": ["printenv", "SECRET"], "env": env}
    return post(client, f"/v1/jobs/{job}/steps", {"slots": {"n0": 1}, "tasks": [task]})


def test_a_steps_variables_reach_its_launch_and_nothing_shown(
    ctl: Controller, client: TestClient
) -> None:
    job = running_job(ctl)
    sent = {
        "SECRET": SECRET,
        "SLURM_PROCID": "0",
        "HOME": "/elsewhere",
        "FUSESCHED_JOB_ID": "999",
        "FUSESCHED_STEP_SLOTS": "n0:0",
        "FUSESCHED_JOB_TOKEN": "forged",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    created = step(client, job, sent)
    assert created.status_code == 201, created.text
    (launch,) = beat(ctl, [f"{job}.main.0"])
    assert launch.argv == ["printenv", "SECRET"]
    assert launch.env["SECRET"] == SECRET and launch.env["SLURM_PROCID"] == "0"
    # what the job, the node and the task give is the controller's, not the step's
    assert launch.env["FUSESCHED_JOB_ID"] == job
    assert launch.env["FUSESCHED_STEP_SLOTS"] == "n0:1"
    assert launch.env["FUSESCHED_NODE"] == "n0"
    for name in ("HOME", "FUSESCHED_JOB_TOKEN", "CUDA_VISIBLE_DEVICES"):
        assert name not in launch.env, name
    # mpirun's launcher's route takes them too
    orted = client.post(
        f"/v1/jobs/{job}/remote", json={"node": "n0", "argv": ["true"], "env": {"A": "1"}}
    )
    assert orted.status_code == 201, orted.text
    launches = beat(ctl, [f"{job}.main.0", launch.task_id])
    assert launches[0].env["A"] == "1" and launches[0].argv == ["true"]
    # nothing that shows the job holds them
    ctl.persist.flush()
    for path in (f"/v1/jobs/{job}", "/v1/jobs", f"/v1/portal/jobs/{job}"):
        shown = client.get(path)
        assert shown.status_code == 200, (path, shown.text)
        assert SECRET not in shown.text, path
        assert launch.task_id in client.get(f"/v1/jobs/{job}").text
    assert client.get(f"/v1/tasks/{launch.task_id}").status_code == 200
    assert SECRET not in client.get(f"/v1/tasks/{launch.task_id}").text


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"1A": "x"}, "'1A' is not a variable name"),
        ({"A=B": "x"}, "'A=B' is not a variable name"),
        ({"": "x"}, "'' is not a variable name"),
        ({"A": "x\x00y"}, "NUL character"),
        ({"A": "x" * LAUNCH_ENV_MAX_VAR_BYTES}, f"A: {LAUNCH_ENV_MAX_VAR_BYTES + 2} bytes"),
        ({"A": "\u00e9" * (LAUNCH_ENV_MAX_VAR_BYTES // 2)}, "bytes, at most"),  # (2 bytes each)
        (
            {f"V{i}": "x" * 100_000 for i in range(LAUNCH_ENV_MAX_BYTES // 100_000 + 1)},
            f"bytes of variables: at most {LAUNCH_ENV_MAX_BYTES}",
        ),
        ({f"V{i}": "" for i in range(LAUNCH_ENV_MAX_VARS + 1)}, f"at most {LAUNCH_ENV_MAX_VARS}"),
        ({"A": "\ud800"}, "A: its value is not UTF-8 text"),
    ],
)
def test_bad_variables_are_refused_with_a_reason(
    ctl: Controller, client: TestClient, env: dict[str, str], reason: str
) -> None:
    job = running_job(ctl)
    refused = step(client, job, env)
    assert refused.status_code == 422, refused.text
    assert reason in refused.text
    orted = post(client, f"/v1/jobs/{job}/remote", {"node": "n0", "argv": ["true"], "env": env})
    assert orted.status_code == 422, orted.text
    assert beat(ctl, [f"{job}.main.0"]) == []  # nothing started
    assert step(client, job, {"A": "x" * 1000}).status_code == 201  # (the job goes on)


def test_a_step_on_nodes_of_one_machine_keeps_the_jobs_transport_setting(
    ctl: Controller, client: TestClient
) -> None:
    """Two nodes at one address (``fusesched up --agents 2``): the job's OpenMPI goes without
    shared memory (``OMPI_MCA_btl=^vader``, controller/launchenv.py). A step's mpirun gets it
    from the job too, not only from the environment srun was run in: under salloc that is
    the user's login shell, which does not have it (the ranks then crashed in vader). The
    step's own setting wins."""
    ctl.register(NodeInventory(name="n1", resources={"cpu": "4", "memory": "4Gi"}))
    script = parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-N", "2", "-n", "2"])
    (job,) = ctl.submit([script.request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    assert batch.env["OMPI_MCA_btl"] == "^vader"

    on_n1: list[str] = []

    def mpirun_on_n1(env: dict[str, str]) -> dict[str, str]:
        task = {"node": "n1", "argv": ["mpirun", "a.out"], "env": env}
        body = {"slots": {"n1": 1}, "tasks": [task], "overlap": True}
        created = post(client, f"/v1/jobs/{job}/steps", body)
        assert created.status_code == 201, created.text
        (launch,) = ctl.heartbeat(Heartbeat(node="n1", running=on_n1), wait_s=0).launch
        on_n1.append(launch.task_id)
        return dict(launch.env)

    salloc = mpirun_on_n1({"OMPI_MCA_plm_rsh_agent": "fusesched-remote"})
    assert salloc["OMPI_MCA_btl"] == "^vader"
    assert "OMPI_MCA_orte_default_hostfile" not in salloc  # (the batch script's, not the step's)
    assert mpirun_on_n1({"OMPI_MCA_btl": "tcp,self"})["OMPI_MCA_btl"] == "tcp,self"
