"""A job whose task the kernel's OOM killer killed in, but whose command exits 0 (``python
big.py || true``, a child killed while the script goes on), ends as Slurm 22.05 ends it:
``OUT_OF_MEMORY``, not ``COMPLETED``. Its agent reports the task ``EXITED`` 0 with the OOM
reason; the controller fails the job with that reason, so every view (the job's state,
sacct ``OUT_OF_MEMORY 0:125``, squeue ``OOM``, scontrol ``JobState=OUT_OF_MEMORY``) and its
``afterok`` dependents agree, as for a task that exits 137 after an OOM kill. A job the
controller stopped (cancelled) ends as before, as does one with no OOM kill; an ``srun``
step's task is its step's, not the job's. The agents are played by hand."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller
from tests.controller.test_sacct_step_summaries import Via
from typer.testing import CliRunner

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.cli import sacct as sacct_cli
from fusesched.cli import squeue_format as sq
from fusesched.cli.main import app
from fusesched.cli.scontrol_show import job_record
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.model.phases import OOM_REASON
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch


def sbatch(ctl: Controller, *options: str, script: str = "#!/bin/sh\nsleep 600\n") -> str:
    (job_id,) = ctl.submit([parse_sbatch(script, args=list(options)).request])
    return job_id


def start(ctl: Controller, running: list[str] | None = None) -> list[TaskLaunch]:
    """Run a cycle; n0's agent takes what it is sent and says it runs: the launches."""
    ctl.run_cycle()
    before = running or []
    launches = ctl.heartbeat(Heartbeat(node="n0", running=before), wait_s=0).launch
    started = [launch.task_id for launch in launches]
    reports = [
        TaskReport(task_id=t, state=TaskState.RUNNING, pid=100 + i) for i, t in enumerate(started)
    ]
    ctl.heartbeat(Heartbeat(node="n0", reports=reports, running=before + started), wait_s=0)
    return list(launches)


def exits(ctl: Controller, task: str, code: int, reason: str, running: list[str]) -> None:
    """n0's agent says ``task`` exited with ``code`` and ``reason``; a cycle runs."""
    report = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code, reason=reason)
    ctl.heartbeat(Heartbeat(node="n0", reports=[report], running=running), wait_s=0)
    ctl.run_cycle()


