"""What users see of Slurm's COMPLETING (controller/completing_views.py): a job whose ended
or requeued run still holds its booking where a task of its step is being killed is shown
completing (``completing`` in its view, squeue's ``CG``, ``-t CG`` finds it) until the hold
ends, while its stored state stays its end's; a node on which such bookings are all that
is booked is shown ``comp``. The agent is played by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_completing import _launched, _submit
from tests.controller.test_late_exits import _cancelled_with_a_step_left
from tests.controller.test_late_exits_restart import _inventory, _restarted_while_a_step_dies
from tests.controller.test_step_accounting import end, listed, step
from tests.controller.test_step_route import beat
from typer.testing import CliRunner

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskLaunch, TaskReport, TaskState
from fusesched.cli import job_list, live
from fusesched.cli.main import app
from fusesched.controller.service import Controller
from fusesched.sdk import Client
from fusesched.store.records import JobState
from fusesched.submit.sbatch import parse_sbatch


def _shown(client: TestClient, job: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs/{job}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _node(client: TestClient) -> dict[str, Any]:
    (node,) = client.get("/v1/nodes").json()
    return dict(node)


def test_a_cancelled_job_is_shown_completing_until_its_step_task_is_gone(
    ctl: Controller, client: TestClient
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    shown = _shown(client, job)
    assert (shown["state"], shown["phase"], shown["completing"]) == (
        "Cancelled",
        "cancelled",
        True,
    )
    assert listed(client, "")[job]["completing"]
    assert list(listed(client, "completing=true")) == [job]  # (squeue -t CG)
    assert list(listed(client, "state=Running&completing=true")) == [job]  # (-t R,CG)
    assert listed(client, "state=Running") == {}  # (its state is its end's)
    ctl.persist.flush()
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and stored.job.state is JobState.CANCELLED  # (sacct's)
    end(ctl, {task: -9}, [])  # SIGKILLed after the grace
    ctl.run_cycle()
    assert not _shown(client, job)["completing"]
    assert listed(client, "completing=true") == {}
    assert not listed(client, "")[job]["completing"]


def test_a_listing_flags_its_jobs_as_of_the_moment_it_filtered_them(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    query = ctl.persist.list_jobs

    def racing(*args: Any, **kwargs: Any) -> Any:
        found = query(*args, **kwargs)
        end(ctl, {task: -9}, [])  # (the hold ends while the store answers)
        ctl.run_cycle()
        return found

    monkeypatch.setattr(ctl.persist, "list_jobs", racing)
    answer = listed(client, "completing=true")
    assert job not in ctl.core.completing
    assert list(answer) == [job] and answer[job]["completing"], answer  # (not shown CA)


def test_the_portal_s_job_page_says_completing(ctl: Controller, client: TestClient) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    answer = client.get(f"/v1/portal/jobs/{job}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["job"]["completing"]  # (as GET /v1/jobs/{id})
    end(ctl, {task: -9}, [])
    ctl.run_cycle()
    assert not client.get(f"/v1/portal/jobs/{job}").json()["job"]["completing"]


def test_a_node_holding_only_an_ended_job_s_booking_is_shown_completing(
    ctl: Controller, client: TestClient
) -> None:
    task = _cancelled_with_a_step_left(ctl, client)[2]
    assert _node(client)["completing"]  # (sinfo's comp)
    _submit(ctl, ["-n", "1"])  # (fits beside the held booking)
    (launch,) = _launched(ctl, [task])
    assert not _node(client)["completing"]  # (a running job's booking too: mix)
    end(ctl, {task: -9}, [launch.task_id])
    ctl.run_cycle()
    assert not _node(client)["completing"]


def _requeued_with_a_step_left(ctl: Controller, client: TestClient, hold: bool) -> str:
    """A job requeued (``hold``: held) whose step's task ignores SIGTERM: its old run's
    booking stays held."""
    (job,) = ctl.submit([parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2"]).request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    (task,) = step(client, job, 1)
    beat(ctl, [batch.task_id])
    started = TaskReport(task_id=task, state=TaskState.RUNNING, pid=42)
    ctl.heartbeat(Heartbeat(node="n0", running=[batch.task_id, task], reports=[started]), wait_s=0)
    assert client.post(f"/v1/jobs/{job}/requeue", json={"hold": hold}).status_code == 200
    ctl.run_cycle()
    end(ctl, {batch.task_id: -15}, [task])
    ctl.run_cycle()
    assert job in ctl.core.completing
    return job


def test_a_requeued_job_is_shown_completing_while_it_waits_and_running_once_it_runs_again(
    ctl: Controller, client: TestClient
) -> None:
    held = _requeued_with_a_step_left(ctl, client, hold=True)
    shown = _shown(client, held)
    assert (shown["state"], shown["completing"]) == ("Pending", True)  # (as Slurm's)
    client.post(f"/v1/jobs/{held}/release")
    ctl.run_cycle()  # (it runs again beside its old run's booking)
    shown = _shown(client, held)
    assert (shown["state"], shown["completing"]) == ("Running", False)
    assert listed(client, "completing=true") == {}


def test_after_a_restart_a_node_kept_draining_shows_no_completing_job(
    tmp_path: Path, clock: Clock
) -> None:
    ctl, job, task = _restarted_while_a_step_dies(tmp_path, clock)
    try:
        ctl.register(_inventory("n0", [TaskLaunch(task_id=task, job_id=job, cpu_ids=[0])]))
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        node = _node(client)
        assert (node["state"], node["completing"]) == ("draining", False)  # (sinfo: drng)
        assert not _shown(client, job)["completing"]
    finally:
        ctl.persist.close()


class _Routed(Client):
    """The SDK, its requests answered by the controller's API in this process."""

    def __init__(self, http: TestClient) -> None:
        super().__init__("http://127.0.0.1:1", token="")
        self.http = http

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        answer = self.http.request(method, path, json=body)
        assert answer.status_code < 300, answer.text
        return answer.text if raw else answer.json()


