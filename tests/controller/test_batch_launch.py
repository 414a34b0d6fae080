"""What the controller sends to start a batch script (sbatch), with the agents played by hand:
the folder sbatch ran in as the script's working directory (``submit_dir``) unless ``-D``
names one (a relative ``-D`` and relative output files are relative to it, as Slurm's), and
``SLURM_SUBMIT_DIR``; agents that do not say ``outputs=true`` (older ones refuse the fields)
get the launch without output files and that folder, and the job runs; a job adopted after a
controller restart and restarted in place keeps its output files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_probe_reports import _without

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    NodeInventory,
    TaskLaunch,
    TaskReport,
    TaskState,
)
from fusesched.controller.failures import job_failed, relaunch_due
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.submit.failure_policy import RestartRequest
from fusesched.submit.sbatch import parse_sbatch

HOME = "/home/ann/project"
SCRIPT = "#!/bin/sh\necho hi\n"
NEW_FIELDS = {"output_file", "error_file", "output_append", "submit_dir"}
OldLaunch = _without(TaskLaunch, NEW_FIELDS)


def sent(client: TestClient, *args: str, submit_dir: str | None = HOME) -> str:
    """``fusesched sbatch ARGS job.sh`` as the quick path sends it, from ``submit_dir``."""
    item: dict[str, Any] = {"name": "job.sh", "text": SCRIPT, "args": list(args)}
    if submit_dir is not None:
        item["submit_dir"] = submit_dir
    answer = client.post("/v1/submissions", json={"files": [item]})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["ids"][0])


def launched(ctl: Controller) -> TaskLaunch:
    ctl.run_cycle()
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    return launch


@pytest.mark.parametrize(
    ("args", "workdir", "submit_dir", "output"),
    [
        ((), None, HOME, f"{HOME}/slurm-{{}}.out"),  # where sbatch ran, when the node has it
        (("-D", "runs", "-o", "o-%j"), f"{HOME}/runs", None, f"{HOME}/runs/o-{{}}"),
        (("-D", "/scratch", "-o", "../o"), "/scratch", None, "/scratch/../o"),  # (no normpath)
        (("-o", "/abs/o-%j"), None, HOME, "/abs/o-{}"),
    ],
)
def test_the_script_runs_where_sbatch_ran_unless_d_says_otherwise(
    client: TestClient,
    ctl: Controller,
    args: tuple[str, ...],
    workdir: str | None,
    submit_dir: str | None,
    output: str,
) -> None:
    job = sent(client, *args)
    launch = launched(ctl)
    assert (launch.workdir, launch.submit_dir) == (workdir, submit_dir)
    assert launch.output_file == output.format(job)
    assert launch.env["SLURM_SUBMIT_DIR"] == HOME


@pytest.mark.parametrize(
    ("group", "workdir", "submit_dir"),
    [
        ({}, None, HOME),  # where run ran, when the node has it
        ({"workdir": "runs"}, f"{HOME}/runs", None),  # -D, relative to it
        ({"workdir": "/scratch"}, "/scratch", None),
        ({"image": "/images/alpine"}, None, None),  # a container: its own folder
    ],
)
def test_every_task_of_a_run_starts_where_run_ran(
    client: TestClient,
    ctl: Controller,
    group: dict[str, Any],
    workdir: str | None,
    submit_dir: str | None,
) -> None:
    """``fusesched run``'s job: every task runs the command (no script), each in the folder
    run ran in unless ``-D`` says otherwise, none writing an output file."""
    task = {"replicas": 2, "resources": {"cpu": "1"}, "argv": ["pwd"], **group}
    job = {"slurm_env": True, "submit_dir": HOME, "groups": [task]}
    assert client.post("/v1/jobs", json=job).status_code == 201
    ctl.run_cycle()
    launches = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert [(t.workdir, t.submit_dir) for t in launches] == [(workdir, submit_dir)] * 2
    assert all(t.output_file is None and t.env["SLURM_SUBMIT_DIR"] == HOME for t in launches)


def test_without_a_submit_dir_as_before(client: TestClient, ctl: Controller) -> None:
    sent(client, submit_dir=None)  # (a client older than it)
    launch = launched(ctl)
    assert launch.submit_dir is None and launch.workdir is None
    assert launch.output_file is None and "SLURM_SUBMIT_DIR" not in launch.env
    refused = client.post(
        "/v1/submissions",
        json={"files": [{"name": "j.sh", "text": SCRIPT, "args": [], "submit_dir": "rel"}]},
    )
    assert refused.status_code == 400 and "absolute path" in refused.text


def test_an_old_agent_gets_the_launch_without_output_files(
    ctl: Controller, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    job = sent(client, "-o", "/abs/o-%j", "--open-mode=append")
    ctl.run_cycle()
    with pytest.raises(ValueError, match="output_file"):  # what an old agent would do
        OldLaunch.model_validate({"task_id": "1.main.0", "job_id": "1", "output_file": "/o"})
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true&probes=true", json={"node": "n0", "running": []}
    )
    assert answer.status_code == 200, answer.text
    (sent_launch,) = answer.json()["launch"]
    assert NEW_FIELDS.isdisjoint(sent_launch), sent_launch
    assert OldLaunch.model_validate(sent_launch).task_id == f"{job}.main.0"  # type: ignore[attr-defined]
    assert "too old for output files" in caplog.text
    # it runs: its RUNNING report is taken as any other
    running = {"node": "n0", "running": [f"{job}.main.0"]}
    report = {"task_id": f"{job}.main.0", "state": "running", "pid": 7}
    answer = client.post("/v1/agents/heartbeat?wait=0", json=running | {"reports": [report]})
    assert answer.status_code == 200 and ctl.jobs[job].tasks[f"{job}.main.0"].state == "running"


def test_a_new_agent_gets_them(ctl: Controller, client: TestClient) -> None:
    job = sent(client, "-o", "/abs/o-%j", "--open-mode=append")
    ctl.run_cycle()
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true&probes=true&outputs=true",
        json={"node": "n0", "running": []},
    )
    (launch,) = HeartbeatReply.model_validate_json(answer.text).launch
    assert (launch.output_file, launch.output_append) == (f"/abs/o-{job}", True)
    assert launch.submit_dir == HOME


def test_an_adopted_job_restarted_in_place_keeps_its_output_file(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    request = parse_sbatch(SCRIPT, args=["-o", "/abs/o-%j"], submit_dir=HOME).request
    restart = RestartRequest(mode="restart-in-place", backoff_s=0)
    (job,) = ctl.submit([request.model_copy(update={"restart": restart})])
    first = launched(ctl)
    report = TaskReport(task_id=first.task_id, state=TaskState.RUNNING, pid=7)
    ctl.heartbeat(Heartbeat(node="n0", running=[first.task_id], reports=[report]), wait_s=0)
    ctl.persist.close()
    # a new controller; the node's agent registers again with what it runs (its launches)
    again = Controller(Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), ctl.logs, clock=clock)
    try:
        again.register(NodeInventory.model_validate({**ONE_NODE, "running": [first]}))
        again.run_cycle()
        live = again.jobs[job]
        assert not live.adopting
        with again.lock:
            job_failed(again, live, Failure(FailureKind.HANG, "n0", "hung"), clock.now)
        ended = TaskReport(task_id=first.task_id, state=TaskState.EXITED, exit_code=-15)
        again.heartbeat(Heartbeat(node="n0", running=[], reports=[ended]), wait_s=0)
        with again.lock:
            relaunch_due(again, clock.now)
        (relaunch,) = again.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    finally:
        again.persist.close()
    assert relaunch.task_id == f"{job}-r1.main.0"
    assert (relaunch.output_file, relaunch.submit_dir) == (f"/abs/o-{job}", HOME)
