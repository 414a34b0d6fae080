"""The submitting shell's environment in what the controller sends to start a job (the agents
played by hand): sbatch's job inherits it under its own and Slurm's variables (Slurm's default
``--export=ALL``), ``--export=NONE`` carries none of it, a container task gets none of it,
and it never shows in the job's views. Bad environments are refused with a reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_batch_launch import launched

from fusesched.api.wire import Heartbeat
from fusesched.controller.service import Controller
from fusesched.model.submit_env import carried_env

SCRIPT = "#!/bin/sh\npython train.py\n"
SHELL = {
    "PATH": "/home/ana/venv/bin:/usr/bin:/bin",
    "VIRTUAL_ENV": "/home/ana/venv",
    "FOO": "from-the-shell",
    "SLURM_JOB_ID": "999",
    "FUSESCHED_TOKEN": "secret-token",
    "HOME": "/home/ana",
}


def sent(client: TestClient, *args: str, environ: dict[str, str] | None = SHELL) -> str:
    body: dict[str, Any] = {"files": [{"name": "job.sh", "text": SCRIPT, "args": list(args)}]}
    if environ is not None:
        body["submit_env"] = environ
    answer = client.post("/v1/submissions", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["ids"][0])


def test_the_job_inherits_the_shell_under_its_own_variables(
    client: TestClient, ctl: Controller
) -> None:
    job = sent(client, "--export=ALL,FOO=named")
    env = launched(ctl).env
    assert env["PATH"] == SHELL["PATH"] and env["VIRTUAL_ENV"] == SHELL["VIRTUAL_ENV"]
    assert env["FOO"] == "named"  # (a variable --export names wins)
    assert env["SLURM_JOB_ID"] == job  # (the job's own, not the shell's)
    assert "secret-token" not in env.values() and "HOME" not in env
    shown = client.get(f"/v1/jobs/{job}").text
    assert "venv" not in shown and "submit_env" not in shown  # (in no view)


def test_export_none_carries_nothing(client: TestClient, ctl: Controller) -> None:
    sent(client, "--export=NONE,FOO")
    env = launched(ctl).env
    assert "PATH" not in env and "VIRTUAL_ENV" not in env
    assert env["FOO"] == "from-the-shell"  # (a bare name: its value from the shell)


def test_a_client_that_sends_none_as_before(client: TestClient, ctl: Controller) -> None:
    sent(client, environ=None)
    assert "VIRTUAL_ENV" not in launched(ctl).env


def test_a_container_task_inherits_nothing(client: TestClient, ctl: Controller) -> None:
    job = {
        "submit_env": SHELL,
        "groups": [{"resources": {"cpu": "1"}, "argv": ["true"], "image": "/images/alpine"}],
    }
    assert client.post("/v1/jobs", json=job).status_code == 201
    assert "VIRTUAL_ENV" not in launched(ctl).env


def test_bad_environments_are_refused_with_the_reason(client: TestClient, ctl: Controller) -> None:
    item = {"name": "job.sh", "text": SCRIPT, "args": []}
    for environ, reason in [
        ({"A": "x\u0000y"}, "NUL"),
        ({"A=B": "x"}, "invalid environment variable name"),
        ({f"BIG{i}": "x" * 100_000 for i in range(11)}, "use --export=NONE,NAME=value"),
        ({"ONE": "x" * 200_000}, "no program can be started with a longer one"),
    ]:
        answer = client.post("/v1/submissions", json={"files": [item], "submit_env": environ})
        assert answer.status_code == 422 and reason in answer.text, answer.text
    assert client.get("/v1/jobs").json() == []  # (nothing stored)


def test_an_environment_that_is_not_text_is_refused(client: TestClient, ctl: Controller) -> None:
    """JSON's ``\\udc80`` escape is no UTF-8 text: taken, its job's launch could not be sent
    to the node (every heartbeat that carried it failed, 500) and the job was requeued for
    ever. Refused with the reason instead."""
    for field in ("A", "PATH"):
        body = (
            '{"files": [{"name": "job.sh", "text": "#!/bin/sh\\ntrue\\n", "args": []}], '
            f'"submit_env": {{"{field}": "caf\\udce9"}}}}'
        )
        answer = client.post(
            "/v1/submissions", content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 422 and "not UTF-8 text" in answer.text, answer.text
    assert client.get("/v1/jobs").json() == []


def test_after_a_restart_waiting_and_running_jobs_keep_it(
    client: TestClient, ctl: Controller, tmp_path: Path, clock: Clock
) -> None:
    """Kept once apart from the requests (store/environments.py), read back by the next
    controller: a waiting array's members start with it, shared, and a running job it
    adopts has it to restart with."""
    body = {
        "files": [{"name": "job.sh", "text": SCRIPT, "args": ["-a", "0-2", "--time=5"]}],
        "submit_env": SHELL,
    }
    assert client.post("/v1/submissions", json=body).status_code == 201
    ctl.run_cycle()
    started = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert started and all(t.env["VIRTUAL_ENV"] == SHELL["VIRTUAL_ENV"] for t in started)
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)
    try:
        members = [j for j in again.jobs.values() if j.request.submit_env is not None]
        assert len(members) == 3  # (waiting, and running: adopted)
        assert len({id(j.request.submit_env) for j in members}) == 1  # (one copy, shared)
        assert all(j.request.submit_env == carried_env(SHELL) for j in members)
    finally:
        again.persist.close()