def test_squeue_lists_the_job_cg_with_t_cg_and_show_says_completing(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _, task = _cancelled_with_a_step_left(ctl, client)
    monkeypatch.setattr(job_list, "_client", lambda *args: _Routed(client))
    monkeypatch.setattr(live, "_client", lambda *args: _Routed(client))
    shown = CliRunner().invoke(app, ["show", job])  # (scontrol show job)
    assert shown.exit_code == 0 and "Completing" in shown.stdout, shown.output

    def squeue(*args: str) -> list[str]:
        result = CliRunner().invoke(app, ["jobs", "-h", "-o", "%i %t %T", *args])
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    assert squeue("-t", "CG") == [f"{job} CG COMPLETING"]
    assert squeue("--states=pd,r,completing") == [f"{job} CG COMPLETING"]
    assert squeue("-t", "PD,R") == []
    # (Slurm's -t CA matches CANCELLED, not CANCELLED+COMPLETING: only CG lists it, and all)
    assert squeue("-t", "CA") == []
    assert squeue("-t", "all") == squeue("-t", "CA,CG") == [f"{job} CG COMPLETING"]
    end(ctl, {task: -9}, [])
    ctl.run_cycle()
    assert squeue("-t", "CG") == []
    assert squeue() == squeue("-t", "CA") == [f"{job} CA CANCELLED"]


class _Older(_Routed):
    """The SDK against a controller older than ``completing``: it ignores the query's
    ``completing=true`` (FastAPI ignores a parameter it does not know) and says nothing of it
    in its views."""

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        path = path.replace("&completing=true", "").replace("completing=true&", "")
        answer = super()._call(method, path, body, raw)
        if isinstance(answer, list):
            return [{k: v for k, v in job.items() if k != "completing"} for job in answer]
        return answer


def test_squeue_t_cg_against_an_older_controller_lists_no_job_it_does_not_say_is_completing(
    ctl: Controller, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _cancelled_with_a_step_left(ctl, client)[0]
    monkeypatch.setattr(job_list, "_client", lambda *args: _Older(client))
    result = CliRunner().invoke(app, ["jobs", "-h", "-o", "%i %t", "-t", "CG"])
    assert result.exit_code == 0 and result.stdout == "", result.output  # (not every job)
    result = CliRunner().invoke(app, ["jobs", "-h", "-o", "%i %t", "-t", "CA,CG"])
    assert result.stdout.splitlines() == [f"{job} CA"], result.output
