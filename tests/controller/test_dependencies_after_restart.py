"""A job submitted after a controller restart may depend on a job that ended before it: the
core no longer knows that job, so the controller settles the dependency from the store (as
Slurm does: met → the job may start, never met → the submission is refused)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller
from tests.controller.test_dependency_kinds import launched, on, restarted, submit

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, TaskReport, TaskState


def test_dependencies_on_jobs_ended_before_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    good, bad = submit(client), submit(client)
    tasks = launched(ctl)
    reports = [
        TaskReport(task_id=tasks[good], state=TaskState.EXITED, exit_code=0),
        TaskReport(task_id=tasks[bad], state=TaskState.EXITED, exit_code=3),
    ]
    ctl.heartbeat(Heartbeat(node="n0", reports=reports, running=[]), wait_s=0)
    ctl.run_cycle()
    again, client = restarted(tmp_path, clock, ctl)
    try:
        assert good not in again.core.jobs and bad not in again.core.jobs  # forgotten
        after_good = submit(client, dependencies=on("afterok", good))
        after_bad = submit(client, dependencies=on("afternotok", bad) + on("after", good))
        assert set(launched(again)) == {after_good, after_bad}
        refused = client.post(
            "/v1/jobs",
            json={
                "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}],
                "dependencies": on("afterok", bad),
            },
        )
        assert refused.status_code == 400, refused.text
        assert f"dependency {bad}" in refused.json()["detail"]
        stored = again.persist.get_job(after_good)
        assert stored is not None and stored.state == "Running"
    finally:
        again.persist.close()
