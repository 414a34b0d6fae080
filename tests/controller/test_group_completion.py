"""A task group's ``completes_job`` (controller/completion.py, Volcano's ``TaskCompleted →
CompleteJob``): once its tasks have all exited 0 the job's other tasks are stopped and the
job completes, exit 0 — also when the controller restarts while they are being stopped (the
new one finds the group complete in the store, sends the stop again and ends the job the
same way). The agent is played by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE, one_node_controller

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    NodeInventory,
    TaskLaunch,
    TaskReport,
    TaskState,
)
from fusesched.controller import failures
from fusesched.controller.hang import Failure, FailureKind
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.submit.request import JobRequest

GROUPS: list[dict[str, Any]] = [
    {"name": "launcher", "argv": ["launch"], "resources": {"cpu": "1"}, "completes_job": True},
    {"name": "server", "argv": ["serve"], "resources": {"cpu": "1"}, "replicas": 2},
]


def beat(ctl: Controller, running: list[str], *reports: TaskReport) -> HeartbeatReply:
    return ctl.heartbeat(Heartbeat(node="n0", running=running, reports=list(reports)), wait_s=0)


def exited(task: str, code: int) -> TaskReport:
    return TaskReport(task_id=task, state=TaskState.EXITED, exit_code=code)


def started(ctl: Controller, **extra: Any) -> tuple[str, list[TaskLaunch]]:
    (job,) = ctl.submit([JobRequest.model_validate({"groups": GROUPS, **extra})])
    ctl.run_cycle()
    launches = beat(ctl, []).launch
    ids = [t.task_id for t in launches]
    running = [TaskReport(task_id=t, state=TaskState.RUNNING, pid=1) for t in ids]
    beat(ctl, ids, *running)
    return job, launches


def shown(ctl: Controller, job: str) -> tuple[str, int | None, str]:
    ctl.run_cycle()
    detail = ctl.persist.store.get_job(job)
    assert detail is not None
    return detail.job.state.value, detail.job.exit_code, detail.job.reason


def test_the_group_completing_stops_the_others_and_completes_the_job(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = one_node_controller(tmp_path, clock)
    job, launches = started(ctl)
    launcher, *servers = (t.task_id for t in launches)
    kills = beat(ctl, servers, exited(launcher, 0)).kill
    assert sorted(k.task_id for k in kills) == servers
    beat(ctl, [], *(exited(s, 143) for s in servers))
    assert shown(ctl, job) == ("Completed", 0, "task group launcher completed")
    ctl.persist.close()


def test_a_restart_while_stopping_keeps_the_completion(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    restart = {"retry_application_failures": True, "max_restarts": 3}
    job, (_, *serving) = started(ctl, restart=restart)
    servers = [t.task_id for t in serving]
    beat(ctl, servers, exited(f"{job}.launcher.0", 0))  # (its kills never reach the agent)
    ctl.run_cycle()
    ctl.persist.close()
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs"), clock=clock
    )
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": serving}))
    kills = beat(again, servers).kill  # the servers still run: stopped again
    assert sorted(k.task_id for k in kills) == servers
    beat(again, [], *(exited(s, 143) for s in servers))
    assert shown(again, job) == ("Completed", 0, "task group launcher completed")
    again.persist.close()


def test_a_restart_after_an_earlier_failure_does_not_complete_it(
    tmp_path: Path, clock: Clock
) -> None:
    """A server failed before the launcher completed: not a completion, so the other server
    is stopped after the restart for a failure (kill_on_bad_exit), not for a completion."""
    ctl = one_node_controller(tmp_path, clock)
    job, (_, first, second) = started(ctl)
    beat(ctl, [second.task_id], exited(first.task_id, 3))
    clock.now += 1
    beat(ctl, [second.task_id], exited(f"{job}.launcher.0", 0))
    ctl.run_cycle()
    ctl.persist.close()
    again = Controller(
        Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}"), LogStore(tmp_path / "logs"), clock=clock
    )
    again.register(NodeInventory.model_validate({**ONE_NODE, "running": [second]}))
    kills = beat(again, [second.task_id]).kill
    assert [k.task_id for k in kills] == [second.task_id]
    assert "failed" in kills[0].reason and "completed" not in kills[0].reason
    beat(again, [], exited(second.task_id, 0))
    assert shown(again, job)[2] != "task group launcher completed"
    again.persist.close()


def test_restart_always_and_completes_job_are_refused_together() -> None:
    group = {**GROUPS[0], "resources": {"cpu": "1"}}
    with pytest.raises(ValidationError, match="give one or the other"):
        JobRequest.model_validate({"groups": [group], "restart": {"always": True}})


def test_an_exit_0_while_the_job_restarts_is_no_completion(tmp_path: Path, clock: Clock) -> None:
    """The job hangs: its gang is stopped to restart in place. The launcher leaving with
    exit 0 on that stop (a graceful SIGTERM handler) does not end the job: it restarts."""
    ctl = one_node_controller(tmp_path, clock)
    restart = {"mode": "restart-in-place", "backoff_s": 0, "max_restarts": 3}
    job, (_, first, second) = started(ctl, restart=restart)
    with ctl.work:
        hang = Failure(FailureKind.HANG, None, "no progress")
        failures.job_failed(ctl, ctl.jobs[job], hang, clock.now)
    servers = [first.task_id, second.task_id]
    beat(ctl, servers, exited(f"{job}.launcher.0", 0))
    beat(ctl, [], *(exited(s, 143) for s in servers))
    with ctl.work:
        failures.relaunch_due(ctl, clock.now)
    assert {t.task_id for t in beat(ctl, []).launch} == {
        f"{job}-r1.launcher.0",
        f"{job}-r1.server.0",
        f"{job}-r1.server.1",
    }
    ctl.persist.close()