def show(ctl: Controller, job_id: str) -> dict[str, Any]:
    answer = TestClient(create_app(ctl)).get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def sacct(ctl: Controller, monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    """``fusesched sacct -a -S 1970-01-01 -P`` with ``args``, answered by ``ctl``'s app (in
    UTC): its lines after the header."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(sacct_cli, "_client", lambda *_: Via(TestClient(create_app(ctl))))
    try:
        result = CliRunner().invoke(app, ["sacct", "-a", "-S", "1970-01-01", "-P", *args])
    finally:
        monkeypatch.undo()
        time.tzset()
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[1:]


def scontrol(ctl: Controller, job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields of the job, by name."""
    record = job_record(show(ctl, job_id), ctl.clock())
    return {key: value for line in record for key, value in line}


def test_a_job_whose_task_exits_0_after_an_oom_kill_is_out_of_memory_in_every_view(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = sbatch(ctl, "-c", "1", script="#!/bin/sh\npython big.py || true\n")
    (task,) = start(ctl)
    ok = sbatch(ctl, "-c", "1", f"--dependency=afterok:{job}")
    notok = sbatch(ctl, "-c", "1", f"--dependency=afternotok:{job}")
    exits(ctl, task.task_id, 0, OOM_REASON, [])
    ended = show(ctl, job)
    assert (ended["state"], ended["phase"], ended["reason"]) == ("Failed", "failed", OOM_REASON)
    assert job not in ctl.jobs  # ended: written and forgotten
    assert sq.slurm_state(ended) == "OUT_OF_MEMORY" and sq.state_code(ended) == "OOM"
    shown = scontrol(ctl, job)
    assert (shown["JobState"], shown["ExitCode"]) == ("OUT_OF_MEMORY", "0:125")
    fields = ("-o", "JobID,State,ExitCode")
    assert sacct(ctl, monkeypatch, "-j", job, *fields) == [
        f"{job}|OUT_OF_MEMORY|0:125",
        f"{job}.batch|OUT_OF_MEMORY|0:125",
    ]
    assert sacct(ctl, monkeypatch, "-X", "-s", "OOM", *fields) == [f"{job}|OUT_OF_MEMORY|0:125"]
    assert show(ctl, ok)["state"] == "Cancelled"  # afterok: never met by an OOM-killed job
    assert "dependency" in show(ctl, ok)["reason"]
    assert show(ctl, notok)["state"] == "Running"  # afternotok: met


def test_it_shows_as_a_job_whose_oom_killed_task_exits_137(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two OOM kills end the same way; only the job's stored exit status differs."""
    ended = []
    for code in (0, 137):
        job = sbatch(ctl, "-c", "1")
        (task,) = start(ctl)
        exits(ctl, task.task_id, code, OOM_REASON, [])
        view = show(ctl, job)
        shown = scontrol(ctl, job)
        said = (shown["JobState"], shown["Reason"], shown["ExitCode"])
        ended.append((view["state"], view["reason"], sq.slurm_state(view), said))
        assert view["exit_code"] == code
    assert ended[0] == ended[1]
    lines = sacct(ctl, monkeypatch, "-X", "-o", "State,ExitCode")
    assert lines == ["OUT_OF_MEMORY|0:125"] * 2


def test_a_job_with_no_oom_kill_that_exits_0_completes_and_meets_afterok(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = sbatch(ctl, "-c", "1")
    (task,) = start(ctl)
    ok = sbatch(ctl, "-c", "1", f"--dependency=afterok:{job}")
    exits(ctl, task.task_id, 0, "", [])
    ended = show(ctl, job)
    assert (ended["state"], ended["phase"], sq.slurm_state(ended)) == (
        "Completed",
        "completed",
        "COMPLETED",
    )
    fields = ("-X", "-j", job, "-o", "JobID,State,ExitCode")
    assert sacct(ctl, monkeypatch, *fields) == [f"{job}|COMPLETED|0:0"]
    assert show(ctl, ok)["state"] == "Running"  # afterok: met


def test_an_oom_kill_in_one_task_outweighs_another_tasks_failing_exit(ctl: Controller) -> None:
    """As Slurm's batch step with an oom-kill event: its status is the OOM's, whatever the
    exits of its tasks (here the gang's other task failed first with exit 3)."""
    body = {"groups": [{"resources": {"cpu": "1"}, "argv": ["x"], "replicas": 2}]}
    (job,) = ctl.submit([JobRequest.model_validate(body)])
    first, second = (t.task_id for t in start(ctl))
    exits(ctl, second, 0, OOM_REASON, [first])
    assert show(ctl, job)["state"] == "Running"  # (an exit 0 stops no other task)
    exits(ctl, first, 3, "", [])
    ended = show(ctl, job)
    assert (ended["phase"], sq.slurm_state(ended), ended["exit_code"]) == (
        "failed",
        "OUT_OF_MEMORY",
        3,
    )
    assert ended["reason"] == OOM_REASON


def test_a_cancelled_job_whose_task_was_oom_killed_is_cancelled(ctl: Controller) -> None:
    job = sbatch(ctl, "-c", "1")
    (task,) = start(ctl)
    ctl.cancel(job)
    ctl.run_cycle()
    exits(ctl, task.task_id, 0, OOM_REASON, [])
    assert show(ctl, job)["state"] == "Cancelled"


def test_a_steps_oom_kill_is_its_steps_not_the_jobs(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``srun`` step whose task was OOM-killed but exited 0 is ``OUT_OF_MEMORY``; its
    batch script, which exits 0 and was killed in nowhere, leaves the job ``COMPLETED``: in
    Slurm each step has its own cgroup, and the job's state is its batch step's."""
    job = sbatch(ctl, "-n", "2", script="#!/bin/sh\nsrun x\n")
    (batch,) = start(ctl)
    body = {"slots": {"n0": 1}, "tasks": [{"node": "n0", "argv": ["x"]}]}
    answer = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert answer.status_code == 201, answer.text
    (step_task,) = answer.json()["task_ids"]
    start(ctl, [batch.task_id])
    exits(ctl, step_task, 0, OOM_REASON, [batch.task_id])
    exits(ctl, batch.task_id, 0, "", [])
    assert show(ctl, job)["state"] == "Completed"
    fields = ("-o", "JobID,State,ExitCode")
    assert sacct(ctl, monkeypatch, "-j", job, *fields) == [
        f"{job}|COMPLETED|0:0",
        f"{job}.batch|COMPLETED|0:0",
        f"{job}.0|OUT_OF_MEMORY|0:125",
    ]


def test_an_oom_kill_reported_before_a_controller_restart_still_ends_the_job_so(
    tmp_path: Path, clock: Clock
) -> None:
    """The task's reason is stored with its exit: the restarted controller that adopts the
    rest of the gang reads it back."""
    ctl = one_node_controller(tmp_path, clock)
    body = {"groups": [{"resources": {"cpu": "1"}, "argv": ["x"], "replicas": 2}]}
    (job,) = ctl.submit([JobRequest.model_validate(body)])
    first, second = start(ctl)
    exits(ctl, first.task_id, 0, OOM_REASON, [second.task_id])
    ctl.persist.close()
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs"), clock=clock
    )
    try:
        again.register(NodeInventory.model_validate({**ONE_NODE, "running": [second]}))
        again.run_cycle()  # (adopted)
        exits(again, second.task_id, 0, "", [])
        ended = show(again, job)
        assert (ended["phase"], sq.slurm_state(ended)) == ("failed", "OUT_OF_MEMORY"), ended
    finally:
        again.persist.close()
