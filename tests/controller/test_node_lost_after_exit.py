"""A node lost after the job's task there had exited 0 fails nothing: a job whose own tasks
run the command (``fusesched run -N 2``, YAML replicas) and whose task on n1 finished while
n0's still runs is not failed, requeued or restarted when n1 falls silent — only tasks still
running (or on their way) there are lost. A batch job's other node, which holds slots for
its steps with no task of the job's own, still counts (Slurm's NODE_FAIL:
tests/controller/test_allocation_lost.py). The agents are played by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.builders import Clock
from tests.controller.test_allocation_lost import CONFIG, inventory, show

from fusesched.api.wire import Heartbeat, TaskLaunch, TaskReport, TaskState
from fusesched.cli.sacct_format import sacct_state
from fusesched.cli.squeue_format import slurm_state
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.core.requeue import NOT_REQUEUED
from fusesched.submit.request import parse_request

WHOLE_NODE = {"name": "main", "replicas": 2, "resources": {"cpu": "4"}, "argv": ["sleep", "60"]}


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    """A controller with nodes n0 and n1 (4 CPUs each) registered."""
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), CONFIG, clock=clock)
    for name in ("n0", "n1"):
        controller.register(inventory(name))
    yield controller
    persist.close()


def two_tasks(ctl: Controller, **extra: Any) -> tuple[str, TaskLaunch, TaskLaunch]:
    """A job of two whole-node tasks, one on n0 and one on n1, both running: (job id, n0's
    launch, n1's launch)."""
    (job,) = ctl.submit([parse_request({"groups": [WHOLE_NODE], **extra})])
    ctl.run_cycle()
    assert ctl.jobs[job].nodes == ("n0", "n1")
    launches = {}
    for node in ("n0", "n1"):
        (launch,) = ctl.heartbeat(Heartbeat(node=node, running=[]), wait_s=0).launch
        report = TaskReport(task_id=launch.task_id, state=TaskState.RUNNING, pid=7)
        ctl.heartbeat(Heartbeat(node=node, running=[launch.task_id], reports=[report]), wait_s=0)
        launches[node] = launch
    return job, launches["n0"], launches["n1"]


def exits(ctl: Controller, node: str, launch: TaskLaunch, code: int = 0) -> None:
    report = TaskReport(task_id=launch.task_id, state=TaskState.EXITED, exit_code=code)
    ctl.heartbeat(Heartbeat(node=node, reports=[report], running=[]), wait_s=0)
    ctl.run_cycle()


def lose_n1(ctl: Controller, clock: Clock, running_on_n0: list[str]) -> None:
    """n1 falls silent past the node timeout while n0 keeps beating; the controller
    notices."""
    clock.now += 31
    ctl.heartbeat(Heartbeat(node="n0", running=running_on_n0), wait_s=0)
    ctl._check_nodes()
    ctl.run_cycle()


@pytest.mark.parametrize(
    "restart",
    [
        {},  # requeue-excluding-node, the default
        {"mode": "restart-in-place"},
        {"mode": "requeue-excluding-node", "max_restarts": 0},  # (no restart left: it fails)
    ],
)
def test_a_node_whose_task_exited_0_is_lost_without_failing_the_job(
    ctl: Controller, clock: Clock, restart: dict[str, Any]
) -> None:
    job, on_n0, on_n1 = two_tasks(ctl, restart=restart)
    exits(ctl, "n1", on_n1)  # (the job runs on: n0's task has not ended)
    lose_n1(ctl, clock, [on_n0.task_id])
    live = ctl.jobs[job]
    assert (live.requeue, live.relaunch, live.first_failure) == (None, None, None)
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[on_n0.task_id]), wait_s=0)
    assert not reply.kill
    assert show(ctl, job)["state"] == "Running"
    kinds = [row.event.kind for row in ctl.persist.store.events_for_job(job)]
    assert "JobNode" not in kinds, kinds
    exits(ctl, "n0", on_n0)
    ended = show(ctl, job)
    assert (ended["state"], ended["exit_code"]) == ("Completed", 0), ended
    assert {t["exit_code"] for t in ended["tasks"]} == {0}  # (n1's is not rewritten lost)


def test_a_node_whose_task_still_runs_is_lost_with_it(ctl: Controller, clock: Clock) -> None:
    job, on_n0, _ = two_tasks(ctl)
    lose_n1(ctl, clock, [on_n0.task_id])
    assert ctl.jobs[job].requeue is not None


def test_a_restart_in_place_after_it_does_not_relaunch_on_the_lost_node(
    ctl: Controller, clock: Clock
) -> None:
    """The node lost nothing of the job, but a failure after it would restart the job in
    place, on its nodes: not on the lost one (its task there would wait for ever), the job
    is requeued without it instead, as for a failure of that node."""
    restart = {"mode": "restart-in-place", "retry_application_failures": True}
    job, on_n0, on_n1 = two_tasks(ctl, restart=restart)
    exits(ctl, "n1", on_n1)
    lose_n1(ctl, clock, [on_n0.task_id])
    ctl.register(inventory("n2"))  # (where it can run again)
    exits(ctl, "n0", on_n0, 3)
    clock.now += 60  # (past the restart's back-off)
    ctl._check_health()
    ctl.run_cycle()
    assert not [task for _, task in ctl.tasks.values() if task.node == "n1"]
    nodes = {}
    for node in ("n0", "n2"):
        for launch in ctl.heartbeat(Heartbeat(node=node, running=[]), wait_s=0).launch:
            nodes[launch.task_id] = node
    assert sorted(nodes.values()) == ["n0", "n2"], nodes
    kinds = [row.event.kind for row in ctl.persist.store.events_for_job(job)]
    assert "JobRestartedInPlace" not in kinds, kinds


def test_a_no_requeue_job_whose_node_is_lost_before_its_restart_in_place_is_node_fail(
    ctl: Controller, clock: Clock
) -> None:
    """As above, but ``--no-requeue``: not requeued, the core fails it, and its reason says
    its node was lost (sacct and squeue: NODE_FAIL), not a plain FAILED."""
    restart = {"mode": "restart-in-place", "retry_application_failures": True}
    job, on_n0, on_n1 = two_tasks(ctl, restart=restart, requeue=False)
    exits(ctl, "n1", on_n1)
    lose_n1(ctl, clock, [on_n0.task_id])
    exits(ctl, "n0", on_n0, 3)
    clock.now += 60  # (past the restart's back-off)
    ctl._check_health()
    ctl.run_cycle()
    ended = show(ctl, job)
    assert ended["phase"] == "failed" and NOT_REQUEUED in ended["reason"], ended
    assert (sacct_state(ended), slurm_state(ended)) == ("NODE_FAIL", "NODE_FAIL"), ended
