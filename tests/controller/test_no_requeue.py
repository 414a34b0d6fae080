"""``sbatch --no-requeue`` (``requeue: false``) in the controller: a job preempted by a higher
QoS is cancelled instead of queued again, one whose node stops heartbeating fails instead of
being requeued, each saying why, and the jobs that depend on it settle accordingly; without
the flag both are requeued as before. The agents are played by hand (heartbeats and task
reports), the clock is moved by hand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_sacct_step_summaries import Via
from typer.testing import CliRunner

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskReport, TaskState
from fusesched.cli import sacct as sacct_cli
from fusesched.cli import squeue_format as sq
from fusesched.cli.main import app
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.submit.sbatch import parse_sbatch

NOT_REQUEUED = "not requeued (--no-requeue)"
TENANCY = {
    "flavors": [{"name": "any", "resources": ["cpu"]}],
    "organisations": [
        {
            "name": "lab",
            "tenants": [
                {
                    "name": "ml",
                    "queues": [
                        {"name": "train", "flavors": [{"name": "any", "resources": {"cpu": 8}}]}
                    ],
                }
            ],
        }
    ],
}


def node(name: str) -> NodeInventory:
    return NodeInventory(name=name, resources={"cpu": "4", "memory": "4Gi"}, cpu_ids=[0, 1, 2, 3])


@pytest.fixture
def make(tmp_path: Path, clock: Clock) -> Iterator[Any]:
    made: list[Persistence] = []

    def controller(*names: str, tenancy: bool = False) -> Controller:
        persist = Persistence(f"sqlite:///{tmp_path / f'db{len(made)}.sqlite'}")
        made.append(persist)
        policy = TenancyPolicy(TenancyConfig.from_dict(TENANCY)) if tenancy else None
        config = ControllerConfig(
            core=CoreConfig(placement="best-fit", tenancy=policy), node_timeout_s=30.0
        )
        ctl = Controller(persist, LogStore(tmp_path / f"logs{len(made)}"), config, clock=clock)
        for name in names:
            ctl.register(node(name))
        return ctl

    yield controller
    for persist in made:
        persist.close()


def sbatch(ctl: Controller, *options: str) -> str:
    """Submit ``sleep`` as sbatch would, with ``options``; the job's id."""
    request = parse_sbatch("#!/bin/sh\nsleep 600\n", args=list(options)).request
    (job_id,) = ctl.submit([request])
    return job_id


def start(ctl: Controller, name: str, running: list[str] | None = None) -> list[str]:
    """Run a cycle; ``name``'s agent takes what it is sent and says it runs: the task ids."""
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node=name, running=running or []), wait_s=0)
    started = [launch.task_id for launch in reply.launch]
    reports = [
        TaskReport(task_id=t, state=TaskState.RUNNING, pid=100 + i) for i, t in enumerate(started)
    ]
    ctl.heartbeat(
        Heartbeat(node=name, reports=reports, running=(running or []) + started), wait_s=0
    )
    return started


def show(ctl: Controller, job_id: str) -> dict[str, Any]:
    answer = TestClient(create_app(ctl)).get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def preempt(ctl: Controller, clock: Clock, *victim_options: str) -> tuple[str, str]:
    """Bronze ``low`` (4 CPUs, ``victim_options``) runs on n0; gold ``high`` preempts it and
    ``low`` exits on its notice: the two ids."""
    low = sbatch(ctl, "-c", "4", "-p", "train", "-A", "ml", "--qos=low", *victim_options)
    (task,) = start(ctl, "n0")
    clock.now += 10  # (a job is not preempted in the cycle that started it)
    high = sbatch(ctl, "-c", "4", "-p", "train", "-A", "ml", "--qos=high")
    ctl.run_cycle()  # the preemption: a kill for low's task, with its grace
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[task]), wait_s=0)
    assert [k.task_id for k in reply.kill] == [task]
    exited = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=143)
    ctl.heartbeat(Heartbeat(node="n0", reports=[exited], running=[]), wait_s=0)
    ctl.run_cycle()
    return low, high


def test_a_preempted_no_requeue_job_is_cancelled_and_says_why(make: Any, clock: Clock) -> None:
    ctl = make("n0", tenancy=True)
    low, high = preempt(ctl, clock, "--no-requeue")
    ended = show(ctl, low)
    assert (ended["state"], ended["phase"]) == ("Cancelled", "cancelled"), ended
    assert ended["reason"] == f"preempted for job {high} (train, gold); {NOT_REQUEUED}"
    assert show(ctl, high)["state"] == "Running"
    assert low not in ctl.jobs  # finished: nothing will start it again


def test_a_preempted_job_without_the_flag_is_requeued(make: Any, clock: Clock) -> None:
    ctl = make("n0", tenancy=True)
    low, high = preempt(ctl, clock)
    again = show(ctl, low)
    assert again["state"] == "Pending" and again["phase"] == "queued", again
    assert f"requeued (preempted for job {high} (train, gold))" in again["reason"]


def lose_n0(ctl: Controller, clock: Clock) -> None:
    """n0 falls silent past the node timeout while n1 keeps beating; the controller notices."""
    clock.now += 31
    ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
    ctl._check_nodes()
    ctl.run_cycle()


