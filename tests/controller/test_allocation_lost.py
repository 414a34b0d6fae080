"""A running batch job (``sbatch -N 2``) that loses one of its other nodes — where only slots
are held, no task of it runs — is failed as if a task of it had been lost there (Slurm's
NODE_FAIL): requeued by its restart policy or failed with
``--no-requeue``; also when the controller restarted and rebuilt the job's nodes from its
hostfile. A node outside its allocation changes nothing. The agents are played by hand, the
clock is moved by hand (controller/failures.py ``node_lost``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, NodeInventory, TaskLaunch, TaskReport, TaskState
from fusesched.controller.agents import leaving
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.records import ControllerConfig
from fusesched.controller.service import Controller
from fusesched.policies.registry import CoreConfig
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/sh\nsleep 600\n"
CONFIG = ControllerConfig(core=CoreConfig(placement="best-fit"), node_timeout_s=30.0)


def inventory(name: str, running: list[TaskLaunch] | None = None) -> NodeInventory:
    return NodeInventory.model_validate({**ONE_NODE, "name": name, "running": running or []})


@pytest.fixture
def make(tmp_path: Path, clock: Clock) -> Iterator[Any]:
    """A controller on one store (a second call: the same store, after a restart), with
    ``names`` registered."""
    made: list[Controller] = []

    def controller(*names: str) -> Controller:
        persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
        ctl = Controller(persist, LogStore(tmp_path / "logs"), CONFIG, clock=clock)
        made.append(ctl)
        for name in names:
            ctl.register(inventory(name))
        return ctl

    yield controller
    for ctl in made:
        ctl.persist.close()


def two_node_batch(ctl: Controller, *options: str) -> tuple[str, TaskLaunch]:
    """``sbatch -N 2`` over both nodes' CPUs, its script running on n0 and nothing on n1;
    then n2 joins (room to run it again without n1): the job's id and the script's launch."""
    args = ["-N", "2", "--ntasks-per-node=4", *options]
    (job,) = ctl.submit([parse_sbatch(SCRIPT, args=args).request])
    ctl.run_cycle()
    assert ctl.jobs[job].nodes == ("n0", "n1")
    (launch,) = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0).launch
    assert not ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0).launch
    report = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=7)
    ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id], reports=[report]), wait_s=0)
    assert not [t for t in ctl.jobs[job].tasks.values() if t.node == "n1"]
    ctl.register(inventory("n2"))
    return job, launch


def lose_n1(ctl: Controller, clock: Clock, launch: TaskLaunch) -> None:
    """n1 falls silent past the node timeout while n0 keeps beating, running the script;
    the controller notices."""
    clock.now += 31
    ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
    ctl._check_nodes()


def script_killed_and_exits(ctl: Controller, launch: TaskLaunch) -> None:
    """n0's agent gets a kill for the script (the job's only task) and says it exited."""
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
    assert launch.task_id in {k.task_id for k in reply.kill}
    exited = TaskReport(task_id=launch.task_id, state=TaskState.EXITED, exit_code=143)
    ctl.heartbeat(Heartbeat(node="n0", reports=[exited], running=[]), wait_s=0)
    ctl.run_cycle()


def show(ctl: Controller, job_id: str) -> dict[str, Any]:
    answer = TestClient(create_app(ctl)).get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_losing_the_node_without_a_task_requeues_the_job(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl)
    lose_n1(ctl, clock, launch)
    assert ctl.jobs[job].requeue is not None  # as for the script's own node
    script_killed_and_exits(ctl, launch)
    again = show(ctl, job)
    assert (again["state"], again["phase"]) == ("Pending", "queued"), again["reason"]
    assert again["reason"].startswith("requeued (node n1 stopped heartbeating: requeued)")
    kinds = [row.event.kind for row in ctl.persist.store.events_for_job(job)]
    assert kinds.count("JobNode") == 1 and "JobRequeued" in kinds, kinds


def test_a_no_requeue_job_fails_when_its_other_node_s_agent_leaves(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl, "--no-requeue")
    leaving(ctl, "n1")
    script_killed_and_exits(ctl, launch)
    ended = show(ctl, job)
    assert (ended["state"], ended["phase"]) == ("Failed", "failed"), ended
    assert ended["reason"] == "NodeDown: node n1's agent stopped; not requeued (--no-requeue)"


def test_a_node_outside_the_allocation_changes_nothing(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl)
    clock.now += 31  # n2 falls silent; the job's nodes keep beating
    ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
    ctl.heartbeat(Heartbeat(node="n1", running=[]), wait_s=0)
    ctl._check_nodes()
    live = ctl.jobs[job]
    assert live.requeue is None and live.first_failure is None
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[launch.task_id]), wait_s=0)
    assert not reply.kill
    assert show(ctl, job)["state"] == "Running"


def test_after_a_restart_the_nodes_rebuilt_from_the_hostfile_count(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl)
    ctl.persist.close()
    again = make()
    again.register(inventory("n0", [launch]))
    again.register(inventory("n1"))
    again.register(inventory("n2"))
    again.run_cycle()
    live = again.jobs[job]
    assert not live.adopting and live.nodes == ("n0", "n1")
    assert [t.node for t in live.tasks.values() if not t.remote] == ["n0"]
    lose_n1(again, clock, launch)
    assert again.jobs[job].requeue is not None
    script_killed_and_exits(again, launch)
    assert show(again, job)["state"] == "Pending", show(again, job)["reason"]


def test_a_job_being_cancelled_ends_cancelled(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl)
    ctl.cancel(job)
    ctl.run_cycle()  # the script's kill is on its way
    lose_n1(ctl, clock, launch)  # already ending: not failed again
    exited = TaskReport(task_id=launch.task_id, state=TaskState.EXITED, exit_code=143)
    ctl.heartbeat(Heartbeat(node="n0", reports=[exited], running=[]), wait_s=0)
    ctl.run_cycle()
    assert show(ctl, job)["state"] == "Cancelled"
    kinds = [row.event.kind for row in ctl.persist.store.events_for_job(job)]
    assert "JobNode" not in kinds, kinds


def test_a_job_an_external_pool_runs_is_not_failed_here(make: Any, clock: Clock) -> None:
    ctl = make("n0", "n1")
    job, launch = two_node_batch(ctl)
    ctl.jobs[job].pool = "cluster"  # (as if a Slurm or Kubernetes pool ran it: its to fail)
    lose_n1(ctl, clock, launch)
    live = ctl.jobs[job]
    assert live.requeue is None and live.first_failure is None
