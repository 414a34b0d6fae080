"""A job step whose task ignores SIGTERM outlives its cancelled job, and the controller is
SIGKILLed and restarted while the task still dies: the new controller, which never knew it,
writes its end once its node registers again (controller/late_exits.py ``node_back``), not
leaving it ``Running`` for ever."""

from __future__ import annotations

from fusesched.sdk import Client

from .test_recovery import Crashable, crashable, wait_for

__all__ = ["crashable"]  # (the fixture, for this module's tests)

SCRIPT = "#!/bin/sh\n#SBATCH -n 1 -t 5 --mem=64M\nsrun sh -c \"trap '' TERM; sleep 100\"\n"


def _step_task(client: Client, job: str) -> dict[str, object]:
    """The job's step's one task as stored ({} before it starts)."""
    return next((dict(t) for t in client.show(job)["tasks"] if t["step_id"] == 0), {})


def test_a_dying_step_task_is_written_ended_after_a_controller_restart(
    crashable: Crashable,
) -> None:
    client = crashable.client
    (job,) = client.submit_files([{"name": "stubborn.sh", "text": SCRIPT}])["ids"]
    wait_for("the step runs", lambda: _step_task(client, job).get("state") == "Running")
    task = _step_task(client, job)["task_id"]
    client.cancel(job)
    wait_for("the job ends", lambda: client.show(job)["phase"] == "cancelled")
    assert _step_task(client, job)["state"] == "Running"  # (SIGTERM ignored: it dies later)
    crashable.kill_controller()
    crashable.start_controller()
    wait_for("its end", lambda: _step_task(client, job)["state"] != "Running", timeout=60.0)
    ended = _step_task(client, job)
    assert ended["task_id"] == task and ended["state"] == "Failed", ended
    assert ended["exit_code"] in (-9, 137, -1), ended  # (SIGKILLed, or no longer listed)