def test_a_no_requeue_job_on_a_lost_node_fails_and_its_dependents_settle(
    make: Any, clock: Clock
) -> None:
    ctl = make("n0", "n1")
    job = sbatch(ctl, "-c", "4", "--no-requeue", "-w", "n0")
    start(ctl, "n0")
    ok = sbatch(ctl, "-c", "1", f"--dependency=afterok:{job}")
    notok = sbatch(ctl, "-c", "1", f"--dependency=afternotok:{job}")
    ctl.run_cycle()
    lose_n0(ctl, clock)
    ended = show(ctl, job)
    assert (ended["state"], ended["phase"]) == ("Failed", "failed"), ended
    assert ended["reason"] == f"NodeDown: node n0 stopped heartbeating; {NOT_REQUEUED}"
    assert show(ctl, ok)["state"] == "Cancelled"  # afterok: can never be met
    assert "dependency" in show(ctl, ok)["reason"]
    ctl.run_cycle()
    assert show(ctl, notok)["state"] == "Running"  # afternotok: met, on the node left


def sacct(ctl: Controller, monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    """``fusesched sacct -a -S 1970-01-01 -P -X`` with ``args``, answered by ``ctl``'s app
    (in UTC: the clock's times are early on 1970-01-01): its lines after the header."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(sacct_cli, "_client", lambda *_: Via(TestClient(create_app(ctl))))
    try:
        args = ("-a", "-S", "1970-01-01", "-P", "-X", *args)
        result = CliRunner().invoke(app, ["sacct", *args])
    finally:
        monkeypatch.undo()
        time.tzset()
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[1:]


def test_a_no_requeue_job_failed_by_its_lost_node_is_node_fail_in_sacct_and_squeue(
    make: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Slurm's: sacct and squeue show it ``NODE_FAIL``/``NF`` (exit ``0:1``), and ``-s
    NF``/``-t NF`` list it, ``F`` not; a job failed by its own exit stays ``FAILED``."""
    ctl = make("n0", "n1")
    lost = sbatch(ctl, "-c", "4", "--no-requeue", "-w", "n0")
    start(ctl, "n0")
    own = sbatch(ctl, "-c", "1", "-w", "n1")
    (task,) = start(ctl, "n1")
    exited = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=3)
    ctl.heartbeat(Heartbeat(node="n1", reports=[exited], running=[]), wait_s=0)
    lose_n0(ctl, clock)
    assert show(ctl, lost)["reason"] == f"NodeDown: node n0 stopped heartbeating; {NOT_REQUEUED}"
    fields = ("-o", "JobID,State,ExitCode")
    assert sacct(ctl, monkeypatch, *fields) == [f"{lost}|NODE_FAIL|0:1", f"{own}|FAILED|3:0"]
    assert sacct(ctl, monkeypatch, "-s", "NF", *fields) == [f"{lost}|NODE_FAIL|0:1"]
    assert sacct(ctl, monkeypatch, "--state=failed", *fields) == [f"{own}|FAILED|3:0"]
    shown = TestClient(create_app(ctl)).get("/v1/jobs").json()
    assert {job["id"]: sq.state_code(job) for job in shown} == {lost: "NF", own: "F"}
    assert [j["id"] for j in shown if sq.matches(sq.parse_states(["NF"]), j)] == [lost]
    assert [j["id"] for j in shown if sq.matches(sq.parse_states(["F"]), j)] == [own]


def test_a_job_without_the_flag_on_a_lost_node_is_requeued(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job = sbatch(ctl, "-c", "4")
    start(ctl, "n0")
    lose_n0(ctl, clock)
    again = show(ctl, job)
    assert again["state"] == "Pending" and again["phase"] == "queued", again
    assert again["reason"].startswith("requeued (node n0 stopped heartbeating: requeued)")
    kinds = [row.event.kind for row in ctl.persist.store.events_for_job(job)]
    assert "JobNode" in kinds and "JobRequeued" in kinds, kinds


@pytest.mark.parametrize("no_requeue", [True, False])
def test_after_a_controller_restart_a_job_whose_node_is_gone(
    tmp_path: Path, clock: Clock, no_requeue: bool
) -> None:
    """A job left running whose node does not come back within the node timeout: requeued,
    or, with --no-requeue, failed (its node lost: Slurm's NODE_FAIL) and what waits on it
    settled, instead of being run a second time."""
    url, logs = f"sqlite:///{tmp_path / 'db.sqlite'}", LogStore(tmp_path / "logs")
    config = ControllerConfig(core=CoreConfig(placement="best-fit"), node_timeout_s=30.0)
    ctl = Controller(Persistence(url), logs, config, clock=clock)
    for name in ("n0", "n1"):
        ctl.register(node(name))
    job = sbatch(ctl, "-c", "4", *(["--no-requeue"] if no_requeue else []))
    (task,) = start(ctl, "n0")
    assert task.startswith(f"{job}.")
    ok = sbatch(ctl, "-c", "1", f"--dependency=afterok:{job}")
    ctl.run_cycle()
    ctl.persist.close()
    again = Controller(Persistence(url), logs, config, clock=clock)  # n0 never comes back
    try:
        again.register(node("n1"))
        clock.now += 31
        again.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
        again._check_nodes()
        again.run_cycle()
        ended = show(again, job)
        if no_requeue:
            assert (ended["state"], ended["phase"]) == ("Failed", "failed"), ended
            assert ended["reason"] == (
                "NodeDown: a node of it did not come back after a controller restart; "
                f"{NOT_REQUEUED}"
            )
            assert job not in again.jobs and show(again, ok)["state"] == "Cancelled"
        else:
            assert (ended["state"], ended["nodes"]) == ("Running", ["n1"]), ended  # run again
            assert show(again, ok)["state"] == "Pending", show(again, ok)["reason"]
    finally:
        again.persist.close()
